/* _index.c — wds.Index: a shard-set index, the JSON `wds index` writes.
 *
 * Over wds/index.h: len() the shard count, sizes and urls, index[i] /
 * shard(i) a shard's details, lookup(url) a URL's shard, find(key) a key's
 * shard and member offsets (a dict key -> (shard, sample) built on the
 * first find()). Loading runs without the GIL; the rest reads the loaded
 * index. */
#include "_common.h"

#include <string.h>

#include "wds/index.h"

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
  PyObject *path; /* a str, bytes or pathlib.Path */
  if (wds_py_path(path_obj, &path) < 0)
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
    snprintf(msg, sizeof msg, "%s", wds_last_error());
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
    return wds_py_raise(rc, wds_last_error());
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

PyTypeObject wds_py_index_type = {
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
