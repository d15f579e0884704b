/* jpeg_gpu.h — the GPU JPEG decoder (wds/gpu_jpeg.h) behind a seam.
 * Internal.
 *
 * jpeg_gpu.c is the decoder without CUDA: it reads a batch's planned rows
 * (pipeline/gpu_plan.h), hands every JPEG to the backend's decode, decodes
 * on the CPU what the backend refused or failed on (wds__decode_image with
 * the row's options and RNG key: the CPU path's bytes), applies on_error to
 * what the CPU cannot decode either, and copies or zeroes the other rows.
 * The backend is an ops table: jpeg_gpu_cuda.cu's is nvJPEG plus a resize
 * kernel; tests give a fake one (CPU decode and resample, refusals, bad
 * data) to run the batching, fallback and error paths without a GPU. */
#ifndef WDS_LOADER_JPEG_GPU_H
#define WDS_LOADER_JPEG_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "pipeline/gpu_plan.h"
#include "wds/gpu_jpeg.h"

enum {
  WDS__JG_OK = 0,      /* decoded into its row */
  WDS__JG_REFUSED = 1, /* the backend cannot decode it (CMYK, lossless...) */
  WDS__JG_FAILED = 2   /* the backend tried and failed (bad data?) */
};

/* One JPEG row for the backend. */
typedef struct wds__jg_img {
  const uint8_t *data; /* the JPEG, in the slot (host, pinned with CUDA) */
  size_t size;
  wds__gpu_row h; /* its plan and output size */
  size_t row;     /* its output row (batch row - the call's row0) */
  size_t batch_row;
  int status; /* set by decode */
} wds__jg_img;

typedef struct wds__jg_ops {
  /* Decodes imgs[0..n) and writes each one's plan (resize of its span,
   * crop, flip) at out + row * row_bytes (device memory) on stream,
   * setting each status. WDS_OK, or a failure of the backend itself
   * (WDS_ERR_IO, WDS_ERR_NOMEM) with its message: the batch is lost. */
  int (*decode)(void *ctx, wds__jg_img *imgs, size_t n, void *out,
                size_t row_bytes, void *stream, wds__err *e);
  /* n bytes host -> device on stream; src stays valid until sync. */
  int (*upload)(void *ctx, void *dst, const void *src, size_t n, void *stream,
                wds__err *e);
  int (*zero)(void *ctx, void *dst, size_t n, void *stream, wds__err *e);
  int (*sync)(void *ctx, void *stream, wds__err *e); /* stream's work done */
  void (*stats)(void *ctx, wds_gpu_jpeg_stats *st);  /* device_bytes... */
  void (*destroy)(void *ctx);
  /* Device memory of at least bytes, owned (grown, reused), or NULL. */
  void *(*buffer)(void *ctx, size_t bytes);
  /* Device -> host, after the stream's work: synchronous. */
  int (*download)(void *ctx, void *host, const void *dev, size_t n,
                  void *stream, wds__err *e);
  /* The deadline of every wait of the backend from now on (ms; 0: none):
   * wds_gpu_jpeg_set_timeout. NULL: the backend does not wait. */
  void (*set_timeout)(void *ctx, int timeout_ms);
} wds__jg_ops;

/* ---- what the backends share (jpeg_gpu.c): on the CPU, so the fake
 * backend of the tests runs the very code nvJPEG's does ---- */

/* Device memory the decoded images of imgs[0..n) need at once: the
 * largest part of at most WDS_GPU_JPEG_ARENA bytes (one image larger than
 * that alone), counting the images whose status is WDS__JG_OK; each image
 * src_w x src_h x channels bytes rounded up to 256. The arena is grown to
 * this, never shrunk: bounded by the largest batch, not growing after it. */
size_t wds__jg_image_bytes(const wds__jg_img *im);
size_t wds__jg_arena_need(const wds__jg_img *imgs, size_t n);

/* 1 when the JPEG data[0..n) ends with its EOI marker (FF D9; trailing
 * zeros or line ends allowed), else 0: cut short. nvJPEG's batched calls
 * may decode such a JPEG without an error (they have no per-image
 * status), so these are decoded one at a time (wds__jg_route). */
int wds__jg_jpeg_whole(const uint8_t *data, size_t n);

/* Where nvJPEG's backend sends one JPEG it parsed (baseline, extended or
 * progressive): the batched hardware or GPU hybrid call, or one image at a
 * time (nvjpegDecode, which has a status per image). The batched calls have
 * none, and GPU_HYBRID's batches of more than 50 images do Huffman on the
 * GPU: a JPEG cut short there decodes "successfully" into garbage. So a
 * JPEG that is not whole (wds__jg_jpeg_whole) never goes to a batched call,
 * nor does a progressive one; whole ones go to the hardware when it takes
 * them (hw_takes), else to the hybrid call. */
enum { WDS__JG_ROUTE_HW = 0, WDS__JG_ROUTE_HYBRID = 1, WDS__JG_ROUTE_ONE = 2 };
int wds__jg_route(int progressive, int whole, int hw_takes);

/* One query of the device: 1 done, 0 not yet, or a failure (a status
 * < 0) with its message in e. */
typedef int (*wds__jg_query)(void *arg, wds__err *e);

/* Polls query (yielding, then sleeping 20-200 us between polls) until it
 * is done: WDS_OK; its failure (WDS_ERR_IO); or, timeout_ms > 0 and that
 * long gone by, WDS_ERR_TIMEOUT naming what. Never blocks in the device's
 * own waits, which a hung peer's work queued before could hold forever. */
int wds__jg_poll(wds__jg_query query, void *arg, const char *what,
                 int timeout_ms, wds__err *e);

/* A batched decode state (nvJPEG's nvjpegJpegState_t of the batched API)
 * and the event recorded after its last batched decode. The state holds
 * that decode's buffers until the device is done with it, so the next
 * batch's initialize waits for the event first (as DALI and nvImageCodec
 * order theirs): the previous batch may still run when the next is
 * issued (Python's engine and wds-train queue batch N+1 behind N). */
typedef struct wds__jg_batched {
  void *ctx;
  /* nvjpegDecodeBatchedInitialize for n images of `channels`: 0 or a
   * failure */
  int (*init)(void *ctx, int n, int channels);
  /* sets up the state's own host arrays (the images' addresses, sizes and
   * destinations) for the call's images (arg: wds__jg_batched_run's
   * fill_arg), after the previous decode is done: nvJPEG may still read
   * them until then. 0, or out of memory. */
  int (*fill)(void *ctx, void *arg);
  /* nvjpegDecodeBatched of the images set up by the caller, on stream:
   * 0 or a failure */
  int (*decode)(void *ctx, void *stream);
  /* records the state's event on stream: WDS_OK, or a failure (in e)
   * once the stream's work is done (waited for otherwise: without the
   * event nothing else would) */
  int (*record)(void *ctx, void *stream, wds__err *e);
  wds__jg_query query; /* the state's event: done? */
  int pending;         /* an event was recorded and not seen done */
} wds__jg_batched;

enum { WDS__JG_BATCH_FAILED = 1 }; /* the batched call refused the batch */

/* Waits (polled, timeout_ms) for s's previous batched decode, then fills
 * the state's arrays (fill(ctx, fill_arg)), initializes and decodes n
 * images and records the event. WDS_OK,
 * WDS__JG_BATCH_FAILED (initialize or decode failed: the caller decodes
 * them one by one), or a failure of the wait, the fill (WDS_ERR_NOMEM) or
 * the record (e). */
int wds__jg_batched_run(wds__jg_batched *s, void *fill_arg, int n, int channels,
                        void *stream, int timeout_ms, wds__err *e);
/* Waits for s's last batched decode (before the state is destroyed). */
int wds__jg_batched_wait(wds__jg_batched *s, int timeout_ms, wds__err *e);

/* A decoder over a backend (ctx owned: destroy() at close). library: what
 * wds_gpu_jpeg_library() says. NULL when out of memory (ctx destroyed). */
wds_gpu_jpeg *wds__gpu_jpeg_new(const wds__jg_ops *ops, void *ctx,
                                const char *library);

/* jpeg_gpu_cuda.cu (built with CUDA and nvjpeg.h): the nvJPEG backend on
 * a device. WDS_OK, or WDS_ERR_OPEN with why in e. */
int wds__jg_cuda_open(int device, const wds__jg_ops **ops, void **ctx,
                      char *library, size_t library_size, wds__err *e);

#endif
