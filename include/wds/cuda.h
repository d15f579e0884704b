/* wds/cuda.h — batches copied to a CUDA device without a race on the slot.
 *
 * Header-only, over the CUDA runtime (include it from code built with the
 * CUDA toolkit; libwds itself does not link the runtime for this). A batch's
 * slot is pinned host memory when wds was built with CUDA, so
 * cudaMemcpyAsync from it is a true DMA that runs after the call returns:
 * wds_loader_release() right after it would let a worker refill the slot
 * while the copy still reads it. These helpers hand the batch back behind a
 * fence made of a CUDA event recorded after the copies
 * (wds_loader_release_after, wds/loader.h): the slot rejoins the pool once
 * the event has completed, and no host thread waits for it.
 *
 *   void *dev[2] = {d_images, d_labels};     (device buffers, one per field)
 *   wds_loader_next(l, &b);
 *   wds_cuda_batch_copy(l, b, dev, stream);  (b is given back: do not use it)
 *   kernel<<<..., stream>>>(d_images, ...);  (ordered after the copies)
 *
 * The fence's callbacks (cudaEventQuery, cudaEventSynchronize,
 * cudaEventDestroy) run in the thread that calls wds_loader_next() and
 * wds_loader_close(): make the event's device current there too.
 *
 * Work on other streams must wait for the copies (cudaStreamWaitEvent on an
 * event the caller records on `stream` after the call). wds-train orders its
 * own copies (trainer/backend_cuda.cu: events per device buffer, the host
 * waiting for a copy before the batch is released) and does not use this. */
#ifndef WDS_CUDA_H
#define WDS_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdio.h>

#include "wds/loader.h"
#include "wds/status.h"

#ifdef __cplusplus
extern "C" {
#endif

static inline int wds_cuda_event_done_(void *ev) {
  /* An error other than "not ready" also ends the wait: the copy is over
   * (failed); the caller sees the error on its stream. */
  return cudaEventQuery((cudaEvent_t)ev) != cudaErrorNotReady;
}

static inline void wds_cuda_event_wait_(void *ev) {
  (void)cudaEventSynchronize((cudaEvent_t)ev);
}

static inline void wds_cuda_event_drop_(void *ev) {
  (void)cudaEventDestroy((cudaEvent_t)ev);
}

/* The thread's last error (wds_last_error) for CUDA's refusal of `what`. */
static inline int wds_cuda_fail_(const char *what, cudaError_t e) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s (%s)", what, cudaGetErrorString(e),
           cudaGetErrorName(e));
  return wds_last_error_set(WDS_ERR_IO, msg);
}

/* Gives b back once everything queued on `stream` so far has run: records
 * an event on stream (made here, destroyed after the release). Returns
 * WDS_OK, WDS_ERR_IO when CUDA refuses the event (b is then released only
 * after cudaStreamSynchronize(stream); wds_last_error() names CUDA's
 * error), or the loader's WDS_ERR_INVALID. */
static inline int wds_cuda_release_after_stream(wds_loader *l,
                                                const wds_batch *b,
                                                cudaStream_t stream) {
  cudaEvent_t ev = NULL;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    (void)cudaStreamSynchronize(stream);
    wds_loader_release(l, b);
    return wds_cuda_fail_("wds_cuda_release_after_stream: cudaEventCreate", e);
  }
  if ((e = cudaEventRecord(ev, stream)) != cudaSuccess) {
    (void)cudaEventDestroy(ev);
    (void)cudaStreamSynchronize(stream);
    wds_loader_release(l, b);
    return wds_cuda_fail_("wds_cuda_release_after_stream: cudaEventRecord", e);
  }
  wds_release_fence f = {wds_cuda_event_done_, wds_cuda_event_wait_,
                         wds_cuda_event_drop_, (void *)ev};
  int rc = wds_loader_release_after(l, b, &f);
  if (rc != WDS_OK) {
    (void)cudaEventSynchronize(ev);
    (void)cudaEventDestroy(ev);
  }
  return rc;
}

/* Copies each field of b with a fixed row size into dev[i] (its
 * size_bytes; a BYTES field's dev[i] may be NULL and is skipped: its rows
 * stay on the host, read them before this call) with cudaMemcpyAsync on
 * `stream`, then gives b back behind an event recorded after the copies
 * (wds_cuda_release_after_stream). b must not be used after the call.
 * Returns WDS_OK; WDS_ERR_IO when a copy is refused (b is still given back,
 * after the copies queued so far), wds_last_error() naming the field and
 * CUDA's error. */
static inline int wds_cuda_batch_copy(wds_loader *l, const wds_batch *b,
                                      void *const *dev, cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  size_t i = 0;
  for (; i < b->field_count && e == cudaSuccess; i++) {
    const wds_batch_field *f = &b->fields[i];
    if (f->dtype == WDS_DTYPE_BYTES || !dev[i] || f->size_bytes == 0)
      continue;
    e = cudaMemcpyAsync(dev[i], f->data, f->size_bytes, cudaMemcpyHostToDevice,
                        stream);
  }
  char what[160] = "";
  if (e != cudaSuccess) /* named now: b is gone after the release */
    snprintf(what, sizeof what, "wds_cuda_batch_copy: field '%s'",
             b->fields[i - 1].name ? b->fields[i - 1].name : "?");
  int rr = wds_cuda_release_after_stream(l, b, stream);
  /* the copy's refusal is the error (its text, whatever the release set) */
  return e != cudaSuccess ? wds_cuda_fail_(what, e) : rr;
}

#ifdef __cplusplus
}
#endif
#endif /* WDS_CUDA_H */
