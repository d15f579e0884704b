/* _options.c — wds.Loader's keywords into a wds_loader_config, through the
 * library's option table (wds/loader.h: wds_loader_option).
 *
 * A keyword that names a row is converted by the row's type into the text
 * wds_loader_config_set parses, by the keyword (so a TIMEOUT keyword,
 * read_timeout_ms, is in milliseconds): a BOOL by truth; an INT, SIZE or
 * TIMEOUT from an int (operator.index; anything else is a ValueError
 * naming the keyword, as the sizes were before); an ENUM from a str; a
 * STRING from a str, bytes or os.PathLike (the bytes kept alive in keep,
 * as the config points to them); FLOATS from a number or a sequence of
 * numbers (crop_scale=(0.2, 1.0)). None leaves the config's default. A value
 * the table refuses raises wds.InvalidError (a ValueError; wds_py_raise)
 * with the library's message, which names the keyword: `retries needs a count
 * from 0 to 1000, not "1001"`. So a new loader option is a row of the table and
 * a keyword of _loader.py's Loader, nothing here: its docstring line comes
 * from the row's help too (loader_option_help, _loader.py's _option_doc).
 *
 * Also the module functions over the table: loader_options(),
 * loader_option_help() and check_loader_options(**kw), which runs the
 * library's rules between options (wds_loader_config_check, naming
 * keywords) for front ends that open later (wds.Dataset). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "_options.h"

/* A FLOATS row's value, a number or a sequence of numbers (a tuple, a
 * list), as "x,y,..." (each number repr's shortest round trip; a str as
 * it is), or NULL with a ValueError naming the keyword. */
static PyObject *floats_text(const wds_loader_option *r, const char *key,
                             PyObject *value) {
  PyObject *seq = NULL, *out = NULL;
  if (PyUnicode_Check(value)) /* "0.2,1": the CLI's text */
    return PyUnicode_AsEncodedString(value, "utf-8", "surrogateescape");
  int one = !PySequence_Check(value); /* a number: float, int, numpy's */
  if (!one && !(seq = PySequence_Fast(value, "not a number or a sequence"))) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError,
                 "%s needs a number or a sequence of %d numbers, not "
                 "%.80s (%R)",
                 key, r->count, Py_TYPE(value)->tp_name, value);
    return NULL;
  }
  Py_ssize_t n = one ? 1 : PySequence_Fast_GET_SIZE(seq);
  char text[512];
  size_t used = 0;
  text[0] = '\0';
  for (Py_ssize_t i = 0; i < n && i < 8; i++) {
    PyObject *item = one ? value : PySequence_Fast_GET_ITEM(seq, i);
    double x = PyFloat_AsDouble(item);
    if (x == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "%s needs numbers, not %.80s (%R)", key,
                   Py_TYPE(item)->tp_name, item);
      goto done;
    }
    char *d = PyOS_double_to_string(x, 'r', 0, 0, NULL);
    if (!d)
      goto done;
    int k = snprintf(text + used, sizeof text - used, "%s%s", i ? "," : "", d);
    PyMem_Free(d);
    if (k > 0)
      used += (size_t)k < sizeof text - used ? (size_t)k : 0;
  }
  if (n == 0 || n > 8) /* the table's message for a wrong count */
    snprintf(text, sizeof text, "(%zd numbers)", n);
  out = PyBytes_FromString(text);
done:
  Py_XDECREF(seq);
  return out;
}

/* The text of value for row r (a new bytes object), or NULL with an
 * exception set. */
static PyObject *row_text(const wds_loader_option *r, const char *key,
                          PyObject *value) {
  switch (r->type) {
  case WDS_OPTION_BOOL: {
    int t = PyObject_IsTrue(value);
    return t < 0 ? NULL : PyBytes_FromString(t ? "1" : "0");
  }
  case WDS_OPTION_INT:
  case WDS_OPTION_SIZE:
  case WDS_OPTION_TIMEOUT: {
    PyObject *i = PyNumber_Index(value);
    if (!i) {
      if (PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "%s needs a whole number, not %.80s (%R)", key,
                     Py_TYPE(value)->tp_name, value);
      }
      return NULL;
    }
    PyObject *s = PyObject_Str(i);
    Py_DECREF(i);
    if (!s)
      return NULL;
    PyObject *b = PyUnicode_AsUTF8String(s);
    Py_DECREF(s);
    return b;
  }
  case WDS_OPTION_ENUM:
    if (!PyUnicode_Check(value)) {
      PyErr_Format(PyExc_ValueError, "%s needs a str, not %.80s (%R)", key,
                   Py_TYPE(value)->tp_name, value);
      return NULL;
    }
    return PyUnicode_AsEncodedString(value, "utf-8", "surrogateescape");
  case WDS_OPTION_STRING: {
    PyObject *b = NULL;
    return wds_py_path(value, &b) < 0 ? NULL : b;
  }
  case WDS_OPTION_FLOATS:
    return floats_text(r, key, value);
  }
  PyErr_Format(PyExc_SystemError, "%s: unknown option type", key);
  return NULL;
}

int wds_py_loader_option(wds_loader_config *cfg, const char *key,
                         PyObject *value, PyObject *keep) {
  const wds_loader_option *r = wds_loader_option_find(key);
  if (!r || key[0] == '-') {
    PyErr_Format(PyExc_TypeError,
                 "'%s' is an invalid keyword argument for _Loader()", key);
    return -1;
  }
  if (value == Py_None)
    return 0; /* the config's default */
  PyObject *text = row_text(r, key, value);
  if (!text)
    return -1;
  /* The table parses C strings: "exact\0junk" would be read as "exact". */
  if (strlen(PyBytes_AS_STRING(text)) != (size_t)PyBytes_GET_SIZE(text)) {
    char msg[200];
    snprintf(msg, sizeof msg,
             "%s: the value holds a NUL character (at offset %zu of %zd)", key,
             strlen(PyBytes_AS_STRING(text)), PyBytes_GET_SIZE(text));
    Py_DECREF(text);
    wds_py_raise(WDS_ERR_INVALID, msg);
    return -1;
  }
  int rc = wds_loader_config_set(cfg, key, PyBytes_AS_STRING(text));
  if (rc != WDS_OK) {
    Py_DECREF(text);
    wds_py_raise(rc, wds_last_error());
    return -1;
  }
  /* A STRING row's field points into text: keep it while cfg is used. */
  rc = PyList_Append(keep, text);
  Py_DECREF(text);
  return rc;
}

int wds_py_loader_options(PyObject *kwargs, const char *const *others,
                          wds_loader_config *cfg, PyObject *keep,
                          PyObject **rest) {
  *rest = PyDict_New();
  if (!*rest)
    return -1;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
    const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    int other = !k;
    for (const char *const *o = others; k && *o && !other; o++)
      other = strcmp(*o, k) == 0;
    if (other ? PyDict_SetItem(*rest, key, value) < 0
              : wds_py_loader_option(cfg, k, value, keep) < 0) {
      Py_CLEAR(*rest);
      return -1;
    }
  }
  return 0;
}

/* The table's rows as a tuple: (keyword, flag) pairs, or with help also
 * (keyword, flag, help, what a BOOL's flag sets or None). */
static PyObject *option_rows(int help) {
  size_t n = 0;
  while (wds_loader_option_at(n))
    n++;
  PyObject *rows = PyTuple_New((Py_ssize_t)n);
  for (size_t i = 0; rows && i < n; i++) {
    const wds_loader_option *o = wds_loader_option_at(i);
    PyObject *row =
        help ? Py_BuildValue("(sssz)", o->name, o->flag, o->help,
                             o->type == WDS_OPTION_BOOL ? o->cli_value : NULL)
             : Py_BuildValue("(ss)", o->name, o->flag);
    if (!row) {
      Py_CLEAR(rows);
      break;
    }
    PyTuple_SET_ITEM(rows, (Py_ssize_t)i, row);
  }
  return rows;
}

PyObject *wds_py_loader_option_rows(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return option_rows(0);
}

PyObject *wds_py_loader_option_help(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return option_rows(1);
}

PyObject *wds_py_check_loader_options(PyObject *self, PyObject *args,
                                      PyObject *kwargs) {
  (void)self;
  static const char *const none[] = {NULL};
  if (PyTuple_GET_SIZE(args)) {
    PyErr_SetString(PyExc_TypeError,
                    "check_loader_options() takes keywords only");
    return NULL;
  }
  wds_loader_config cfg = WDS_LOADER_CONFIG_INIT;
  cfg.mode = WDS_MODE_EXACT; /* wds.Loader's default */
  PyObject *keep = PyList_New(0), *rest = NULL, *out = NULL;
  if (!keep || wds_py_loader_options(kwargs, none, &cfg, keep, &rest) < 0)
    goto done;
  if (PyDict_Size(rest)) { /* a key that is not a str */
    PyErr_SetString(PyExc_TypeError, "check_loader_options(): keywords only");
    goto done;
  }
  if (wds_loader_config_check(&cfg, WDS_OPTION_NAMES_KEYWORD) != WDS_OK) {
    wds_py_raise(WDS_ERR_INVALID, wds_last_error());
    goto done;
  }
  Py_INCREF(Py_None);
  out = Py_None;
done:
  Py_XDECREF(keep);
  Py_XDECREF(rest);
  return out;
}
