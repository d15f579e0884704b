/* resize.c — Pillow-compatible BILINEAR resampling and the crop geometry.
 *
 * Resampling follows Pillow's ImagingResample (Resample.c, 8 bits per
 * channel): a triangle filter whose support grows with the downscale factor
 * (antialiasing), weights normalised per output pixel and rounded to 22-bit
 * fixed point, a horizontal pass into an 8-bit intermediate over only the
 * rows the vertical pass reads, then the vertical pass. With the same
 * source span and sizes the bytes equal Pillow's img.resize(..., BILINEAR,
 * box=...). Only the kept outputs are computed: a center crop of a resize is
 * the resize's taps for the kept indices, so nothing outside the crop is
 * touched. The vertical pass accumulates whole rows (k outer, x inner) so
 * the compiler can vectorise it; integer sums do not depend on the order.
 *
 * Geometry follows torchvision (Resize + CenterCrop, RandomResizedCrop)
 * with a counter-based RNG: draw n of key k is splitmix64(k + n * golden),
 * so a crop is a pure function of (key, image size). */
#include "resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"

static double bilinear(double x) {
  if (x < 0.0)
    x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

int wds__taps_prepare(wds__taps *t, int in_size, double in0, double in1,
                      int out_total, int off, int count, int flip) {
  if (t->valid && t->in_size == in_size && t->in0 == in0 && t->in1 == in1 &&
      t->out_total == out_total && t->off == off && t->count == count &&
      t->flip == flip)
    return 0;
  t->valid = 0;
  double scale = (in1 - in0) / out_total;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * filterscale; /* bilinear support is 1 */
  int ksize = (int)ceil(support) * 2 + 1;
  void *p = wds__grow(t->bounds, &t->bounds_cap, (size_t)count * 2,
                      sizeof *t->bounds, 64);
  if (!p)
    return -1;
  t->bounds = p;
  p = wds__grow(t->taps, &t->taps_cap, (size_t)count * (size_t)ksize,
                sizeof *t->taps, 256);
  if (!p)
    return -1;
  t->taps = p;
  p = wds__grow(t->work, &t->work_cap, (size_t)ksize, sizeof *t->work, 16);
  if (!p)
    return -1;
  t->work = p;
  double ss = 1.0 / filterscale;
  for (int i = 0; i < count; i++) {
    double center = in0 + (i + off + 0.5) * scale;
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0)
      xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > in_size)
      xmax = in_size;
    xmax -= xmin;
    if (xmax < 0)
      xmax = 0;
    if (xmax > ksize)
      xmax = ksize;
    double ww = 0.0;
    for (int x = 0; x < xmax; x++) {
      double w = bilinear((x + xmin - center + 0.5) * ss);
      t->work[x] = w;
      ww += w;
    }
    int slot = flip ? count - 1 - i : i;
    int32_t *k = t->taps + (size_t)slot * (size_t)ksize;
    for (int x = 0; x < ksize; x++) {
      double w = x < xmax && ww != 0.0 ? t->work[x] / ww : 0.0;
      /* Pillow's normalize_coeffs_8bpc rounding */
      k[x] = (int32_t)(w < 0 ? -0.5 + w * (1 << WDS__RESIZE_BITS)
                             : 0.5 + w * (1 << WDS__RESIZE_BITS));
    }
    t->bounds[2 * slot] = xmin;
    t->bounds[2 * slot + 1] = xmax;
  }
  t->in_size = in_size;
  t->in0 = in0;
  t->in1 = in1;
  t->out_total = out_total;
  t->off = off;
  t->count = count;
  t->flip = flip;
  t->ksize = ksize;
  t->valid = 1;
  return 0;
}

void wds__taps_free(wds__taps *t) {
  free(t->bounds);
  free(t->taps);
  free(t->work);
  memset(t, 0, sizeof *t);
}

void wds__taps_span(const wds__taps *t, int *first, int *last) {
  int lo = 0, hi = 0;
  for (int i = 0; i < t->count; i++) {
    int a = t->bounds[2 * i], b = a + t->bounds[2 * i + 1];
    if (i == 0 || a < lo)
      lo = a;
    if (i == 0 || b > hi)
      hi = b;
  }
  *first = lo;
  *last = hi;
}

static inline uint8_t clip8(int32_t v) {
  v >>= WDS__RESIZE_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void horizontal_row(const uint8_t *in, int channels, const wds__taps *tx,
                           uint8_t *out) {
  const int32_t half = 1 << (WDS__RESIZE_BITS - 1);
  if (channels == 3) {
    for (int i = 0; i < tx->count; i++) {
      const int32_t *k = tx->taps + (size_t)i * (size_t)tx->ksize;
      const uint8_t *s = in + (size_t)tx->bounds[2 * i] * 3;
      int n = tx->bounds[2 * i + 1];
      int32_t r = half, g = half, b = half;
      for (int x = 0; x < n; x++) {
        r += s[3 * x] * k[x];
        g += s[3 * x + 1] * k[x];
        b += s[3 * x + 2] * k[x];
      }
      out[3 * i] = clip8(r);
      out[3 * i + 1] = clip8(g);
      out[3 * i + 2] = clip8(b);
    }
  } else {
    for (int i = 0; i < tx->count; i++) {
      const int32_t *k = tx->taps + (size_t)i * (size_t)tx->ksize;
      const uint8_t *s = in + tx->bounds[2 * i];
      int n = tx->bounds[2 * i + 1];
      int32_t v = half;
      for (int x = 0; x < n; x++)
        v += s[x] * k[x];
      out[i] = clip8(v);
    }
  }
}

void wds__resample(const uint8_t *src, size_t src_stride, int channels,
                   const wds__taps *tx, const wds__taps *ty, uint8_t *tmp,
                   int32_t *acc, uint8_t *out) {
  int first, last;
  wds__taps_span(ty, &first, &last);
  size_t row = (size_t)tx->count * (size_t)channels;
  for (int y = first; y < last; y++)
    horizontal_row(src + (size_t)y * src_stride, channels, tx,
                   tmp + (size_t)(y - first) * row);
  const int32_t half = 1 << (WDS__RESIZE_BITS - 1);
  for (int j = 0; j < ty->count; j++) {
    const int32_t *k = ty->taps + (size_t)j * (size_t)ty->ksize;
    const uint8_t *s = tmp + (size_t)(ty->bounds[2 * j] - first) * row;
    int n = ty->bounds[2 * j + 1];
    for (size_t x = 0; x < row; x++)
      acc[x] = half;
    for (int y = 0; y < n; y++) {
      const uint8_t *sr = s + (size_t)y * row;
      int32_t ky = k[y];
      for (size_t x = 0; x < row; x++)
        acc[x] += sr[x] * ky;
    }
    uint8_t *o = out + (size_t)j * row;
    for (size_t x = 0; x < row; x++)
      o[x] = clip8(acc[x]);
  }
}

/* ---- geometry ---- */

/* Python's round() of a half-integer or integer value n / 2 (ties to even),
 * as torchvision's CenterCrop computes its offsets. */
static int half_round_even(int n) {
  if (n % 2 == 0)
    return n / 2;
  int lo = n / 2; /* n >= 0 here */
  return lo % 2 == 0 ? lo : lo + 1;
}

void wds__plan_center(int src_w, int src_h, int out_w, int out_h,
                      wds__crop_plan *p) {
  int64_t rw, rh;
  memset(p, 0, sizeof *p);
  /* the side whose ratio out/src is larger is matched; the other side is
   * int(out * long / short) as torchvision's Resize computes it */
  if ((int64_t)out_w * src_h >= (int64_t)out_h * src_w) {
    rw = out_w;
    rh = (int64_t)out_w * src_h / src_w;
    if (rh < out_h)
      rh = out_h;
  } else {
    rh = out_h;
    rw = (int64_t)out_h * src_w / src_h;
    if (rw < out_w)
      rw = out_w;
  }
  p->x0 = 0;
  p->x1 = src_w;
  p->y0 = 0;
  p->y1 = src_h;
  p->total_w = (int)rw;
  p->total_h = (int)rh;
  p->off_x = half_round_even((int)rw - out_w);
  p->off_y = half_round_even((int)rh - out_h);
  p->flip = 0;
}

static uint64_t draw(uint64_t key, uint64_t n) {
  return wds__mix64(key + n * 0xD1B54A32D192ED03ull);
}

static double draw_unit(uint64_t key, uint64_t n) { /* [0, 1) */
  return (double)(draw(key, n) >> 11) * 0x1.0p-53;
}

static int draw_below(uint64_t key, uint64_t n, int bound) { /* [0, bound) */
  return (int)(((draw(key, n) >> 32) * (uint64_t)bound) >> 32);
}

void wds__plan_random(int src_w, int src_h, int out_w, int out_h, double smin,
                      double smax, uint64_t key, wds__crop_plan *p) {
  double area = (double)src_w * src_h;
  memset(p, 0, sizeof *p);
  double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
  int w = 0, h = 0, i = 0, j = 0, found = 0;
  for (uint64_t attempt = 0; attempt < 10 && !found; attempt++) {
    uint64_t n = attempt * 4;
    double target = area * (smin + (smax - smin) * draw_unit(key, n));
    double ratio = exp(lr0 + (lr1 - lr0) * draw_unit(key, n + 1));
    double fw = round(sqrt(target * ratio)), fh = round(sqrt(target / ratio));
    if (fw > 0 && fw <= src_w && fh > 0 && fh <= src_h) {
      w = (int)fw;
      h = (int)fh;
      i = draw_below(key, n + 2, src_h - h + 1);
      j = draw_below(key, n + 3, src_w - w + 1);
      found = 1;
    }
  }
  if (!found) {
    double in_ratio = (double)src_w / src_h;
    w = src_w;
    h = src_h;
    if (in_ratio < 3.0 / 4.0)
      h = (int)round(w / (3.0 / 4.0));
    else if (in_ratio > 4.0 / 3.0)
      w = (int)round(h * (4.0 / 3.0));
    if (h > src_h)
      h = src_h;
    if (w > src_w)
      w = src_w;
    if (w < 1)
      w = 1;
    if (h < 1)
      h = 1;
    i = (src_h - h) / 2;
    j = (src_w - w) / 2;
  }
  p->x0 = j;
  p->x1 = j + w;
  p->y0 = i;
  p->y1 = i + h;
  p->total_w = out_w;
  p->total_h = out_h;
  p->off_x = 0;
  p->off_y = 0;
  p->flip = (int)(draw(key, 1000) >> 63);
}
