/* resize.h — separable image resampling (Pillow's BILINEAR with support
 * scaling) and the crop geometry of the image decoder. Internal to
 * pipeline/. */
#ifndef WDS_PIPELINE_RESIZE_H
#define WDS_PIPELINE_RESIZE_H

#include <stddef.h>
#include <stdint.h>

/* Fixed-point filter taps for one axis: output i reads source pixels
 * bounds[2i] .. bounds[2i] + bounds[2i+1] - 1 with weights
 * taps[i * ksize ..], scaled by 2^WDS__RESIZE_BITS. Cached by key: a
 * prepare() with the same arguments as the last one reuses the table. */
#define WDS__RESIZE_BITS 22

typedef struct wds__taps {
  /* key of the cached table */
  int in_size, out_total, off, count, flip;
  double in0, in1;
  int valid;
  /* table */
  int ksize;
  int *bounds;   /* 2 * count */
  int32_t *taps; /* count * ksize */
  double *work;  /* ksize doubles, scratch */
  /* the taps split for pmaddwd (resize.c): per output, (ksize + 1) / 2
   * pairs of taps x, x + 1, each as two int32 of two 16-bit halves: the
   * low 15 bits of both, then the bits above */
  int32_t *pairs;
  size_t bounds_cap, taps_cap, work_cap, pairs_cap;
} wds__taps;

/* Taps of outputs off .. off + count - 1 of a resize of the source span
 * [in0, in1) (of an axis in_size pixels long) to out_total pixels; flip
 * reverses the outputs. Returns 0, or -1 when out of memory. */
int wds__taps_prepare(wds__taps *t, int in_size, double in0, double in1,
                      int out_total, int off, int count, int flip);
void wds__taps_free(wds__taps *t);

/* Rows of the source the vertical taps read: [*first, *last). */
void wds__taps_span(const wds__taps *t, int *first, int *last);

/* Resamples src (rows of src_stride bytes, tx->in_size pixels of channels
 * interleaved bytes each; 1 or 3 channels) through tx (horizontal) and ty
 * (vertical) into out (tx->count x ty->count x channels). tmp holds
 * (last - first) * tx->count * channels bytes (wds__taps_span of ty). Runs
 * the best kernels this CPU has. */
void wds__resample(const uint8_t *src, size_t src_stride, int channels,
                   const wds__taps *tx, const wds__taps *ty, uint8_t *tmp,
                   uint8_t *out);

/* The kernels, chosen at run time: every one gives the same bytes (exact
 * integer arithmetic). SSE2: the horizontal pass (RGB and gray) and the
 * vertical pass, with pmaddwd; AVX2: the vertical pass 32 bytes at a time
 * and the horizontal pass of RGB four rows at a time; scalar: everything
 * else, and everything on CPUs other than x86-64. */
enum { WDS__RESIZE_SCALAR, WDS__RESIZE_SSE2, WDS__RESIZE_AVX2 };
int wds__resize_isa_supported(int isa); /* 1 when this CPU runs it */
int wds__resize_isa_best(void);
const char *wds__resize_isa_name(int isa);
/* wds__resample with the kernels of isa (scalar where not supported). */
void wds__resample_isa(int isa, const uint8_t *src, size_t src_stride,
                       int channels, const wds__taps *tx, const wds__taps *ty,
                       uint8_t *tmp, uint8_t *out);

/* The two passes of wds__resample_isa on their own, for a caller that runs
 * them at different times (the loader: the horizontal pass in the worker
 * that decoded the image, the vertical pass into the batch slot's row).
 * rows: source rows [first, last) through tx into tmp (row r at
 * (r - first) * tx->count * channels). cols: the rows of tmp (row bytes
 * each, its first row being source row first) through ty into out; it
 * allocates nothing and cannot fail. */
void wds__resample_rows_isa(int isa, const uint8_t *src, size_t src_stride,
                            int channels, const wds__taps *tx, int first,
                            int last, uint8_t *tmp);
void wds__resample_cols_isa(int isa, const uint8_t *tmp, size_t row, int first,
                            const wds__taps *ty, uint8_t *out);

/* A copy of t's table for the vertical pass (wds__resample_cols_isa, which
 * reads its taps from the pairs) in wds__taps_copy_size(t) bytes at mem
 * (4-byte aligned): *view reads it from there (count, ksize, bounds,
 * pairs; no plain taps, no cache key); it is never prepared nor freed. */
size_t wds__taps_copy_size(const wds__taps *t);
void wds__taps_copy(const wds__taps *t, void *mem, wds__taps *view);

/* Where the output comes from, in source pixels, per axis: a virtual
 * resize of [in0, in1) to out_total pixels, of which outputs off ..
 * off + out - 1 are kept. */
typedef struct wds__crop_plan {
  double x0, x1, y0, y1;
  int total_w, total_h; /* virtual resized size */
  int off_x, off_y;
  int flip;
} wds__crop_plan;

/* CENTER: torchvision Resize(shorter side) + CenterCrop. */
void wds__plan_center(int src_w, int src_h, int out_w, int out_h,
                      wds__crop_plan *p);

/* RANDOM: torchvision RandomResizedCrop.get_params (scale [smin, smax],
 * ratio [3/4, 4/3], 10 attempts, then the fallback) and a flip with
 * probability 1/2, all drawn from key. */
void wds__plan_random(int src_w, int src_h, int out_w, int out_h, double smin,
                      double smax, uint64_t key, wds__crop_plan *p);

/* RANDOM with every parameter: torchvision's RandomResizedCrop(scale=
 * (smin, smax), ratio=(rmin, rmax)).get_params (10 attempts of an area
 * uniform in the scale range and an aspect ratio log-uniform in the ratio
 * range, the box's corner uniform; then the fallback: the whole image,
 * clipped to the nearest ratio of the range, centered) and a horizontal
 * flip with probability flip_prob. wds__plan_random is this with (3/4,
 * 4/3) and 1/2. */
void wds__plan_rrc(int src_w, int src_h, int out_w, int out_h, double smin,
                   double smax, double rmin, double rmax, double flip_prob,
                   uint64_t key, wds__crop_plan *p);

#endif
