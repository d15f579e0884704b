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
 * touched.
 *
 * Kernels: the scalar ones are the reference; on x86-64 the SSE2 ones
 * (every x86-64 CPU) and AVX2 ones (chosen at run time with
 * __builtin_cpu_supports) compute the same integer sums with pmaddwd, two
 * (pixel, tap) pairs per 32-bit lane, so every path gives the same bytes
 * (test_decode's resize_kernels_agree holds each to an int64 evaluation of
 * the taps). The taps are split into pmaddwd's 16-bit operands once per
 * table (wds__taps.pairs), and the horizontal pass of RGB runs four rows
 * at a time under AVX2 so they share each tap load; that of gray images
 * runs four rows (SSE2) or eight (AVX2) at a time, a row per 32-bit lane.
 *
 * Geometry follows torchvision (Resize + CenterCrop, RandomResizedCrop)
 * with a counter-based RNG: draw n of key k is splitmix64's finaliser
 * (wds__mix64) of k + n * 0xD1B54A32D192ED03 (draw()), so a crop is a pure
 * function of (key, image size). */
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

/* Two taps as the 16-bit halves of one int32 (pmaddwd's operand). */
static inline int32_t tap_pair(int32_t a, int32_t b) {
  return (int32_t)(((uint32_t)b << 16) | ((uint32_t)a & 0xFFFFu));
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
  int np = (ksize + 1) / 2;
  p = wds__grow(t->pairs, &t->pairs_cap, (size_t)count * (size_t)np * 2,
                sizeof *t->pairs, 256);
  if (!p)
    return -1;
  t->pairs = p;
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
    int32_t *pk = t->pairs + (size_t)slot * (size_t)np * 2;
    for (int x = 0; x < ksize; x += 2) {
      int32_t k0 = k[x], k1 = x + 1 < ksize ? k[x + 1] : 0;
      pk[x] = tap_pair(k0 & 0x7FFF, k1 & 0x7FFF);
      pk[x + 1] = tap_pair(k0 >> 15, k1 >> 15);
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
  free(t->pairs);
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

/* ---- scalar kernels: the reference every other path equals ---- */

/* Output i of one row: channels sums of its taps. */
static void horizontal_px(const uint8_t *in, int channels, const wds__taps *tx,
                          int i, uint8_t *out) {
  const int32_t half = 1 << (WDS__RESIZE_BITS - 1);
  const int32_t *k = tx->taps + (size_t)i * (size_t)tx->ksize;
  const uint8_t *s = in + (size_t)tx->bounds[2 * i] * (size_t)channels;
  int n = tx->bounds[2 * i + 1];
  if (channels == 3) {
    int32_t r = half, g = half, b = half;
    for (int x = 0; x < n; x++) {
      r += s[3 * x] * k[x];
      g += s[3 * x + 1] * k[x];
      b += s[3 * x + 2] * k[x];
    }
    out[3 * i] = clip8(r);
    out[3 * i + 1] = clip8(g);
    out[3 * i + 2] = clip8(b);
  } else {
    int32_t v = half;
    for (int x = 0; x < n; x++)
      v += s[x] * k[x];
    out[i] = clip8(v);
  }
}

static void horizontal_scalar(const uint8_t *in, int channels,
                              const wds__taps *tx, uint8_t *out) {
  for (int i = 0; i < tx->count; i++)
    horizontal_px(in, channels, tx, i, out);
}

/* Output row j of the vertical pass over bytes [x0, row), in chunks whose
 * sums fit a stack accumulator (the pass allocates nothing: the loader's
 * slot copy runs it and must not fail). */
#define WDS__V_CHUNK 512

/* Tap y of a row of pairs (wds__taps.pairs): its low 15 bits and the bits
 * above, in the 16-bit halves (y & 1 says which) of pairs y & ~1 and
 * (y & ~1) + 1. The vertical pass reads its taps from there, so that a
 * copy of the table (wds__taps_copy) needs no plain taps. */
static inline int32_t tap_of(const int32_t *pk, int y) {
  int sh = 16 * (y & 1);
  uint32_t lo = ((uint32_t)pk[y & ~1] >> sh) & 0xFFFFu;
  uint32_t hi = ((uint32_t)pk[(y & ~1) + 1] >> sh) & 0xFFFFu;
  return (int32_t)lo + (int32_t)(int16_t)hi * 32768;
}

static void vertical_scalar(const uint8_t *tmp, size_t row, int first,
                            const wds__taps *ty, int j, size_t x0, uint8_t *o) {
  const int32_t half = 1 << (WDS__RESIZE_BITS - 1);
  const int32_t *pk = ty->pairs + (size_t)j * (size_t)((ty->ksize + 1) / 2) * 2;
  const uint8_t *s = tmp + (size_t)(ty->bounds[2 * j] - first) * row;
  int n = ty->bounds[2 * j + 1];
  int32_t acc[WDS__V_CHUNK];
  for (size_t c0 = x0; c0 < row; c0 += WDS__V_CHUNK) {
    size_t m = row - c0 < WDS__V_CHUNK ? row - c0 : WDS__V_CHUNK;
    for (size_t x = 0; x < m; x++)
      acc[x] = half;
    for (int y = 0; y < n; y++) {
      const uint8_t *sr = s + (size_t)y * row + c0;
      int32_t ky = tap_of(pk, y);
      for (size_t x = 0; x < m; x++)
        acc[x] += sr[x] * ky;
    }
    for (size_t x = 0; x < m; x++)
      o[c0 + x] = clip8(acc[x]);
  }
}

/* ---- x86 kernels ----
 * Exact: they compute the scalar kernels' integer sums, so their bytes
 * equal the scalar path's (test_decode compares every path). A 22-bit tap
 * k (0 <= k <= 2^22 for this filter) is split as k = kh * 2^15 + kl with
 * 0 <= kl < 2^15 and kh <= 128, both 16-bit, so pmaddwd multiplies two
 * (pixel, tap) pairs per 32-bit lane; the sum is half + L + (H << 15).
 * L alone may pass 2^31 on long filters, but every step is an add or
 * shift modulo 2^32 and the true sum (at most 255 * 2^22 + 2^21) fits, so
 * the result is exact. */
#if defined(__GNUC__) && defined(__x86_64__)
#define WDS__RESIZE_X86 1
#include <immintrin.h>

/* RGB, one output pixel per 128-bit vector (r, g, b, spare), two taps per
 * pmaddwd: 8 bytes at pixel x give r0 g0 b0 r1 g1 b1 r2 g2; interleaved
 * with themselves shifted by one pixel they give r0 r1 g0 g1 b0 b1 ...
 * The loads read up to 2 bytes past the last tap pair's pixels, so an
 * output whose pairs end within a pixel of the row's end (the last one or
 * two of a row) takes the scalar kernel. */
/* Stores the r, g, b bytes of px (low byte first) at o; where more of
 * the row follows (more), as one 4-byte store whose spare byte the next
 * pixel overwrites. */
static inline void put_px(uint8_t *o, uint32_t px, int more) {
  if (more) {
    memcpy(o, &px, 4); /* little-endian x86 */
  } else {
    o[0] = (uint8_t)px;
    o[1] = (uint8_t)(px >> 8);
    o[2] = (uint8_t)(px >> 16);
  }
}

static void horizontal_rgb_sse2(const uint8_t *in, const wds__taps *tx,
                                uint8_t *out) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(1 << (WDS__RESIZE_BITS - 1));
  size_t np = (size_t)(tx->ksize + 1) / 2;
  for (int i = 0; i < tx->count; i++) {
    int xmin = tx->bounds[2 * i], n = tx->bounds[2 * i + 1];
    if (xmin + ((n + 1) & ~1) >= tx->in_size) {
      horizontal_px(in, 3, tx, i, out);
      continue;
    }
    const int32_t *pk = tx->pairs + (size_t)i * np * 2;
    const uint8_t *s = in + (size_t)xmin * 3;
    __m128i lo = zero, hi = zero;
    for (int x = 0; x < n; x += 2) {
      __m128i p = _mm_loadl_epi64((const __m128i *)(const void *)(s + 3 * x));
      __m128i q = _mm_srli_si128(p, 3);
      __m128i w = _mm_unpacklo_epi8(_mm_unpacklo_epi8(p, q), zero);
      lo = _mm_add_epi32(lo, _mm_madd_epi16(w, _mm_set1_epi32(pk[x])));
      hi = _mm_add_epi32(hi, _mm_madd_epi16(w, _mm_set1_epi32(pk[x + 1])));
    }
    __m128i v = _mm_add_epi32(_mm_add_epi32(half, lo), _mm_slli_epi32(hi, 15));
    v = _mm_srai_epi32(v, WDS__RESIZE_BITS);
    v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
    put_px(out + 3 * (size_t)i, (uint32_t)_mm_cvtsi128_si32(v),
           i + 1 < tx->count);
  }
}

/* The same on four rows at once, two per 256-bit vector (one per 128-bit
 * lane), sharing the taps; one 16-byte load per row gives four taps'
 * pixels, which pshufb spreads into pmaddwd's pairs. Outputs whose loads
 * would pass the row's end (the last two or so) take the scalar kernel. */
__attribute__((target("avx2"))) static void
horizontal_rgb4_avx2(const uint8_t *const in[4], const wds__taps *tx,
                     uint8_t *const out[4]) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(1 << (WDS__RESIZE_BITS - 1));
  /* pixels x, x + 1 (bytes 0..5) and x + 2, x + 3 (6..11) of a 16-byte
   * load as 16-bit r r g g b b 0 0 (-1: a zero byte) */
  const __m256i pair_a = _mm256_setr_epi8(
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, 0, -1, 3, -1, 1,
      -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m256i pair_b = _mm256_setr_epi8(
      6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1, 6, -1, 9, -1,
      7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  size_t np = (size_t)(tx->ksize + 1) / 2;
  for (int i = 0; i < tx->count; i++) {
    int xmin = tx->bounds[2 * i], n = tx->bounds[2 * i + 1];
    int groups = (n + 3) / 4; /* of 4 taps, one 16-byte load per row */
    if (xmin + 4 * groups + 2 > tx->in_size) {
      for (int r = 0; r < 4; r++)
        horizontal_px(in[r], 3, tx, i, out[r]);
      continue;
    }
    const int32_t *pk = tx->pairs + (size_t)i * np * 2;
    size_t at = (size_t)xmin * 3;
    __m256i lo01 = zero, hi01 = zero, lo23 = zero, hi23 = zero;
    for (int x = 0; x < n; x += 4, at += 12) {
      __m256i p01 = _mm256_inserti128_si256(
          _mm256_castsi128_si256(
              _mm_loadu_si128((const __m128i *)(const void *)(in[0] + at))),
          _mm_loadu_si128((const __m128i *)(const void *)(in[1] + at)), 1);
      __m256i p23 = _mm256_inserti128_si256(
          _mm256_castsi128_si256(
              _mm_loadu_si128((const __m128i *)(const void *)(in[2] + at))),
          _mm_loadu_si128((const __m128i *)(const void *)(in[3] + at)), 1);
      for (int h = 0; h < 2 && x + 2 * h < n; h++) {
        __m256i m = h ? pair_b : pair_a;
        __m256i w01 = _mm256_shuffle_epi8(p01, m);
        __m256i w23 = _mm256_shuffle_epi8(p23, m);
        __m256i kl = _mm256_set1_epi32(pk[x + 2 * h]);
        __m256i kh = _mm256_set1_epi32(pk[x + 2 * h + 1]);
        lo01 = _mm256_add_epi32(lo01, _mm256_madd_epi16(w01, kl));
        hi01 = _mm256_add_epi32(hi01, _mm256_madd_epi16(w01, kh));
        lo23 = _mm256_add_epi32(lo23, _mm256_madd_epi16(w23, kl));
        hi23 = _mm256_add_epi32(hi23, _mm256_madd_epi16(w23, kh));
      }
    }
    __m256i v01 =
        _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(half, lo01),
                                           _mm256_slli_epi32(hi01, 15)),
                          WDS__RESIZE_BITS);
    __m256i v23 =
        _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(half, lo23),
                                           _mm256_slli_epi32(hi23, 15)),
                          WDS__RESIZE_BITS);
    /* lane 0: rows 0, 2; lane 1: rows 1, 3 (4 bytes each, r g b spare) */
    __m256i v = _mm256_packus_epi16(_mm256_packs_epi32(v01, v23), zero);
    __m128i l0 = _mm256_castsi256_si128(v), l1 = _mm256_extracti128_si256(v, 1);
    uint32_t px[4] = {
        (uint32_t)_mm_cvtsi128_si32(l0), (uint32_t)_mm_cvtsi128_si32(l1),
        (uint32_t)_mm_extract_epi32(l0, 1), (uint32_t)_mm_extract_epi32(l1, 1)};
    for (int r = 0; r < 4; r++)
      put_px(out[r] + 3 * (size_t)i, px[r], i + 1 < tx->count);
  }
}

/* Gray: one output of four rows at once, a row per 32-bit lane, sharing
 * the taps. Eight pixels of each row (four tap pairs) are loaded and
 * transposed so that each pair of each row is one pmaddwd operand:
 * unpacking the rows' 16-bit units (pixel pairs) by two and then their
 * 32-bit units gives pair p of rows 0..3 side by side, widened to 16 bits.
 * An output whose loads would pass the row's end (the last few) takes the
 * scalar kernel. */
static inline __m128i gray_sum(__m128i lo, __m128i hi) {
  const __m128i half = _mm_set1_epi32(1 << (WDS__RESIZE_BITS - 1));
  return _mm_srai_epi32(
      _mm_add_epi32(_mm_add_epi32(half, lo), _mm_slli_epi32(hi, 15)),
      WDS__RESIZE_BITS);
}

static void horizontal_gray4_sse2(const uint8_t *const in[4],
                                  const wds__taps *tx, uint8_t *const out[4]) {
  const __m128i zero = _mm_setzero_si128();
  size_t np = (size_t)(tx->ksize + 1) / 2;
  for (int i = 0; i < tx->count; i++) {
    int xmin = tx->bounds[2 * i], n = tx->bounds[2 * i + 1];
    if (xmin + 8 * ((n + 7) / 8) > tx->in_size) {
      for (int r = 0; r < 4; r++)
        horizontal_px(in[r], 1, tx, i, out[r]);
      continue;
    }
    const int32_t *pk = tx->pairs + (size_t)i * np * 2;
    __m128i lo = zero, hi = zero;
    for (int x = 0; x < n; x += 8) {
      size_t at = (size_t)(xmin + x);
      __m128i t01 = _mm_unpacklo_epi16(
          _mm_loadl_epi64((const __m128i *)(const void *)(in[0] + at)),
          _mm_loadl_epi64((const __m128i *)(const void *)(in[1] + at)));
      __m128i t23 = _mm_unpacklo_epi16(
          _mm_loadl_epi64((const __m128i *)(const void *)(in[2] + at)),
          _mm_loadl_epi64((const __m128i *)(const void *)(in[3] + at)));
      __m128i u[2] = {_mm_unpacklo_epi32(t01, t23),
                      _mm_unpackhi_epi32(t01, t23)};
      for (int p = 0; p < 4 && x + 2 * p < n; p++) {
        __m128i w = p & 1 ? _mm_unpackhi_epi8(u[p >> 1], zero)
                          : _mm_unpacklo_epi8(u[p >> 1], zero);
        lo =
            _mm_add_epi32(lo, _mm_madd_epi16(w, _mm_set1_epi32(pk[x + 2 * p])));
        hi = _mm_add_epi32(
            hi, _mm_madd_epi16(w, _mm_set1_epi32(pk[x + 2 * p + 1])));
      }
    }
    __m128i v = gray_sum(lo, hi);
    v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
    uint32_t px = (uint32_t)_mm_cvtsi128_si32(v);
    for (int r = 0; r < 4; r++)
      out[r][i] = (uint8_t)(px >> (8 * r));
  }
}

/* The same on eight rows, four per 128-bit lane. */
__attribute__((target("avx2"))) static void
horizontal_gray8_avx2(const uint8_t *const in[8], const wds__taps *tx,
                      uint8_t *const out[8]) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(1 << (WDS__RESIZE_BITS - 1));
  size_t np = (size_t)(tx->ksize + 1) / 2;
  for (int i = 0; i < tx->count; i++) {
    int xmin = tx->bounds[2 * i], n = tx->bounds[2 * i + 1];
    if (xmin + 8 * ((n + 7) / 8) > tx->in_size) {
      for (int r = 0; r < 8; r++)
        horizontal_px(in[r], 1, tx, i, out[r]);
      continue;
    }
    const int32_t *pk = tx->pairs + (size_t)i * np * 2;
    __m256i lo = zero, hi = zero;
    for (int x = 0; x < n; x += 8) {
      size_t at = (size_t)(xmin + x);
      __m256i r[4];
      for (int k = 0; k < 4; k++)
        r[k] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(
                _mm_loadl_epi64((const __m128i *)(const void *)(in[k] + at))),
            _mm_loadl_epi64((const __m128i *)(const void *)(in[k + 4] + at)),
            1);
      __m256i t01 = _mm256_unpacklo_epi16(r[0], r[1]);
      __m256i t23 = _mm256_unpacklo_epi16(r[2], r[3]);
      __m256i u[2] = {_mm256_unpacklo_epi32(t01, t23),
                      _mm256_unpackhi_epi32(t01, t23)};
      for (int p = 0; p < 4 && x + 2 * p < n; p++) {
        __m256i w = p & 1 ? _mm256_unpackhi_epi8(u[p >> 1], zero)
                          : _mm256_unpacklo_epi8(u[p >> 1], zero);
        lo = _mm256_add_epi32(
            lo, _mm256_madd_epi16(w, _mm256_set1_epi32(pk[x + 2 * p])));
        hi = _mm256_add_epi32(
            hi, _mm256_madd_epi16(w, _mm256_set1_epi32(pk[x + 2 * p + 1])));
      }
    }
    __m256i v = _mm256_srai_epi32(
        _mm256_add_epi32(_mm256_add_epi32(half, lo), _mm256_slli_epi32(hi, 15)),
        WDS__RESIZE_BITS);
    v = _mm256_packus_epi16(_mm256_packs_epi32(v, v), v);
    /* lane 0: rows 0..3, lane 1: rows 4..7, a byte each */
    uint32_t a = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(v));
    uint32_t b = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(v, 1));
    for (int k = 0; k < 4; k++) {
      out[k][i] = (uint8_t)(a >> (8 * k));
      out[k + 4][i] = (uint8_t)(b >> (8 * k));
    }
  }
}

/* Accumulates rows a and b (16 bytes each) times the taps pairs lo, hi
 * into the four 4-lane sums of 16 outputs. */
#define WDS__V_STEP(W, ZERO, UNPACKLO8, UNPACKHI8, MADD, ADD, a, b, lo, hi, L, \
                    H)                                                         \
  do {                                                                         \
    W ab0 = UNPACKLO8(a, b), ab1 = UNPACKHI8(a, b);                            \
    W w0 = UNPACKLO8(ab0, ZERO), w1 = UNPACKHI8(ab0, ZERO);                    \
    W w2 = UNPACKLO8(ab1, ZERO), w3 = UNPACKHI8(ab1, ZERO);                    \
    L[0] = ADD(L[0], MADD(w0, lo));                                            \
    L[1] = ADD(L[1], MADD(w1, lo));                                            \
    L[2] = ADD(L[2], MADD(w2, lo));                                            \
    L[3] = ADD(L[3], MADD(w3, lo));                                            \
    H[0] = ADD(H[0], MADD(w0, hi));                                            \
    H[1] = ADD(H[1], MADD(w1, hi));                                            \
    H[2] = ADD(H[2], MADD(w2, hi));                                            \
    H[3] = ADD(H[3], MADD(w3, hi));                                            \
  } while (0)

/* 16 outputs of row j from x on; returns the next x. */
static size_t vertical_sse2(const uint8_t *s, size_t row, const int32_t *pk,
                            int n, size_t x, uint8_t *o) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(1 << (WDS__RESIZE_BITS - 1));
  for (; x + 16 <= row; x += 16) {
    __m128i L[4] = {zero, zero, zero, zero}, H[4] = {zero, zero, zero, zero};
    for (int y = 0; y < n; y += 2) {
      __m128i a = _mm_loadu_si128(
          (const __m128i *)(const void *)(s + (size_t)y * row + x));
      __m128i b =
          y + 1 < n
              ? _mm_loadu_si128(
                    (const __m128i *)(const void *)(s + (size_t)(y + 1) * row +
                                                    x))
              : zero;
      __m128i lo = _mm_set1_epi32(pk[y]), hi = _mm_set1_epi32(pk[y + 1]);
      WDS__V_STEP(__m128i, zero, _mm_unpacklo_epi8, _mm_unpackhi_epi8,
                  _mm_madd_epi16, _mm_add_epi32, a, b, lo, hi, L, H);
    }
    __m128i v[4];
    for (int q = 0; q < 4; q++)
      v[q] = _mm_srai_epi32(
          _mm_add_epi32(_mm_add_epi32(half, L[q]), _mm_slli_epi32(H[q], 15)),
          WDS__RESIZE_BITS);
    __m128i r = _mm_packus_epi16(_mm_packs_epi32(v[0], v[1]),
                                 _mm_packs_epi32(v[2], v[3]));
    _mm_storeu_si128((__m128i *)(void *)(o + x), r);
  }
  return x;
}

/* The same on 32 outputs: 256-bit unpacks and packs work per 128-bit lane,
 * and the pack undoes the unpack's order lane by lane. */
__attribute__((target("avx2"))) static size_t
vertical_avx2(const uint8_t *s, size_t row, const int32_t *pk, int n, size_t x,
              uint8_t *o) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(1 << (WDS__RESIZE_BITS - 1));
  for (; x + 32 <= row; x += 32) {
    __m256i L[4] = {zero, zero, zero, zero}, H[4] = {zero, zero, zero, zero};
    for (int y = 0; y < n; y += 2) {
      __m256i a = _mm256_loadu_si256(
          (const __m256i *)(const void *)(s + (size_t)y * row + x));
      __m256i b =
          y + 1 < n
              ? _mm256_loadu_si256(
                    (const __m256i *)(const void *)(s + (size_t)(y + 1) * row +
                                                    x))
              : zero;
      __m256i lo = _mm256_set1_epi32(pk[y]), hi = _mm256_set1_epi32(pk[y + 1]);
      WDS__V_STEP(__m256i, zero, _mm256_unpacklo_epi8, _mm256_unpackhi_epi8,
                  _mm256_madd_epi16, _mm256_add_epi32, a, b, lo, hi, L, H);
    }
    __m256i v[4];
    for (int q = 0; q < 4; q++)
      v[q] = _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(half, L[q]),
                                                _mm256_slli_epi32(H[q], 15)),
                               WDS__RESIZE_BITS);
    __m256i r = _mm256_packus_epi16(_mm256_packs_epi32(v[0], v[1]),
                                    _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256((__m256i *)(void *)(o + x), r);
  }
  return x;
}
#endif

int wds__resize_isa_supported(int isa) {
  switch (isa) {
  case WDS__RESIZE_SCALAR:
    return 1;
#ifdef WDS__RESIZE_X86
  case WDS__RESIZE_SSE2:
    return 1; /* in every x86-64 */
  case WDS__RESIZE_AVX2:
    return __builtin_cpu_supports("avx2") != 0;
#endif
  default:
    return 0;
  }
}

int wds__resize_isa_best(void) {
  return wds__resize_isa_supported(WDS__RESIZE_AVX2)   ? WDS__RESIZE_AVX2
         : wds__resize_isa_supported(WDS__RESIZE_SSE2) ? WDS__RESIZE_SSE2
                                                       : WDS__RESIZE_SCALAR;
}

const char *wds__resize_isa_name(int isa) {
  return isa == WDS__RESIZE_AVX2   ? "avx2"
         : isa == WDS__RESIZE_SSE2 ? "sse2"
                                   : "scalar";
}

void wds__resample_rows_isa(int isa, const uint8_t *src, size_t src_stride,
                            int channels, const wds__taps *tx, int first,
                            int last, uint8_t *tmp) {
  if (!wds__resize_isa_supported(isa))
    isa = WDS__RESIZE_SCALAR;
  size_t row = (size_t)tx->count * (size_t)channels;
  int y = first;
#ifdef WDS__RESIZE_X86
  if (isa != WDS__RESIZE_SCALAR && channels == 3) {
    if (isa == WDS__RESIZE_AVX2)
      for (; y + 4 <= last; y += 4) {
        const uint8_t *in[4];
        uint8_t *o[4];
        for (int r = 0; r < 4; r++) {
          in[r] = src + (size_t)(y + r) * src_stride;
          o[r] = tmp + (size_t)(y + r - first) * row;
        }
        horizontal_rgb4_avx2(in, tx, o);
      }
    for (; y < last; y++)
      horizontal_rgb_sse2(src + (size_t)y * src_stride, tx,
                          tmp + (size_t)(y - first) * row);
  } else if (isa != WDS__RESIZE_SCALAR && channels == 1) {
    const uint8_t *in[8];
    uint8_t *o[8];
    if (isa == WDS__RESIZE_AVX2)
      for (; y + 8 <= last; y += 8) {
        for (int r = 0; r < 8; r++) {
          in[r] = src + (size_t)(y + r) * src_stride;
          o[r] = tmp + (size_t)(y + r - first) * row;
        }
        horizontal_gray8_avx2(in, tx, o);
      }
    for (; y + 4 <= last; y += 4) {
      for (int r = 0; r < 4; r++) {
        in[r] = src + (size_t)(y + r) * src_stride;
        o[r] = tmp + (size_t)(y + r - first) * row;
      }
      horizontal_gray4_sse2(in, tx, o);
    }
  }
#endif
  for (; y < last; y++)
    horizontal_scalar(src + (size_t)y * src_stride, channels, tx,
                      tmp + (size_t)(y - first) * row);
}

void wds__resample_cols_isa(int isa, const uint8_t *tmp, size_t row, int first,
                            const wds__taps *ty, uint8_t *out) {
  if (!wds__resize_isa_supported(isa))
    isa = WDS__RESIZE_SCALAR;
  for (int j = 0; j < ty->count; j++) {
    size_t x = 0;
    uint8_t *o = out + (size_t)j * row;
#ifdef WDS__RESIZE_X86
    const int32_t *pk =
        ty->pairs + (size_t)j * (size_t)((ty->ksize + 1) / 2) * 2;
    const uint8_t *s = tmp + (size_t)(ty->bounds[2 * j] - first) * row;
    int n = ty->bounds[2 * j + 1];
    if (isa == WDS__RESIZE_AVX2)
      x = vertical_avx2(s, row, pk, n, x, o);
    if (isa != WDS__RESIZE_SCALAR)
      x = vertical_sse2(s, row, pk, n, x, o);
#endif
    if (x < row)
      vertical_scalar(tmp, row, first, ty, j, x, o);
  }
}

void wds__resample_isa(int isa, const uint8_t *src, size_t src_stride,
                       int channels, const wds__taps *tx, const wds__taps *ty,
                       uint8_t *tmp, uint8_t *out) {
  int first, last;
  wds__taps_span(ty, &first, &last);
  size_t row = (size_t)tx->count * (size_t)channels;
  wds__resample_rows_isa(isa, src, src_stride, channels, tx, first, last, tmp);
  wds__resample_cols_isa(isa, tmp, row, first, ty, out);
}

void wds__resample(const uint8_t *src, size_t src_stride, int channels,
                   const wds__taps *tx, const wds__taps *ty, uint8_t *tmp,
                   uint8_t *out) {
  wds__resample_isa(wds__resize_isa_best(), src, src_stride, channels, tx, ty,
                    tmp, out);
}

/* bounds (int) and taps share one int32 array in a copy */
_Static_assert(sizeof(int) == sizeof(int32_t), "int is 32 bits");

size_t wds__taps_copy_size(const wds__taps *t) {
  size_t np = (size_t)(t->ksize + 1) / 2;
  return ((size_t)t->count * 2 + (size_t)t->count * np * 2) * sizeof(int32_t);
}

void wds__taps_copy(const wds__taps *t, void *mem, wds__taps *view) {
  size_t np = (size_t)(t->ksize + 1) / 2;
  size_t nb = (size_t)t->count * 2, npk = (size_t)t->count * np * 2;
  int32_t *m = mem;
  memset(view, 0, sizeof *view);
  view->in_size = t->in_size;
  view->count = t->count;
  view->ksize = t->ksize;
  view->bounds = memcpy(m, t->bounds, nb * sizeof *m);
  view->pairs = memcpy(m + nb, t->pairs, npk * sizeof *m);
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
  wds__plan_rrc(src_w, src_h, out_w, out_h, smin, smax, 3.0 / 4.0, 4.0 / 3.0,
                0.5, key, p);
}

void wds__plan_rrc(int src_w, int src_h, int out_w, int out_h, double smin,
                   double smax, double rmin, double rmax, double flip_prob,
                   uint64_t key, wds__crop_plan *p) {
  double area = (double)src_w * src_h;
  memset(p, 0, sizeof *p);
  double lr0 = log(rmin), lr1 = log(rmax);
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
    if (in_ratio < rmin)
      h = (int)round(w / rmin);
    else if (in_ratio > rmax)
      w = (int)round(h * rmax);
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
  /* u >= 1 - p: for p = 1/2 the draw's top bit, as before flip_prob */
  p->flip = draw_unit(key, 1000) >= 1.0 - flip_prob;
}
