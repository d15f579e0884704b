/* _module.c — the module wds._wds: its set-up, its functions and the
 * exception hierarchy.
 *
 * The CPython extension behind the `wds` Python package, written over the
 * public C API only (the headers of include/wds/). What it exposes:
 *   - wds.Error and one subclass per status code of wds/status.h, raised with
 *     the library's message (wds_last_error(), read in the calling thread
 *     right after the call that failed):
 *     wds_py_raise, here, maps a status to its class for every type;
 *   - wds.expand(spec, max_urls=0) -> list[str] (here);
 *   - wds.Reader(spec, **options) (_reader.c): samples as dicts {"__key__",
 *     "__url__", EXT: bytes}, the raw samples of Python webdataset;
 *   - wds.Index(path) (_index.c): a shard-set index (the JSON `wds index`
 *     writes);
 *   - _Writer (_writer.c): the shard writer behind wds.ShardWriter
 *     (python/wds/_writer.py, which encodes the fields);
 *   - _Loader (_loader.c) and _Batch, its arrays and wds.BytesField
 *     (_batch.c): the loader behind wds.Loader (python/wds/_loader.py);
 *   - gpu_jpeg_open() and _GpuJpeg (_gpujpeg.c): the GPU JPEG decoder;
 *   - the loader option table (_options.c): loader_options() (keyword and
 *     flag of each row), loader_option_help() (with the help text: the
 *     docstrings' option lists), check_loader_options(**kw) (the library's
 *     rules between options, for wds.Dataset); _topology() (the rank and
 *     world the C loader takes from the environment, here).
 * The GIL is released while the library reads or expands; a call that
 * waits for data still notices signals (wds_py_interrupt, _common.c).
 *
 * Initialisation is multi-phase (PEP 489: PyInit__wds returns the
 * definition, wds_py_exec fills each module object). Each module object
 * holds its exception classes and types in its state (wds_py_state). The
 * types are static and the classes are made once per process (wds_py_raise
 * reads them from any thread, without a module at hand), so they belong to
 * the main interpreter: a re-import there (the module removed from
 * sys.modules) gets the same classes and types, and an import in a
 * sub-interpreter fails with an ImportError saying so, instead of sharing
 * objects between interpreters. */
#include "_common.h"
#include "_options.h"

#include <errno.h>
#include <string.h>

#include "wds/loader.h"
#include "wds/version.h"

PyMODINIT_FUNC PyInit__wds(void);

/* ---- errors -------------------------------------------------------------- */

/* One exception class per status code: index -code (1..14); [0] is Error.
 * Each also derives from the builtin a Python caller catches for that kind of
 * failure: reading and opening fail with OSError (as open() and gzip do), bad
 * arguments and bad data with ValueError (as json and int() do), a stream that
 * ends too soon with EOFError (as gzip and lzma do). CancelledError has none:
 * asyncio's derives from BaseException, which `except Exception` would miss. */
#define WDS_PY_NERR 15
static PyObject *wds_errors[WDS_PY_NERR];

typedef struct {
  int status;
  const char *name;    /* class name in the module */
  const char *builtin; /* a builtin base besides wds.Error, or NULL */
} wds_py_errdef;

static const wds_py_errdef wds_py_errdefs[] = {
    {WDS_ERR_NOMEM, "NoMemoryError", "MemoryError"},
    {WDS_ERR_INVALID, "InvalidError", "ValueError"},
    {WDS_ERR_SPEC, "SpecError", "ValueError"},
    {WDS_ERR_LIMIT, "LimitError", "ValueError"},
    {WDS_ERR_IO, "IOError", "OSError"},
    {WDS_ERR_OPEN, "OpenError", "OSError"},
    {WDS_ERR_COMMAND, "CommandError", "OSError"},
    {WDS_ERR_TRUNCATED, "TruncatedError", "EOFError"},
    {WDS_ERR_CORRUPT, "CorruptError", "ValueError"},
    {WDS_ERR_FORMAT, "FormatError", "ValueError"},
    {WDS_ERR_DECOMPRESS, "DecompressError", "ValueError"},
    {WDS_ERR_DUPLICATE, "DuplicateError", "ValueError"},
    {WDS_ERR_TIMEOUT, "TimeoutError", "TimeoutError"},
    {WDS_ERR_CANCELLED, "CancelledError", NULL},
};

/* wds.OpenError's subclasses for a local file's open(2) errors, told apart by
 * the library's "cannot open ...: STRERROR" text (a file, an index, an @FILE
 * list, a shard to write; the public API carries no errno): each also derives
 * from the OSError subclass Python's open() raises, and .errno is set. */
typedef struct {
  int errnum;
  const char *errname;
  const char *name;
  const char *builtin;
  const char *text; /* the library's text for it when not strerror's */
} wds_py_oserrdef;

static const wds_py_oserrdef wds_py_oserrdefs[] = {
    {ENOENT, "ENOENT", "NotFoundError", "FileNotFoundError", NULL},
    {EACCES, "EACCES", "PermissionDeniedError", "PermissionError", NULL},
    {EISDIR, "EISDIR", "IsDirectoryError", "IsADirectoryError",
     "cannot open: is a directory"},
};
#define WDS_PY_NOSERR (sizeof wds_py_oserrdefs / sizeof wds_py_oserrdefs[0])
static PyObject *wds_oserrors[WDS_PY_NOSERR];

/* The library's messages are shared with the C API and the CLI: some start
 * with the C function that failed ("wds_loader_open: ") and some name a
 * command-line flag. What a Python caller reads names the Python keyword
 * instead; the rest of the message is the library's. */
static const struct {
  const char *from, *to;
} wds_py_rewrites[] = {
    {"--mode plain or resampled", "mode=\"plain\" or \"resampled\""},
    {"--mode exact or resampled", "mode=\"exact\" or \"resampled\""},
    {"--mode resampled or exact", "mode=\"resampled\" or \"exact\""},
    {"--mode resampled", "mode=\"resampled\""},
    {"--mode exact", "mode=\"exact\""},
    {"--mode plain", "mode=\"plain\""},
    {"--read-timeout or read_timeout_ms", "read_timeout_ms"},
    {" (max_window_bytes in the C API)", ""},
    {"--max-window ", "max_window_bytes, at least "},
    {"--max-window", "max_window_bytes"},
    {" (--allow-pipe-from-files, or allow_pipe_from_files in the config)",
     " (allow_pipe_from_files=True)"},
};

/* Whether s[i] starts "wds_IDENT: " at the start of s or of a clause (after
 * ": " or "; "); its length then, else 0. */
static size_t wds_py_cname_at(const char *s, size_t i) {
  if (i != 0 &&
      !(i >= 2 && (s[i - 2] == ':' || s[i - 2] == ';') && s[i - 1] == ' '))
    return 0;
  if (strncmp(s + i, "wds_", 4) != 0)
    return 0;
  size_t j = i + 4;
  while ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= '0' && s[j] <= '9') ||
         s[j] == '_')
    j++;
  if (j == i + 4 || s[j] != ':' || s[j + 1] != ' ')
    return 0;
  return j + 2 - i;
}

/* The message with the rewrites above applied, as a new str. */
static PyObject *wds_py_message(const char *msg) {
  size_t n = strlen(msg), cap = 2 * n + 64, o = 0;
  char *out = PyMem_Malloc(cap);
  if (!out)
    return PyErr_NoMemory();
  for (size_t i = 0; i < n;) {
    size_t skip = wds_py_cname_at(msg, i);
    if (skip) {
      i += skip;
      continue;
    }
    int done = 0;
    if (msg[i] == '-' || msg[i] == ' ')
      for (size_t k = 0; k < sizeof wds_py_rewrites / sizeof *wds_py_rewrites;
           k++) {
        size_t fl = strlen(wds_py_rewrites[k].from);
        if (strncmp(msg + i, wds_py_rewrites[k].from, fl) == 0) {
          size_t tl = strlen(wds_py_rewrites[k].to);
          if (o + tl + (n - i) + 1 > cap) {
            cap = 2 * (o + tl + (n - i) + 1);
            char *grown = PyMem_Realloc(out, cap);
            if (!grown) {
              PyMem_Free(out);
              return PyErr_NoMemory();
            }
            out = grown;
          }
          memcpy(out + o, wds_py_rewrites[k].to, tl);
          o += tl;
          i += fl;
          done = 1;
          break;
        }
      }
    if (!done) {
      if (o + 2 > cap) {
        cap *= 2;
        char *grown = PyMem_Realloc(out, cap);
        if (!grown) {
          PyMem_Free(out);
          return PyErr_NoMemory();
        }
        out = grown;
      }
      out[o++] = msg[i++];
    }
  }
  PyObject *text = PyUnicode_DecodeUTF8(out, (Py_ssize_t)o, "backslashreplace");
  PyMem_Free(out);
  return text;
}

/* Whether msg holds the library's text for the open(2) error d. */
static int wds_py_open_errno(const char *msg, const wds_py_oserrdef *d) {
  if (d->text)
    return strstr(msg, d->text) != NULL;
  const char *open = strstr(msg, "cannot open");
  char text[160];
  snprintf(text, sizeof text, ": %s", strerror(d->errnum));
  return open && strstr(open, text) != NULL;
}

PyObject *wds_py_raise(int status, const char *msg) {
  PyObject *cls = wds_errors[0];
  if (status < 0 && -status < WDS_PY_NERR && wds_errors[-status])
    cls = wds_errors[-status];
  if (!msg || !*msg)
    msg = wds_strerror(status);
  int errnum = 0;
  if (status == WDS_ERR_OPEN)
    for (size_t i = 0; i < WDS_PY_NOSERR; i++) {
      const wds_py_oserrdef *d = &wds_py_oserrdefs[i];
      if (wds_oserrors[i] && wds_py_open_errno(msg, d)) {
        cls = wds_oserrors[i];
        errnum = d->errnum;
        break;
      }
    }
  PyObject *text = wds_py_message(msg);
  if (!text)
    return NULL;
  PyObject *exc = PyObject_CallOneArg(cls, text);
  Py_DECREF(text);
  if (!exc)
    return NULL;
  PyObject *code = PyLong_FromLong(status);
  PyObject *name = PyUnicode_FromString(wds_status_name(status));
  if (!code || !name || PyObject_SetAttrString(exc, "status", code) < 0 ||
      PyObject_SetAttrString(exc, "status_name", name) < 0) {
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_DECREF(exc);
    return NULL;
  }
  Py_DECREF(code);
  Py_DECREF(name);
  if (errnum) {
    /* OSError's errno, without its strerror and filename: str() stays the
     * library's message. */
    PyObject *e = PyLong_FromLong(errnum);
    if (!e || PyObject_SetAttrString(exc, "errno", e) < 0) {
      Py_XDECREF(e);
      Py_DECREF(exc);
      return NULL;
    }
    Py_DECREF(e);
  }
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

/* A class named wds.NAME with bases (parent, the builtin named builtin when
 * there is one), the class attributes status and status_name, and doc. */
static PyObject *wds_py_error_class(const char *name, PyObject *parent,
                                    const char *builtin, int status,
                                    const char *doc) {
  PyObject *builtins = PyEval_GetBuiltins(); /* borrowed */
  PyObject *b = builtin && builtins ? PyDict_GetItemString(builtins, builtin)
                                    : NULL; /* borrowed */
  PyObject *bases = b ? PyTuple_Pack(2, parent, b) : PyTuple_Pack(1, parent);
  if (!bases)
    return NULL;
  PyObject *cdict = Py_BuildValue("{s:i,s:s}", "status", status, "status_name",
                                  wds_status_name(status));
  if (!cdict) {
    Py_DECREF(bases);
    return NULL;
  }
  char qual[64];
  snprintf(qual, sizeof qual, "wds.%s", name);
  PyObject *cls = PyErr_NewExceptionWithDoc(qual, doc, bases, cdict);
  Py_DECREF(bases);
  Py_DECREF(cdict);
  return cls;
}

static int wds_py_add_class(PyObject *m, const char *name, PyObject *cls) {
  Py_INCREF(cls);
  if (PyModule_AddObject(m, name, cls) < 0) {
    Py_DECREF(cls);
    return -1;
  }
  return 0;
}

/* Makes the exception classes (once per process: wds_errors, wds_oserrors). */
static int wds_py_make_errors(void) {
  if (wds_errors[0])
    return 0;
  PyObject *dict =
      Py_BuildValue("{s:i,s:s}", "status", 0, "status_name", "WDS_UNKNOWN");
  if (!dict)
    return -1;
  wds_errors[0] = PyErr_NewExceptionWithDoc(
      "wds.Error",
      "A wds failure: .status is the library's status code (wds/status.h), "
      ".status_name its name, str() the library's message.",
      PyExc_Exception, dict);
  Py_DECREF(dict);
  if (!wds_errors[0])
    return -1;
  for (size_t i = 0; i < sizeof wds_py_errdefs / sizeof wds_py_errdefs[0];
       i++) {
    const wds_py_errdef *d = &wds_py_errdefs[i];
    char doc[160];
    snprintf(doc, sizeof doc, "%s: %s%s%s.", wds_status_name(d->status),
             wds_strerror(d->status), d->builtin ? " (also a " : "",
             d->builtin ? d->builtin : "");
    if (d->builtin)
      snprintf(doc + strlen(doc) - 1, sizeof doc - strlen(doc) + 1, ").");
    PyObject *cls =
        wds_py_error_class(d->name, wds_errors[0], d->builtin, d->status, doc);
    if (!cls)
      return -1;
    wds_errors[-d->status] = cls;
  }
  for (size_t i = 0; i < WDS_PY_NOSERR; i++) {
    const wds_py_oserrdef *d = &wds_py_oserrdefs[i];
    char doc[160];
    snprintf(doc, sizeof doc,
             "wds.OpenError for a local file that open(2) refused with %s "
             "(also a %s; .errno is set).",
             d->errname, d->builtin);
    PyObject *cls = wds_py_error_class(d->name, wds_errors[-WDS_ERR_OPEN],
                                       d->builtin, WDS_ERR_OPEN, doc);
    if (!cls)
      return -1;
    wds_oserrors[i] = cls;
  }
  return 0;
}

/* Adds the exception classes to module m. */
static int wds_py_add_errors(PyObject *m) {
  if (wds_py_add_class(m, "Error", wds_errors[0]) < 0)
    return -1;
  for (size_t i = 0; i < sizeof wds_py_errdefs / sizeof wds_py_errdefs[0];
       i++) {
    const wds_py_errdef *d = &wds_py_errdefs[i];
    if (wds_py_add_class(m, d->name, wds_errors[-d->status]) < 0)
      return -1;
  }
  for (size_t i = 0; i < WDS_PY_NOSERR; i++)
    if (wds_py_add_class(m, wds_py_oserrdefs[i].name, wds_oserrors[i]) < 0)
      return -1;
  return 0;
}

/* ---- expand -------------------------------------------------------------- */

PyDoc_STRVAR(wds_py_expand_doc,
             "expand(spec, max_urls=None, *, allow_pipe_from_files=False) "
             "-> list[str]\n\n"
             "The shard URLs a spec expands to (braces, '::', @FILE, ${VAR}), "
             "as `wds expand` prints them. pipe: commands read from an @FILE "
             "are refused unless allow_pipe_from_files.");

static PyObject *wds_py_expand(PyObject *self, PyObject *args,
                               PyObject *kwargs) {
  (void)self;
  static char *kwlist[] = {"spec", "max_urls", "allow_pipe_from_files", NULL};
  PyObject *spec_obj, *max_obj = Py_None;
  int allow_pipe = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$p:expand", kwlist,
                                   &spec_obj, &max_obj, &allow_pipe))
    return NULL;
  uint64_t max_urls;
  if (wds_py_size(max_obj, "max_urls", SIZE_MAX, &max_urls) < 0)
    return NULL;
  PyObject *spec;
  if (wds_py_fsbytes(spec_obj, &spec) < 0)
    return NULL;
  wds_url_list list = {0};
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  const char *one = PyBytes_AS_STRING(spec);
  rc = wds_spec_expand_flags(&one, 1, (size_t)max_urls,
                             allow_pipe ? WDS_SPEC_ALLOW_PIPE_FROM_FILES : 0,
                             &list);
  Py_END_ALLOW_THREADS;
  Py_DECREF(spec);
  if (rc != WDS_OK)
    return wds_py_raise(rc, wds_last_error());
  PyObject *out = wds_py_url_list(&list);
  wds_url_list_free(&list);
  return out;
}

/* ---- _topology ----------------------------------------------------------- */

PyDoc_STRVAR(
    wds_py_topology_doc,
    "_topology() -> (rank, world_size)\n\n"
    "The job's rank and world size as the C loader reads them from the "
    "environment (wds_env_topology: torchrun's RANK/WORLD_SIZE, else Slurm's, "
    "Open MPI's, PMI's, else 0/1); wds.InvalidError with the C message for a "
    "partial or bad set (wds.Dataset's fallback after torch.distributed).");

static PyObject *wds_py_topology(PyObject *self, PyObject *args) {
  (void)self;
  (void)args;
  int rank = 0, world = 1;
  int rc = wds_env_topology(&rank, &world);
  if (rc != WDS_OK)
    return wds_py_raise(rc, wds_last_error());
  return Py_BuildValue("(ii)", rank, world);
}

/* ---- the module ---------------------------------------------------------- */

static PyMethodDef wds_py_methods[] = {
    {"expand", (PyCFunction)(void (*)(void))wds_py_expand,
     METH_VARARGS | METH_KEYWORDS, wds_py_expand_doc},
    {"loader_options", wds_py_loader_option_rows, METH_NOARGS,
     "loader_options(): the loader option table's rows, (keyword, CLI "
     "flag) pairs in its order: what wds.Loader takes besides its input."},
    {"loader_option_help", wds_py_loader_option_help, METH_NOARGS,
     "loader_option_help(): (keyword, CLI flag, help, what a flag without "
     "a value sets or None) of each row of the "
     "loader option table, in its order (the docstrings' option list)."},
    {"check_loader_options",
     (PyCFunction)(void (*)(void))wds_py_check_loader_options,
     METH_VARARGS | METH_KEYWORDS,
     "check_loader_options(**options): the library's rules between loader "
     "options (wds_loader_config_check) on wds.Loader's defaults and these "
     "keywords; wds.InvalidError naming the keywords at fault."},
    {"gpu_jpeg_open", (PyCFunction)(void (*)(void))wds_py_gpu_jpeg_open,
     METH_VARARGS,
     "gpu_jpeg_open(device): the GPU JPEG decoder on CUDA device `device` "
     "(-1: the current one); wds.OpenError saying why when there is none."},
    {"_topology", wds_py_topology, METH_NOARGS, wds_py_topology_doc},
    {NULL, NULL, 0, NULL}};

/* The types; those with a name are the module's attributes (the others
 * are reached through them: a _Batch from _Loader.next(), its arrays and
 * BytesFields from _Batch.field(), a _GpuJpeg from gpu_jpeg_open()). */
static const struct {
  PyTypeObject *type;
  const char *name;
} wds_py_types[] = {
    {&wds_py_reader_type, "Reader"},
    {&wds_py_index_type, "Index"},
    {&wds_py_bytesfield_type, "BytesField"},
    {&wds_py_loader_type, "_Loader"},
    {&wds_py_writer_type, "_Writer"},
    {&wds_py_batch_type, NULL},
    {&wds_py_array_type, NULL},
    {&wds_py_gpujpeg_type, NULL},
};
#define WDS_PY_NTYPES (sizeof wds_py_types / sizeof wds_py_types[0])

/* A module object's state: its references to the exception classes and
 * the types (the process's, see the top of this file), released with it. */
typedef struct {
  PyObject *held[WDS_PY_NERR + WDS_PY_NOSERR + WDS_PY_NTYPES];
  size_t n;
} wds_py_state;

static int wds_py_hold(wds_py_state *st, PyObject *o) {
  if (st->n >= sizeof st->held / sizeof st->held[0]) {
    PyErr_SetString(PyExc_SystemError, "wds._wds: module state is full");
    return -1;
  }
  Py_INCREF(o);
  st->held[st->n++] = o;
  return 0;
}

static int wds_py_exec(PyObject *m) {
  if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
    PyErr_SetString(PyExc_ImportError,
                    "wds._wds cannot be imported in a sub-interpreter: its "
                    "types and exception classes are the main "
                    "interpreter's (import wds there)");
    return -1;
  }
  wds_py_state *st = PyModule_GetState(m);
  if (wds_py_make_errors() < 0)
    return -1;
  for (size_t i = 0; i < WDS_PY_NTYPES; i++)
    if (PyType_Ready(wds_py_types[i].type) < 0)
      return -1;
  if (PyModule_AddStringConstant(m, "__version__", wds_version()) < 0 ||
      wds_py_add_errors(m) < 0)
    return -1;
  for (size_t i = 0; i < WDS_PY_NTYPES; i++)
    if (wds_py_types[i].name &&
        wds_py_add_class(m, wds_py_types[i].name,
                         (PyObject *)wds_py_types[i].type) < 0)
      return -1;
  for (size_t i = 0; i < WDS_PY_NERR; i++)
    if (wds_errors[i] && wds_py_hold(st, wds_errors[i]) < 0)
      return -1;
  for (size_t i = 0; i < WDS_PY_NOSERR; i++)
    if (wds_py_hold(st, wds_oserrors[i]) < 0)
      return -1;
  for (size_t i = 0; i < WDS_PY_NTYPES; i++)
    if (wds_py_hold(st, (PyObject *)wds_py_types[i].type) < 0)
      return -1;
  return 0;
}

static int wds_py_traverse(PyObject *m, visitproc visit, void *arg) {
  wds_py_state *st = PyModule_GetState(m);
  for (size_t i = 0; st && i < st->n; i++)
    Py_VISIT(st->held[i]);
  return 0;
}

static int wds_py_clear(PyObject *m) {
  wds_py_state *st = PyModule_GetState(m);
  for (size_t i = 0; st && i < st->n; i++)
    Py_CLEAR(st->held[i]);
  if (st)
    st->n = 0;
  return 0;
}

static void wds_py_free(void *m) { wds_py_clear((PyObject *)m); }

static PyModuleDef_Slot wds_py_slots[] = {
    /* (through an integer: ISO C has no function-to-object pointer cast) */
    {Py_mod_exec, (void *)(uintptr_t)wds_py_exec},
#ifdef Py_mod_multiple_interpreters
    /* 3.12+: refused before exec runs. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL}};

static struct PyModuleDef wds_py_module = {
    PyModuleDef_HEAD_INIT,
    "wds._wds",
    "The C extension of the wds package (use `import wds`).",
    sizeof(wds_py_state),
    wds_py_methods,
    wds_py_slots,
    wds_py_traverse,
    wds_py_clear,
    wds_py_free};

PyMODINIT_FUNC PyInit__wds(void) { return PyModuleDef_Init(&wds_py_module); }
