/* _wds: the CPython extension behind the `wds` Python package.
 *
 * Written over the public C API only (the headers of include/wds/). What it
 * exposes:
 *   - wds.Error and one subclass per status code of wds/status.h, raised with
 *     the library's message (the handle's last error, or wds_open_error());
 *   - wds.expand(spec, max_urls=0) -> list[str];
 *   - wds.Reader(spec, **options): samples as dicts {"__key__", "__url__",
 *     EXT: bytes}, the raw samples of Python webdataset;
 *   - wds.Index(path): a shard-set index (the JSON `wds index` writes);
 *   - _Writer: the shard writer behind wds.ShardWriter (python/wds/_writer.py,
 *     which encodes the fields).
 * The GIL is released while the library reads or expands. A call that
 * waits for data (Reader iteration, Loader construction's counting pass and
 * next()) still notices signals: the library asks wds_py_interrupt (the
 * configs' interrupt check) every 100 ms or so, which takes the GIL back
 * and runs the Python handlers (PyErr_CheckSignals); one that raises
 * (Ctrl-C: KeyboardInterrupt) ends the call with that exception. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "wds/gpu_jpeg.h"
#include "wds/index.h"
#include "wds/loader.h"
#include "wds/reader.h"
#include "wds/spec.h"
#include "wds/status.h"
#include "wds/version.h"
#include "wds/writer.h"

PyMODINIT_FUNC PyInit__wds(void);

/* ---- signals while a call waits without the GIL ---------------------------
 * A handle's wait: which thread is in a blocking call of it without the GIL
 * (its address of wds_py_me, 0 when none) and that thread's state. The
 * library may ask the check from other threads (a reading thread): those
 * get 0 at once, without touching Python. */
typedef struct {
  atomic_uintptr_t thread;
  PyThreadState *ts;
  int raised; /* a handler raised during this call: the exception is set */
} wds_py_wait;

static _Thread_local char wds_py_me;

/* The configs' interrupt check. In the thread blocked in the call: takes
 * the GIL, runs the signal handlers, lets it go; nonzero when one raised
 * (the exception stays set for the call's return). */
static int wds_py_interrupt(void *ctx) {
  wds_py_wait *w = ctx;
  if (atomic_load(&w->thread) != (uintptr_t)&wds_py_me)
    return 0;
  if (w->raised)
    return 1;
  PyEval_RestoreThread(w->ts);
  w->raised = PyErr_CheckSignals() < 0;
  w->ts = PyEval_SaveThread();
  return w->raised;
}

/* Around a call that may wait: like Py_BEGIN/END_ALLOW_THREADS, and marks
 * this thread as the one wds_py_interrupt serves. After the end, w->raised
 * says whether a handler's exception is set. */
#define WDS_PY_BEGIN_WAIT(w)                                                   \
  {                                                                            \
    wds_py_wait *wds_py_w_ = (w);                                              \
    wds_py_w_->raised = 0;                                                     \
    wds_py_w_->ts = PyEval_SaveThread();                                       \
    atomic_store(&wds_py_w_->thread, (uintptr_t)&wds_py_me);
#define WDS_PY_END_WAIT                                                        \
  atomic_store(&wds_py_w_->thread, (uintptr_t)0);                              \
  PyEval_RestoreThread(wds_py_w_->ts);                                         \
  wds_py_w_->ts = NULL;                                                        \
  }

/* ---- errors ------------------------------------------------------------ */

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

/* Raises the class for status with msg (the generic text when msg is empty).
 * The exception carries .status (the code) and .status_name. Returns NULL. */
static PyObject *wds_py_raise(int status, const char *msg) {
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

static int wds_py_add_errors(PyObject *m) {
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
  if (!wds_errors[0] || wds_py_add_class(m, "Error", wds_errors[0]) < 0)
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
    if (wds_py_add_class(m, d->name, cls) < 0)
      return -1;
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
    if (wds_py_add_class(m, d->name, cls) < 0)
      return -1;
  }
  return 0;
}

/* str from library text: UTF-8, undecodable bytes as surrogates (the way
 * Python decodes file names), so any tar member name round-trips. */
static PyObject *wds_py_str(const char *s) {
  if (!s)
    Py_RETURN_NONE;
  return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "surrogateescape");
}

/* A C string from a str or bytes argument (a new bytes object holds it). */
static int wds_py_fsbytes(PyObject *obj, PyObject **out) {
  if (PyUnicode_Check(obj)) {
    *out = PyUnicode_AsEncodedString(obj, "utf-8", "surrogateescape");
  } else if (PyBytes_Check(obj)) {
    Py_INCREF(obj);
    *out = obj;
  } else {
    PyErr_Format(PyExc_TypeError, "expected str or bytes, not %.80s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  if (!*out)
    return -1;
  if (strlen(PyBytes_AS_STRING(*out)) != (size_t)PyBytes_GET_SIZE(*out)) {
    Py_CLEAR(*out);
    PyErr_SetString(PyExc_ValueError, "embedded null character");
    return -1;
  }
  return 0;
}

/* cache_dir= (None, or a str, bytes or os.PathLike) into *out (a bytes
 * object the caller releases; NULL for None). */
static int wds_py_cache_dir(PyObject *obj, PyObject **out) {
  *out = NULL;
  if (obj == Py_None)
    return 0;
  PyObject *p = PyOS_FSPath(obj);
  if (!p)
    return -1;
  int rc = wds_py_fsbytes(p, out);
  Py_DECREF(p);
  return rc;
}

/* A non-negative size option; None means the library's default (0). */
static int wds_py_size(PyObject *obj, const char *what, uint64_t max,
                       uint64_t *out) {
  *out = 0;
  if (!obj || obj == Py_None)
    return 0;
  unsigned long long v = PyLong_AsUnsignedLongLong(obj);
  if (PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError) ||
        PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError,
                   "%s: expected a non-negative integer up to %llu", what,
                   (unsigned long long)max);
    }
    return -1;
  }
  if (v > max) {
    PyErr_Format(PyExc_ValueError, "%s: %llu is more than %llu", what, v,
                 (unsigned long long)max);
    return -1;
  }
  *out = v;
  return 0;
}

/* read_timeout_ms and retries as Python takes them, as the commands'
 * --read-timeout and --retries do: None the library's default (5 minutes;
 * 5 retries), 0 wait forever / no retries, N up to max; anything else
 * (a negative value) is a ValueError naming the keyword. Into the C
 * config's value (0: the default, < 0: forever / none). */
static int wds_py_zero_is_none(PyObject *obj, const char *what, int max,
                               int *out) {
  uint64_t v;
  *out = 0;
  if (!obj || obj == Py_None)
    return 0;
  if (wds_py_size(obj, what, (uint64_t)max, &v) < 0)
    return -1;
  *out = v == 0 ? -1 : (int)v;
  return 0;
}

static PyObject *wds_py_url_list(const wds_url_list *l) {
  PyObject *list = PyList_New((Py_ssize_t)l->count);
  if (!list)
    return NULL;
  for (size_t i = 0; i < l->count; i++) {
    PyObject *s = wds_py_str(l->urls[i]);
    if (!s) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, s);
  }
  return list;
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
  char err[1024];
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  const char *one = PyBytes_AS_STRING(spec);
  rc = wds_spec_expand_flags(&one, 1, (size_t)max_urls,
                             allow_pipe ? WDS_SPEC_ALLOW_PIPE_FROM_FILES : 0,
                             &list, err, sizeof err);
  Py_END_ALLOW_THREADS;
  Py_DECREF(spec);
  if (rc != WDS_OK)
    return wds_py_raise(rc, err);
  PyObject *out = wds_py_url_list(&list);
  wds_url_list_free(&list);
  return out;
}

/* ---- Reader -------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD wds_reader *r;
  int busy;          /* a thread is in wds_reader_next() without the GIL */
  int close_pending; /* close() came while busy: the reader thread closes */
  int done;          /* EOF seen */
  wds_py_wait wait;  /* signals while open() or next() waits */
} wds_py_reader;

static void wds_py_reader_release(wds_py_reader *self) {
  wds_reader *r = self->r;
  self->r = NULL;
  if (r) {
    self->busy = 1;         /* an __init__ meanwhile must not start another */
    Py_BEGIN_ALLOW_THREADS; /* stopping a pipe: command may wait */
    wds_reader_close(r);
    Py_END_ALLOW_THREADS;
    self->busy = 0;
  }
}

static void wds_py_reader_dealloc(wds_py_reader *self) {
  wds_py_reader_release(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int wds_py_reader_init(wds_py_reader *self, PyObject *args,
                              PyObject *kwargs) {
  static char *kwlist[] = {"spec",
                           "max_urls",
                           "buffer_size_bytes",
                           "max_sample_bytes",
                           "max_fields",
                           "read_timeout_ms",
                           "max_window_bytes",
                           "retries",
                           "cache_dir",
                           "cache_size",
                           "allow_pipe_from_files",
                           NULL};
  PyObject *spec_obj;
  PyObject *o_max_urls = Py_None, *o_buf = Py_None, *o_sample = Py_None,
           *o_fields = Py_None, *o_window = Py_None, *o_cdir = Py_None,
           *o_csize = Py_None, *o_timeout = Py_None, *o_retries = Py_None;
  int timeout_ms = 0, retries = 0, allow_pipe = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOOOOOOOOp:Reader", kwlist,
                                   &spec_obj, &o_max_urls, &o_buf, &o_sample,
                                   &o_fields, &o_timeout, &o_window, &o_retries,
                                   &o_cdir, &o_csize, &allow_pipe))
    return -1;
  if (wds_py_zero_is_none(o_timeout, "read_timeout_ms", INT_MAX, &timeout_ms) <
          0 ||
      wds_py_zero_is_none(o_retries, "retries", 1000, &retries) < 0)
    return -1;
  if (self->r || self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "Reader is already initialised");
    return -1;
  }
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  uint64_t v;
  if (wds_py_size(o_max_urls, "max_urls", SIZE_MAX, &v) < 0)
    return -1;
  cfg.max_urls = (size_t)v;
  if (wds_py_size(o_buf, "buffer_size_bytes", SIZE_MAX, &v) < 0)
    return -1;
  cfg.buffer_size_bytes = (size_t)v;
  if (wds_py_size(o_sample, "max_sample_bytes", SIZE_MAX, &v) < 0)
    return -1;
  cfg.max_sample_bytes = (size_t)v;
  if (wds_py_size(o_fields, "max_fields", SIZE_MAX, &v) < 0)
    return -1;
  cfg.max_fields = (size_t)v;
  if (wds_py_size(o_window, "max_window_bytes", UINT64_MAX, &v) < 0)
    return -1;
  cfg.max_window_bytes = v;
  cfg.read_timeout_ms = timeout_ms;
  cfg.retries = retries;
  if (wds_py_size(o_csize, "cache_size", UINT64_MAX, &v) < 0)
    return -1;
  cfg.cache_size = v;
  cfg.allow_pipe_from_files = allow_pipe;
  cfg.interrupt = wds_py_interrupt;
  cfg.interrupt_ctx = &self->wait;

  /* spec: a str (or bytes) spec, or a list/tuple of URLs taken as is. */
  PyObject *spec = NULL, *urls = NULL, *cdir = NULL;
  const char **url_ptrs = NULL;
  if (wds_py_cache_dir(o_cdir, &cdir) < 0)
    return -1;
  cfg.cache_dir = cdir ? PyBytes_AS_STRING(cdir) : NULL;
  if (PyUnicode_Check(spec_obj) || PyBytes_Check(spec_obj)) {
    if (wds_py_fsbytes(spec_obj, &spec) < 0) {
      Py_XDECREF(cdir);
      return -1;
    }
    cfg.spec = PyBytes_AS_STRING(spec);
  } else {
    PyObject *seq = PySequence_Fast(
        spec_obj, "Reader: spec must be a str or a sequence of URLs");
    if (!seq) {
      Py_XDECREF(cdir);
      return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    urls = PyTuple_New(n);
    url_ptrs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *url_ptrs);
    if (!urls || !url_ptrs) {
      Py_DECREF(seq);
      Py_XDECREF(urls);
      Py_XDECREF(cdir);
      PyMem_Free(url_ptrs);
      PyErr_NoMemory();
      return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *b;
      if (wds_py_fsbytes(PySequence_Fast_GET_ITEM(seq, i), &b) < 0) {
        Py_DECREF(seq);
        Py_DECREF(urls);
        Py_XDECREF(cdir);
        PyMem_Free(url_ptrs);
        return -1;
      }
      PyTuple_SET_ITEM(urls, i, b);
      url_ptrs[i] = PyBytes_AS_STRING(b);
    }
    Py_DECREF(seq);
    cfg.urls = url_ptrs;
    cfg.url_count = (size_t)n;
  }

  wds_reader *r = NULL;
  int rc;
  char msg[2048] = "";
  self->busy = 1; /* a second __init__ meanwhile is refused */
  WDS_PY_BEGIN_WAIT(&self->wait);
  rc = wds_reader_open(&cfg, &r);
  if (rc != WDS_OK) /* the thread's text, read on the same thread */
    snprintf(msg, sizeof msg, "%s", wds_open_error());
  WDS_PY_END_WAIT;
  self->busy = 0;
  Py_XDECREF(spec);
  PyMem_Free(url_ptrs);
  Py_XDECREF(urls);                        /* the reader copied the URLs */
  Py_XDECREF(cdir);                        /* and the cache directory */
  if (rc == WDS_OK && self->wait.raised) { /* a handler raised regardless */
    wds_reader_close(r);
    return -1;
  }
  if (rc != WDS_OK) {
    if (!self->wait.raised) /* else the handler's exception (Ctrl-C) */
      wds_py_raise(rc, msg);
    return -1;
  }
  self->r = r;
  self->done = 0;
  self->close_pending = 0;
  return 0;
}

static int wds_py_reader_check(wds_py_reader *self) {
  if (!self->r || self->close_pending) {
    PyErr_SetString(PyExc_ValueError, "I/O operation on a closed Reader");
    return -1;
  }
  return 0;
}

static PyObject *wds_py_sample_dict(const wds_sample *s) {
  PyObject *d = PyDict_New();
  if (!d)
    return NULL;
  PyObject *v = wds_py_str(s->key);
  if (!v || PyDict_SetItemString(d, "__key__", v) < 0)
    goto fail;
  Py_DECREF(v);
  v = wds_py_str(s->url);
  if (!v || PyDict_SetItemString(d, "__url__", v) < 0)
    goto fail;
  Py_DECREF(v);
  for (size_t i = 0; i < s->field_count; i++) {
    const wds_field *f = &s->fields[i];
    PyObject *k = wds_py_str(f->ext);
    if (!k) {
      v = NULL;
      goto fail;
    }
    v = PyBytes_FromStringAndSize((const char *)f->data,
                                  (Py_ssize_t)f->size_bytes);
    int bad = !v || PyDict_SetItem(d, k, v) < 0;
    Py_DECREF(k);
    if (bad)
      goto fail;
    Py_DECREF(v);
  }
  return d;
fail:
  Py_XDECREF(v);
  Py_DECREF(d);
  return NULL;
}

static PyObject *wds_py_reader_iter(PyObject *self) {
  if (wds_py_reader_check((wds_py_reader *)self) < 0)
    return NULL;
  Py_INCREF(self);
  return self;
}

static PyObject *wds_py_reader_next(wds_py_reader *self) {
  if (wds_py_reader_check(self) < 0)
    return NULL;
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "Reader is being read by another thread");
    return NULL;
  }
  if (self->done)
    return NULL; /* StopIteration */
  wds_reader *r = self->r;
  const wds_sample *s = NULL;
  int rc;
  self->busy = 1;
  WDS_PY_BEGIN_WAIT(&self->wait);
  rc = wds_reader_next(r, &s);
  WDS_PY_END_WAIT;
  self->busy = 0;
  PyObject *out = NULL;
  if (self->wait.raised) {
    /* A signal handler raised (Ctrl-C: KeyboardInterrupt) while the read
     * waited: that exception, and the reader is cancelled (closable). */
  } else if (rc == WDS_OK)
    out = wds_py_sample_dict(s);
  else if (rc == WDS_EOF)
    self->done = 1;
  else
    wds_py_raise(rc, wds_reader_error(r));
  if (self->close_pending) {
    self->close_pending = 0;
    wds_py_reader_release(self);
  }
  return out;
}

static PyObject *wds_py_reader_close(wds_py_reader *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (self->busy) { /* another thread is in next(): stop it; it closes */
    if (self->r)
      wds_reader_cancel(self->r);
    self->close_pending = 1;
    Py_RETURN_NONE;
  }
  wds_py_reader_release(self);
  Py_RETURN_NONE;
}

static PyObject *wds_py_reader_cancel(wds_py_reader *self,
                                      PyObject *Py_UNUSED(ignored)) {
  if (self->r)
    wds_reader_cancel(self->r);
  Py_RETURN_NONE;
}

static PyObject *wds_py_reader_enter(PyObject *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (wds_py_reader_check((wds_py_reader *)self) < 0)
    return NULL;
  Py_INCREF(self);
  return self;
}

static PyObject *wds_py_reader_exit(wds_py_reader *self, PyObject *args) {
  (void)args;
  return wds_py_reader_close(self, NULL);
}

static PyObject *wds_py_reader_stats(wds_py_reader *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (wds_py_reader_check(self) < 0)
    return NULL;
  wds_reader_stats st;
  wds_reader_stats_get(self->r, &st);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "shards",
                       (unsigned long long)st.shards, "samples",
                       (unsigned long long)st.samples, "members",
                       (unsigned long long)st.members, "field_bytes",
                       (unsigned long long)st.field_bytes, "tar_bytes",
                       (unsigned long long)st.tar_bytes, "cache_hits",
                       (unsigned long long)st.cache_hits, "cache_stored",
                       (unsigned long long)st.cache_stored, "cache_errors",
                       (unsigned long long)st.cache_errors);
}

static PyObject *wds_py_reader_get_shards(wds_py_reader *self, void *closure) {
  (void)closure;
  if (wds_py_reader_check(self) < 0)
    return NULL;
  size_t n = wds_reader_shard_count(self->r);
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    PyObject *s = wds_py_str(wds_reader_shard_url(self->r, i));
    if (!s) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, s);
  }
  return list;
}

static PyObject *wds_py_reader_get_closed(wds_py_reader *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(!self->r || self->close_pending);
}

static PyMethodDef wds_py_reader_methods[] = {
    {"close", (PyCFunction)(void (*)(void))wds_py_reader_close, METH_NOARGS,
     "Closes the reader (stopping a pipe: command); a next() blocked in "
     "another thread is cancelled. Idempotent."},
    {"cancel", (PyCFunction)(void (*)(void))wds_py_reader_cancel, METH_NOARGS,
     "Makes a blocked next(), and every later one, raise wds.CancelledError."},
    {"stats", (PyCFunction)(void (*)(void))wds_py_reader_stats, METH_NOARGS,
     "Counters since open: shards, samples, members, field_bytes, "
     "tar_bytes."},
    {"__enter__", (PyCFunction)(void (*)(void))wds_py_reader_enter, METH_NOARGS,
     NULL},
    {"__exit__", (PyCFunction)(void (*)(void))wds_py_reader_exit, METH_VARARGS,
     NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef wds_py_reader_getset[] = {
    {"shards", (getter)(void (*)(void))wds_py_reader_get_shards, NULL,
     "The expanded shard URLs.", NULL},
    {"closed", (getter)(void (*)(void))wds_py_reader_get_closed, NULL,
     "True after close().", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyDoc_STRVAR(
    wds_py_reader_doc,
    "Reader(spec, *, max_urls=None, buffer_size_bytes=None, "
    "max_sample_bytes=None, max_fields=None, read_timeout_ms=None, "
    "max_window_bytes=None, retries=None, cache_dir=None, cache_size=None, "
    "allow_pipe_from_files=False)\n\n"
    "Iterates the samples of a shard spec (a str, or a list of URLs taken as "
    "is) as dicts {'__key__': str, '__url__': str, EXT: bytes, ...}, the raw "
    "samples of Python webdataset. Options are those of wds_reader_config "
    "(wds/reader.h); None or 0 is the library's default, but "
    "read_timeout_ms=0 waits forever and retries=0 tries once, as the "
    "commands' --read-timeout 0 and --retries 0 (None: 5 minutes, 5 "
    "retries); a negative value is a ValueError. A failure raises a "
    "wds.Error subclass with the library's message (shard, member, offset); "
    "iterating again continues with what follows, as the C reader does. A "
    "context manager; close() frees it.");

static PyTypeObject wds_py_reader_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds.Reader",
    .tp_basicsize = sizeof(wds_py_reader),
    .tp_dealloc = (destructor)wds_py_reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = wds_py_reader_doc,
    .tp_iter = wds_py_reader_iter,
    .tp_iternext = (iternextfunc)wds_py_reader_next,
    .tp_methods = wds_py_reader_methods,
    .tp_getset = wds_py_reader_getset,
    .tp_init = (initproc)wds_py_reader_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Index --------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD wds_index *ix;
  int has_samples;
  PyObject *keys; /* dict key -> (shard, sample) built on first find() */
} wds_py_index;

static void wds_py_index_dealloc(wds_py_index *self) {
  wds_index_close(self->ix);
  self->ix = NULL;
  Py_CLEAR(self->keys);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int wds_py_index_init(wds_py_index *self, PyObject *args,
                             PyObject *kwargs) {
  static char *kwlist[] = {"path", "samples", "allow_pipe_from_files", NULL};
  PyObject *path_obj;
  int samples = 1, allow_pipe = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$pp:Index", kwlist,
                                   &path_obj, &samples, &allow_pipe))
    return -1;
  PyObject *path = NULL;
  if (!PyUnicode_Check(path_obj) && !PyBytes_Check(path_obj)) {
    path_obj = PyOS_FSPath(path_obj); /* pathlib.Path */
    if (!path_obj)
      return -1;
  } else {
    Py_INCREF(path_obj);
  }
  int bad = wds_py_fsbytes(path_obj, &path) < 0;
  Py_DECREF(path_obj);
  if (bad)
    return -1;
  wds_index *ix = NULL;
  int rc;
  char msg[2048] = "";
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_index_load(PyBytes_AS_STRING(path),
                      (samples ? WDS_INDEX_SAMPLES : 0) |
                          (allow_pipe ? WDS_INDEX_ALLOW_PIPE_FROM_FILES : 0),
                      &ix);
  if (rc != WDS_OK)
    snprintf(msg, sizeof msg, "%s", wds_open_error());
  Py_END_ALLOW_THREADS;
  Py_DECREF(path);
  if (rc != WDS_OK) {
    wds_py_raise(rc, msg);
    return -1;
  }
  wds_index_close(self->ix);
  Py_CLEAR(self->keys);
  self->ix = ix;
  self->has_samples = samples;
  return 0;
}

static int wds_py_index_check(wds_py_index *self) {
  if (!self->ix) {
    PyErr_SetString(PyExc_ValueError, "Index is not loaded");
    return -1;
  }
  return 0;
}

static Py_ssize_t wds_py_index_len(wds_py_index *self) {
  if (wds_py_index_check(self) < 0)
    return -1;
  return (Py_ssize_t)wds_index_shard_count(self->ix);
}

static PyObject *wds_py_int64_or_none(int64_t v) {
  if (v < 0)
    Py_RETURN_NONE;
  return PyLong_FromLongLong((long long)v);
}

/* {ext: (offset, size)} of an indexed sample. */
static PyObject *wds_py_index_fields(const wds_index_sample *s) {
  PyObject *d = PyDict_New();
  if (!d)
    return NULL;
  for (size_t i = 0; i < s->field_count; i++) {
    PyObject *k = wds_py_str(s->fields[i].ext);
    PyObject *v = Py_BuildValue("(KK)", (unsigned long long)s->fields[i].offset,
                                (unsigned long long)s->fields[i].size_bytes);
    int bad = !k || !v || PyDict_SetItem(d, k, v) < 0;
    Py_XDECREF(k);
    Py_XDECREF(v);
    if (bad) {
      Py_DECREF(d);
      return NULL;
    }
  }
  return d;
}

static PyObject *wds_py_index_shard(wds_py_index *self, PyObject *arg) {
  if (wds_py_index_check(self) < 0)
    return NULL;
  Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred())
    return NULL;
  Py_ssize_t n = (Py_ssize_t)wds_index_shard_count(self->ix);
  if (i < 0)
    i += n;
  wds_index_shard sh;
  if (i < 0 || i >= n ||
      wds_index_shard_info(self->ix, (size_t)i, &sh) != WDS_OK) {
    PyErr_SetString(PyExc_IndexError, "shard index out of range");
    return NULL;
  }
  PyObject *d = Py_BuildValue("{s:N,s:N,s:K,s:N,s:N}", "url",
                              wds_py_str(sh.url), "path", wds_py_str(sh.path),
                              "nsamples", (unsigned long long)sh.nsamples,
                              "filesize", wds_py_int64_or_none(sh.filesize),
                              "tar_bytes", wds_py_int64_or_none(sh.tar_bytes));
  if (!d || !sh.has_samples)
    return d;
  PyObject *list = PyList_New((Py_ssize_t)sh.sample_count);
  if (!list) {
    Py_DECREF(d);
    return NULL;
  }
  for (size_t j = 0; j < sh.sample_count; j++) {
    PyObject *s =
        Py_BuildValue("{s:N,s:N}", "key", wds_py_str(sh.samples[j].key),
                      "fields", wds_py_index_fields(&sh.samples[j]));
    if (!s) {
      Py_DECREF(list);
      Py_DECREF(d);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)j, s);
  }
  if (PyDict_SetItemString(d, "samples", list) < 0) {
    Py_DECREF(list);
    Py_DECREF(d);
    return NULL;
  }
  Py_DECREF(list);
  return d;
}

static PyObject *wds_py_index_sq_item(wds_py_index *self, Py_ssize_t i) {
  PyObject *n = PyLong_FromSsize_t(i);
  if (!n)
    return NULL;
  PyObject *out = wds_py_index_shard(self, n);
  Py_DECREF(n);
  return out;
}

static PyObject *wds_py_index_lookup(wds_py_index *self, PyObject *arg) {
  if (wds_py_index_check(self) < 0)
    return NULL;
  PyObject *url;
  if (wds_py_fsbytes(arg, &url) < 0)
    return NULL;
  size_t i = 0;
  int rc = wds_index_lookup(self->ix, PyBytes_AS_STRING(url), &i);
  Py_DECREF(url);
  if (rc != WDS_OK)
    return wds_py_raise(rc, wds_index_error(self->ix));
  return PyLong_FromSize_t(i);
}

static PyObject *wds_py_index_find(wds_py_index *self, PyObject *arg) {
  if (wds_py_index_check(self) < 0)
    return NULL;
  if (!self->has_samples) {
    PyErr_SetString(PyExc_ValueError,
                    "find(): the index was loaded with samples=False");
    return NULL;
  }
  if (!self->keys) { /* key -> (shard, sample); the first occurrence wins */
    PyObject *keys = PyDict_New();
    if (!keys)
      return NULL;
    size_t n = wds_index_shard_count(self->ix);
    for (size_t i = 0; i < n; i++) {
      wds_index_shard sh;
      if (wds_index_shard_info(self->ix, i, &sh) != WDS_OK)
        continue;
      for (size_t j = 0; j < sh.sample_count; j++) {
        PyObject *k = wds_py_str(sh.samples[j].key);
        PyObject *v =
            k ? Py_BuildValue("(nn)", (Py_ssize_t)i, (Py_ssize_t)j) : NULL;
        int bad = !v || PyDict_SetDefault(keys, k, v) == NULL;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad) {
          Py_DECREF(keys);
          return NULL;
        }
      }
    }
    self->keys = keys;
  }
  PyObject *where = PyDict_GetItemWithError(self->keys, arg); /* borrowed */
  if (!where) {
    if (!PyErr_Occurred())
      PyErr_SetObject(PyExc_KeyError, arg);
    return NULL;
  }
  Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(where, 0));
  Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(where, 1));
  wds_index_shard sh;
  if (wds_index_shard_info(self->ix, (size_t)i, &sh) != WDS_OK)
    return wds_py_raise(WDS_ERR_INVALID, "index changed");
  return Py_BuildValue("{s:n,s:N,s:N,s:n,s:N}", "shard", i, "url",
                       wds_py_str(sh.url), "path", wds_py_str(sh.path),
                       "sample", j, "fields",
                       wds_py_index_fields(&sh.samples[j]));
}

/* [item(shard) for every shard]: the sizes and urls properties. */
static PyObject *wds_py_index_list(wds_py_index *self,
                                   PyObject *(*item)(const wds_index_shard *)) {
  if (wds_py_index_check(self) < 0)
    return NULL;
  size_t n = wds_index_shard_count(self->ix);
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    wds_index_shard sh;
    PyObject *v =
        wds_index_shard_info(self->ix, i, &sh) == WDS_OK ? item(&sh) : NULL;
    if (!v) {
      Py_DECREF(list);
      return PyErr_Occurred() ? NULL
                              : wds_py_raise(WDS_ERR_INVALID, "bad shard");
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  return list;
}

static PyObject *wds_py_shard_size(const wds_index_shard *sh) {
  return PyLong_FromUnsignedLongLong(sh->nsamples);
}

static PyObject *wds_py_shard_url(const wds_index_shard *sh) {
  return wds_py_str(sh->url);
}

static PyObject *wds_py_index_get_sizes(wds_py_index *self, void *closure) {
  (void)closure;
  return wds_py_index_list(self, wds_py_shard_size);
}

static PyObject *wds_py_index_get_urls(wds_py_index *self, void *closure) {
  (void)closure;
  return wds_py_index_list(self, wds_py_shard_url);
}

static PyMethodDef wds_py_index_methods[] = {
    {"shard", (PyCFunction)(void (*)(void))wds_py_index_shard, METH_O,
     "shard(i) -> dict: url, path, nsamples, filesize, tar_bytes (None when "
     "unknown) and, when loaded, samples: [{'key', 'fields': {EXT: (offset, "
     "size)}}]. Also index[i]."},
    {"lookup", (PyCFunction)(void (*)(void))wds_py_index_lookup, METH_O,
     "lookup(url) -> int: the shard a URL of a spec names; wds.InvalidError "
     "when not listed, wds.CorruptError when the file's size changed."},
    {"find", (PyCFunction)(void (*)(void))wds_py_index_find, METH_O,
     "find(key) -> dict: shard, url, path, sample (its position in the "
     "shard) and fields {EXT: (offset, size)}: offset of the member's first "
     "header in the decompressed tar stream, size of its data. KeyError "
     "when absent."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef wds_py_index_getset[] = {
    {"sizes", (getter)(void (*)(void))wds_py_index_get_sizes, NULL,
     "Samples per shard, in file order.", NULL},
    {"urls", (getter)(void (*)(void))wds_py_index_get_urls, NULL,
     "Shard URLs as written in the index.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods wds_py_index_seq = {
    .sq_length = (lenfunc)wds_py_index_len,
    .sq_item = (ssizeargfunc)wds_py_index_sq_item,
};

PyDoc_STRVAR(wds_py_index_doc,
             "Index(path, *, samples=True)\n\n"
             "A shard-set index, the JSON `wds index` writes (wds/index.h). "
             "len() is the shard count, sizes the samples per shard, "
             "index[i] / shard(i) a shard's details, find(key) a key's shard "
             "and member offsets, lookup(url) a URL's shard.");

static PyTypeObject wds_py_index_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds.Index",
    .tp_basicsize = sizeof(wds_py_index),
    .tp_dealloc = (destructor)wds_py_index_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = wds_py_index_doc,
    .tp_as_sequence = &wds_py_index_seq,
    .tp_methods = wds_py_index_methods,
    .tp_getset = wds_py_index_getset,
    .tp_init = (initproc)wds_py_index_init,
    .tp_new = PyType_GenericNew,
};

/* ---- _Writer (behind wds.ShardWriter) ------------------------------------ */

typedef struct {
  PyObject_HEAD wds_writer *w;
  int busy; /* a thread is in the library without the GIL */
  /* Shards of the pattern an earlier run left after the last one written
   * (wds_writer_config.on_leftover, called by close without the GIL):
   * counted, the first and last kept (malloc'd). */
  unsigned long long left_n;
  char *left_first, *left_last;
} wds_py_writer;

static void wds_py_writer_on_leftover(void *ctx, const char *path) {
  wds_py_writer *self = ctx;
  if (self->left_n++ == 0)
    self->left_first = strdup(path);
  free(self->left_last);
  self->left_last = strdup(path);
}

static void wds_py_writer_dealloc(wds_py_writer *self) {
  if (self->w) /* never closed: discard the unfinished shard */
    wds_writer_abort(self->w);
  self->w = NULL;
  free(self->left_first);
  free(self->left_last);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int wds_py_writer_init(wds_py_writer *self, PyObject *args,
                              PyObject *kwargs) {
  static char *kwlist[] = {"pattern", "maxcount",    "maxsize", "compression",
                           "level",   "start_shard", "mtime",   "sync",
                           "out_fd",  NULL};
  PyObject *pattern_obj, *o_count = Py_None, *o_size = Py_None,
                         *o_start = Py_None;
  int compression = WDS_COMPRESS_AUTO, level = 0, sync = 1, out_fd = -1;
  long long mtime = 0;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "O|$OOiiOLpi:_Writer", kwlist, &pattern_obj, &o_count,
          &o_size, &compression, &level, &o_start, &mtime, &sync, &out_fd))
    return -1;
  if (self->w || self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "_Writer is already initialised");
    return -1;
  }
  wds_writer_config cfg = WDS_WRITER_CONFIG_INIT;
  if (wds_py_size(o_count, "maxcount", UINT64_MAX, &cfg.max_count) < 0 ||
      wds_py_size(o_size, "maxsize", UINT64_MAX, &cfg.max_size_bytes) < 0 ||
      wds_py_size(o_start, "start_shard", UINT64_MAX, &cfg.start_index) < 0)
    return -1;
  if (compression < WDS_COMPRESS_AUTO || compression > WDS_COMPRESS_GZIP) {
    PyErr_SetString(PyExc_ValueError, "_Writer: bad compression");
    return -1;
  }
  cfg.compression = (wds_compress)compression;
  cfg.level = level;
  cfg.mtime = (int64_t)mtime;
  cfg.no_sync = !sync;
  cfg.on_leftover = wds_py_writer_on_leftover;
  cfg.on_leftover_ctx = self;
  /* out_fd: one tar stream to that descriptor (a pipe: target's command,
   * run by python/wds/_writer.py), pattern None. */
  cfg.out_fd = out_fd;
  PyObject *pattern = NULL;
  if (out_fd >= 0 && pattern_obj == Py_None) {
    pattern_obj = NULL;
  } else if (!PyUnicode_Check(pattern_obj) && !PyBytes_Check(pattern_obj)) {
    pattern_obj = PyOS_FSPath(pattern_obj);
    if (!pattern_obj)
      return -1;
  } else {
    Py_INCREF(pattern_obj);
  }
  if (pattern_obj) {
    int bad = wds_py_fsbytes(pattern_obj, &pattern) < 0;
    Py_DECREF(pattern_obj);
    if (bad)
      return -1;
    cfg.pattern = PyBytes_AS_STRING(pattern);
  }
  wds_writer *w = NULL;
  char msg[2048] = "";
  int rc;
  self->busy = 1; /* a second __init__ meanwhile is refused */
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_writer_open(&cfg, &w);
  if (rc != WDS_OK)
    snprintf(msg, sizeof msg, "%s", wds_open_error());
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  Py_XDECREF(pattern);
  if (rc != WDS_OK) {
    wds_py_raise(rc, msg);
    return -1;
  }
  self->w = w;
  return 0;
}

static int wds_py_writer_check(wds_py_writer *self) {
  if (!self->w) {
    PyErr_SetString(PyExc_ValueError, "I/O operation on a closed ShardWriter");
    return -1;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "ShardWriter is being used by another thread");
    return -1;
  }
  return 0;
}

/* write(key, fields): fields a sequence of (ext: str, data: bytes). */
static PyObject *wds_py_writer_write(wds_py_writer *self, PyObject *args) {
  PyObject *key_obj, *fields_obj;
  if (!PyArg_ParseTuple(args, "OO:write", &key_obj, &fields_obj))
    return NULL;
  if (wds_py_writer_check(self) < 0)
    return NULL;
  PyObject *key = NULL, *seq = NULL, *exts = NULL;
  wds_writer_field *f = NULL;
  PyObject *out = NULL;
  if (wds_py_fsbytes(key_obj, &key) < 0)
    goto done;
  seq = PySequence_Fast(fields_obj, "write: fields must be a sequence");
  if (!seq)
    goto done;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  exts = PyTuple_New(n);
  f = PyMem_Calloc(n ? (size_t)n : 1, sizeof *f);
  if (!exts || !f) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    PyObject *ext_obj, *data;
    if (!PyTuple_Check(item) ||
        !PyArg_ParseTuple(item, "OS:write", &ext_obj, &data)) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError,
                        "write: each field is a tuple (ext, bytes)");
      goto done;
    }
    PyObject *ext;
    if (wds_py_fsbytes(ext_obj, &ext) < 0)
      goto done;
    PyTuple_SET_ITEM(exts, i, ext);
    f[i].ext = PyBytes_AS_STRING(ext);
    f[i].data = PyBytes_AS_STRING(data); /* seq keeps data alive */
    f[i].size_bytes = (size_t)PyBytes_GET_SIZE(data);
  }
  wds_writer *w = self->w;
  int rc;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_writer_write_sample(w, PyBytes_AS_STRING(key), f, (size_t)n);
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  if (rc != WDS_OK) {
    wds_py_raise(rc, wds_writer_error(w));
    goto done;
  }
  out = Py_None;
  Py_INCREF(out);
done:
  PyMem_Free(f);
  Py_XDECREF(exts);
  Py_XDECREF(seq);
  Py_XDECREF(key);
  return out;
}

static PyObject *wds_py_writer_stats_dict(const wds_writer_stats *st) {
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "shards",
                       (unsigned long long)st->shards, "samples",
                       (unsigned long long)st->samples, "members",
                       (unsigned long long)st->members, "tar_bytes",
                       (unsigned long long)st->tar_bytes, "out_bytes",
                       (unsigned long long)st->out_bytes);
}

static PyObject *wds_py_writer_stats(wds_py_writer *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (wds_py_writer_check(self) < 0)
    return NULL;
  wds_writer_stats st;
  wds_writer_stats_get(self->w, &st);
  return wds_py_writer_stats_dict(&st);
}

static PyObject *wds_py_writer_end_shard(wds_py_writer *self,
                                         PyObject *Py_UNUSED(ignored)) {
  if (wds_py_writer_check(self) < 0)
    return NULL;
  wds_writer *w = self->w;
  int rc;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_writer_end_shard(w);
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  if (rc != WDS_OK)
    return wds_py_raise(rc, wds_writer_error(w));
  Py_RETURN_NONE;
}

/* close() -> final stats; raises the writer's (sticky) error, if any. */
static PyObject *wds_py_writer_close(wds_py_writer *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (!self->w)
    Py_RETURN_NONE;
  if (wds_py_writer_check(self) < 0)
    return NULL;
  wds_writer *w = self->w;
  int rc;
  wds_writer_stats st;
  char msg[2048] = "";
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_writer_end_shard(w);
  wds_writer_stats_get(w, &st);
  if (rc != WDS_OK) {
    snprintf(msg, sizeof msg, "%s", wds_writer_error(w));
    wds_writer_abort(w);
  } else {
    rc = wds_writer_close(w);
  }
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  self->w = NULL;
  if (rc != WDS_OK)
    return wds_py_raise(rc, msg);
  PyObject *d = wds_py_writer_stats_dict(&st);
  if (d && self->left_n) {
    /* for ShardWriter.close's warning */
    PyObject *v = Py_BuildValue("(Kss)", self->left_n,
                                self->left_first ? self->left_first : "",
                                self->left_last ? self->left_last : "");
    if (!v || PyDict_SetItemString(d, "leftover", v) < 0)
      Py_CLEAR(d);
    Py_XDECREF(v);
  }
  return d;
}

static PyObject *wds_py_writer_abort(wds_py_writer *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (!self->w)
    Py_RETURN_NONE;
  if (wds_py_writer_check(self) < 0)
    return NULL;
  wds_writer *w = self->w;
  self->w = NULL;
  Py_BEGIN_ALLOW_THREADS;
  wds_writer_abort(w);
  Py_END_ALLOW_THREADS;
  Py_RETURN_NONE;
}

static PyObject *wds_py_writer_get_closed(wds_py_writer *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(!self->w);
}

static PyMethodDef wds_py_writer_methods[] = {
    {"write", (PyCFunction)(void (*)(void))wds_py_writer_write, METH_VARARGS,
     "write(key, [(ext, bytes), ...]): one sample."},
    {"end_shard", (PyCFunction)(void (*)(void))wds_py_writer_end_shard,
     METH_NOARGS, "Finishes the current shard now."},
    {"stats", (PyCFunction)(void (*)(void))wds_py_writer_stats, METH_NOARGS,
     "shards, samples, members, tar_bytes, out_bytes."},
    {"close", (PyCFunction)(void (*)(void))wds_py_writer_close, METH_NOARGS,
     "Finishes the last shard; returns the final stats (None when already "
     "closed)."},
    {"abort", (PyCFunction)(void (*)(void))wds_py_writer_abort, METH_NOARGS,
     "Discards the unfinished shard; completed shards stay."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef wds_py_writer_getset[] = {
    {"closed", (getter)(void (*)(void))wds_py_writer_get_closed, NULL,
     "True after close() or abort().", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject wds_py_writer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds._wds._Writer",
    .tp_basicsize = sizeof(wds_py_writer),
    .tp_dealloc = (destructor)wds_py_writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C shard writer (wds/writer.h) behind wds.ShardWriter.",
    .tp_methods = wds_py_writer_methods,
    .tp_getset = wds_py_writer_getset,
    .tp_init = (initproc)wds_py_writer_init,
    .tp_new = PyType_GenericNew,
};

/* ---- _Loader and _Batch (behind wds.Loader and wds.Batch) ---------------- */

typedef struct {
  PyObject_HEAD wds_loader *l;
  wds_field_spec *specs;
  char *spec_storage;
  int busy;          /* a thread is in wds_loader_next() without the GIL */
  Py_ssize_t live;   /* _Batch objects holding a slot */
  int close_pending; /* close() while batches live: the last one closes */
  PyObject *names;   /* the field names (a tuple, the same in every batch),
                        made on the first batch's request */
  wds_py_wait wait;  /* signals while open() or next() waits */
} wds_py_loader;

typedef struct {
  PyObject_HEAD wds_py_loader *loader; /* strong reference */
  const wds_batch *b;                  /* NULL once the slot is given back */
  Py_ssize_t exports; /* buffers exported by its _Arrays, and BytesFields */
  int released;       /* release() called */
} wds_py_batch;

/* A bytes field of a batch (wds.BytesField): a read-only sequence whose
 * items, bytes objects, are made from the slot on first access and kept.
 * Like an array, it views the slot: it counts as an export of the batch,
 * so the slot stays until the BytesField is gone. */
typedef struct {
  PyObject_HEAD wds_py_batch *batch; /* strong reference */
  const wds_batch_field *f;          /* valid while batch->b is */
  Py_ssize_t n;                      /* rows */
  PyObject **items;                  /* n cached items, made on first use */
} wds_py_bytesfield;

/* A buffer over one field of a batch (field -1: the valid flags). */
typedef struct {
  PyObject_HEAD wds_py_batch *batch; /* strong reference */
  int field;
  Py_ssize_t shape[9], strides[9];
} wds_py_array;

static PyTypeObject wds_py_loader_type, wds_py_batch_type, wds_py_array_type,
    wds_py_bytesfield_type;

static void wds_py_loader_free(wds_py_loader *self) {
  wds_loader *l = self->l;
  wds_field_spec *specs = self->specs;
  char *storage = self->spec_storage;
  self->l = NULL;
  self->specs = NULL;
  self->spec_storage = NULL;
  if (l) {
    self->busy = 1; /* an __init__ meanwhile must not start another */
    Py_BEGIN_ALLOW_THREADS;
    wds_loader_close(l);
    Py_END_ALLOW_THREADS;
    self->busy = 0;
  }
  free(specs);
  free(storage);
}

/* After a call that ran without the GIL: a close() that came meanwhile
 * (close_pending) frees the loader once no batch holds a slot. */
static void wds_py_loader_after_call(wds_py_loader *self) {
  if (self->close_pending && self->live == 0) {
    self->close_pending = 0;
    wds_py_loader_free(self);
  }
}

/* Gives the batch's slot back (once; when nothing exports its memory). */
static void wds_py_batch_give_back(wds_py_batch *self) {
  if (!self->b || self->exports > 0)
    return;
  wds_py_loader *lo = self->loader;
  if (lo->l)
    wds_loader_release(lo->l, self->b);
  self->b = NULL;
  lo->live--;
  /* Not while another thread is in next() or set_epoch() without the GIL:
   * that thread frees the loader when its call returns. */
  if (!lo->busy)
    wds_py_loader_after_call(lo);
}

static void wds_py_batch_dealloc(wds_py_batch *self) {
  self->exports = 0; /* its _Arrays are gone: they hold a reference */
  wds_py_batch_give_back(self);
  Py_CLEAR(self->loader);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int wds_py_batch_check(wds_py_batch *self) {
  if (!self->b || self->released) {
    PyErr_SetString(PyExc_ValueError, "the Batch was released");
    return -1;
  }
  return 0;
}

static PyObject *wds_py_batch_release(wds_py_batch *self,
                                      PyObject *Py_UNUSED(ignored)) {
  self->released = 1;
  wds_py_batch_give_back(self);
  Py_RETURN_NONE;
}

/* A list of n str; a row with the same pointer as the row before (the
 * rows of one shard share its url) shares its str. */
static PyObject *wds_py_batch_strings(const char *const *v, size_t n) {
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list)
    return NULL;
  PyObject *prev = NULL;
  for (size_t i = 0; i < n; i++) {
    PyObject *s;
    if (prev && v[i] == v[i - 1]) {
      s = prev;
      Py_INCREF(s);
    } else {
      s = wds_py_str(v[i] ? v[i] : "");
      if (!s) {
        Py_DECREF(list);
        return NULL;
      }
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    prev = s;
  }
  return list;
}

static PyObject *wds_py_batch_get(wds_py_batch *self, void *closure) {
  if (wds_py_batch_check(self) < 0)
    return NULL;
  const wds_batch *b = self->b;
  switch ((intptr_t)closure) {
  case 0:
    return wds_py_batch_strings(b->keys, b->rows);
  case 1:
    return wds_py_batch_strings(b->urls, b->rows);
  case 2:
    return PyLong_FromUnsignedLongLong(b->epoch);
  case 3:
    return PyLong_FromUnsignedLongLong(b->index);
  case 4:
    return PyLong_FromSize_t(b->rows);
  case 5: {
    /* The same names in every batch of a loader: made once. */
    wds_py_loader *lo = self->loader;
    if (!lo->names) {
      PyObject *t = PyTuple_New((Py_ssize_t)b->field_count);
      for (size_t i = 0; t && i < b->field_count; i++) {
        PyObject *s = wds_py_str(b->fields[i].name);
        if (!s) {
          Py_CLEAR(t);
          break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, s);
      }
      if (!t)
        return NULL;
      lo->names = t;
    }
    Py_INCREF(lo->names);
    return lo->names;
  }
  case 6:
    return PyLong_FromLong(b->slot);
  case 7: /* each row's source, as native uint32 (a copy) */
    return PyBytes_FromStringAndSize((const char *)b->sources,
                                     (Py_ssize_t)(b->rows * sizeof(uint32_t)));
  }
  Py_RETURN_NONE;
}

static const char *wds_py_dtype_format(wds_dtype t) {
  switch (t) {
  case WDS_DTYPE_BOOL:
    return "?";
  case WDS_DTYPE_U8:
    return "B";
  case WDS_DTYPE_I8:
    return "b";
  case WDS_DTYPE_U16:
    return "<H";
  case WDS_DTYPE_I16:
    return "<h";
  case WDS_DTYPE_U32:
    return "<I";
  case WDS_DTYPE_I32:
    return "<i";
  case WDS_DTYPE_U64:
    return "<Q";
  case WDS_DTYPE_I64:
    return "<q";
  case WDS_DTYPE_F16:
    return "<e";
  case WDS_DTYPE_F32:
    return "<f";
  case WDS_DTYPE_F64:
    return "<d";
  default:
    return NULL;
  }
}

/* field(i): a memoryview over a numeric field (no copy; it keeps the batch
 * alive), or for a bytes field a BytesField (its items made on access; it
 * keeps the slot too). i = -1: the valid flags (bool). */
static PyObject *wds_py_batch_field(wds_py_batch *self, PyObject *arg) {
  if (wds_py_batch_check(self) < 0)
    return NULL;
  Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred())
    return NULL;
  const wds_batch *b = self->b;
  if (i < -1 || i >= (Py_ssize_t)b->field_count) {
    PyErr_SetString(PyExc_IndexError, "field index out of range");
    return NULL;
  }
  if (i >= 0 && b->fields[i].dtype == WDS_DTYPE_BYTES) {
    wds_py_bytesfield *bf =
        PyObject_New(wds_py_bytesfield, &wds_py_bytesfield_type);
    if (!bf)
      return NULL;
    Py_INCREF(self);
    bf->batch = self;
    bf->f = &b->fields[i];
    bf->n = (Py_ssize_t)b->rows;
    bf->items = NULL;
    self->exports++;
    return (PyObject *)bf;
  }
  if (i >= 0 && (!wds_py_dtype_format(b->fields[i].dtype) ||
                 b->fields[i].ndim < 1 || b->fields[i].ndim > 8)) {
    PyErr_SetString(PyExc_TypeError, "unsupported field type");
    return NULL;
  }
  wds_py_array *a = PyObject_New(wds_py_array, &wds_py_array_type);
  if (!a)
    return NULL;
  Py_INCREF(self);
  a->batch = self;
  a->field = (int)i;
  PyObject *mv = PyMemoryView_FromObject((PyObject *)a);
  Py_DECREF(a);
  return mv;
}

static PyObject *wds_py_batch_enter(PyObject *self,
                                    PyObject *Py_UNUSED(ignored)) {
  Py_INCREF(self);
  return self;
}

static PyObject *wds_py_batch_exit(wds_py_batch *self, PyObject *args) {
  (void)args;
  return wds_py_batch_release(self, NULL);
}

static PyMethodDef wds_py_batch_methods[] = {
    {"release", (PyCFunction)(void (*)(void))wds_py_batch_release, METH_NOARGS,
     "Gives the slot back to the loader (once no array uses its memory)."},
    {"field", (PyCFunction)(void (*)(void))wds_py_batch_field, METH_O,
     "field(i): memoryview of a numeric field (no copy), list of bytes for a "
     "bytes field; -1: the valid flags."},
    {"__enter__", (PyCFunction)(void (*)(void))wds_py_batch_enter, METH_NOARGS,
     NULL},
    {"__exit__", (PyCFunction)(void (*)(void))wds_py_batch_exit, METH_VARARGS,
     NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef wds_py_batch_getset[] = {
    {"keys", (getter)(void (*)(void))wds_py_batch_get, NULL, "Row keys.",
     (void *)0},
    {"urls", (getter)(void (*)(void))wds_py_batch_get, NULL, "Row shards.",
     (void *)1},
    {"epoch", (getter)(void (*)(void))wds_py_batch_get, NULL, "Epoch.",
     (void *)2},
    {"index", (getter)(void (*)(void))wds_py_batch_get, NULL,
     "Batch number in the epoch.", (void *)3},
    {"rows", (getter)(void (*)(void))wds_py_batch_get, NULL, "Rows.",
     (void *)4},
    {"names", (getter)(void (*)(void))wds_py_batch_get, NULL, "Field names.",
     (void *)5},
    {"slot", (getter)(void (*)(void))wds_py_batch_get, NULL, "Pool slot.",
     (void *)6},
    {"sources", (getter)(void (*)(void))wds_py_batch_get, NULL,
     "Each row's source index, native uint32 bytes.", (void *)7},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject wds_py_batch_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds._wds._Batch",
    .tp_basicsize = sizeof(wds_py_batch),
    .tp_dealloc = (destructor)wds_py_batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A batch in a loader slot (wds/loader.h), behind wds.Batch.",
    .tp_methods = wds_py_batch_methods,
    .tp_getset = wds_py_batch_getset,
};

static void wds_py_array_dealloc(wds_py_array *self) {
  Py_CLEAR(self->batch);
  PyObject_Free(self);
}

static int wds_py_array_getbuffer(wds_py_array *self, Py_buffer *view,
                                  int flags) {
  wds_py_batch *bt = self->batch;
  if (!bt->b) {
    PyErr_SetString(PyExc_ValueError, "the Batch was released");
    return -1;
  }
  const wds_batch *b = bt->b;
  void *data;
  const char *fmt;
  Py_ssize_t itemsize, len;
  int ndim;
  if (self->field < 0) {
    data = (void *)b->valid;
    fmt = "?";
    itemsize = 1;
    ndim = 1;
    self->shape[0] = (Py_ssize_t)b->rows;
  } else {
    const wds_batch_field *f = &b->fields[self->field];
    data = f->data;
    fmt = wds_py_dtype_format(f->dtype);
    itemsize = (Py_ssize_t)wds_dtype_size(f->dtype);
    ndim = f->ndim;
    for (int d = 0; d < ndim; d++)
      self->shape[d] = (Py_ssize_t)f->shape[d];
  }
  len = itemsize;
  for (int d = ndim - 1; d >= 0; d--) {
    self->strides[d] = len;
    len *= self->shape[d];
  }
  view->buf = data;
  view->obj = (PyObject *)self;
  Py_INCREF(self);
  view->len = len;
  view->readonly = 0;
  view->itemsize = itemsize;
  view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
  view->ndim = ndim;
  view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
  view->strides =
      (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  bt->exports++;
  return 0;
}

static void wds_py_array_releasebuffer(wds_py_array *self, Py_buffer *view) {
  (void)view;
  wds_py_batch *bt = self->batch;
  if (bt->exports > 0 && --bt->exports == 0 && bt->released)
    wds_py_batch_give_back(bt);
}

static PyBufferProcs wds_py_array_buffer = {
    .bf_getbuffer = (getbufferproc)wds_py_array_getbuffer,
    .bf_releasebuffer = (releasebufferproc)wds_py_array_releasebuffer,
};

static PyTypeObject wds_py_array_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds._wds._Array",
    .tp_basicsize = sizeof(wds_py_array),
    .tp_dealloc = (destructor)wds_py_array_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The memory of one field of a batch slot.",
    .tp_as_buffer = &wds_py_array_buffer,
};

/* ---- wds.BytesField ----------------------------------------------------- */

#ifdef Py_TPFLAGS_SEQUENCE /* 3.10: `match` treats it as a sequence */
#define WDS_PY_TPFLAGS_SEQUENCE Py_TPFLAGS_SEQUENCE
#else
#define WDS_PY_TPFLAGS_SEQUENCE 0
#endif

static void wds_py_bytesfield_dealloc(wds_py_bytesfield *self) {
  if (self->items) {
    for (Py_ssize_t i = 0; i < self->n; i++)
      Py_XDECREF(self->items[i]);
    PyMem_Free(self->items);
  }
  wds_py_batch *bt = self->batch;
  if (bt->exports > 0 && --bt->exports == 0 && bt->released)
    wds_py_batch_give_back(bt);
  Py_DECREF(bt);
  PyObject_Free(self);
}

static Py_ssize_t wds_py_bytesfield_len(wds_py_bytesfield *self) {
  return self->n;
}

/* Item i (0 <= i < n), a new reference: made from the slot once, then
 * the same object. */
static PyObject *wds_py_bytesfield_at(wds_py_bytesfield *self, Py_ssize_t i) {
  if (!self->items) {
    self->items = PyMem_Calloc((size_t)self->n ? (size_t)self->n : 1,
                               sizeof *self->items);
    if (!self->items)
      return PyErr_NoMemory();
  }
  PyObject *v = self->items[i];
  if (!v) {
    const wds_batch_field *f = self->f;
    v = PyBytes_FromStringAndSize(
        (const char *)f->data + f->offsets[i],
        (Py_ssize_t)(f->offsets[i + 1] - f->offsets[i]));
    if (!v)
      return NULL;
    self->items[i] = v;
  }
  Py_INCREF(v);
  return v;
}

static PyObject *wds_py_bytesfield_item(wds_py_bytesfield *self, Py_ssize_t i) {
  if (i < 0 || i >= self->n) {
    PyErr_SetString(PyExc_IndexError, "BytesField index out of range");
    return NULL;
  }
  return wds_py_bytesfield_at(self, i);
}

/* A list of the items start, start + step, ... (count of them). */
static PyObject *wds_py_bytesfield_list(wds_py_bytesfield *self,
                                        Py_ssize_t start, Py_ssize_t step,
                                        Py_ssize_t count) {
  PyObject *list = PyList_New(count);
  for (Py_ssize_t k = 0; list && k < count; k++) {
    PyObject *v = wds_py_bytesfield_at(self, start + k * step);
    if (!v)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, k, v);
  }
  return list;
}

static PyObject *wds_py_bytesfield_subscript(wds_py_bytesfield *self,
                                             PyObject *key) {
  if (PySlice_Check(key)) {
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0)
      return NULL;
    Py_ssize_t count = PySlice_AdjustIndices(self->n, &start, &stop, step);
    return wds_py_bytesfield_list(self, start, step, count);
  }
  Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred())
    return NULL;
  if (i < 0)
    i += self->n;
  return wds_py_bytesfield_item(self, i);
}

static PyObject *wds_py_bytesfield_tolist(wds_py_bytesfield *self,
                                          PyObject *Py_UNUSED(ignored)) {
  return wds_py_bytesfield_list(self, 0, 1, self->n);
}

/* == and != against any sequence, item by item (as a list compares). */
static PyObject *wds_py_bytesfield_richcompare(wds_py_bytesfield *self,
                                               PyObject *other, int op) {
  if ((op != Py_EQ && op != Py_NE) || !PySequence_Check(other) ||
      PyUnicode_Check(other) || PyBytes_Check(other) ||
      PyByteArray_Check(other))
    Py_RETURN_NOTIMPLEMENTED;
  PyObject *mine = wds_py_bytesfield_tolist(self, NULL);
  if (!mine)
    return NULL;
  PyObject *theirs = PySequence_List(other);
  if (!theirs) {
    Py_DECREF(mine);
    return NULL;
  }
  PyObject *r = PyObject_RichCompare(mine, theirs, op);
  Py_DECREF(mine);
  Py_DECREF(theirs);
  return r;
}

static PyObject *wds_py_bytesfield_repr(wds_py_bytesfield *self) {
  PyObject *list = wds_py_bytesfield_tolist(self, NULL);
  if (!list)
    return NULL;
  PyObject *r = PyUnicode_FromFormat("wds.BytesField(%R)", list);
  Py_DECREF(list);
  return r;
}

static PySequenceMethods wds_py_bytesfield_seq = {
    .sq_length = (lenfunc)wds_py_bytesfield_len,
    .sq_item = (ssizeargfunc)wds_py_bytesfield_item,
};

static PyMappingMethods wds_py_bytesfield_map = {
    .mp_length = (lenfunc)wds_py_bytesfield_len,
    .mp_subscript = (binaryfunc)wds_py_bytesfield_subscript,
};

static PyMethodDef wds_py_bytesfield_methods[] = {
    {"tolist", (PyCFunction)(void (*)(void))wds_py_bytesfield_tolist,
     METH_NOARGS,
     "A list of the items (bytes): it does not keep the batch's slot."},
    {NULL, NULL, 0, NULL}};

PyDoc_STRVAR(
    wds_py_bytesfield_doc,
    "A bytes field of a wds.Batch: a read-only sequence of bytes, one per\n"
    "row (len, indexing, slices as lists, iteration, ==). Each item is made\n"
    "from the loader's slot on first access and kept. Like the batch's\n"
    "arrays it views the slot, so the slot is given back only once the\n"
    "BytesField is gone too; tolist() or list() copies the items out.");

static PyTypeObject wds_py_bytesfield_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds.BytesField",
    .tp_basicsize = sizeof(wds_py_bytesfield),
    .tp_dealloc = (destructor)wds_py_bytesfield_dealloc,
    .tp_repr = (reprfunc)wds_py_bytesfield_repr,
    .tp_as_sequence = &wds_py_bytesfield_seq,
    .tp_as_mapping = &wds_py_bytesfield_map,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_flags = Py_TPFLAGS_DEFAULT | WDS_PY_TPFLAGS_SEQUENCE,
    .tp_doc = wds_py_bytesfield_doc,
    .tp_richcompare = (richcmpfunc)wds_py_bytesfield_richcompare,
    .tp_methods = wds_py_bytesfield_methods,
};

static void wds_py_loader_dealloc(wds_py_loader *self) {
  /* No _Batch lives: each holds a reference. */
  wds_py_loader_free(self);
  Py_CLEAR(self->names);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int wds_py_loader_init(wds_py_loader *self, PyObject *args,
                              PyObject *kwargs) {
  static char *kwlist[] = {"spec",
                           "fields",
                           "batch_size",
                           "mode",
                           "rank",
                           "world_size",
                           "workers",
                           "seed",
                           "epoch",
                           "resume_batches",
                           "shuffle_buffer",
                           "index",
                           "drop_last",
                           "last_batch",
                           "samples_per_epoch",
                           "image_size",
                           "crop",
                           "prefetch",
                           "on_error",
                           "shard_shuffle",
                           "read_timeout_ms",
                           "retries",
                           "rank_batch_sizes",
                           "cache_dir",
                           "cache_size",
                           "allow_pipe_from_files",
                           "sources",
                           "eager_next_epoch",
                           "defer_reads",
                           "image_memory_limit",
                           "jpeg_decode",
                           NULL};
  PyObject *o_sources = Py_None, *o_image_limit = Py_None;
  PyObject *spec_obj, *fields_obj,
      *o_seed = Py_None, *o_epoch = Py_None, *o_resume = Py_None,
      *o_shuf = Py_None, *o_index = Py_None, *o_spe = Py_None,
      *o_prefetch = Py_None, *o_bs = Py_None, *o_rbs = Py_None,
      *o_cdir = Py_None, *o_csize = Py_None, *o_timeout = Py_None,
      *o_retries = Py_None;
  int mode = WDS_MODE_EXACT, rank = -1, world = -1, workers = 0, drop_last = 0,
      last_batch = -1, image_size = 224, crop = 0, on_error = 0,
      shard_shuffle = 1, timeout_ms = 0, retries = 0, allow_pipe = 0, eager = 0,
      defer = 0, jpeg_decode = 0;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "OOO|$iiiiOOOOOpiOiiOiiOOOOOpOpiOi:_Loader", kwlist,
          &spec_obj, &fields_obj, &o_bs, &mode, &rank, &world, &workers,
          &o_seed, &o_epoch, &o_resume, &o_shuf, &o_index, &drop_last,
          &last_batch, &o_spe, &image_size, &crop, &o_prefetch, &on_error,
          &shard_shuffle, &o_timeout, &o_retries, &o_rbs, &o_cdir, &o_csize,
          &allow_pipe, &o_sources, &eager, &defer, &o_image_limit,
          &jpeg_decode))
    return -1;
  if (wds_py_zero_is_none(o_timeout, "read_timeout_ms", INT_MAX, &timeout_ms) <
          0 ||
      wds_py_zero_is_none(o_retries, "retries", 1000, &retries) < 0)
    return -1;
  if (self->l || self->live || self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "_Loader is already initialised");
    return -1;
  }
  wds_loader_config cfg = WDS_LOADER_CONFIG_INIT;
  uint64_t v;
  if (wds_py_size(o_bs, "batch_size", SIZE_MAX, &v) < 0)
    return -1;
  cfg.batch_size = (size_t)v;
  if (wds_py_size(o_seed, "seed", UINT64_MAX, &cfg.seed) < 0 ||
      wds_py_size(o_epoch, "epoch", UINT64_MAX, &cfg.epoch) < 0 ||
      wds_py_size(o_resume, "resume_batches", UINT64_MAX, &cfg.resume_batches) <
          0 ||
      wds_py_size(o_spe, "samples_per_epoch", UINT64_MAX,
                  &cfg.samples_per_epoch) < 0)
    return -1;
  if (wds_py_size(o_shuf, "shuffle_buffer", SIZE_MAX, &v) < 0)
    return -1;
  cfg.shuffle_buffer = (size_t)v;
  if (wds_py_size(o_prefetch, "prefetch", SIZE_MAX, &v) < 0)
    return -1;
  cfg.prefetch_batches = (size_t)v;
  cfg.mode = (wds_mode)mode;
  cfg.rank = rank;
  cfg.world_size = world;
  cfg.workers = workers;
  cfg.drop_last = drop_last;
  if (last_batch >= 0)
    cfg.last_batch = (wds_last_batch)last_batch;
  else if (drop_last)
    cfg.last_batch = WDS_LAST_DROP; /* as `wds batches --drop-last` */
  cfg.image_size = image_size;
  cfg.crop = (wds_crop)crop;
  cfg.on_error = (wds_error_policy)on_error;
  cfg.shard_shuffle = shard_shuffle;
  cfg.eager_next_epoch = eager;
  cfg.defer_reads = (wds_defer_reads)defer;
  if (wds_py_size(o_image_limit, "image_memory_limit", UINT64_MAX,
                  &cfg.image_memory_limit) < 0)
    return -1;
  cfg.jpeg_decode = (wds_jpeg_decode)jpeg_decode;
  cfg.read_timeout_ms = timeout_ms;
  cfg.retries = retries;
  cfg.interrupt = wds_py_interrupt;
  cfg.interrupt_ctx = &self->wait;
  size_t *rbs = NULL;
  if (o_rbs != Py_None) {
    PyObject *seq = PySequence_Fast(
        o_rbs, "Loader: rank_batch_sizes must be a sequence of integers");
    if (!seq)
      return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    rbs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *rbs);
    if (!rbs) {
      Py_DECREF(seq);
      PyErr_NoMemory();
      return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      if (wds_py_size(PySequence_Fast_GET_ITEM(seq, i), "rank_batch_sizes",
                      SIZE_MAX, &v) < 0) {
        Py_DECREF(seq);
        PyMem_Free(rbs);
        return -1;
      }
      rbs[i] = (size_t)v;
    }
    Py_DECREF(seq);
    if (n == 0) {
      PyMem_Free(rbs);
      PyErr_SetString(PyExc_ValueError,
                      "Loader: rank_batch_sizes is empty (give one batch "
                      "size per rank, or None)");
      return -1;
    }
    cfg.rank_batch_sizes = rbs;
    cfg.rank_batch_size_count = (size_t)n;
    if (cfg.batch_size == 0)
      cfg.batch_size = 1; /* batch_size=None: the rank's entry */
  }
  cfg.allow_pipe_from_files = allow_pipe;

  PyObject *fields = NULL, *spec = NULL, *index = NULL, *urls = NULL,
           *cdir = NULL;
  PyObject *src_keep = NULL; /* the sources' bytes, alive until open */
  wds_source_config *srcs = NULL;
  const char **url_ptrs = NULL;
  int ret = -1;
  char err[1024] = "";
  if (wds_py_fsbytes(fields_obj, &fields) < 0)
    goto done;
  wds_field_spec *specs = NULL;
  size_t nspecs = 0;
  char *storage = NULL;
  int rc = wds_field_specs_parse(PyBytes_AS_STRING(fields), &specs, &nspecs,
                                 &storage, err, sizeof err);
  if (rc != WDS_OK) {
    wds_py_raise(rc, err);
    goto done;
  }
  free(self->specs);
  free(self->spec_storage);
  self->specs = specs;
  self->spec_storage = storage;
  cfg.fields = specs;
  cfg.field_count = nspecs;
  if (o_index != Py_None) {
    PyObject *p = PyOS_FSPath(o_index);
    if (!p)
      goto done;
    int bad = wds_py_fsbytes(p, &index) < 0;
    Py_DECREF(p);
    if (bad)
      goto done;
    cfg.index_path = PyBytes_AS_STRING(index);
  }
  uint64_t csize = 0;
  if (wds_py_cache_dir(o_cdir, &cdir) < 0 ||
      wds_py_size(o_csize, "cache_size", UINT64_MAX, &csize) < 0)
    goto done;
  cfg.cache_dir = cdir ? PyBytes_AS_STRING(cdir) : NULL;
  cfg.cache_size = csize;
  if (o_sources != Py_None) {
    /* [(spec, index or None, weight, proportion, repeat), ...] */
    PyObject *seq = PySequence_Fast(
        o_sources, "Loader: sources must be a sequence of wds.Source");
    if (!seq)
      goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    src_keep = PyList_New(0);
    srcs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *srcs);
    if (!src_keep || !srcs) {
      Py_DECREF(seq);
      PyErr_NoMemory();
      goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *t = PySequence_Fast_GET_ITEM(seq, i), *sp = NULL, *ix = Py_None,
               *b = NULL;
      double w = 0, p = 0, r = 0;
      if (!PyArg_ParseTuple(t, "OOddd:sources", &sp, &ix, &w, &p, &r) ||
          wds_py_fsbytes(sp, &b) < 0 || PyList_Append(src_keep, b) < 0) {
        Py_XDECREF(b);
        Py_DECREF(seq);
        goto done;
      }
      Py_DECREF(b);
      srcs[i].spec = PyBytes_AS_STRING(b);
      if (ix != Py_None) {
        PyObject *pth = PyOS_FSPath(ix), *ib = NULL;
        int bad = !pth || wds_py_fsbytes(pth, &ib) < 0 ||
                  PyList_Append(src_keep, ib) < 0;
        Py_XDECREF(pth);
        Py_XDECREF(ib);
        if (bad) {
          Py_DECREF(seq);
          goto done;
        }
        srcs[i].index_path = PyBytes_AS_STRING(ib);
      }
      srcs[i].weight = w;
      srcs[i].proportion = p;
      srcs[i].repeat = r;
    }
    Py_DECREF(seq);
    cfg.sources = srcs;
    cfg.source_count = (size_t)n;
  }
  if (spec_obj == Py_None) {
    /* sources alone (the loader says so if there are none) */
  } else if (PyUnicode_Check(spec_obj) || PyBytes_Check(spec_obj)) {
    if (wds_py_fsbytes(spec_obj, &spec) < 0)
      goto done;
    cfg.spec = PyBytes_AS_STRING(spec);
  } else {
    PyObject *seq = PySequence_Fast(
        spec_obj, "Loader: spec must be a str or a sequence of URLs");
    if (!seq)
      goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    urls = PyTuple_New(n);
    url_ptrs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *url_ptrs);
    if (!urls || !url_ptrs) {
      Py_DECREF(seq);
      PyErr_NoMemory();
      goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *b;
      if (wds_py_fsbytes(PySequence_Fast_GET_ITEM(seq, i), &b) < 0) {
        Py_DECREF(seq);
        goto done;
      }
      PyTuple_SET_ITEM(urls, i, b);
      url_ptrs[i] = PyBytes_AS_STRING(b);
    }
    Py_DECREF(seq);
    cfg.urls = url_ptrs;
    cfg.url_count = (size_t)n;
  }
  wds_loader *l = NULL;
  char msg[2048] = "";
  self->busy = 1; /* a second __init__ meanwhile is refused */
  WDS_PY_BEGIN_WAIT(&self->wait);
  rc = wds_loader_open(&cfg, &l);
  if (rc != WDS_OK)
    snprintf(msg, sizeof msg, "%s", wds_open_error());
  WDS_PY_END_WAIT;
  self->busy = 0;
  if (rc == WDS_OK && self->wait.raised) { /* a handler raised regardless */
    Py_BEGIN_ALLOW_THREADS;
    wds_loader_close(l);
    Py_END_ALLOW_THREADS;
    goto done;
  }
  if (rc != WDS_OK) {
    if (!self->wait.raised) /* else the handler's exception (Ctrl-C) */
      wds_py_raise(rc, msg);
    goto done;
  }
  self->l = l;
  ret = 0;
done:
  Py_XDECREF(fields);
  Py_XDECREF(spec);
  Py_XDECREF(index);
  Py_XDECREF(cdir);
  Py_XDECREF(urls);
  Py_XDECREF(src_keep);
  PyMem_Free(srcs);
  PyMem_Free(url_ptrs);
  PyMem_Free(rbs);
  return ret;
}

static int wds_py_loader_check(wds_py_loader *self) {
  if (!self->l || self->close_pending) {
    PyErr_SetString(PyExc_ValueError, "the Loader is closed");
    return -1;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "the Loader is being used by another thread");
    return -1;
  }
  return 0;
}

/* next() -> _Batch, or None at the end of the epoch. */
static PyObject *wds_py_loader_next(wds_py_loader *self,
                                    PyObject *Py_UNUSED(ignored)) {
  if (wds_py_loader_check(self) < 0)
    return NULL;
  wds_py_batch *bt = PyObject_New(wds_py_batch, &wds_py_batch_type);
  if (!bt)
    return NULL;
  bt->loader = NULL;
  bt->b = NULL;
  bt->exports = 0;
  bt->released = 0;
  wds_loader *l = self->l;
  const wds_batch *b = NULL;
  int rc;
  self->busy = 1;
  WDS_PY_BEGIN_WAIT(&self->wait);
  rc = wds_loader_next(l, &b);
  WDS_PY_END_WAIT;
  self->busy = 0;
  if (rc == WDS_OK) {
    Py_INCREF(self);
    bt->loader = self;
    bt->b = b;
    self->live++;
  }
  /* close() from another thread meanwhile: with a batch, the loader closes
   * when it is gone; else now. */
  wds_py_loader_after_call(self);
  if (rc == WDS_OK)
    return (PyObject *)bt;
  Py_DECREF(bt);
  if (self->wait.raised) /* a signal handler's exception (Ctrl-C): the */
    return NULL;         /* loader is as it was, the batch still to come */
  if (rc == WDS_EOF)
    Py_RETURN_NONE;
  return wds_py_raise(rc, self->l ? wds_loader_error(l) : "");
}

static PyObject *wds_py_loader_set_epoch(wds_py_loader *self, PyObject *arg) {
  if (wds_py_loader_check(self) < 0)
    return NULL;
  unsigned long long e = PyLong_AsUnsignedLongLong(arg);
  if (e == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  wds_loader *l = self->l;
  int rc;
  /* Busy as in next(): a next(), set_epoch() or close() from another
   * thread meanwhile raises, or is deferred until this returns. */
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_loader_set_epoch(l, (uint64_t)e);
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  PyObject *out = NULL;
  if (rc != WDS_OK)
    wds_py_raise(rc, wds_loader_error(l));
  else {
    Py_INCREF(Py_None);
    out = Py_None;
  }
  wds_py_loader_after_call(self);
  return out;
}

static PyObject *wds_py_loader_position(wds_py_loader *self,
                                        PyObject *Py_UNUSED(ignored)) {
  if (wds_py_loader_check(self) < 0)
    return NULL;
  uint64_t e = 0, n = 0;
  wds_loader_position(self->l, &e, &n);
  return Py_BuildValue("(KK)", (unsigned long long)e, (unsigned long long)n);
}

static PyObject *wds_py_loader_epoch_batches(wds_py_loader *self,
                                             PyObject *Py_UNUSED(ignored)) {
  if (wds_py_loader_check(self) < 0)
    return NULL;
  return PyLong_FromUnsignedLongLong(wds_loader_epoch_batches(self->l));
}

static PyObject *wds_py_loader_stats(wds_py_loader *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (wds_py_loader_check(self) < 0)
    return NULL;
  wds_loader_stats st;
  wds_loader_stats_get(self->l, &st);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:"
                       "s,s:K,s:K,s:K,s:K,"
                       "s:K}",
                       "batches", (unsigned long long)st.batches, "samples",
                       (unsigned long long)st.samples, "skipped",
                       (unsigned long long)st.skipped, "fill_rows",
                       (unsigned long long)st.fill_rows, "shards_opened",
                       (unsigned long long)st.shards_opened, "bytes_read",
                       (unsigned long long)st.bytes_read, "read_ns",
                       (unsigned long long)st.read_ns, "shuffle_ns",
                       (unsigned long long)st.shuffle_ns, "decode_ns",
                       (unsigned long long)st.decode_ns, "batch_ns",
                       (unsigned long long)st.batch_ns, "wait_ns",
                       (unsigned long long)st.wait_ns, "slot_wait_ns",
                       (unsigned long long)st.slot_wait_ns, "peak_pool_bytes",
                       (unsigned long long)st.peak_pool_bytes, "allocator",
                       wds_loader_allocator_name(self->l), "cache_hits",
                       (unsigned long long)st.cache_hits, "cache_stored",
                       (unsigned long long)st.cache_stored, "cache_errors",
                       (unsigned long long)st.cache_errors, "deferred_fields",
                       (unsigned long long)st.deferred_fields, "deferred_bytes",
                       (unsigned long long)st.deferred_bytes);
}

static PyObject *wds_py_loader_cancel(wds_py_loader *self,
                                      PyObject *Py_UNUSED(ignored)) {
  if (self->l)
    wds_loader_cancel(self->l);
  Py_RETURN_NONE;
}

static PyObject *wds_py_loader_close(wds_py_loader *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (!self->l)
    Py_RETURN_NONE;
  if (self->busy || self->live > 0) {
    /* A next() in another thread, or batches still held: stop the
     * pipeline now, free it when the last batch is gone. */
    wds_loader_cancel(self->l);
    self->close_pending = 1;
    Py_RETURN_NONE;
  }
  wds_py_loader_free(self);
  Py_RETURN_NONE;
}

static PyObject *wds_py_loader_get_closed(wds_py_loader *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(!self->l || self->close_pending);
}

static PyObject *wds_py_loader_get_live(wds_py_loader *self, void *closure) {
  (void)closure;
  return PyLong_FromSsize_t(self->live);
}

static PyMethodDef wds_py_loader_methods[] = {
    {"next", (PyCFunction)(void (*)(void))wds_py_loader_next, METH_NOARGS,
     "The next _Batch, or None at the end of the epoch."},
    {"set_epoch", (PyCFunction)(void (*)(void))wds_py_loader_set_epoch, METH_O,
     "Abandons the current epoch; the next batch is from the given one."},
    {"position", (PyCFunction)(void (*)(void))wds_py_loader_position,
     METH_NOARGS, "(epoch, batches delivered in it)."},
    {"epoch_batches", (PyCFunction)(void (*)(void))wds_py_loader_epoch_batches,
     METH_NOARGS, "Batches per epoch on this rank (0: not known)."},
    {"stats", (PyCFunction)(void (*)(void))wds_py_loader_stats, METH_NOARGS,
     "The loader's counters."},
    {"cancel", (PyCFunction)(void (*)(void))wds_py_loader_cancel, METH_NOARGS,
     "Makes a blocked next() raise wds.CancelledError."},
    {"close", (PyCFunction)(void (*)(void))wds_py_loader_close, METH_NOARGS,
     "Stops the loader (freed once no batch is held)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef wds_py_loader_getset[] = {
    {"closed", (getter)(void (*)(void))wds_py_loader_get_closed, NULL,
     "True after close().", NULL},
    {"live_batches", (getter)(void (*)(void))wds_py_loader_get_live, NULL,
     "Batches holding a slot.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject wds_py_loader_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds._wds._Loader",
    .tp_basicsize = sizeof(wds_py_loader),
    .tp_dealloc = (destructor)wds_py_loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C loader (wds/loader.h) behind wds.Loader.",
    .tp_methods = wds_py_loader_methods,
    .tp_getset = wds_py_loader_getset,
    .tp_init = (initproc)wds_py_loader_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module -------------------------------------------------------------- */

/* ---- _GpuJpeg: wds/gpu_jpeg.h, for wds.Loader(jpeg_decode="gpu") ------- */

typedef struct {
  PyObject_HEAD wds_gpu_jpeg *g;
} wds_py_gpujpeg;

static PyTypeObject wds_py_gpujpeg_type;

static PyObject *wds_py_gpu_jpeg_open(PyObject *mod, PyObject *args) {
  (void)mod;
  int device = -1;
  if (!PyArg_ParseTuple(args, "i:gpu_jpeg_open", &device))
    return NULL;
  char err[1024] = "";
  wds_gpu_jpeg *g = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_gpu_jpeg_create(device, &g, err, sizeof err);
  Py_END_ALLOW_THREADS;
  if (rc != WDS_OK)
    return wds_py_raise(rc, err);
  wds_py_gpujpeg *o = PyObject_New(wds_py_gpujpeg, &wds_py_gpujpeg_type);
  if (!o) {
    wds_gpu_jpeg_close(g);
    return NULL;
  }
  o->g = g;
  return (PyObject *)o;
}

static void wds_py_gpujpeg_dealloc(wds_py_gpujpeg *self) {
  wds_gpu_jpeg_close(self->g);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The held batch of a _Batch, or NULL with an exception. */
static const wds_batch *wds_py_held(PyObject *o, wds_py_loader **l) {
  if (!PyObject_TypeCheck(o, &wds_py_batch_type)) {
    PyErr_SetString(PyExc_TypeError, "expected a _Batch");
    return NULL;
  }
  wds_py_batch *b = (wds_py_batch *)o;
  if (!b->b || !b->loader || !b->loader->l) {
    PyErr_SetString(PyExc_ValueError, "the batch was released");
    return NULL;
  }
  *l = b->loader;
  return b->b;
}

/* shape(batch, i): (height, width, channels) of field i decoded, or None
 * when it is not a GPU-planned field. */
static PyObject *wds_py_gpujpeg_shape(wds_py_gpujpeg *self, PyObject *args) {
  PyObject *bo;
  Py_ssize_t i;
  wds_py_loader *l;
  if (!PyArg_ParseTuple(args, "On:shape", &bo, &i))
    return NULL;
  if (!wds_py_held(bo, &l))
    return NULL;
  int64_t sh[3];
  (void)self;
  if (i < 0 || wds_gpu_jpeg_shape(l->l, (size_t)i, sh) != WDS_OK)
    Py_RETURN_NONE;
  return Py_BuildValue("(LLL)", (long long)sh[0], (long long)sh[1],
                       (long long)sh[2]);
}

/* decode(batch, i, device_pointer, stream_pointer) */
static PyObject *wds_py_gpujpeg_decode(wds_py_gpujpeg *self, PyObject *args) {
  PyObject *bo;
  Py_ssize_t i;
  unsigned long long dev, stream;
  wds_py_loader *l;
  if (!PyArg_ParseTuple(args, "OnKK:decode", &bo, &i, &dev, &stream))
    return NULL;
  const wds_batch *b = wds_py_held(bo, &l);
  if (!b)
    return NULL;
  if (i < 0) {
    PyErr_SetString(PyExc_IndexError, "field index");
    return NULL;
  }
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_gpu_jpeg_decode(self->g, l->l, b, (size_t)i, (void *)(uintptr_t)dev,
                           (void *)(uintptr_t)stream);
  Py_END_ALLOW_THREADS;
  if (rc != WDS_OK)
    return wds_py_raise(rc, wds_gpu_jpeg_error(self->g));
  Py_RETURN_NONE;
}

static PyObject *wds_py_gpujpeg_stats(wds_py_gpujpeg *self, PyObject *args) {
  (void)args;
  wds_gpu_jpeg_stats st;
  wds_gpu_jpeg_stats_get(self->g, &st);
  return Py_BuildValue(
      "{sKsKsKsKsKsKsKss}", "batches", (unsigned long long)st.batches,
      "gpu_images", (unsigned long long)st.gpu_images, "cpu_fallback",
      (unsigned long long)st.cpu_fallback, "cpu_rows",
      (unsigned long long)st.cpu_rows, "failed", (unsigned long long)st.failed,
      "device_bytes", (unsigned long long)st.device_bytes, "hardware",
      (unsigned long long)st.hardware, "library",
      wds_gpu_jpeg_library(self->g));
}

static PyMethodDef wds_py_gpujpeg_methods[] = {
    {"shape", (PyCFunction)(void (*)(void))wds_py_gpujpeg_shape, METH_VARARGS,
     "shape(batch, i): (height, width, channels) of a GPU-planned field i, "
     "else None."},
    {"decode", (PyCFunction)(void (*)(void))wds_py_gpujpeg_decode, METH_VARARGS,
     "decode(batch, i, device_ptr, stream_ptr): field i's images into device "
     "memory (rows x H x W x C uint8), queued on the CUDA stream."},
    {"stats", (PyCFunction)(void (*)(void))wds_py_gpujpeg_stats, METH_NOARGS,
     "Counts: gpu_images, cpu_fallback, cpu_rows, failed, device_bytes, "
     "hardware, library (the libnvjpeg loaded)."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject wds_py_gpujpeg_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds._wds._GpuJpeg",
    .tp_basicsize = sizeof(wds_py_gpujpeg),
    .tp_dealloc = (destructor)wds_py_gpujpeg_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The GPU JPEG decoder (wds/gpu_jpeg.h): gpu_jpeg_open(device).",
    .tp_methods = wds_py_gpujpeg_methods};

static PyMethodDef wds_py_methods[] = {
    {"expand", (PyCFunction)(void (*)(void))wds_py_expand,
     METH_VARARGS | METH_KEYWORDS, wds_py_expand_doc},
    {"gpu_jpeg_open", (PyCFunction)(void (*)(void))wds_py_gpu_jpeg_open,
     METH_VARARGS,
     "gpu_jpeg_open(device): the GPU JPEG decoder on CUDA device `device` "
     "(-1: the current one); wds.OpenError saying why when there is none."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef wds_py_module = {
    PyModuleDef_HEAD_INIT,
    "wds._wds",
    "The C extension of the wds package (use `import wds`).",
    -1,
    wds_py_methods,
    NULL,
    NULL,
    NULL,
    NULL};

PyMODINIT_FUNC PyInit__wds(void) {
  PyObject *m = PyModule_Create(&wds_py_module);
  if (!m)
    return NULL;
  if (PyModule_AddStringConstant(m, "__version__", wds_version()) < 0 ||
      wds_py_add_errors(m) < 0)
    goto fail;
  if (PyType_Ready(&wds_py_reader_type) < 0 ||
      PyType_Ready(&wds_py_index_type) < 0)
    goto fail;
  Py_INCREF(&wds_py_reader_type);
  if (PyModule_AddObject(m, "Reader", (PyObject *)&wds_py_reader_type) < 0) {
    Py_DECREF(&wds_py_reader_type);
    goto fail;
  }
  Py_INCREF(&wds_py_index_type);
  if (PyModule_AddObject(m, "Index", (PyObject *)&wds_py_index_type) < 0) {
    Py_DECREF(&wds_py_index_type);
    goto fail;
  }
  if (PyType_Ready(&wds_py_writer_type) < 0 ||
      PyType_Ready(&wds_py_loader_type) < 0 ||
      PyType_Ready(&wds_py_batch_type) < 0 ||
      PyType_Ready(&wds_py_array_type) < 0 ||
      PyType_Ready(&wds_py_bytesfield_type) < 0 ||
      PyType_Ready(&wds_py_gpujpeg_type) < 0)
    goto fail;
  Py_INCREF(&wds_py_bytesfield_type);
  if (PyModule_AddObject(m, "BytesField", (PyObject *)&wds_py_bytesfield_type) <
      0) {
    Py_DECREF(&wds_py_bytesfield_type);
    goto fail;
  }
  Py_INCREF(&wds_py_loader_type);
  if (PyModule_AddObject(m, "_Loader", (PyObject *)&wds_py_loader_type) < 0) {
    Py_DECREF(&wds_py_loader_type);
    goto fail;
  }
  Py_INCREF(&wds_py_writer_type);
  if (PyModule_AddObject(m, "_Writer", (PyObject *)&wds_py_writer_type) < 0) {
    Py_DECREF(&wds_py_writer_type);
    goto fail;
  }
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
