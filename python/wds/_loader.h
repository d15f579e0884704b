/* _loader.h — the _Loader and _Batch objects, which _loader.c, _batch.c
 * and _gpujpeg.c share.
 *
 * A _Batch holds its loader slot (and a strong reference to its _Loader)
 * until it, every buffer exported from it and every BytesField of it is
 * gone; then it gives the slot back (wds_loader_release, from any
 * thread). The _Loader counts the batches holding a slot (live): a close()
 * while some live, or while another thread is in next() without the GIL,
 * cancels the loader and is finished by whoever ends last
 * (wds_py_loader_after_call). */
#ifndef WDS_PY_LOADER_H
#define WDS_PY_LOADER_H

#include "_common.h"

#include "wds/loader.h"

#pragma GCC visibility push(hidden) /* as _common.h's */

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

/* After a call that ran without the GIL: a close() that came meanwhile
 * (close_pending) frees the loader once no batch holds a slot. */
void wds_py_loader_after_call(wds_py_loader *self);

#pragma GCC visibility pop

#endif
