/* augment.c — ColorJitter and Normalize on a decoded image (augment.h).
 *
 * Each adjustment follows torchvision.transforms.v2.functional's tensor
 * kernel for uint8 step by step, in the same float32 operations (a
 * product, then a sum rounded once: torch's add with alpha is a fused
 * multiply-add, computed here in double, exact before the one rounding to
 * float), so the pixels are torchvision's but where a float32 result sits
 * within rounding of an integer (python/tests/test_augment.py measures
 * how often and by how much). Per-value work (brightness, contrast, the
 * normalisation) goes through 256-entry tables; saturation and hue are per
 * pixel. Nothing allocates: everything runs in place or into the caller's
 * row, on any thread. */
#include "augment.h"

#include <math.h>
#include <string.h>

#include "base/rng.h"

/* The draws of the jitter: counters 2000 and up of the image's key (the
 * crop uses 0..39 and 1000; pipeline/resize.c). */
#define JITTER_COUNTER 2000u

static uint64_t draw(uint64_t key, uint64_t n) {
  return wds__mix64(key + n * 0xD1B54A32D192ED03ull);
}

static double draw_unit(uint64_t key, uint64_t n) { /* [0, 1) */
  return (double)(draw(key, n) >> 11) * 0x1.0p-53;
}

int wds__augment_check(const wds__augment *a, int channels, wds__err *e) {
  if (!(a->ratio_min > 0 && a->ratio_min <= a->ratio_max &&
        isfinite(a->ratio_max)))
    return wds__fail(e, WDS_ERR_INVALID,
                     "crop_ratio (%g, %g): need 0 < min <= max (aspect "
                     "ratios, width / height)",
                     a->ratio_min, a->ratio_max);
  if (!(a->flip_prob >= 0 && a->flip_prob <= 1))
    return wds__fail(e, WDS_ERR_INVALID,
                     "flip_prob %g: need a probability in [0, 1]",
                     a->flip_prob);
  const char *names[4] = {"brightness", "contrast", "saturation", "hue"};
  const double *r[4] = {a->jitter.brightness, a->jitter.contrast,
                        a->jitter.saturation, a->jitter.hue};
  for (int k = 0; k < 4; k++) {
    double lo = k == 3 ? -0.5 : 0, hi = k == 3 ? 0.5 : INFINITY;
    if (!(r[k][0] >= lo && r[k][0] <= r[k][1] && r[k][1] <= hi &&
          isfinite(r[k][1])))
      return wds__fail(e, WDS_ERR_INVALID,
                       k == 3 ? "%s (%g, %g): need -0.5 <= min <= max <= 0.5"
                              : "%s (%g, %g): need 0 <= min <= max",
                       names[k], r[k][0], r[k][1]);
  }
  if (a->dtype != WDS_IMAGE_UINT8 && a->dtype != WDS_IMAGE_FLOAT32 &&
      a->dtype != WDS_IMAGE_FLOAT16)
    return wds__fail(e, WDS_ERR_INVALID, "image_dtype: unknown value %d",
                     (int)a->dtype);
  for (int c = 0; c < channels && c < 3; c++) {
    if (!isfinite(a->mean[c]))
      return wds__fail(e, WDS_ERR_INVALID,
                       "normalize_mean[%d] %g: need a finite number", c,
                       a->mean[c]);
    if (!(a->std[c] != 0 && isfinite(a->std[c])))
      return wds__fail(e, WDS_ERR_INVALID,
                       "normalize_std[%d] %g: need a finite number other "
                       "than 0",
                       c, a->std[c]);
    if (a->dtype == WDS_IMAGE_UINT8 && (a->mean[c] != 0 || a->std[c] != 1))
      return wds__fail(e, WDS_ERR_INVALID,
                       "normalize_mean and normalize_std need image_dtype "
                       "float32 or float16 (uint8 rows are not normalized)");
  }
  return WDS_OK;
}

/* the ranges in op order: brightness, contrast, saturation, hue */
static const double *range_of(const wds__jitter *j, int k) {
  return k == 0   ? j->brightness
         : k == 1 ? j->contrast
         : k == 2 ? j->saturation
                  : j->hue;
}

static int op_on(const wds__jitter *j, int k) {
  const double *r = range_of(j, k);
  double id = k == 3 ? 0 : 1;
  return !(r[0] == id && r[1] == id);
}

int wds__jitter_active(const wds__jitter *j) {
  return op_on(j, 0) || op_on(j, 1) || op_on(j, 2) || op_on(j, 3);
}

void wds__jitter_draw(const wds__jitter *j, uint64_t key,
                      wds__jitter_params *p) {
  memset(p, 0, sizeof *p);
  /* torchvision's randperm(4): a uniform permutation (Fisher-Yates) */
  for (int k = 0; k < 4; k++)
    p->order[k] = k;
  for (int k = 3; k > 0; k--) {
    int r = (int)(((draw(key, JITTER_COUNTER + (uint64_t)k) >> 32) *
                   (uint64_t)(k + 1)) >>
                  32);
    int t = p->order[k];
    p->order[k] = p->order[r];
    p->order[r] = t;
  }
  for (int k = 0; k < 4; k++) {
    if (!op_on(j, k))
      continue;
    const double *r = range_of(j, k);
    double u = draw_unit(key, JITTER_COUNTER + 10 + (uint64_t)k);
    /* torchvision draws the factor as a float32 (torch.empty(1)); a range
     * of one value gives that value */
    p->factor[k] = (float)(r[0] + (r[1] - r[0]) * u);
    p->on[k] = 1;
  }
}

/* float32 to uint8 as torch's .to(torch.uint8) after clamp_(0, 255):
 * truncation. */
static inline uint8_t to_u8(float v) {
  if (!(v > 0))
    return 0;
  if (v >= 255.0f)
    return 255;
  return (uint8_t)v;
}

/* torch's a.add_(b, alpha=w) in float32: one rounding of a + w * b. */
static inline float fma32(float b, float w, float a) {
  return (float)((double)b * (double)w + (double)a);
}

/* _rgb_to_grayscale_image(preserve_dtype=False).floor_() of one pixel */
static inline float gray_floor(const uint8_t *s) {
  float l = (float)s[0] * 0.2989f;
  l = fma32((float)s[1], 0.587f, l);
  l = fma32((float)s[2], 0.114f, l);
  return (float)(int32_t)l; /* floor: l >= 0 */
}

void wds__adjust_brightness(uint8_t *px, size_t n, int channels, float f) {
  uint8_t lut[256];
  for (int v = 0; v < 256; v++)
    lut[v] = to_u8((float)v * f);
  for (size_t i = 0; i < n * (size_t)channels; i++)
    px[i] = lut[px[i]];
}

void wds__adjust_contrast(uint8_t *px, size_t n, int channels, float f) {
  if (n == 0)
    return;
  /* torch.mean of the floored grayscale (float32): its values are whole
   * numbers, so the sum is exact in double (and in torch's float32 for
   * images under 65793 pixels a channel value; larger ones within its
   * cascade summation's rounding). */
  double sum = 0;
  if (channels == 3)
    for (size_t i = 0; i < n; i++)
      sum += gray_floor(px + 3 * i);
  else
    for (size_t i = 0; i < n; i++)
      sum += px[i];
  float mean = (float)sum / (float)n;
  float w = (float)(1.0 - (double)f);
  uint8_t lut[256];
  for (int v = 0; v < 256; v++)
    lut[v] = to_u8(fma32(mean, w, (float)v * f));
  for (size_t i = 0; i < n * (size_t)channels; i++)
    px[i] = lut[px[i]];
}

void wds__adjust_saturation(uint8_t *px, size_t n, int channels, float f) {
  if (channels != 3)
    return;
  /* The per-value products as tables, each the very value gray_floor and
   * fma32 compute (a product of an 8-bit integer and a float is exact in
   * double), so the pixels are the same, with loads for multiplies. */
  float lr[256], xf[256];
  double gp[256], bp[256], gw[256];
  double w = (double)(float)(1.0 - (double)f);
  for (int v = 0; v < 256; v++) {
    lr[v] = (float)v * 0.2989f;
    gp[v] = (double)v * (double)0.587f;
    bp[v] = (double)v * (double)0.114f;
    xf[v] = (float)v * f;
    gw[v] = (double)v * w;
  }
  for (size_t i = 0; i < n; i++) {
    uint8_t *s = px + 3 * i;
    float l = (float)((double)lr[s[0]] + gp[s[1]]);
    l = (float)((double)l + bp[s[2]]);
    double g = gw[(int32_t)l]; /* the floored gray, 0..255 */
    for (int c = 0; c < 3; c++)
      s[c] = to_u8((float)(g + (double)xf[s[c]]));
  }
}

static inline float max3(float a, float b, float c) {
  float m = a > b ? a : b;
  return m > c ? m : c;
}

static inline float min3(float a, float b, float c) {
  float m = a < b ? a : b;
  return m < c ? m : c;
}

static inline float clamp01(float v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

/* torchvision's _rgb_to_hsv, _hsv_to_rgb and the shift between them, for
 * one pixel, in float32 as the tensor ops round. The values stay in known
 * ranges, so torch's fmod, remainder and floor become comparisons and
 * exact subtractions (the same results), and only the two of rc, gc, bc
 * that the hue's branch reads are divided. */
static void hue_pixel(uint8_t *s, float shift) {
  const float k255 = (float)(1.0 / 255.0), k6 = (float)(1.0 / 6.0);
  float r = (float)s[0] * k255, g = (float)s[1] * k255, b = (float)s[2] * k255;
  float maxc = max3(r, g, b), minc = min3(r, g, b);
  float h = 0, sat = 0;
  if (maxc != minc) {
    float range = maxc - minc;
    sat = range / maxc;
    if (maxc == r)
      h = (maxc - b) / range - (maxc - g) / range; /* bc - gc */
    else if (maxc == g)
      h = ((maxc - r) / range + 2.0f) - (maxc - b) / range; /* rc + 2 - bc */
    else
      h = ((maxc - g) / range + 4.0f) - (maxc - r) / range; /* gc + 4 - rc */
    h = h * k6 + 1.0f; /* in (0, 2): fmod(h, 1) */
    if (h >= 1.0f)
      h -= 1.0f;
  }
  /* h.add_(hue_factor).remainder_(1.0): h + shift in [-0.5, 1.5) */
  h = h + shift;
  if (h < 0)
    h += 1.0f; /* rounds to 1 for a tiny h: the same as torch's */
  else if (h >= 1.0f)
    h -= 1.0f;
  float v = maxc;
  float h6 = h * 6.0f; /* in [0, 6] */
  int i = (int)h6;
  float fr = h6 - (float)i;
  if (i >= 6)
    i -= 6;
  float sxf = sat * fr;
  float one_minus_s = 1.0f - sat;
  float q = clamp01((1.0f - sxf) * v);
  float t = clamp01((sxf + one_minus_s) * v);
  float p = clamp01(one_minus_s * v);
  float o[3];
  switch (i) {
  case 0:
    o[0] = v, o[1] = t, o[2] = p;
    break;
  case 1:
    o[0] = q, o[1] = v, o[2] = p;
    break;
  case 2:
    o[0] = p, o[1] = v, o[2] = t;
    break;
  case 3:
    o[0] = p, o[1] = q, o[2] = v;
    break;
  case 4:
    o[0] = t, o[1] = p, o[2] = v;
    break;
  default:
    o[0] = v, o[1] = p, o[2] = q;
    break;
  }
  /* to_dtype_image(float -> uint8, scale=True): x * 255.999, truncated */
  const float k = (float)(255.0 + 1.0 - 1e-3);
  for (int c = 0; c < 3; c++)
    s[c] = to_u8(o[c] * k);
}

void wds__adjust_hue(uint8_t *px, size_t n, int channels, float f) {
  if (channels != 3 || f == 0)
    return;
  for (size_t i = 0; i < n; i++)
    hue_pixel(px + 3 * i, f);
}

void wds__jitter_apply(uint8_t *px, size_t n, int channels,
                       const wds__jitter_params *p) {
  for (int k = 0; k < 4; k++) {
    int op = p->order[k];
    if (!p->on[op])
      continue;
    float f = p->factor[op];
    switch (op) {
    case 0:
      wds__adjust_brightness(px, n, channels, f);
      break;
    case 1:
      wds__adjust_contrast(px, n, channels, f);
      break;
    case 2:
      wds__adjust_saturation(px, n, channels, f);
      break;
    default:
      wds__adjust_hue(px, n, channels, f);
      break;
    }
  }
}

uint16_t wds__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e == 0xff) /* inf, NaN (kept quiet) */
    return (uint16_t)(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0));
  int32_t he = (int32_t)e - 127 + 15;
  if (he >= 31) /* overflow */
    return (uint16_t)(sign | 0x7c00u);
  if (he <= 0) { /* subnormal or zero */
    if (he < -10)
      return (uint16_t)sign;
    m |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - he);
    uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1),
             half = 1u << (shift - 1);
    if (rem > half || (rem == half && (hm & 1)))
      hm++;
    return (uint16_t)(sign | hm);
  }
  uint32_t hm = m >> 13, rem = m & 0x1fffu;
  uint32_t h = sign | ((uint32_t)he << 10) | hm;
  if (rem > 0x1000u || (rem == 0x1000u && (hm & 1)))
    h++; /* may carry into the exponent: still right, up to inf */
  return (uint16_t)h;
}

void wds__normalize_chw(const uint8_t *px, int w, int h, int channels,
                        const double *mean, const double *std, int f16,
                        void *out) {
  size_t plane = (size_t)w * (size_t)h;
  /* ToDtype(float32, scale=True): x * (1/255); Normalize: (x - m) / s,
   * each rounded to float32, as torch computes them */
  const float k = (float)(1.0 / 255.0);
  for (int c = 0; c < channels; c++) {
    float lut[256];
    float m = (float)mean[c], s = (float)std[c];
    for (int v = 0; v < 256; v++)
      lut[v] = ((float)v * k - m) / s;
    const uint8_t *src = px + c;
    if (f16) {
      uint16_t hl[256];
      for (int v = 0; v < 256; v++)
        hl[v] = wds__f32_to_f16(lut[v]);
      uint16_t *dst = (uint16_t *)out + (size_t)c * plane;
      for (size_t i = 0; i < plane; i++)
        dst[i] = hl[src[i * (size_t)channels]];
    } else {
      float *dst = (float *)out + (size_t)c * plane;
      for (size_t i = 0; i < plane; i++)
        dst[i] = lut[src[i * (size_t)channels]];
    }
  }
}
