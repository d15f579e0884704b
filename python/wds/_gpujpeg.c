/* _gpujpeg.c — _GpuJpeg: the GPU JPEG decoder, for
 * wds.Loader(jpeg_decode="gpu").
 *
 * Over wds/gpu_jpeg.h: gpu_jpeg_open(device) makes one (wds.OpenError
 * saying why when there is none); python/wds/_device.py asks it for a
 * planned field's shape and has it decode a held _Batch's field into
 * device memory on a CUDA stream, without the GIL. */
#include "_loader.h"

#include "wds/gpu_jpeg.h"

typedef struct {
  PyObject_HEAD wds_gpu_jpeg *g;
} wds_py_gpujpeg;

PyObject *wds_py_gpu_jpeg_open(PyObject *mod, PyObject *args) {
  (void)mod;
  int device = -1;
  if (!PyArg_ParseTuple(args, "i:gpu_jpeg_open", &device))
    return NULL;
  wds_gpu_jpeg *g = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  rc = wds_gpu_jpeg_open(device, &g);
  Py_END_ALLOW_THREADS;
  if (rc != WDS_OK)
    return wds_py_raise(rc, wds_last_error());
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
    return wds_py_raise(rc, wds_last_error());
  Py_RETURN_NONE;
}

static PyObject *wds_py_gpujpeg_stats(wds_py_gpujpeg *self, PyObject *args) {
  (void)args;
  wds_gpu_jpeg_stats st;
  wds_gpu_jpeg_stats_get(self->g, &st);
  return Py_BuildValue(
      "{sKsKsKsKsKsKsKsKsKss}", "batches", (unsigned long long)st.batches,
      "gpu_images", (unsigned long long)st.gpu_images, "cpu_fallback",
      (unsigned long long)st.cpu_fallback, "cpu_rows",
      (unsigned long long)st.cpu_rows, "failed", (unsigned long long)st.failed,
      "device_bytes", (unsigned long long)st.device_bytes, "arena_bytes",
      (unsigned long long)st.arena_bytes, "nvjpeg_bytes",
      (unsigned long long)st.nvjpeg_bytes, "hardware",
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
     "Counts: gpu_images, cpu_fallback, cpu_rows, failed, device_bytes "
     "(arena_bytes, the decoder's, + nvjpeg_bytes, nvJPEG's own), hardware, "
     "library (the libnvjpeg loaded)."},
    {NULL, NULL, 0, NULL}};

PyTypeObject wds_py_gpujpeg_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds._wds._GpuJpeg",
    .tp_basicsize = sizeof(wds_py_gpujpeg),
    .tp_dealloc = (destructor)wds_py_gpujpeg_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The GPU JPEG decoder (wds/gpu_jpeg.h): gpu_jpeg_open(device).",
    .tp_methods = wds_py_gpujpeg_methods};
