/* _writer.c — _Writer: the C shard writer behind wds.ShardWriter.
 *
 * Over wds/writer.h; python/wds/_writer.py encodes the fields and gives
 * this type (key, [(ext, bytes), ...]). A shard pattern, or one tar
 * stream to out_fd (a pipe: target's command). Writing runs without the
 * GIL and marks the writer busy: a call from another thread meanwhile
 * raises. The shards an earlier run left after the last one written
 * (on_leftover) are counted for ShardWriter.close's warning. */
#include "_common.h"

#include <stdlib.h>
#include <string.h>

#include "wds/writer.h"

typedef struct {
  PyObject_HEAD wds_writer *w;
  int busy; /* a thread is in the library without the GIL */
  /* Shards of the pattern an earlier run left after the last one written
   * (wds_writer_config.on_leftover, called by close without the GIL):
   * counted, the first and last kept (the library's
   * wds_writer_leftover_add). */
  wds_writer_leftovers left;
} wds_py_writer;

static void wds_py_writer_dealloc(wds_py_writer *self) {
  if (self->w) /* never closed: discard the unfinished shard */
    wds_writer_abort(self->w);
  self->w = NULL;
  wds_writer_leftovers_free(&self->left);
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
  cfg.on_leftover = wds_writer_leftover_add;
  cfg.on_leftover_ctx = &self->left;
  /* out_fd: one tar stream to that descriptor (a pipe: target's command,
   * run by python/wds/_writer.py), pattern None. */
  cfg.out_fd = out_fd;
  PyObject *pattern = NULL;
  if (!(out_fd >= 0 && pattern_obj == Py_None)) {
    if (wds_py_path(pattern_obj, &pattern) < 0)
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
    snprintf(msg, sizeof msg, "%s", wds_last_error());
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
    wds_py_raise(rc, wds_last_error());
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
    return wds_py_raise(rc, wds_last_error());
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
    snprintf(msg, sizeof msg, "%s", wds_last_error());
    wds_writer_abort(w);
  } else if ((rc = wds_writer_close(w)) != WDS_OK) {
    /* the text outlives the handle: it is the thread's */
    snprintf(msg, sizeof msg, "%s", wds_last_error());
  }
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  self->w = NULL;
  if (rc != WDS_OK)
    return wds_py_raise(rc, msg);
  PyObject *d = wds_py_writer_stats_dict(&st);
  if (d && self->left.count) {
    /* for ShardWriter.close's warning */
    PyObject *v = Py_BuildValue("(Kss)", (unsigned long long)self->left.count,
                                self->left.first ? self->left.first : "",
                                self->left.last ? self->left.last : "");
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

PyTypeObject wds_py_writer_type = {
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
