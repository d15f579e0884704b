/* _common.c — the helpers every type of wds._wds uses (_common.h).
 *
 * Signals while a call waits without the GIL: the library asks the
 * configs' interrupt check, wds_py_interrupt, every 100 ms or so while a
 * call waits for data (Reader iteration, Loader construction's counting
 * pass and next()); in the thread blocked in the call it takes the GIL
 * back and runs the Python handlers (PyErr_CheckSignals); one that raises
 * (Ctrl-C: KeyboardInterrupt) ends the call with that exception.
 *
 * Arguments into C (str, bytes and os.PathLike into bytes; sizes; the
 * read_timeout_ms / retries convention; the spec argument of Reader and
 * _Loader, written once here) and library text into str. */
#include "_common.h"

#include <string.h>

/* ---- signals while a call waits without the GIL -------------------------- */

_Thread_local char wds_py_me;

int wds_py_interrupt(void *ctx) {
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

/* ---- arguments and results ----------------------------------------------- */

PyObject *wds_py_str(const char *s) {
  if (!s)
    Py_RETURN_NONE;
  return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "surrogateescape");
}

int wds_py_fsbytes(PyObject *obj, PyObject **out) {
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

int wds_py_path(PyObject *obj, PyObject **out) {
  *out = NULL;
  PyObject *p = PyOS_FSPath(obj); /* a str or bytes as it is */
  if (!p)
    return -1;
  int rc = wds_py_fsbytes(p, out);
  Py_DECREF(p);
  return rc;
}

int wds_py_cache_dir(PyObject *obj, PyObject **out) {
  *out = NULL;
  if (obj == Py_None)
    return 0;
  return wds_py_path(obj, out);
}

int wds_py_size(PyObject *obj, const char *what, uint64_t max, uint64_t *out) {
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

int wds_py_zero_is_none(PyObject *obj, const char *what, int max, int *out) {
  uint64_t v;
  *out = 0;
  if (!obj || obj == Py_None)
    return 0;
  if (wds_py_size(obj, what, (uint64_t)max, &v) < 0)
    return -1;
  *out = v == 0 ? -1 : (int)v;
  return 0;
}

PyObject *wds_py_url_list(const wds_url_list *l) {
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

int wds_py_spec_get(PyObject *obj, const char *who, wds_py_spec *out) {
  memset(out, 0, sizeof *out);
  if (PyUnicode_Check(obj) || PyBytes_Check(obj)) {
    if (wds_py_fsbytes(obj, &out->keep) < 0)
      return -1;
    out->spec = PyBytes_AS_STRING(out->keep);
    return 0;
  }
  char msg[96];
  snprintf(msg, sizeof msg, "%s: spec must be a str or a sequence of URLs",
           who);
  PyObject *seq = PySequence_Fast(obj, msg);
  if (!seq)
    return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject *urls = PyTuple_New(n);
  const char **ptrs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *ptrs);
  if (!urls || !ptrs) {
    Py_DECREF(seq);
    Py_XDECREF(urls);
    PyMem_Free(ptrs);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *b;
    if (wds_py_fsbytes(PySequence_Fast_GET_ITEM(seq, i), &b) < 0) {
      Py_DECREF(seq);
      Py_DECREF(urls);
      PyMem_Free(ptrs);
      return -1;
    }
    PyTuple_SET_ITEM(urls, i, b);
    ptrs[i] = PyBytes_AS_STRING(b);
  }
  Py_DECREF(seq);
  out->keep = urls;
  out->urls = ptrs;
  out->url_count = (size_t)n;
  return 0;
}

void wds_py_spec_free(wds_py_spec *s) {
  PyMem_Free(s->urls);
  Py_XDECREF(s->keep);
  memset(s, 0, sizeof *s);
}
