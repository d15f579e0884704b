/* _reader.c — wds.Reader: the samples of a shard spec as dicts.
 *
 * Over wds/reader.h: each sample a dict {"__key__": str, "__url__": str,
 * EXT: bytes}, the raw samples of Python webdataset. next() runs without
 * the GIL (WDS_PY_BEGIN_WAIT: signals still reach Python) and marks the
 * reader busy: a next() from another thread meanwhile raises, a close()
 * cancels the read and is done by the reading thread when it returns. Its
 * keywords that are loader options (read_timeout_ms, retries, cache_dir,
 * ...) go through the option table's rows (_options.c), as wds.Loader's. */
#include "_common.h"
#include "_options.h"

#include <limits.h>
#include <string.h>

#include "wds/reader.h"

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

/* The Reader's keywords that are rows of the loader's option table (the
 * reader commands' --read-timeout, --retries, ... come from the same rows):
 * converted and checked by their rows, the messages naming the keyword. */
static const char *const wds_py_reader_rows[] = {"max_sample_bytes",
                                                 "read_timeout_ms",
                                                 "max_window_bytes",
                                                 "retries",
                                                 "cache_dir",
                                                 "cache_size",
                                                 "allow_pipe_from_files",
                                                 "max_unverified_bytes",
                                                 NULL};

static int wds_py_reader_init(wds_py_reader *self, PyObject *args,
                              PyObject *kwargs) {
  /* The others: not options of the loader. */
  static char *kwlist[] = {"spec", "max_urls", "buffer_size_bytes",
                           "max_fields", NULL};
  if (self->r || self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "Reader is already initialised");
    return -1;
  }
  /* The table's keywords into a loader config, the rest left for
   * PyArg_ParseTupleAndKeywords (which refuses an unknown one). */
  wds_loader_config lc = WDS_LOADER_CONFIG_INIT;
  PyObject *keep = PyList_New(0), *rest = PyDict_New();
  if (!keep || !rest)
    goto fail_early;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
    const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    int row = 0;
    for (const char *const *o = wds_py_reader_rows; k && *o && !row; o++)
      row = strcmp(*o, k) == 0;
    if (row ? wds_py_loader_option(&lc, k, value, keep) < 0
            : PyDict_SetItem(rest, key, value) < 0)
      goto fail_early;
  }
  PyObject *spec_obj;
  PyObject *o_max_urls = Py_None, *o_buf = Py_None, *o_fields = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, rest, "O|$OOO:Reader", kwlist,
                                   &spec_obj, &o_max_urls, &o_buf, &o_fields))
    goto fail_early;
  wds_reader_config cfg = WDS_READER_CONFIG_INIT;
  uint64_t v;
  if (wds_py_size(o_max_urls, "max_urls", SIZE_MAX, &v) < 0)
    goto fail_early;
  cfg.max_urls = (size_t)v;
  if (wds_py_size(o_buf, "buffer_size_bytes", SIZE_MAX, &v) < 0)
    goto fail_early;
  cfg.buffer_size_bytes = (size_t)v;
  if (wds_py_size(o_fields, "max_fields", SIZE_MAX, &v) < 0)
    goto fail_early;
  cfg.max_fields = (size_t)v;
  /* The rows' fields mean the same in both configs (wds/loader.h: "as in
   * wds_reader_config"). */
  cfg.max_sample_bytes = lc.max_sample_bytes;
  cfg.read_timeout_ms = lc.read_timeout_ms;
  cfg.max_window_bytes = lc.max_window_bytes;
  cfg.retries = lc.retries;
  cfg.cache_dir = lc.cache_dir; /* into keep's bytes */
  cfg.cache_size = lc.cache_size;
  cfg.allow_pipe_from_files = lc.allow_pipe_from_files;
  cfg.max_unverified_bytes = lc.max_unverified_bytes;
  cfg.interrupt = wds_py_interrupt;
  cfg.interrupt_ctx = &self->wait;

  /* spec: a str (or bytes) spec, or a list/tuple of URLs taken as is. */
  wds_py_spec spec;
  if (wds_py_spec_get(spec_obj, "Reader", &spec) < 0)
    goto fail_early;
  cfg.spec = spec.spec;
  cfg.urls = spec.urls;
  cfg.url_count = spec.url_count;

  wds_reader *r = NULL;
  int rc;
  char msg[2048] = "";
  self->busy = 1; /* a second __init__ meanwhile is refused */
  WDS_PY_BEGIN_WAIT(&self->wait);
  rc = wds_reader_open(&cfg, &r);
  if (rc != WDS_OK) /* the thread's text, read on the same thread */
    snprintf(msg, sizeof msg, "%s", wds_last_error());
  WDS_PY_END_WAIT;
  self->busy = 0;
  wds_py_spec_free(&spec); /* the reader copied the URLs */
  Py_DECREF(keep);         /* and the cache directory */
  Py_DECREF(rest);
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
fail_early:
  Py_XDECREF(keep);
  Py_XDECREF(rest);
  return -1;
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
    wds_py_raise(rc, wds_last_error());
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
  return Py_BuildValue(
      "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "shards",
      (unsigned long long)st.shards, "samples", (unsigned long long)st.samples,
      "members", (unsigned long long)st.members, "field_bytes",
      (unsigned long long)st.field_bytes, "tar_bytes",
      (unsigned long long)st.tar_bytes, "cache_hits",
      (unsigned long long)st.cache_hits, "cache_stored",
      (unsigned long long)st.cache_stored, "cache_errors",
      (unsigned long long)st.cache_errors, "unverified_samples",
      (unsigned long long)st.unverified_samples, "unchecked_frames",
      (unsigned long long)st.unchecked_frames);
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
    "allow_pipe_from_files=False, max_unverified_bytes=None)\n\n"
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

PyTypeObject wds_py_reader_type = {
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
