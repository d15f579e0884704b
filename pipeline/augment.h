/* augment.h — the image decoder's color augmentation and output
 * conversion: torchvision's ColorJitter on uint8 HWC pixels, and
 * Normalize into float32 or float16 channels-first (CHW) rows. Internal to
 * pipeline/.
 *
 * The four adjustments are torchvision.transforms.v2.functional's
 * adjust_brightness, adjust_contrast, adjust_saturation and adjust_hue on a
 * uint8 tensor, in float32 arithmetic as torch computes them (a blend
 * truncated to uint8; grayscale 0.2989 R + 0.587 G + 0.114 B, floored; hue
 * through HSV in [0, 1] and back, times 255.999 truncated), so that the
 * same factors give torchvision's pixels within a measured tolerance
 * (python/tests/test_augment.py; docs/loader.md). Every draw comes from a
 * counter-based key: the result is a pure function of (pixels, key). */
#ifndef WDS_PIPELINE_AUGMENT_H
#define WDS_PIPELINE_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "wds/decode.h"

/* ColorJitter's ranges, torchvision's (min, max) form: brightness,
 * contrast and saturation factors uniform in [lo, hi] (0 <= lo <= hi; the
 * single-number form v is [max(0, 1 - v), 1 + v]), the hue shift in [lo,
 * hi] (-0.5 <= lo <= hi <= 0.5; v is [-v, v]). An adjustment whose range
 * is its identity alone ((1, 1); hue (0, 0)) is off, as torchvision's
 * None. */
typedef struct wds__jitter {
  double brightness[2], contrast[2], saturation[2], hue[2];
} wds__jitter;

/* One sample's draw: the order of the four adjustments (0 brightness, 1
 * contrast, 2 saturation, 3 hue; torchvision's randperm(4)) and their
 * factors; an adjustment that is off has on[k] == 0. */
typedef struct wds__jitter_params {
  int order[4];
  int on[4];
  float factor[4];
} wds__jitter_params;

/* A field's augmentation and output beyond the crop, from the loader's
 * options. A wds__image_opts without one (aug NULL) has the defaults:
 * ratio (3/4, 4/3), flip 1/2, no jitter, uint8 HWC. */
typedef struct wds__augment {
  double ratio_min, ratio_max; /* RANDOM crop: aspect ratio range (w / h) */
  double flip_prob;            /* RANDOM crop: horizontal flip */
  wds__jitter jitter;
  wds_image_dtype dtype; /* UINT8: HWC uint8 rows; FLOAT32, FLOAT16: CHW,
                            (x / 255 - mean) / std */
  double mean[3], std[3];
} wds__augment;

/* WDS_OK, or WDS_ERR_INVALID naming the option (the loader's keyword:
 * crop_ratio, flip_prob, brightness, contrast, saturation, hue,
 * image_dtype, normalize_mean, normalize_std) and what it needs; channels
 * (1 or 3) says how many mean and std entries count. */
int wds__augment_check(const wds__augment *a, int channels, wds__err *e);

/* 1 when any adjustment is on. */
int wds__jitter_active(const wds__jitter *j);

/* The draw of key (the image's augmentation key; counters apart from the
 * crop's). */
void wds__jitter_draw(const wds__jitter *j, uint64_t key,
                      wds__jitter_params *p);

/* Applies p in its order to n pixels of HWC uint8 (channels 1 or 3; on one
 * channel saturation and hue change nothing, as torchvision's). */
void wds__jitter_apply(uint8_t *px, size_t n, int channels,
                       const wds__jitter_params *p);

/* The adjustments alone, in place (factor as torchvision's). */
void wds__adjust_brightness(uint8_t *px, size_t n, int channels, float f);
void wds__adjust_contrast(uint8_t *px, size_t n, int channels, float f);
void wds__adjust_saturation(uint8_t *px, size_t n, int channels, float f);
void wds__adjust_hue(uint8_t *px, size_t n, int channels, float f);

/* Normalize: out[c][y][x] = (px[y][x][c] / 255 - mean[c]) / std[c] for an
 * h x w x channels uint8 image, as float32 (f16 0) or IEEE float16 (f16 1,
 * rounded to nearest even), channels first. std[c] != 0. */
void wds__normalize_chw(const uint8_t *px, int w, int h, int channels,
                        const double *mean, const double *std, int f16,
                        void *out);

/* float to IEEE half, rounded to nearest even (inf and NaN kept). */
uint16_t wds__f32_to_f16(float f);

#endif
