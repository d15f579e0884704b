/* _options.h — wds.Loader's keywords through the loader's option table,
 * and the module functions over the table (python/wds/_options.c). */
#ifndef WDS_PY_OPTIONS_H
#define WDS_PY_OPTIONS_H

#include "_common.h"
#include "wds/loader.h"

/* Sets cfg's option named key (a row of the table, by its Python keyword)
 * from value; None keeps the default. Bytes the config points to are
 * appended to keep. 0, or -1 with an exception set: TypeError for a key
 * that is no row, ValueError for a value of the wrong type, the status's
 * wds.Error class (wds_py_raise: wds.InvalidError, a ValueError) for a
 * value the table refuses (its message names key). */
int wds_py_loader_option(wds_loader_config *cfg, const char *key,
                         PyObject *value, PyObject *keep);

/* Every keyword of kwargs (a dict, or NULL) but those named in others
 * (NULL-terminated) through wds_py_loader_option; *rest is a new dict of
 * the others (for PyArg_ParseTupleAndKeywords). 0, or -1 with an
 * exception set (*rest NULL). */
int wds_py_loader_options(PyObject *kwargs, const char *const *others,
                          wds_loader_config *cfg, PyObject *keep,
                          PyObject **rest);

/* _wds.loader_options(): the table's rows as a tuple of (keyword, flag)
 * pairs, in table order (what wds.Loader must take; tests check it). */
PyObject *wds_py_loader_option_rows(PyObject *self, PyObject *unused);

/* _wds.loader_option_help(): (keyword, flag, help, cli_value) of every
 * row, in table order (cli_value: what a BOOL row's flag sets, "1" or "0";
 * None for the other types): what wds.Loader's and wds.Dataset's docstrings
 * list (_loader.py makes the list at import, so a new row documents itself). */
PyObject *wds_py_loader_option_help(PyObject *self, PyObject *unused);

/* _wds.check_loader_options(**keywords): the rows named by keyword set on
 * wds.Loader's defaults (mode "exact"), then the library's rules between
 * options (wds_loader_config_check, naming keywords): None, or
 * wds.InvalidError with the rule's message. For front ends that open
 * their loaders later (wds.Dataset, in the DataLoader's workers). */
PyObject *wds_py_check_loader_options(PyObject *self, PyObject *args,
                                      PyObject *kwargs);

#endif
