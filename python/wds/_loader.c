/* _loader.c — _Loader: the C loader behind wds.Loader.
 *
 * Over wds/loader.h; python/wds/_loader.py is its Python face. __init__
 * runs in stages: the keywords into a wds_loader_config
 * (wds_py_loader_config_from_kwargs; the option table's rows through
 * _options.c), the checks of this object's state,
 * what the config points at (the field specs, paths, sources and spec,
 * kept alive until open), the open (without the GIL; signals still reach
 * Python), and the Python-side state. next() hands out _Batch objects
 * (_batch.c), each holding a slot; next() and set_epoch() run without the
 * GIL and mark the loader busy (another thread's call raises, a close()
 * is deferred until the call returns, or until the last batch is gone). */
#include "_loader.h"
#include "_options.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

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

void wds_py_loader_after_call(wds_py_loader *self) {
  if (self->close_pending && self->live == 0) {
    self->close_pending = 0;
    wds_py_loader_free(self);
  }
}

static void wds_py_loader_dealloc(wds_py_loader *self) {
  /* No _Batch lives: each holds a reference. */
  wds_py_loader_free(self);
  Py_CLEAR(self->names);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- __init__, in stages ------------------------------------------------- */

/* What stage 3 makes into what the config points at: _Loader(...)'s
 * arguments that are not rows of the option table (borrowed, as the
 * call's arguments are), the rank_batch_sizes array the config points at
 * (PyMem; the caller frees it), and the bytes the rows' strings point to
 * (keep: a list, owned). */
typedef struct {
  PyObject *spec, *fields, *sources, *keep;
  size_t *rbs;
} wds_py_loader_args;

/* rank_batch_sizes=: a sequence of sizes into *out (PyMem) and *n. */
static int wds_py_loader_rbs(PyObject *o_rbs, size_t **out, size_t *n_out) {
  uint64_t v;
  PyObject *seq = PySequence_Fast(
      o_rbs, "Loader: rank_batch_sizes must be a sequence of integers");
  if (!seq)
    return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  size_t *rbs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *rbs);
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
  *out = rbs;
  *n_out = (size_t)n;
  return 0;
}

/* Stage 1, the keywords: those that are rows of the loader's option table
 * through it (_options.c: the CLI's bounds and messages, naming the
 * keyword), the others here, into *out and *a (for stage 3). -1 with an
 * exception when one is bad (nothing then to free). */
static int wds_py_loader_config_from_kwargs(PyObject *args, PyObject *kwargs,
                                            wds_loader_config *out,
                                            wds_py_loader_args *a) {
  static const char *const others[] = {
      "spec",    "fields",       "batch_size", "rank_batch_sizes",
      "sources", "resume_state", NULL};
  static char *kwlist[] = {
      "spec",    "fields",       "batch_size", "rank_batch_sizes",
      "sources", "resume_state", NULL};
  PyObject *spec_obj, *fields_obj, *o_bs = Py_None, *o_rbs = Py_None,
                                   *o_sources = Py_None, *o_state = Py_None;
  wds_loader_config cfg = WDS_LOADER_CONFIG_INIT;
  cfg.mode = WDS_MODE_EXACT; /* wds.Loader's default, as wds-train's */
  PyObject *keep = PyList_New(0), *rest = NULL;
  if (!keep || wds_py_loader_options(kwargs, others, &cfg, keep, &rest) < 0 ||
      !PyArg_ParseTupleAndKeywords(args, rest, "OOO|$OOO:_Loader", kwlist,
                                   &spec_obj, &fields_obj, &o_bs, &o_rbs,
                                   &o_sources, &o_state))
    goto fail;
  /* resume_state: the text wds_loader_state gave (a str), read by the
   * open while the call's arguments live. */
  if (o_state != Py_None) {
    if (!PyUnicode_Check(o_state)) {
      PyErr_Format(PyExc_TypeError,
                   "Loader: resume_state must be a str (state_dict()'s "
                   "\"state\"), not %s",
                   Py_TYPE(o_state)->tp_name);
      goto fail;
    }
    if (!(cfg.resume_state = PyUnicode_AsUTF8(o_state)))
      goto fail;
  }
  Py_CLEAR(rest);
  /* drop_last's partial last batch: last_batch=None leaves the config's
   * WDS_LAST_AUTO, which the open resolves (the library's rule). */
  /* batch_size: a row too, but positional, and None (with
   * rank_batch_sizes: each rank's entry; without: the loader refuses 0) */
  if (o_bs == Py_None)
    cfg.batch_size = o_rbs == Py_None ? 0 : 1;
  else if (wds_py_loader_option(&cfg, "batch_size", o_bs, keep) < 0)
    goto fail;
  size_t *rbs = NULL;
  if (o_rbs != Py_None &&
      wds_py_loader_rbs(o_rbs, &rbs, &cfg.rank_batch_size_count) < 0)
    goto fail;
  cfg.rank_batch_sizes = rbs;
  *out = cfg;
  *a = (wds_py_loader_args){.spec = spec_obj,
                            .fields = fields_obj,
                            .sources = o_sources,
                            .keep = keep,
                            .rbs = rbs};
  return 0;
fail:
  Py_XDECREF(keep);
  Py_XDECREF(rest);
  return -1;
}

/* What a loader config points at, made from the Python arguments, alive
 * until the open returns; the field specs then stay with the _Loader. */
typedef struct {
  PyObject *fields;   /* bytes */
  PyObject *keep;     /* the option rows' bytes (stage 1's list) */
  PyObject *src_keep; /* the sources' bytes (a list) */
  wds_source_config *srcs;
  wds_py_spec spec;
  size_t *rbs;           /* rank_batch_sizes (stage 1's) */
  wds_field_spec *specs; /* the parsed fields= (malloc'd by the library) */
  char *spec_storage;
} wds_py_loader_inputs;

static void wds_py_loader_inputs_free(wds_py_loader_inputs *in) {
  Py_XDECREF(in->fields);
  Py_XDECREF(in->keep);
  Py_XDECREF(in->src_keep);
  PyMem_Free(in->srcs);
  wds_py_spec_free(&in->spec);
  PyMem_Free(in->rbs);
  free(in->specs);
  free(in->spec_storage);
  memset(in, 0, sizeof *in);
}

/* sources=: [(spec, index or None, weight, proportion, repeat), ...] into
 * cfg->sources, their text kept in in->src_keep. */
static int wds_py_loader_sources(PyObject *o_sources, wds_loader_config *cfg,
                                 wds_py_loader_inputs *in) {
  PyObject *seq = PySequence_Fast(
      o_sources, "Loader: sources must be a sequence of wds.Source");
  if (!seq)
    return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  in->src_keep = PyList_New(0);
  in->srcs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *in->srcs);
  if (!in->src_keep || !in->srcs) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  wds_source_config *srcs = in->srcs;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *t = PySequence_Fast_GET_ITEM(seq, i), *sp = NULL, *ix = Py_None,
             *b = NULL;
    double w = 0, p = 0, r = 0;
    if (!PyArg_ParseTuple(t, "OOddd:sources", &sp, &ix, &w, &p, &r) ||
        wds_py_fsbytes(sp, &b) < 0 || PyList_Append(in->src_keep, b) < 0) {
      Py_XDECREF(b);
      Py_DECREF(seq);
      return -1;
    }
    Py_DECREF(b);
    srcs[i].spec = PyBytes_AS_STRING(b);
    if (ix != Py_None) {
      PyObject *ib = NULL;
      int bad = wds_py_path(ix, &ib) < 0 || PyList_Append(in->src_keep, ib) < 0;
      Py_XDECREF(ib);
      if (bad) {
        Py_DECREF(seq);
        return -1;
      }
      srcs[i].index_path = PyBytes_AS_STRING(ib);
    }
    srcs[i].weight = w;
    srcs[i].proportion = p;
    srcs[i].repeat = r;
  }
  Py_DECREF(seq);
  cfg->sources = srcs;
  cfg->source_count = (size_t)n;
  return 0;
}

/* Stage 3, what the config points at: the field specs, the sources and
 * the spec (None: sources alone; the loader
 * says so if there are none), from a's arguments into *in. -1 with an
 * exception; the caller frees *in either way. */
static int wds_py_loader_inputs_get(const wds_py_loader_args *a,
                                    wds_loader_config *cfg,
                                    wds_py_loader_inputs *in) {
  if (wds_py_fsbytes(a->fields, &in->fields) < 0)
    return -1;
  size_t nspecs = 0;
  int rc = wds_field_specs_parse(PyBytes_AS_STRING(in->fields), &in->specs,
                                 &nspecs, &in->spec_storage);
  if (rc != WDS_OK) {
    wds_py_raise(rc, wds_last_error());
    return -1;
  }
  cfg->fields = in->specs;
  cfg->field_count = nspecs;
  if (a->sources != Py_None && wds_py_loader_sources(a->sources, cfg, in) < 0)
    return -1;
  if (a->spec != Py_None) {
    if (wds_py_spec_get(a->spec, "Loader", &in->spec) < 0)
      return -1;
    cfg->spec = in->spec.spec;
    cfg->urls = in->spec.urls;
    cfg->url_count = in->spec.url_count;
  }
  return 0;
}

/* Stage 4, the open: without the GIL, signals served (a handler that
 * raises, Ctrl-C, ends it with that exception). *out, or -1 with an
 * exception. */
static int wds_py_loader_open(wds_py_loader *self, wds_loader_config *cfg,
                              wds_loader **out) {
  wds_loader *l = NULL;
  char msg[2048] = "";
  int rc;
  cfg->interrupt = wds_py_interrupt;
  cfg->interrupt_ctx = &self->wait;
  self->busy = 1; /* a second __init__ meanwhile is refused */
  WDS_PY_BEGIN_WAIT(&self->wait);
  rc = wds_loader_open(cfg, &l);
  if (rc != WDS_OK)
    snprintf(msg, sizeof msg, "%s", wds_last_error());
  WDS_PY_END_WAIT;
  self->busy = 0;
  if (rc == WDS_OK && self->wait.raised) { /* a handler raised regardless */
    Py_BEGIN_ALLOW_THREADS;
    wds_loader_close(l);
    Py_END_ALLOW_THREADS;
    return -1;
  }
  if (rc != WDS_OK) {
    if (!self->wait.raised) /* else the handler's exception (Ctrl-C) */
      wds_py_raise(rc, msg);
    return -1;
  }
  *out = l;
  return 0;
}

static int wds_py_loader_init(wds_py_loader *self, PyObject *args,
                              PyObject *kwargs) {
  wds_loader_config cfg;
  wds_py_loader_args a;
  if (wds_py_loader_config_from_kwargs(args, kwargs, &cfg, &a) < 0)
    return -1;
  wds_py_loader_inputs in = {.rbs = a.rbs, .keep = a.keep};
  /* Stage 2, the checks: one loader per object. */
  if (self->l || self->live || self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "_Loader is already initialised");
    wds_py_loader_inputs_free(&in);
    return -1;
  }
  wds_loader *l = NULL;
  if (wds_py_loader_inputs_get(&a, &cfg, &in) < 0 ||
      wds_py_loader_open(self, &cfg, &l) < 0) {
    wds_py_loader_inputs_free(&in);
    return -1;
  }
  /* Stage 5, the Python side: the loader and the field specs it reads. */
  free(self->specs);
  free(self->spec_storage);
  self->specs = in.specs;
  self->spec_storage = in.spec_storage;
  in.specs = NULL;
  in.spec_storage = NULL;
  self->l = l;
  wds_py_loader_inputs_free(&in);
  return 0;
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
  /* the text now, before anything else this thread runs can fail */
  char msg[1024] = "";
  if (rc < 0)
    snprintf(msg, sizeof msg, "%s", wds_last_error());
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
  return wds_py_raise(rc, msg);
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
    wds_py_raise(rc, wds_last_error());
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

static PyObject *wds_py_loader_state(wds_py_loader *self,
                                     PyObject *Py_UNUSED(ignored)) {
  if (wds_py_loader_check(self) < 0)
    return NULL;
  char *text = NULL;
  if (wds_loader_state(self->l, &text) != WDS_OK)
    return PyErr_NoMemory();
  PyObject *o = PyUnicode_FromString(text);
  free(text);
  return o;
}

static PyObject *wds_py_loader_elastic(wds_py_loader *self,
                                       PyObject *Py_UNUSED(ignored)) {
  if (wds_py_loader_check(self) < 0)
    return NULL;
  int world = 0;
  uint64_t left = 0;
  if (!wds_loader_elastic(self->l, &world, &left, NULL))
    Py_RETURN_NONE;
  return Py_BuildValue("(iK)", world, (unsigned long long)left);
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
  return Py_BuildValue(
      "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:"
      "s,s:K,s:K,s:K,s:K,"
      "s:K,s:K}",
      "batches", (unsigned long long)st.batches, "samples",
      (unsigned long long)st.samples, "skipped", (unsigned long long)st.skipped,
      "fill_rows", (unsigned long long)st.fill_rows, "shards_opened",
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
      (unsigned long long)st.deferred_bytes, "unverified_samples",
      (unsigned long long)st.unverified_samples);
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
    {"elastic", (PyCFunction)(void (*)(void))wds_py_loader_elastic, METH_NOARGS,
     "(old world, samples left) in an elastic resume's epoch, else None."},
    {"state", (PyCFunction)(void (*)(void))wds_py_loader_state, METH_NOARGS,
     "The saved state (wds_loader_state): the position and what gives it "
     "meaning, as text."},
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

PyTypeObject wds_py_loader_type = {
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
