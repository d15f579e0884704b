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
} wds__jg_ops;

/* A decoder over a backend (ctx owned: destroy() at close). library: what
 * wds_gpu_jpeg_library() says. NULL when out of memory (ctx destroyed). */
wds_gpu_jpeg *wds__gpu_jpeg_new(const wds__jg_ops *ops, void *ctx,
                                const char *library);

/* jpeg_gpu_cuda.cu (built with CUDA and nvjpeg.h): the nvJPEG backend on
 * a device. WDS_OK, or WDS_ERR_OPEN with why in e. */
int wds__jg_cuda_open(int device, const wds__jg_ops **ops, void **ctx,
                      char *library, size_t library_size, wds__err *e);

#endif
