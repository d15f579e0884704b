/* jpeg_gpu_cuda.cu — the nvJPEG backend of the GPU JPEG decoder
 * (jpeg_gpu.h): built with CUDA and nvjpeg.h (the header only: libnvjpeg is
 * loaded with dlopen on first use, from the places wds/gpu_jpeg.h lists).
 *
 * A batch's JPEGs are sorted by what decodes them: baseline and extended
 * Huffman JPEGs go to nvjpegDecodeBatched, on the hardware backend's handle
 * where the GPU has the engine and it takes the image
 * (nvjpegDecodeBatchedSupported), else on the GPU hybrid backend's;
 * progressive ones to nvjpegDecode (hybrid handle) one by one; CMYK,
 * lossless and whatever nvJPEG cannot parse are refused (the CPU decodes
 * them: jpeg_gpu.c). A batched call that fails is retried image by image,
 * so one bad image never costs the others. Decoded images (interleaved RGB,
 * or Y for one channel) go into one device arena, in parts of at most
 * WDS_GPU_JPEG_ARENA bytes (an image larger than that alone); after each
 * part one kernel resizes and crops every image of it into its output row
 * as the CPU path's plan says (Pillow's antialiased bilinear filter, in
 * float, one pass per output pixel over its window). Everything is
 * allocated once, grown to the largest batch, and reused.
 *
 * Ordering: each batched state has an event recorded after its batched
 * decode, waited for (polled) before the state is initialized again
 * (wds__jg_batched_run), as DALI and nvImageCodec do: the caller queues
 * batch N+1 while N runs. Every call selects the decoder's device; every
 * wait polls (cudaEventQuery, cudaStreamQuery) under the decoder's timeout,
 * never blocking in a CUDA call a hung peer's work could hold. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <glob.h>
#include <math.h>
#include <nvjpeg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "loader/jpeg_gpu.h"
#include "shards/dl.h"
}

/* ---- libnvjpeg, loaded once ---- */

#define NVJ_FUNCS(X)                                                           \
  X(nvjpegCreateEx)                                                            \
  X(nvjpegDestroy)                                                             \
  X(nvjpegJpegStateCreate)                                                     \
  X(nvjpegJpegStateDestroy)                                                    \
  X(nvjpegDecode)                                                              \
  X(nvjpegDecodeBatchedInitialize)                                             \
  X(nvjpegDecodeBatched)                                                       \
  X(nvjpegDecodeBatchedSupported)                                              \
  X(nvjpegJpegStreamCreate)                                                    \
  X(nvjpegJpegStreamDestroy)                                                   \
  X(nvjpegJpegStreamParseHeader)                                               \
  X(nvjpegJpegStreamGetJpegEncoding)                                           \
  X(nvjpegJpegStreamGetComponentsNum)                                          \
  X(nvjpegJpegStreamGetFrameDimensions)

#define NVJ_PTR(f) static decltype(&f) p_##f;
NVJ_FUNCS(NVJ_PTR)
/* optional (libnvjpeg 12.1 and later): handles whose device memory the
 * decoder counts */
static decltype(&nvjpegCreateExV2) p_nvjpegCreateExV2;

/* Loaded by the first open that finds it; a failed load is tried again by
 * the next open (the user may have fixed WDS_NVJPEG_LIBRARY). */
static pthread_mutex_t nvj_mu = PTHREAD_MUTEX_INITIALIZER;
static int nvj_ok;
static char nvj_why[1024];
static char nvj_path[512];

/* Candidates, in the documented order (wds/gpu_jpeg.h). */
static void nvj_load(void) {
  static const char *const names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12",
                                      "libnvjpeg.so"};
  char *cands[64];
  size_t n = 0;
  const char *env = getenv("WDS_NVJPEG_LIBRARY");
  if (env && *env)
    cands[n++] = strdup(env);
  const char *cuda_home = getenv("CUDA_HOME");
  const char *dirs[] = {cuda_home, "/usr/local/cuda"};
  for (size_t d = 0; d < 2; d++) {
    if (!dirs[d] || !*dirs[d])
      continue;
    const char *subs[] = {"lib64", "targets/x86_64-linux/lib",
                          "targets/sbsa-linux/lib"};
    for (size_t s = 0; s < 3 && n < 40; s++) {
      char p[512];
      snprintf(p, sizeof p, "%s/%s/libnvjpeg.so.13", dirs[d], subs[s]);
      cands[n++] = strdup(p);
    }
  }
  /* Python wheels: the environment's, then the usual prefixes. */
  const char *venv = getenv("VIRTUAL_ENV");
  const char *prefixes[] = {venv, "/opt/torch/.venv", "/usr/local", "/usr"};
  const char *pats[] = {
      "%s/lib/python3*/*-packages/nvidia/cu13/lib/libnvjpeg.so*",
      "%s/lib/python3*/*-packages/nvidia/nvjpeg/lib/libnvjpeg.so*",
      "%s/lib/python3*/*-packages/torchvision.libs/libnvjpeg*.so*",
      "%s/lib/python3*/*-packages/torchvision/libnvjpeg*.so*"};
  for (size_t pi = 0; pi < 4; pi++)
    for (size_t pp = 0; pp < 4; pp++) {
      if (!prefixes[pi] || !*prefixes[pi])
        continue;
      char pat[512];
      snprintf(pat, sizeof pat, pats[pp], prefixes[pi]);
      glob_t g;
      if (glob(pat, 0, NULL, &g) == 0)
        for (size_t k = 0; k < g.gl_pathc && n < 60; k++)
          cands[n++] = strdup(g.gl_pathv[k]);
      globfree(&g);
    }
  for (size_t k = 0; k < 3; k++)
    cands[n++] = strdup(names[k]);
#define NVJ_SYM(f) {#f, (void **)&p_##f},
  static const wds__dl_sym syms[] = {NVJ_FUNCS(NVJ_SYM)};
  char first[512] = "";
  for (size_t k = 0; k < n && !nvj_ok; k++) {
    const char *one[2] = {cands[k], NULL};
    char why[512];
    if (wds__dl_open("libnvjpeg", one, syms, sizeof syms / sizeof *syms, "12.0",
                     why, sizeof why)) {
      nvj_ok = 1;
      Dl_info info;
      if (dladdr((void *)p_nvjpegCreateEx, &info) && info.dli_fname)
        snprintf(nvj_path, sizeof nvj_path, "%s", info.dli_fname);
      else
        snprintf(nvj_path, sizeof nvj_path, "%s", cands[k]);
      void *h = dlopen(nvj_path, RTLD_NOW | RTLD_NOLOAD);
      if (h) /* the reference wds__dl_open holds keeps it loaded */
        p_nvjpegCreateExV2 =
            (decltype(&nvjpegCreateExV2))dlsym(h, "nvjpegCreateExV2");
      if (h)
        dlclose(h);
    } else if (!first[0]) {
      snprintf(first, sizeof first, "%s", why);
    }
  }
  if (!nvj_ok)
    snprintf(nvj_why, sizeof nvj_why,
             "libnvjpeg not found (looked in $WDS_NVJPEG_LIBRARY, "
             "$CUDA_HOME and /usr/local/cuda lib dirs, the nvidia-nvjpeg "
             "and torchvision wheels of $VIRTUAL_ENV, /opt/torch/.venv, "
             "/usr/local and /usr, then the loader's path; first: %s); "
             "pip install nvidia-nvjpeg, or set WDS_NVJPEG_LIBRARY",
             first);
  for (size_t k = 0; k < n; k++)
    free(cands[k]);
}

/* ---- the resize kernel ---- */

/* nvJPEG's flags: the CPU path's contract (wds/gpu_jpeg.h) */
#define JG_NVJPEG_FLAGS                                                        \
  (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION | NVJPEG_FLAGS_BITSTREAM_STRICT)

struct jg_desc {
  const unsigned char *src; /* decoded image, interleaved */
  unsigned char *dst;       /* its output row */
  int src_w, src_h, pitch, channels;
  int out_w, out_h, total_w, total_h, off_x, off_y, flip;
  float x0, x1, y0, y1;
};

__device__ static float tri(float x) {
  x = fabsf(x);
  return x < 1.0f ? 1.0f - x : 0.0f;
}

/* Pillow's window for output o of a resize of [in0, in1) (in_size pixels)
 * to total outputs: [*lo, *hi), with its scale and support. */
__device__ static void window(float in0, float in1, int total, int in_size,
                              int o, float *center, float *ss, int *lo,
                              int *hi) {
  float scale = (in1 - in0) / (float)total;
  float fs = scale < 1.0f ? 1.0f : scale;
  float support = fs;
  *center = in0 + ((float)o + 0.5f) * scale;
  *ss = 1.0f / fs;
  int a = (int)(*center - support + 0.5f);
  int b = (int)(*center + support + 0.5f);
  *lo = a < 0 ? 0 : a;
  *hi = b > in_size ? in_size : b;
}

/* Image i of descs in grid y (strided: a grid's y is at most 65,535),
 * output pixels in x. */
__global__ static void jg_resize(const jg_desc *descs, unsigned nd) {
  for (unsigned i = blockIdx.y; i < nd; i += gridDim.y) {
    const jg_desc d = descs[i];
    int n = d.out_w * d.out_h;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += gridDim.x * blockDim.x) {
      int oy = p / d.out_w, ox = p % d.out_w;
      int sx = d.flip ? d.out_w - 1 - ox : ox; /* the source column's output */
      float cx, sxs, cy, sys;
      int x0, x1, y0, y1;
      window(d.x0, d.x1, d.total_w, d.src_w, sx + d.off_x, &cx, &sxs, &x0, &x1);
      window(d.y0, d.y1, d.total_h, d.src_h, oy + d.off_y, &cy, &sys, &y0, &y1);
      float acc[3] = {0.f, 0.f, 0.f}, wsum = 0.f, wxs = 0.f;
      for (int x = x0; x < x1; x++)
        wxs += tri(((float)x - cx + 0.5f) * sxs);
      for (int y = y0; y < y1; y++) {
        float wy = tri(((float)y - cy + 0.5f) * sys);
        if (wy == 0.f)
          continue;
        const unsigned char *row = d.src + (size_t)y * d.pitch;
        for (int x = x0; x < x1; x++) {
          float w = wy * tri(((float)x - cx + 0.5f) * sxs);
          const unsigned char *px = row + (size_t)x * d.channels;
          for (int c = 0; c < d.channels; c++)
            acc[c] += w * (float)px[c];
        }
        wsum += wy;
      }
      float norm = wsum * wxs;
      unsigned char *out = d.dst + (size_t)p * d.channels;
      for (int c = 0; c < d.channels; c++) {
        float v = norm > 0.f ? acc[c] / norm : 0.f;
        v = v < 0.f ? 0.f : v > 255.f ? 255.f : v;
        out[c] = (unsigned char)(v + 0.5f);
      }
    }
  }
}

/* ---- the backend ---- */

/* A batched state of the backend: nvJPEG's handle and state, the event
 * after its last batched decode (wds__jg_batched's). */
struct jg_cuda;
struct jg_bstate {
  jg_cuda *g;
  nvjpegHandle_t h;
  nvjpegJpegState_t s;
  cudaEvent_t done;
  /* its own host arrays, read by nvJPEG until `done`: filled only after
   * the previous decode on this state (wds__jg_batched's fill) */
  const unsigned char **bd;
  size_t *bl;
  nvjpegImage_t *bi;
  size_t cap;
  size_t m; /* images set up in bd/bl/bi */
};

struct jg_cuda {
  int device;
  int timeout_ms;        /* of every wait (wds_gpu_jpeg_set_timeout) */
  nvjpegHandle_t hw, hy; /* hardware (or NULL), GPU hybrid: batched */
  nvjpegHandle_t one;    /* the default backend: one image at a time */
  nvjpegJpegState_t hw_state, hy_state, one_state;
  jg_bstate bs[2];              /* hw, hy */
  wds__jg_batched batched[2];   /* over bs */
  nvjpegJpegStream_t js, js_hw; /* header parses: hybrid's, hardware's */
  unsigned char *arena;         /* decoded images */
  size_t arena_cap;
  jg_desc *h_desc, *d_desc;
  size_t desc_cap;
  cudaEvent_t desc_done; /* the last kernel that read h_desc's copy */
  int desc_pending;
  cudaEvent_t call_done; /* the end of the last decode call's work */
  int call_pending;
  /* the device has stream-ordered allocation (cudaMallocAsync): device
   * memory is then allocated and freed on the decoder's stream, never with
   * cudaFree, which waits for the whole device (a collective a hung peer
   * holds included) */
  int pools;
  /* pinned resize-plan buffers outgrown: freed at close (cudaFreeHost
   * waits for the whole device); at most one per doubling */
  void *retired[64];
  int n_retired;
  /* the allocators nvjpegCreateExV2 was given: they outlive the handles */
  nvjpegDevAllocatorV2_t dev_alloc;
  nvjpegPinnedAllocatorV2_t pinned_alloc;
  unsigned long long nvj_bytes; /* nvJPEG's device memory (its allocator) */
  int nvj_counted;              /* nvjpegCreateExV2 was there */
  unsigned hw_flags, hy_flags;  /* the JG_NVJPEG_FLAGS each took */
  /* per batch, host: */
  int *route; /* 0 hw batched, 1 hybrid batched, 2 single */
  size_t route_cap;
  size_t *bk; /* image index of each batched entry (host only) */
  size_t b_cap;
  size_t *off; /* arena offset per image */
  size_t off_cap;
  void *user; /* wds_gpu_jpeg_buffer's */
  size_t user_cap;
};

static int nvj_fail(wds__err *e, const char *what, nvjpegStatus_t s) {
  return wds__fail(e, WDS_ERR_IO, "nvJPEG: %s failed (status %d)", what,
                   (int)s);
}

static int cu_fail(wds__err *e, const char *what, cudaError_t c) {
  return wds__fail(e,
                   c == cudaErrorMemoryAllocation ? WDS_ERR_NOMEM : WDS_ERR_IO,
                   "CUDA: %s: %s", what, cudaGetErrorString(c));
}

/* The decoder's device selected for a call, the caller's given back. */
struct dev_scope {
  int prev, ok;
  cudaError_t c;
  explicit dev_scope(int device) : prev(-1), ok(0) {
    c = cudaGetDevice(&prev);
    if (c == cudaSuccess && prev != device)
      c = cudaSetDevice(device);
    ok = c == cudaSuccess;
  }
  ~dev_scope() {
    int now = -1;
    if (prev >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev)
      cudaSetDevice(prev);
  }
};
#define DEV_SCOPE(g, e)                                                        \
  dev_scope scope_((g)->device);                                               \
  if (!scope_.ok)                                                              \
  return cu_fail(e, "selecting the decoder's device", scope_.c)

/* ---- polled waits (wds__jg_poll) ---- */

static int q_event(void *arg, wds__err *e) {
  cudaError_t c = cudaEventQuery((cudaEvent_t)arg);
  if (c == cudaSuccess)
    return 1;
  if (c == cudaErrorNotReady)
    return 0;
  cu_fail(e, "waiting for an event", c);
  return -1;
}

static int q_stream(void *arg, wds__err *e) {
  cudaError_t c = cudaStreamQuery((cudaStream_t)arg);
  if (c == cudaSuccess)
    return 1;
  if (c == cudaErrorNotReady)
    return 0;
  cu_fail(e, "waiting for the stream", c);
  return -1;
}

static int wait_stream(jg_cuda *g, cudaStream_t st, const char *what,
                       wds__err *e) {
  return wds__jg_poll(q_stream, (void *)st, what, g->timeout_ms, e);
}

static int wait_event(jg_cuda *g, cudaEvent_t ev, const char *what,
                      wds__err *e) {
  return wds__jg_poll(q_event, (void *)ev, what, g->timeout_ms, e);
}

/* ---- the batched states (wds__jg_batched over nvJPEG) ---- */

static int bs_init(void *ctx, int n, int channels) {
  jg_bstate *b = (jg_bstate *)ctx;
  return p_nvjpegDecodeBatchedInitialize(b->h, b->s, n, 1,
                                         channels == 1 ? NVJPEG_OUTPUT_Y
                                                       : NVJPEG_OUTPUT_RGBI) !=
         NVJPEG_STATUS_SUCCESS;
}

/* what a batched call decodes: imgs[g->bk[k]] for k < m */
struct jg_fill_arg {
  jg_cuda *g;
  const wds__jg_img *imgs;
  size_t m;
};

static void image_dest(jg_cuda *g, const wds__jg_img *im, size_t off,
                       nvjpegImage_t *d);

static int bs_fill(void *ctx, void *arg) {
  jg_bstate *b = (jg_bstate *)ctx;
  const jg_fill_arg *f = (const jg_fill_arg *)arg;
  if (f->m > b->cap) {
    size_t c = b->cap ? b->cap : 64;
    while (c < f->m)
      c *= 2;
    void *p1 = realloc((void *)b->bd, c * sizeof *b->bd);
    if (p1)
      b->bd = (const unsigned char **)p1;
    void *p2 = p1 ? realloc(b->bl, c * sizeof *b->bl) : NULL;
    if (p2)
      b->bl = (size_t *)p2;
    void *p3 = p2 ? realloc(b->bi, c * sizeof *b->bi) : NULL;
    if (p3)
      b->bi = (nvjpegImage_t *)p3;
    if (!p3)
      return -1;
    b->cap = c;
  }
  for (size_t k = 0; k < f->m; k++) {
    const wds__jg_img *im = &f->imgs[f->g->bk[k]];
    b->bd[k] = im->data;
    b->bl[k] = im->size;
    image_dest(f->g, im, f->g->off[f->g->bk[k]], &b->bi[k]);
  }
  b->m = f->m;
  return 0;
}

static int bs_decode(void *ctx, void *stream) {
  jg_bstate *b = (jg_bstate *)ctx;
  return p_nvjpegDecodeBatched(b->h, b->s, b->bd, b->bl, b->bi,
                               (cudaStream_t)stream) != NVJPEG_STATUS_SUCCESS;
}

static int bs_record(void *ctx, void *stream, wds__err *e) {
  jg_bstate *b = (jg_bstate *)ctx;
  cudaError_t c = cudaEventRecord(b->done, (cudaStream_t)stream);
  if (c == cudaSuccess)
    return WDS_OK;
  wds__err w;
  wait_stream(b->g, (cudaStream_t)stream, "nvJPEG's batched decode", &w);
  return cu_fail(e, "cudaEventRecord (batched decode)", c);
}

static int bs_query(void *ctx, wds__err *e) {
  return q_event((void *)((jg_bstate *)ctx)->done, e);
}

/* ---- nvJPEG's device memory, counted ---- */

/* Device memory on stream st: stream-ordered where the device has it. A
 * free is queued behind st's work (which the caller has waited for, polled,
 * or which nvJPEG ordered), so it never waits for other streams. */
static cudaError_t dev_alloc(const jg_cuda *g, void **p, size_t n,
                             cudaStream_t st) {
  return g->pools ? cudaMallocAsync(p, n, st) : cudaMalloc(p, n);
}

static cudaError_t dev_free(const jg_cuda *g, void *p, cudaStream_t st) {
  if (!p)
    return cudaSuccess;
  return g->pools ? cudaFreeAsync(p, st) : cudaFree(p);
}

static int nvj_dev_malloc(void *ctx, void **p, size_t n, cudaStream_t st) {
  cudaError_t c = dev_alloc((jg_cuda *)ctx, p, n, st);
  if (c == cudaSuccess)
    __atomic_add_fetch(&((jg_cuda *)ctx)->nvj_bytes, (unsigned long long)n,
                       __ATOMIC_RELAXED);
  return (int)c;
}

static int nvj_dev_free(void *ctx, void *p, size_t n, cudaStream_t st) {
  cudaError_t c = dev_free((jg_cuda *)ctx, p, st);
  if (p)
    __atomic_sub_fetch(&((jg_cuda *)ctx)->nvj_bytes, (unsigned long long)n,
                       __ATOMIC_RELAXED);
  return (int)c;
}

static int nvj_pinned_malloc(void *ctx, void **p, size_t n, cudaStream_t st) {
  (void)ctx, (void)st;
  return (int)cudaHostAlloc(p, n, cudaHostAllocDefault);
}

static int nvj_pinned_free(void *ctx, void *p, size_t n, cudaStream_t st) {
  (void)ctx, (void)n, (void)st;
  return (int)cudaFreeHost(p);
}

/* A handle of backend, with the most of JG_NVJPEG_FLAGS it takes (all,
 * strict only, interpolation only, none: a backend or a libnvjpeg that
 * refuses a flag still decodes; *used says which), through the counting
 * allocator where there is nvjpegCreateExV2 (else, or when it fails,
 * nvjpegCreateEx). The status of the last try. */
static nvjpegStatus_t jg_create(jg_cuda *g, nvjpegBackend_t backend,
                                nvjpegHandle_t *h, unsigned *used) {
  static const unsigned tries[] = {
      JG_NVJPEG_FLAGS, NVJPEG_FLAGS_BITSTREAM_STRICT,
      NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, 0};
  nvjpegStatus_t s = NVJPEG_STATUS_NOT_INITIALIZED;
  for (size_t k = 0; k < sizeof tries / sizeof *tries; k++) {
    *h = NULL;
    if (p_nvjpegCreateExV2) {
      /* kept in g: nvJPEG may keep the pointers for the handle's life */
      g->dev_alloc.dev_malloc = nvj_dev_malloc;
      g->dev_alloc.dev_free = nvj_dev_free;
      g->dev_alloc.dev_ctx = g;
      g->pinned_alloc.pinned_malloc = nvj_pinned_malloc;
      g->pinned_alloc.pinned_free = nvj_pinned_free;
      g->pinned_alloc.pinned_ctx = g;
      if ((s = p_nvjpegCreateExV2(backend, &g->dev_alloc, &g->pinned_alloc,
                                  tries[k], h)) == NVJPEG_STATUS_SUCCESS) {
        g->nvj_counted = 1;
        *used = tries[k];
        return s;
      }
      *h = NULL;
    }
    if ((s = p_nvjpegCreateEx(backend, NULL, NULL, tries[k], h)) ==
        NVJPEG_STATUS_SUCCESS) {
      *used = tries[k];
      return s;
    }
  }
  *h = NULL;
  return s;
}

template <typename T> static int grow(T **p, size_t *cap, size_t need) {
  if (need <= *cap)
    return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need)
    c *= 2;
  T *q = (T *)realloc((void *)*p, c * sizeof(T));
  if (!q)
    return -1;
  *p = q;
  *cap = c;
  return 0;
}

static void jg_destroy(void *ctx) {
  jg_cuda *g = (jg_cuda *)ctx;
  if (!g)
    return;
  dev_scope scope(g->device);
  wds__err e;
  /* polled, under the timeout: a hung peer's work ends the wait (the
   * trainer aborts its communicator first, which ends that work) */
  if (g->desc_pending)
    wait_event(g, g->desc_done, "closing the decoder", &e);
  if (g->call_pending)
    wait_event(g, g->call_done, "closing the decoder", &e);
  for (int k = 0; k < 2; k++)
    if (g->bs[k].done) {
      wds__jg_batched_wait(&g->batched[k], g->timeout_ms, &e);
      cudaEventDestroy(g->bs[k].done);
    }
  if (g->desc_done)
    cudaEventDestroy(g->desc_done);
  if (g->call_done)
    cudaEventDestroy(g->call_done);
  if (g->js)
    p_nvjpegJpegStreamDestroy(g->js);
  if (g->js_hw)
    p_nvjpegJpegStreamDestroy(g->js_hw);
  if (g->hw_state)
    p_nvjpegJpegStateDestroy(g->hw_state);
  if (g->hy_state)
    p_nvjpegJpegStateDestroy(g->hy_state);
  if (g->one_state)
    p_nvjpegJpegStateDestroy(g->one_state);
  if (g->hw)
    p_nvjpegDestroy(g->hw);
  if (g->hy)
    p_nvjpegDestroy(g->hy);
  if (g->one)
    p_nvjpegDestroy(g->one);
  cudaFree(g->arena);
  cudaFree(g->user);
  cudaFree(g->d_desc);
  cudaFreeHost(g->h_desc);
  for (int k = 0; k < g->n_retired; k++)
    cudaFreeHost(g->retired[k]);
  free(g->route);
  for (int k = 0; k < 2; k++) {
    free((void *)g->bs[k].bd);
    free(g->bs[k].bl);
    free(g->bs[k].bi);
  }
  free(g->bk);
  free(g->off);
  free(g);
}

static void jg_stats(void *ctx, wds_gpu_jpeg_stats *st) {
  jg_cuda *g = (jg_cuda *)ctx;
  st->arena_bytes = g->arena_cap + g->user_cap + g->desc_cap * sizeof(jg_desc);
  st->nvjpeg_bytes = __atomic_load_n(&g->nvj_bytes, __ATOMIC_RELAXED);
  st->device_bytes = st->arena_bytes + st->nvjpeg_bytes;
  st->hardware = g->hw != NULL;
}

static void jg_set_timeout(void *ctx, int timeout_ms) {
  ((jg_cuda *)ctx)->timeout_ms = timeout_ms;
}

static int jg_upload(void *ctx, void *dst, const void *src, size_t n,
                     void *stream, wds__err *e) {
  jg_cuda *g = (jg_cuda *)ctx;
  DEV_SCOPE(g, e);
  cudaError_t c = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice,
                                  (cudaStream_t)stream);
  return c == cudaSuccess ? WDS_OK : cu_fail(e, "copy to the device", c);
}

static int jg_zero(void *ctx, void *dst, size_t n, void *stream, wds__err *e) {
  jg_cuda *g = (jg_cuda *)ctx;
  DEV_SCOPE(g, e);
  cudaError_t c = cudaMemsetAsync(dst, 0, n, (cudaStream_t)stream);
  return c == cudaSuccess ? WDS_OK : cu_fail(e, "zeroing a row", c);
}

static int jg_sync(void *ctx, void *stream, wds__err *e) {
  jg_cuda *g = (jg_cuda *)ctx;
  DEV_SCOPE(g, e);
  return wait_stream(g, (cudaStream_t)stream, "the decoder's stream", e);
}

static void *jg_buffer(void *ctx, size_t bytes) {
  jg_cuda *g = (jg_cuda *)ctx;
  if (bytes <= g->user_cap && g->user)
    return g->user;
  dev_scope scope(g->device);
  if (!scope.ok)
    return NULL;
  /* nothing may still write the old one. This blocks on the whole device
   * (a hung collective too): wds_gpu_jpeg_buffer is for benchmarks and
   * tests, which size it once; a training loop decodes into its own
   * memory */
  cudaDeviceSynchronize();
  cudaFree(g->user);
  g->user = NULL;
  g->user_cap = 0;
  if (cudaMalloc(&g->user, bytes ? bytes : 1) == cudaSuccess)
    g->user_cap = bytes;
  else
    g->user = NULL;
  return g->user;
}

static int jg_download(void *ctx, void *host, const void *dev, size_t n,
                       void *stream, wds__err *e) {
  jg_cuda *g = (jg_cuda *)ctx;
  DEV_SCOPE(g, e);
  /* the copy is queued behind the stream's work, waited for by polling:
   * to pageable memory it would block inside the driver */
  int rc = wait_stream(g, (cudaStream_t)stream, "copy from the device", e);
  if (rc != WDS_OK)
    return rc;
  cudaError_t c = cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost,
                                  (cudaStream_t)stream);
  if (c != cudaSuccess)
    return cu_fail(e, "copy from the device", c);
  return wait_stream(g, (cudaStream_t)stream, "copy from the device", e);
}

static void image_dest(jg_cuda *g, const wds__jg_img *im, size_t off,
                       nvjpegImage_t *d) {
  memset(d, 0, sizeof *d);
  d->channel[0] = g->arena + off;
  d->pitch[0] = (size_t)im->h.src_w * (size_t)im->h.channels;
}

/* Decodes part [a, b) of imgs (their arena offsets in g->off) and resizes
 * the decoded ones into their rows. */
static int jg_part(jg_cuda *g, wds__jg_img *imgs, size_t a, size_t b,
                   unsigned char *out, size_t row_bytes, cudaStream_t st,
                   wds__err *e) {
  int rc;
  for (int pass = 0; pass < 2; pass++) {
    if (!(pass == 0 ? g->hw : g->hy))
      continue;
    /* one call per output format (a batch of one field has one) */
    for (int ch = 1; ch <= 3; ch += 2) {
      size_t m = 0;
      for (size_t i = a; i < b; i++)
        if (imgs[i].status == WDS__JG_OK && g->route[i] == pass &&
            (imgs[i].h.channels == 1) == (ch == 1))
          g->bk[m++] = i;
      if (m == 0)
        continue;
      /* the state's arrays are filled once its previous decode is done */
      jg_fill_arg fa = {g, imgs, m};
      rc = wds__jg_batched_run(&g->batched[pass], &fa, (int)m, ch, st,
                               g->timeout_ms, e);
      if (rc == WDS__JG_BATCH_FAILED) /* one by one: find the bad ones */
        for (size_t k = 0; k < m; k++)
          g->route[g->bk[k]] = WDS__JG_ROUTE_ONE;
      else if (rc != WDS_OK)
        return rc;
    }
  }
  for (size_t i = a; i < b; i++) {
    if (imgs[i].status != WDS__JG_OK || g->route[i] != WDS__JG_ROUTE_ONE)
      continue;
    nvjpegImage_t d;
    image_dest(g, &imgs[i], g->off[i], &d);
    nvjpegOutputFormat_t fmt =
        imgs[i].h.channels == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
    if (p_nvjpegDecode(g->one, g->one_state, imgs[i].data, imgs[i].size, fmt,
                       &d, st) != NVJPEG_STATUS_SUCCESS)
      imgs[i].status = WDS__JG_FAILED;
  }
  /* the kernel's descriptors: wait (polled) until the last kernel has
   * read the previous ones */
  if (g->desc_pending) {
    if ((rc = wait_event(g, g->desc_done, "the previous resize", e)) != WDS_OK)
      return rc;
    g->desc_pending = 0;
  }
  size_t nd = 0;
  for (size_t i = a; i < b; i++) {
    const wds__jg_img *im = &imgs[i];
    if (im->status != WDS__JG_OK)
      continue;
    jg_desc *d = &g->h_desc[nd++];
    d->src = g->arena + g->off[i];
    d->dst = out + im->row * row_bytes;
    d->src_w = im->h.src_w;
    d->src_h = im->h.src_h;
    d->channels = im->h.channels;
    d->pitch = im->h.src_w * im->h.channels;
    d->out_w = im->h.out_w;
    d->out_h = im->h.out_h;
    d->total_w = im->h.total_w;
    d->total_h = im->h.total_h;
    d->off_x = im->h.off_x;
    d->off_y = im->h.off_y;
    d->flip = im->h.flip;
    d->x0 = (float)im->h.x0;
    d->x1 = (float)im->h.x1;
    d->y0 = (float)im->h.y0;
    d->y1 = (float)im->h.y1;
  }
  if (nd == 0)
    return WDS_OK;
  cudaError_t c = cudaMemcpyAsync(g->d_desc, g->h_desc, nd * sizeof(jg_desc),
                                  cudaMemcpyHostToDevice, st);
  if (c != cudaSuccess)
    return cu_fail(e, "copy of the resize plans", c);
  /* grid y strides over the images: at most 65,535 */
  dim3 grid(32, (unsigned)(nd < 65535 ? nd : 65535));
  jg_resize<<<grid, 256, 0, st>>>(g->d_desc, (unsigned)nd);
  if ((c = cudaGetLastError()) != cudaSuccess)
    return cu_fail(e, "resize kernel", c);
  /* a failed record would make the next wait return while the copy of
   * h_desc still runs: the batch fails instead */
  if ((c = cudaEventRecord(g->desc_done, st)) != cudaSuccess)
    return cu_fail(e, "cudaEventRecord (resize plans)", c);
  g->desc_pending = 1;
  return WDS_OK;
}

static int jg_decode(void *ctx, wds__jg_img *imgs, size_t n, void *out,
                     size_t row_bytes, void *stream, wds__err *e) {
  jg_cuda *g = (jg_cuda *)ctx;
  cudaStream_t st = (cudaStream_t)stream;
  DEV_SCOPE(g, e);
  int rc = WDS_OK;
  cudaError_t c;
  if (grow(&g->route, &g->route_cap, n) || grow(&g->bk, &g->b_cap, n) ||
      grow(&g->off, &g->off_cap, n))
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  /* a call on another stream than the last one's: its work (the arena,
   * the states) comes after the last call's */
  if (g->call_pending &&
      (c = cudaStreamWaitEvent(st, g->call_done, 0)) != cudaSuccess)
    return cu_fail(e, "cudaStreamWaitEvent (the previous call)", c);
  if (n > g->desc_cap) {
    if (g->desc_pending) {
      if ((rc = wait_event(g, g->desc_done, "the previous resize", e)) !=
          WDS_OK)
        return rc;
      g->desc_pending = 0;
    }
    /* the last kernel that read them is done (desc_done): the device copy
     * is freed on st, the pinned one at close (cudaFreeHost would wait for
     * the whole device); doubled, so few are kept */
    size_t cap = g->desc_cap * 2 > n ? g->desc_cap * 2 : n;
    if (g->h_desc) {
      if (g->n_retired < (int)(sizeof g->retired / sizeof *g->retired))
        g->retired[g->n_retired++] = g->h_desc;
      else
        cudaFreeHost(g->h_desc); /* 2^64 plans: not reached */
    }
    dev_free(g, g->d_desc, st);
    g->h_desc = NULL;
    g->d_desc = NULL;
    g->desc_cap = 0;
    c = cudaMallocHost((void **)&g->h_desc, cap * sizeof(jg_desc));
    if (c == cudaSuccess)
      c = dev_alloc(g, (void **)&g->d_desc, cap * sizeof(jg_desc), st);
    if (c != cudaSuccess)
      return cu_fail(e, "memory for the resize plans", c);
    g->desc_cap = cap;
  }
  /* the route of each image */
  for (size_t i = 0; i < n; i++) {
    wds__jg_img *im = &imgs[i];
    im->status = WDS__JG_OK;
    nvjpegJpegEncoding_t enc = NVJPEG_ENCODING_UNKNOWN;
    unsigned w = 0, h = 0;
    unsigned comps = 0;
    if (im->h.cmyk ||
        p_nvjpegJpegStreamParseHeader(g->hy, im->data, im->size, g->js) !=
            NVJPEG_STATUS_SUCCESS ||
        p_nvjpegJpegStreamGetJpegEncoding(g->js, &enc) !=
            NVJPEG_STATUS_SUCCESS ||
        p_nvjpegJpegStreamGetComponentsNum(g->js, &comps) !=
            NVJPEG_STATUS_SUCCESS ||
        p_nvjpegJpegStreamGetFrameDimensions(g->js, &w, &h) !=
            NVJPEG_STATUS_SUCCESS ||
        (int)w != im->h.src_w || (int)h != im->h.src_h ||
        (comps != 1 && comps != 3)) {
      im->status = WDS__JG_REFUSED;
      continue;
    }
    int progressive = enc == NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN;
    if (progressive || enc == NVJPEG_ENCODING_BASELINE_DCT ||
        enc == NVJPEG_ENCODING_EXTENDED_SEQUENTIAL_DCT_HUFFMAN) {
      /* a cut one is decoded alone, where nvjpegDecode reports it: the
       * batched calls have no per-image status (wds__jg_route) */
      int whole = wds__jg_jpeg_whole(im->data, im->size), unsupported = 1;
      /* the hardware backend takes it: 0 means supported */
      int hw_takes =
          !progressive && whole && g->hw && g->js_hw &&
          p_nvjpegJpegStreamParseHeader(g->hw, im->data, im->size, g->js_hw) ==
              NVJPEG_STATUS_SUCCESS &&
          p_nvjpegDecodeBatchedSupported(g->hw, g->js_hw, &unsupported) ==
              NVJPEG_STATUS_SUCCESS &&
          unsupported == 0;
      g->route[i] = wds__jg_route(progressive, whole, hw_takes);
    } else {
      im->status = WDS__JG_REFUSED; /* lossless, arithmetic coding... */
    }
  }
  {
    /* the arena: the largest part of at most WDS_GPU_JPEG_ARENA bytes (or
     * one image larger than that) */
    size_t need = wds__jg_arena_need(imgs, n);
    if (need > g->arena_cap) {
      /* nothing may still use the old one: every call's work is on st
       * (behind call_done) */
      rc = wait_stream(g, st, "memory for decoded images", e);
      if (rc != WDS_OK)
        return rc;
      dev_free(g, g->arena, st); /* on st: waits for no other stream */
      g->arena = NULL;
      g->arena_cap = 0;
      if ((c = dev_alloc(g, (void **)&g->arena, need, st)) != cudaSuccess)
        return cu_fail(e, "memory for decoded images", c);
      g->arena_cap = need;
    }
    size_t a = 0, part = 0;
    for (size_t i = 0; i <= n && rc == WDS_OK; i++) {
      size_t b = i < n && imgs[i].status == WDS__JG_OK
                     ? wds__jg_image_bytes(&imgs[i])
                     : 0;
      if (i == n || (part > 0 && part + b > g->arena_cap)) {
        rc = jg_part(g, imgs, a, i, (unsigned char *)out, row_bytes, st, e);
        a = i;
        part = 0;
      }
      if (i < n) {
        g->off[i] = part;
        part += b;
      }
    }
  }
  if (rc == WDS_OK) {
    if ((c = cudaEventRecord(g->call_done, st)) != cudaSuccess)
      return cu_fail(e, "cudaEventRecord (the call's end)", c);
    g->call_pending = 1;
  }
  return rc;
}

static const wds__jg_ops cuda_ops = {jg_decode, jg_upload,   jg_zero,
                                     jg_sync,   jg_stats,    jg_destroy,
                                     jg_buffer, jg_download, jg_set_timeout};

extern "C" int wds__jg_cuda_open(int device, const wds__jg_ops **ops,
                                 void **ctx, char *library, size_t library_size,
                                 wds__err *e) {
  int count = 0;
  cudaError_t c = cudaGetDeviceCount(&count);
  if (c != cudaSuccess || count == 0)
    return wds__fail(e, WDS_ERR_OPEN, "no CUDA GPU (%s)",
                     c != cudaSuccess ? cudaGetErrorString(c)
                                      : "no device found");
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess)
    device = 0;
  if (device >= count)
    return wds__fail(e, WDS_ERR_OPEN, "no CUDA device %d (this machine has %d)",
                     device, count);
  pthread_mutex_lock(&nvj_mu);
  if (!nvj_ok)
    nvj_load(); /* again after a failure: it may be there now */
  int loaded = nvj_ok;
  if (!loaded)
    wds__fail(e, WDS_ERR_OPEN, "%s", nvj_why);
  pthread_mutex_unlock(&nvj_mu);
  if (!loaded)
    return WDS_ERR_OPEN;
  jg_cuda *g = (jg_cuda *)calloc(1, sizeof *g);
  if (!g)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory");
  g->device = device;
  if (cudaDeviceGetAttribute(&g->pools, cudaDevAttrMemoryPoolsSupported,
                             device) != cudaSuccess)
    g->pools = 0;
  int rc = WDS_OK;
  nvjpegStatus_t s;
  {
    dev_scope scope(device);
    if (!scope.ok) {
      free(g);
      return wds__fail(e, WDS_ERR_OPEN, "CUDA: selecting device %d: %s", device,
                       cudaGetErrorString(scope.c));
    }
    /* the hardware backend where the GPU has the engine (with the flags,
     * else without: then its images are whole ones only, see
     * wds__jg_jpeg_whole) */
    unsigned one_flags = 0;
    if (jg_create(g, NVJPEG_BACKEND_HARDWARE, &g->hw, &g->hw_flags) !=
            NVJPEG_STATUS_SUCCESS ||
        p_nvjpegJpegStateCreate(g->hw, &g->hw_state) != NVJPEG_STATUS_SUCCESS ||
        p_nvjpegJpegStreamCreate(g->hw, &g->js_hw) != NVJPEG_STATUS_SUCCESS) {
      if (g->hw_state)
        p_nvjpegJpegStateDestroy(g->hw_state);
      if (g->hw)
        p_nvjpegDestroy(g->hw);
      g->hw = NULL;
      g->hw_state = NULL;
      g->js_hw = NULL;
    }
    if ((s = jg_create(g, NVJPEG_BACKEND_GPU_HYBRID, &g->hy, &g->hy_flags)) !=
            NVJPEG_STATUS_SUCCESS &&
        (s = jg_create(g, NVJPEG_BACKEND_DEFAULT, &g->hy, &g->hy_flags)) !=
            NVJPEG_STATUS_SUCCESS) {
      g->hy = NULL;
      rc = nvj_fail(e, "nvjpegCreateEx", s);
    } else if ((s = p_nvjpegJpegStateCreate(g->hy, &g->hy_state)) !=
                   NVJPEG_STATUS_SUCCESS ||
               (s = jg_create(g, NVJPEG_BACKEND_DEFAULT, &g->one,
                              &one_flags)) != NVJPEG_STATUS_SUCCESS ||
               (s = p_nvjpegJpegStateCreate(g->one, &g->one_state)) !=
                   NVJPEG_STATUS_SUCCESS ||
               (s = p_nvjpegJpegStreamCreate(g->hy, &g->js)) !=
                   NVJPEG_STATUS_SUCCESS) {
      rc = nvj_fail(e, "creating its state", s);
    } else if ((c = cudaEventCreateWithFlags(
                    &g->desc_done, cudaEventDisableTiming)) != cudaSuccess ||
               (c = cudaEventCreateWithFlags(
                    &g->call_done, cudaEventDisableTiming)) != cudaSuccess) {
      rc = cu_fail(e, "event", c);
    }
    for (int k = 0; k < 2 && rc == WDS_OK; k++) {
      jg_bstate *b = &g->bs[k];
      b->g = g;
      b->h = k == 0 ? g->hw : g->hy;
      b->s = k == 0 ? g->hw_state : g->hy_state;
      if ((c = cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming)) !=
          cudaSuccess)
        rc = cu_fail(e, "event", c);
      wds__jg_batched bt = {b,         bs_init,  bs_fill, bs_decode,
                            bs_record, bs_query, 0};
      g->batched[k] = bt;
    }
  }
  if (rc != WDS_OK) {
    jg_destroy(g);
    if (rc == WDS_ERR_IO)
      rc = WDS_ERR_OPEN;
    return rc;
  }
  /* the flags a backend refused are named: the pixels and errors then
   * differ from the CPU path's contract */
  unsigned got = g->hy_flags & (g->hw ? g->hw_flags : JG_NVJPEG_FLAGS);
  snprintf(library, library_size, "%s (%s backend%s%s)", nvj_path,
           g->hw ? "hardware" : "GPU hybrid",
           got & NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
               ? ""
               : "; no NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION",
           got & NVJPEG_FLAGS_BITSTREAM_STRICT
               ? ""
               : "; no NVJPEG_FLAGS_BITSTREAM_STRICT");
  *ops = &cuda_ops;
  *ctx = g;
  return WDS_OK;
}
