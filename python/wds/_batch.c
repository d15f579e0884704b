/* _batch.c — _Batch (behind wds.Batch), its arrays and wds.BytesField.
 *
 * A _Batch views a loader slot (wds/loader.h) without copying: field(i)
 * gives a memoryview over a numeric field (an _Array exports the slot's
 * memory through the buffer protocol) or, for a bytes field, a BytesField
 * whose items are made from the slot on first access and kept. Every
 * exported buffer and every BytesField counts as an export of the batch;
 * the slot goes back to the loader once the batch is released or gone and
 * no export is left (wds_py_batch_give_back, which also finishes a close()
 * the loader deferred: _loader.h). */
#include "_loader.h"

#include <string.h>

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

PyTypeObject wds_py_batch_type = {
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

PyTypeObject wds_py_array_type = {
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

PyTypeObject wds_py_bytesfield_type = {
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
