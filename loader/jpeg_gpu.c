/* jpeg_gpu.c — the GPU JPEG decoder's rows, fallbacks and errors
 * (jpeg_gpu.h); the nvJPEG backend is in jpeg_gpu_cuda.cu. */
#include "loader/jpeg_gpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"
#include "base/url.h"
#include "loader/handle.h"
#include "pipeline/decode.h"

struct wds_gpu_jpeg {
  /* one call at a time: two loaders (threads) on one GPU share a decoder
   * (python/wds/_device.py keeps one per device) */
  pthread_mutex_t mu;
  const wds__jg_ops *ops;
  void *ctx;
  char library[512];
  char err[WDS__ERR_SIZE];
  wds__decoder *cpu; /* the fallback's */
  wds__jg_img *imgs;
  size_t imgs_cap;
  uint8_t *staging; /* fallback rows, host; bounded by a batch's rows */
  size_t staging_cap;
  wds_gpu_jpeg_stats st;
};

wds_gpu_jpeg *wds__gpu_jpeg_new(const wds__jg_ops *ops, void *ctx,
                                const char *library) {
  wds_gpu_jpeg *g = calloc(1, sizeof *g);
  if (g && !(g->cpu = wds__decoder_new())) {
    free(g);
    g = NULL;
  }
  if (!g) {
    ops->destroy(ctx);
    return NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  g->ops = ops;
  g->ctx = ctx;
  snprintf(g->library, sizeof g->library, "%s", library ? library : "");
  return g;
}

int wds_gpu_jpeg_open(int device, wds_gpu_jpeg **out) {
  const wds__jg_ops *ops = NULL;
  void *ctx = NULL;
  char lib[512] = "";
  wds__err e;
  if (!out)
    return wds__last_fail(WDS_ERR_INVALID, "wds_gpu_jpeg_open: out is NULL");
  *out = NULL;
  int rc = wds__jg_cuda_open(device, &ops, &ctx, lib, sizeof lib, &e);
  if (rc != WDS_OK)
    return wds__last_fail(rc, "GPU JPEG decoding: %s", e.msg);
  if (!(*out = wds__gpu_jpeg_new(ops, ctx, lib)))
    return wds__last_fail(WDS_ERR_NOMEM, "GPU JPEG decoding: out of memory");
  return WDS_OK;
}

int wds_gpu_jpeg_shape(const wds_loader *l, size_t field, int64_t shape[3]) {
  if (!l || field >= l->nfields ||
      l->fields[field].def != &wds__image_gpu_plan_def)
    return wds__last_fail(WDS_ERR_INVALID,
                          "wds_gpu_jpeg_shape: field %zu is not a JPEG field "
                          "planned for the GPU (open the loader with "
                          "jpeg_decode GPU)",
                          field);
  shape[0] = l->fields[field].opts.height;
  shape[1] = l->fields[field].opts.width;
  shape[2] = l->fields[field].opts.channels;
  return WDS_OK;
}

const char *wds_gpu_jpeg_library(const wds_gpu_jpeg *g) {
  return g ? g->library : "";
}

void wds_gpu_jpeg_stats_get(const wds_gpu_jpeg *g, wds_gpu_jpeg_stats *out) {
  memset(out, 0, sizeof *out);
  if (!g)
    return;
  wds_gpu_jpeg *m = (wds_gpu_jpeg *)g; /* the lock only */
  pthread_mutex_lock(&m->mu);
  *out = g->st;
  if (g->ops->stats)
    g->ops->stats(g->ctx, out);
  pthread_mutex_unlock(&m->mu);
}

int wds_gpu_jpeg_set_timeout(wds_gpu_jpeg *g, int timeout_ms) {
  if (!g || timeout_ms < 0)
    return wds__last_fail(WDS_ERR_INVALID, "wds_gpu_jpeg_set_timeout: %s",
                          !g ? "the decoder is NULL"
                             : "the timeout is negative");
  pthread_mutex_lock(&g->mu);
  if (g->ops->set_timeout)
    g->ops->set_timeout(g->ctx, timeout_ms);
  pthread_mutex_unlock(&g->mu);
  return WDS_OK;
}

void wds_gpu_jpeg_close(wds_gpu_jpeg *g) {
  if (!g)
    return;
  g->ops->destroy(g->ctx);
  pthread_mutex_destroy(&g->mu);
  wds__decoder_free(g->cpu);
  free(g->imgs);
  free(g->staging);
  free(g);
}

/* A failure of a call on g: its text kept on g and as the caller's last
 * error. */
static int fail(wds_gpu_jpeg *g, int rc, const char *msg) {
  snprintf(g->err, sizeof g->err, "%s", msg);
  return wds__last_set(rc, g->err);
}

/* The result of a call made under g's lock, set as the caller's last
 * error (the text copied while it is held) and the lock released. */
static int unlock_with(wds_gpu_jpeg *g, int rc) {
  char msg[WDS__ERR_SIZE];
  snprintf(msg, sizeof msg, "%s", g->err);
  pthread_mutex_unlock(&g->mu);
  return wds__last_set(rc, msg);
}

void *wds_gpu_jpeg_buffer(wds_gpu_jpeg *g, size_t bytes) {
  void *p = NULL;
  if (g) {
    pthread_mutex_lock(&g->mu);
    p = g->ops->buffer(g->ctx, bytes);
    pthread_mutex_unlock(&g->mu);
  }
  if (!p)
    wds__last_fail(WDS_ERR_NOMEM,
                   "wds_gpu_jpeg_buffer: %zu bytes of device memory could "
                   "not be had",
                   bytes);
  return p;
}

#define NULL_DECODER(fn)                                                       \
  wds__last_fail(WDS_ERR_INVALID, fn ": the decoder is NULL")

int wds_gpu_jpeg_sync(wds_gpu_jpeg *g, void *stream) {
  wds__err e;
  if (!g)
    return NULL_DECODER("wds_gpu_jpeg_sync");
  pthread_mutex_lock(&g->mu);
  int rc = g->ops->sync(g->ctx, stream, &e);
  if (rc != WDS_OK)
    snprintf(g->err, sizeof g->err, "%s", e.msg);
  return unlock_with(g, rc);
}

int wds_gpu_jpeg_download(wds_gpu_jpeg *g, void *host, const void *dev,
                          size_t bytes, void *stream) {
  wds__err e;
  if (!g)
    return NULL_DECODER("wds_gpu_jpeg_download");
  pthread_mutex_lock(&g->mu);
  int rc = g->ops->download(g->ctx, host, dev, bytes, stream, &e);
  if (rc != WDS_OK)
    snprintf(g->err, sizeof g->err, "%s", e.msg);
  return unlock_with(g, rc);
}

int wds_gpu_jpeg_decode(wds_gpu_jpeg *g, wds_loader *l, const wds_batch *b,
                        size_t field, void *dev_out, void *stream) {
  return wds_gpu_jpeg_decode_rows(g, l, b, field, 0, b ? b->rows : 0, dev_out,
                                  stream);
}

static int decode_rows(wds_gpu_jpeg *g, wds_loader *l, const wds_batch *b,
                       size_t field, size_t row0, size_t rows, void *dev_out,
                       void *stream) {
  int64_t shape[3];
  wds__err e;
  if (wds_gpu_jpeg_shape(l, field, shape) != WDS_OK ||
      field >= b->field_count || b->fields[field].dtype != WDS_DTYPE_BYTES) {
    snprintf(g->err, sizeof g->err,
             "wds_gpu_jpeg_decode: field %zu is not a JPEG field planned for "
             "the GPU (open the loader with jpeg_decode GPU)",
             field);
    return WDS_ERR_INVALID;
  }
  g->err[0] = 0;
  const wds_batch_field *f = &b->fields[field];
  size_t row_bytes = (size_t)(shape[0] * shape[1] * shape[2]);
  uint8_t *out = dev_out;
  uint8_t *valid = (uint8_t *)b->valid; /* the slot's: the caller holds it */
  size_t n = 0, nfall = 0;
  size_t end = row0 < b->rows
                   ? row0 + (rows < b->rows - row0 ? rows : b->rows - row0)
                   : row0;
  void *p = wds__grow(g->imgs, &g->imgs_cap, end > row0 ? end - row0 : 1,
                      sizeof *g->imgs, 16);
  if (!p)
    return fail(g, WDS_ERR_NOMEM, "wds_gpu_jpeg_decode: out of memory");
  g->imgs = p;
  int rc = WDS_OK;
  /* Rows without data (samples the workers failed on) are zeros; rows the
   * workers decoded are copied; JPEGs go to the backend. */
  for (size_t r = row0; r < end; r++) {
    size_t len = (size_t)(f->offsets[r + 1] - f->offsets[r]);
    const uint8_t *d = (const uint8_t *)f->data + f->offsets[r];
    uint8_t *dst = out + (r - row0) * row_bytes;
    if (len == 0) {
      rc = g->ops->zero(g->ctx, dst, row_bytes, stream, &e);
    } else {
      wds__gpu_row h;
      if ((rc = wds__gpu_row_read(d, len, &h, &e)) == WDS_OK &&
          ((int64_t)h.out_h != shape[0] || (int64_t)h.out_w != shape[1] ||
           (int64_t)h.channels != shape[2]))
        rc = wds__fail(&e, WDS_ERR_FORMAT, "a row of another shape");
      if (rc != WDS_OK) {
        wds__err_prefix(&e, "wds_gpu_jpeg_decode: row %zu", r);
        return fail(g, WDS_ERR_INVALID, e.msg);
      }
      if (h.kind == WDS__GPU_ROW_PIXELS) {
        rc = g->ops->upload(g->ctx, dst, d + WDS__GPU_ROW_HEAD, row_bytes,
                            stream, &e);
        g->st.cpu_rows++;
      } else {
        wds__jg_img *im = &g->imgs[n++];
        im->data = d + WDS__GPU_ROW_HEAD;
        im->size = (size_t)h.payload;
        im->h = h;
        im->row = r - row0;
        im->batch_row = r;
        im->status = WDS__JG_OK;
      }
    }
    if (rc != WDS_OK)
      return fail(g, rc, e.msg);
  }
  if (n > 0 && (rc = g->ops->decode(g->ctx, g->imgs, n, out, row_bytes, stream,
                                    &e)) != WDS_OK)
    return fail(g, rc, e.msg);
  g->st.batches++;
  for (size_t i = 0; i < n; i++)
    nfall += g->imgs[i].status != WDS__JG_OK;
  g->st.gpu_images += n - nfall;
  if (nfall == 0)
    return WDS_OK;
  /* The CPU path's decode of each image the backend did not decode: its
   * pixels, or its error. */
  p = wds__grow(g->staging, &g->staging_cap, nfall * row_bytes, 1, 4096);
  if (!p)
    return fail(g, WDS_ERR_NOMEM, "wds_gpu_jpeg_decode: out of memory");
  g->staging = p;
  size_t k = 0;
  int first_rc = WDS_OK;
  for (size_t i = 0; i < n; i++) {
    wds__jg_img *im = &g->imgs[i];
    if (im->status == WDS__JG_OK)
      continue;
    uint8_t *px = g->staging + k++ * row_bytes;
    /* the plan's crop ratio and flip; jitter and float rows are refused
     * with jpeg_decode GPU (loader.c) */
    wds__augment aug = {.ratio_min = im->h.ratio_min,
                        .ratio_max = im->h.ratio_max,
                        .flip_prob = im->h.flip_prob,
                        .jitter = {{1, 1}, {1, 1}, {1, 1}, {0, 0}}, /* off */
                        .std = {1, 1, 1}};
    wds__image_opts io = {
        im->h.out_w,     im->h.out_h,     im->h.channels, (wds_crop)im->h.crop,
        im->h.scale_min, im->h.scale_max, im->h.rng_key,  &aug};
    int drc = wds__decode_image(g->cpu, im->data, im->size, &io, px, &e);
    if (drc == WDS_OK) {
      g->st.cpu_fallback++;
    } else {
      char ub[WDS__URL_REDACT_MAX];
      g->st.failed++;
      wds__err_prefix(&e, "%s: sample \"%s\": field '%s'",
                      wds__url_redact(b->urls[im->batch_row], ub, sizeof ub),
                      b->keys[im->batch_row], f->name);
      if (l->cfg.on_error == WDS_ON_ERROR_STOP || drc == WDS_ERR_NOMEM) {
        if (first_rc == WDS_OK) {
          first_rc = drc;
          snprintf(g->err, sizeof g->err, "%s", e.msg);
        }
      } else {
        wds__note_skip(l, "skipped", e.msg);
      }
      memset(px, 0, row_bytes);
      valid[im->batch_row] = 0;
    }
    if ((rc = g->ops->upload(g->ctx, out + im->row * row_bytes, px, row_bytes,
                             stream, &e)) != WDS_OK)
      return fail(g, rc, e.msg);
  }
  /* the staging rows are reused by the next batch: wait for their copies */
  if ((rc = g->ops->sync(g->ctx, stream, &e)) != WDS_OK)
    return fail(g, rc, e.msg);
  return first_rc;
}

int wds_gpu_jpeg_decode_rows(wds_gpu_jpeg *g, wds_loader *l, const wds_batch *b,
                             size_t field, size_t row0, size_t rows,
                             void *dev_out, void *stream) {
  if (!g || !l || !b)
    return wds__last_fail(WDS_ERR_INVALID, "wds_gpu_jpeg_decode: %s is NULL",
                          !g   ? "the decoder"
                          : !l ? "the loader"
                               : "the batch");
  pthread_mutex_lock(&g->mu);
  int rc = decode_rows(g, l, b, field, row0, rows, dev_out, stream);
  return unlock_with(g, rc);
}

/* ---- shared by the backends ---- */

size_t wds__jg_image_bytes(const wds__jg_img *im) {
  return ((size_t)im->h.src_w * (size_t)im->h.src_h * (size_t)im->h.channels +
          255) &
         ~(size_t)255;
}

size_t wds__jg_arena_need(const wds__jg_img *imgs, size_t n) {
  size_t need = 0, part = 0;
  for (size_t i = 0; i < n; i++) {
    if (imgs[i].status != WDS__JG_OK)
      continue;
    size_t b = wds__jg_image_bytes(&imgs[i]);
    if (part > 0 && part + b > WDS_GPU_JPEG_ARENA)
      part = 0;
    part += b;
    if (part > need)
      need = part;
  }
  return need;
}

int wds__jg_jpeg_whole(const uint8_t *d, size_t n) {
  while (n > 2 && (d[n - 1] == 0 || d[n - 1] == '\n' || d[n - 1] == '\r'))
    n--;
  return n >= 4 && d[0] == 0xFF && d[1] == 0xD8 && d[n - 2] == 0xFF &&
         d[n - 1] == 0xD9;
}

int wds__jg_route(int progressive, int whole, int hw_takes) {
  if (progressive || !whole)
    return WDS__JG_ROUTE_ONE;
  return hw_takes ? WDS__JG_ROUTE_HW : WDS__JG_ROUTE_HYBRID;
}

static double jg_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int wds__jg_poll(wds__jg_query query, void *arg, const char *what,
                 int timeout_ms, wds__err *e) {
  double t0 = jg_now();
  for (unsigned spins = 0;; spins++) {
    int q = query(arg, e);
    if (q == 1)
      return WDS_OK;
    if (q < 0)
      return WDS_ERR_IO; /* e says what */
    if (timeout_ms > 0 && (spins & 15) == 15 &&
        jg_now() - t0 > timeout_ms / 1000.0)
      return wds__fail(e, WDS_ERR_TIMEOUT,
                       "%s: not done after %.1f s (the decoder's timeout, "
                       "wds_gpu_jpeg_set_timeout: work queued before it on "
                       "the device hangs?)",
                       what, jg_now() - t0);
    if (spins < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, spins < 4096 ? 20000 : 200000};
      nanosleep(&ts, NULL);
    }
  }
}

int wds__jg_batched_wait(wds__jg_batched *s, int timeout_ms, wds__err *e) {
  if (!s->pending)
    return WDS_OK;
  int rc = wds__jg_poll(s->query, s->ctx, "nvJPEG's previous batched decode",
                        timeout_ms, e);
  if (rc == WDS_OK)
    s->pending = 0;
  return rc;
}

int wds__jg_batched_run(wds__jg_batched *s, void *fill_arg, int n, int channels,
                        void *stream, int timeout_ms, wds__err *e) {
  int rc = wds__jg_batched_wait(s, timeout_ms, e);
  if (rc != WDS_OK)
    return rc;
  /* the arrays the previous decode read: only now free to change */
  if (s->fill(s->ctx, fill_arg) != 0)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  if (s->init(s->ctx, n, channels) != 0)
    return WDS__JG_BATCH_FAILED;
  int failed = s->decode(s->ctx, stream) != 0;
  /* recorded after a failed decode too: it may have queued work */
  if ((rc = s->record(s->ctx, stream, e)) != WDS_OK)
    return rc;
  s->pending = 1;
  return failed ? WDS__JG_BATCH_FAILED : WDS_OK;
}

#ifndef WDS_HAVE_NVJPEG
/* Built without the nvJPEG backend: say why (CMake's WDS_NVJPEG_WHY). */
#ifndef WDS_NVJPEG_WHY
#define WDS_NVJPEG_WHY "built without CUDA"
#endif
int wds__jg_cuda_open(int device, const wds__jg_ops **ops, void **ctx,
                      char *library, size_t library_size, wds__err *e) {
  (void)device;
  (void)ops;
  (void)ctx;
  (void)library;
  (void)library_size;
  return wds__fail(e, WDS_ERR_OPEN,
                   "this build of wds has no GPU JPEG decoder (" WDS_NVJPEG_WHY
                   ")");
}
#endif
