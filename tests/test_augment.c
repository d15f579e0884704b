/* test_augment.c — the image augmentation (pipeline/augment.c, the crop
 * parameters of pipeline/resize.c) and its options: ColorJitter's math on
 * known pixels, identity factors, the per-key draws, Normalize's float
 * CHW layout (float32, float16), the decoder's augmented rows, and the
 * option table's and wds_loader_open's messages for bad values.
 * python/tests/test_augment.py compares the pixels with torchvision's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "pipeline/augment.h"
#include "pipeline/decode.h"
#include "pipeline/resize.h"
#include "test.h"
#include "wds/loader.h"

/* A pseudo-random RGB image with some gray pixels (hue's equal-channel
 * case). */
static uint8_t *noise(size_t n, int ch, uint32_t seed) {
  uint8_t *p = malloc(n * (size_t)ch);
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n * (size_t)ch; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = (uint8_t)(s >> 24);
  }
  for (size_t i = 0; ch == 3 && i < n; i += 7)
    p[3 * i + 1] = p[3 * i + 2] = p[3 * i];
  return p;
}

TEST(identity_factors_change_nothing) {
  size_t n = 4096;
  for (int ch = 1; ch <= 3; ch += 2) {
    uint8_t *a = noise(n, ch, 1), *b = malloc(n * (size_t)ch);
    memcpy(b, a, n * (size_t)ch);
    wds__adjust_brightness(b, n, ch, 1.0f);
    wds__adjust_contrast(b, n, ch, 1.0f);
    wds__adjust_saturation(b, n, ch, 1.0f);
    wds__adjust_hue(b, n, ch, 0.0f);
    ASSERT_TRUE(memcmp(a, b, n * (size_t)ch) == 0);
    /* a jitter of strength 0 draws nothing and applies nothing */
    wds__jitter j = {{1, 1}, {1, 1}, {1, 1}, {0, 0}}; /* all off */
    ASSERT_TRUE(!wds__jitter_active(&j));
    wds__jitter_params p;
    wds__jitter_draw(&j, 1234, &p);
    ASSERT_TRUE(!p.on[0] && !p.on[1] && !p.on[2] && !p.on[3]);
    wds__jitter_apply(b, n, ch, &p);
    ASSERT_TRUE(memcmp(a, b, n * (size_t)ch) == 0);
    free(a);
    free(b);
  }
}

TEST(known_factors) {
  /* brightness: x * f clamped and truncated (torch's .to(uint8)) */
  uint8_t px[6] = {100, 200, 255, 1, 0, 3};
  wds__adjust_brightness(px, 2, 3, 1.5f);
  const uint8_t b15[6] = {150, 255, 255, 1, 0, 4};
  ASSERT_TRUE(memcmp(px, b15, 6) == 0);
  uint8_t half[3] = {255, 3, 1};
  wds__adjust_brightness(half, 1, 3, 0.5f);
  ASSERT_EQ_INT(half[0], 127); /* 127.5 truncated */
  ASSERT_EQ_INT(half[1], 1);
  ASSERT_EQ_INT(half[2], 0);
  /* saturation 0: the floored grayscale 0.2989 R + 0.587 G + 0.114 B */
  uint8_t s[3] = {10, 200, 50}; /* 126.089 */
  wds__adjust_saturation(s, 1, 3, 0.0f);
  ASSERT_TRUE(s[0] == 126 && s[1] == 126 && s[2] == 126);
  /* saturation 2 pushes away from the gray: 2x - 126 */
  uint8_t s2[3] = {10, 200, 50};
  wds__adjust_saturation(s2, 1, 3, 2.0f);
  ASSERT_TRUE(s2[0] == 0 && s2[1] == 255 && s2[2] == 0);
  /* contrast 0: every pixel the mean of the floored grayscale; the
   * weights sum to 0.9999, so gray 100 is 99 and 51 is 50: 74.5 -> 74 */
  uint8_t c[6] = {100, 100, 100, 51, 51, 51};
  wds__adjust_contrast(c, 2, 3, 0.0f);
  for (int i = 0; i < 6; i++)
    ASSERT_EQ_INT(c[i], 74);
  /* contrast 0.5 on one channel: (x + mean) / 2 */
  uint8_t l[2] = {0, 200}; /* mean 100 */
  wds__adjust_contrast(l, 2, 1, 0.5f);
  ASSERT_TRUE(l[0] == 50 && l[1] == 150);
  /* hue: red shifted by half a turn is cyan (x 255.999, truncated) */
  uint8_t h[6] = {255, 0, 0, 77, 77, 77};
  wds__adjust_hue(h, 2, 3, 0.5f);
  ASSERT_TRUE(h[0] == 0 && h[1] == 255 && h[2] == 255);
  ASSERT_TRUE(h[3] == 77 && h[4] == 77 && h[5] == 77); /* gray keeps */
  /* red by a third of a turn is green */
  uint8_t g[3] = {255, 0, 0};
  wds__adjust_hue(g, 1, 3, 1.0f / 3.0f);
  ASSERT_TRUE(g[0] == 0 && g[1] == 255 && g[2] == 0);
  /* one channel: saturation and hue change nothing (torchvision's) */
  uint8_t one[3] = {10, 20, 30};
  wds__adjust_saturation(one, 3, 1, 0.0f);
  wds__adjust_hue(one, 3, 1, 0.3f);
  ASSERT_TRUE(one[0] == 10 && one[1] == 20 && one[2] == 30);
}

TEST(jitter_draws) {
  wds__jitter j = {{0.6, 1.4}, {0.7, 1.3}, {0.8, 1.2}, {-0.1, 0.1}};
  ASSERT_TRUE(wds__jitter_active(&j));
  int seen[4][4] = {{0}};
  double lo[4] = {1, 1, 1, 1}, hi[4] = {-1, -1, -1, -1};
  for (uint64_t key = 0; key < 2000; key++) {
    wds__jitter_params p, q;
    wds__jitter_draw(&j, key, &p);
    wds__jitter_draw(&j, key, &q);
    ASSERT_TRUE(memcmp(&p, &q, sizeof p) == 0); /* a pure function */
    int used = 0;
    for (int k = 0; k < 4; k++) {
      seen[k][p.order[k]]++;
      used |= 1 << p.order[k];
      ASSERT_TRUE(p.on[k]);
      lo[k] = fmin(lo[k], p.factor[k]);
      hi[k] = fmax(hi[k], p.factor[k]);
    }
    ASSERT_EQ_INT(used, 15); /* a permutation */
  }
  for (int k = 0; k < 4; k++)
    for (int o = 0; o < 4; o++) /* every op at every place, about 500 */
      ASSERT_TRUE(seen[k][o] > 400 && seen[k][o] < 600);
  const double want_lo[4] = {0.6, 0.7, 0.8, -0.1},
               want_hi[4] = {1.4, 1.3, 1.2, 0.1};
  for (int k = 0; k < 4; k++) {
    ASSERT_TRUE(lo[k] >= want_lo[k] - 1e-6 && lo[k] < want_lo[k] + 0.01);
    ASSERT_TRUE(hi[k] <= want_hi[k] + 1e-6 && hi[k] > want_hi[k] - 0.01);
  }
  /* brightness (0, 3) alone; a range of one value is that factor */
  wds__jitter big = {{0, 3}, {1, 1}, {1, 1}, {0, 0}};
  double mn = 9;
  for (uint64_t key = 0; key < 500; key++) {
    wds__jitter_params p;
    wds__jitter_draw(&big, key, &p);
    ASSERT_TRUE(p.on[0] && !p.on[1] && !p.on[2] && !p.on[3]);
    ASSERT_TRUE(p.factor[0] >= 0 && p.factor[0] <= 3);
    mn = fmin(mn, p.factor[0]);
  }
  ASSERT_TRUE(mn < 0.05);
}

TEST(float16) {
  ASSERT_EQ_INT(wds__f32_to_f16(0.0f), 0);
  ASSERT_EQ_INT(wds__f32_to_f16(-0.0f), 0x8000);
  ASSERT_EQ_INT(wds__f32_to_f16(1.0f), 0x3C00);
  ASSERT_EQ_INT(wds__f32_to_f16(-2.0f), 0xC000);
  ASSERT_EQ_INT(wds__f32_to_f16(0.1f), 0x2E66);
  ASSERT_EQ_INT(wds__f32_to_f16(65504.0f), 0x7BFF);
  ASSERT_EQ_INT(wds__f32_to_f16(65520.0f), 0x7C00); /* rounds to inf */
  ASSERT_EQ_INT(wds__f32_to_f16(0x1p-24f), 1);      /* smallest subnormal */
  ASSERT_EQ_INT(wds__f32_to_f16(0x1p-25f), 0);      /* a tie: to even */
  ASSERT_EQ_INT(wds__f32_to_f16(0x1.8p-24f), 2);    /* a tie: to even */
  ASSERT_EQ_INT(wds__f32_to_f16(1e-9f), 0);
  ASSERT_EQ_INT(wds__f32_to_f16(1.0f + 0x1p-11f), 0x3C00); /* tie: even */
  ASSERT_EQ_INT(wds__f32_to_f16(1.0f + 0x1.8p-10f), 0x3C02);
}

TEST(normalize_layout) {
  /* a 3 x 2 RGB image: CHW, (x / 255 - mean) / std */
  uint8_t px[18];
  for (int i = 0; i < 18; i++)
    px[i] = (uint8_t)(i * 14);
  double mean[3] = {0.485, 0.456, 0.406}, std[3] = {0.229, 0.224, 0.225};
  float out[18];
  uint16_t half[18];
  wds__normalize_chw(px, 3, 2, 3, mean, std, 0, out);
  wds__normalize_chw(px, 3, 2, 3, mean, std, 1, half);
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < 2; y++)
      for (int x = 0; x < 3; x++) {
        float v = px[(y * 3 + x) * 3 + c];
        float want =
            (v * (float)(1.0 / 255.0) - (float)mean[c]) / (float)std[c];
        ASSERT_TRUE(out[c * 6 + y * 3 + x] == want);
        ASSERT_EQ_INT(half[c * 6 + y * 3 + x], wds__f32_to_f16(want));
      }
  /* one channel: mean[0], std[0] */
  uint8_t g[2] = {0, 255};
  float go[2];
  double m1[3] = {0.5, 9, 9}, s1[3] = {0.5, 9, 9};
  wds__normalize_chw(g, 2, 1, 1, m1, s1, 0, go);
  ASSERT_TRUE(go[0] == -1.0f && go[1] == 1.0f);
}

/* ---- the crop's parameters ---- */

TEST(crop_ratio_and_flip) {
  wds__crop_plan p, q;
  int flips = 0;
  for (uint64_t k = 0; k < 1000; k++) {
    /* the defaults are today's plan, byte for byte */
    wds__plan_random(500, 375, 224, 224, 0.08, 1.0, k, &p);
    wds__plan_rrc(500, 375, 224, 224, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, 0.5, k,
                  &q);
    ASSERT_TRUE(memcmp(&p, &q, sizeof p) == 0);
    flips += p.flip;
    /* ratio (1, 1): square boxes (rounding apart) */
    wds__plan_rrc(500, 375, 224, 224, 0.2, 0.6, 1.0, 1.0, 0.5, k, &q);
    ASSERT_TRUE(fabs((q.x1 - q.x0) - (q.y1 - q.y0)) <= 1);
    /* flip probability 0 and 1 */
    wds__plan_rrc(500, 375, 224, 224, 0.08, 1.0, 0.75, 1.5, 0.0, k, &q);
    ASSERT_EQ_INT(q.flip, 0);
    wds__plan_rrc(500, 375, 224, 224, 0.08, 1.0, 0.75, 1.5, 1.0, k, &q);
    ASSERT_EQ_INT(q.flip, 1);
  }
  ASSERT_TRUE(flips > 430 && flips < 570);
  /* no attempt fits (a 10:1 image, the whole area at ratio 1): the
   * fallback clips the image to the nearest ratio of the range, centered */
  wds__plan_rrc(1000, 100, 64, 64, 1.0, 1.0, 1.0, 1.0, 0.0, 7, &p);
  ASSERT_TRUE(p.x0 == 450 && p.x1 == 550 && p.y0 == 0 && p.y1 == 100);
  wds__plan_rrc(1000, 100, 64, 64, 1.0, 1.0, 0.5, 2.0, 0.0, 7, &p);
  ASSERT_TRUE(p.x0 == 400 && p.x1 == 600 && p.y0 == 0 && p.y1 == 100);
  wds__plan_rrc(100, 1000, 64, 64, 1.0, 1.0, 0.5, 2.0, 0.0, 7, &p);
  ASSERT_TRUE(p.x0 == 0 && p.x1 == 100 && p.y0 == 400 && p.y1 == 600);
}

/* ---- the decoder's augmented rows ---- */

static unsigned char *make_jpeg(int w, int h, unsigned long *n) {
  uint8_t *pix = noise((size_t)w * h, 3, 9);
  for (int y = 0; y < h; y++) /* smooth it: JPEG-like content */
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++)
        pix[((size_t)y * w + x) * 3 + c] =
            (uint8_t)((pix[((size_t)y * w + x) * 3 + c] >> 3) + x + c * 40);
  tjhandle tj = tjInitCompress();
  unsigned char *jpg = NULL;
  *n = 0;
  tjCompress2(tj, pix, w, 0, h, TJPF_RGB, &jpg, n, TJSAMP_420, 90, 0);
  tjDestroy(tj);
  free(pix);
  return jpg;
}

static void *alloc_cb(void *ctx, size_t n) {
  (void)ctx;
  return malloc(n);
}

TEST(augmented_rows) {
  unsigned long n;
  unsigned char *jpg = make_jpeg(160, 120, &n);
  wds__augment aug = {
      .ratio_min = 0.5,
      .ratio_max = 2.0,
      .flip_prob = 0.5,
      .jitter = {{0.6, 1.4}, {0.6, 1.4}, {0.6, 1.4}, {-0.1, 0.1}},
      .dtype = WDS_IMAGE_FLOAT32,
      .mean = {0.485, 0.456, 0.406},
      .std = {0.229, 0.224, 0.225}};
  wds__image_opts o = {.width = 64,
                       .height = 48,
                       .channels = 3,
                       .crop = WDS_CROP_RANDOM,
                       .scale_min = 0.2,
                       .scale_max = 1.0,
                       .aug = &aug};
  wds__decoder *d1 = wds__decoder_new(), *d2 = wds__decoder_new();
  wds__err e;
  size_t np = 64 * 48;
  uint8_t *u8 = malloc(np * 3), *plain = malloc(np * 3);
  float *want = malloc(np * 3 * 4), *got = malloc(np * 3 * 4);
  uint16_t *h16 = malloc(np * 3 * 2);
  int differ = 0;
  for (uint64_t key = 1; key <= 8; key++) {
    o.rng_key = key;
    /* the uint8 pixels: the crop, then the jitter of the same key */
    ASSERT_EQ_INT(wds__decode_image(d1, jpg, n, &o, u8, &e), WDS_OK);
    o.aug = NULL;
    ASSERT_EQ_INT(wds__decode_image(d1, jpg, n, &o, plain, &e), WDS_OK);
    o.aug = &aug;
    differ += memcmp(u8, plain, np * 3) != 0;
    wds__normalize_chw(u8, 64, 48, 3, aug.mean, aug.std, 0, want);
    /* the loader's path: a block, written into the row later; a decoder
     * with another history gives the same bytes */
    void *blk = NULL;
    void (*write)(const void *, void *) = NULL;
    wds__decoder *d = key % 2 ? d1 : d2;
    ASSERT_EQ_INT(
        wds__decode_image_rows(d, jpg, n, &o, alloc_cb, NULL, &blk, &write, &e),
        WDS_OK);
    ASSERT_TRUE(write != NULL);
    write(blk, got);
    ASSERT_TRUE(memcmp(want, got, np * 3 * 4) == 0);
    free(blk);
    aug.dtype = WDS_IMAGE_FLOAT16;
    ASSERT_EQ_INT(wds__decode_image_rows(d2, jpg, n, &o, alloc_cb, NULL, &blk,
                                         &write, &e),
                  WDS_OK);
    write(blk, h16);
    for (size_t i = 0; i < np * 3; i++)
      ASSERT_EQ_INT(h16[i], wds__f32_to_f16(want[i]));
    free(blk);
    /* jitter alone: uint8 HWC rows (not normalized) */
    aug.dtype = WDS_IMAGE_UINT8;
    double m0[3], s0[3];
    memcpy(m0, aug.mean, sizeof m0);
    memcpy(s0, aug.std, sizeof s0);
    for (int k = 0; k < 3; k++)
      aug.mean[k] = 0, aug.std[k] = 1;
    ASSERT_EQ_INT(wds__decode_image_rows(d1, jpg, n, &o, alloc_cb, NULL, &blk,
                                         &write, &e),
                  WDS_OK);
    write(blk, plain);
    ASSERT_TRUE(memcmp(u8, plain, np * 3) == 0);
    free(blk);
    aug.dtype = WDS_IMAGE_FLOAT32;
    memcpy(aug.mean, m0, sizeof m0);
    memcpy(aug.std, s0, sizeof s0);
  }
  ASSERT_TRUE(differ >= 7); /* the jitter changed the pixels */
  /* the decoder refuses what the options forbid, naming the option */
  aug.std[1] = 0;
  o.rng_key = 1;
  ASSERT_EQ_INT(wds__decode_image(d1, jpg, n, &o, u8, &e), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "normalize_std[1]");
  wds__decoder_free(d1);
  wds__decoder_free(d2);
  free(u8);
  free(plain);
  free(want);
  free(got);
  free(h16);
  tjFree(jpg);
}

/* ---- options ---- */

static int set(wds_loader_config *c, const char *name, const char *v) {
  return wds_loader_config_set(c, name, v);
}

TEST(option_values) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  ASSERT_TRUE(c.crop_ratio_min == 3.0 / 4.0 && c.crop_ratio_max == 4.0 / 3.0);
  ASSERT_TRUE(c.flip_prob == 0.5 && c.normalize_std[2] == 1);
  ASSERT_EQ_INT(set(&c, "crop_scale", "0.2,1"), WDS_OK);
  ASSERT_TRUE(c.crop_scale_min == 0.2 && c.crop_scale_max == 1);
  ASSERT_EQ_INT(set(&c, "--crop-ratio", "0.5, 2"), WDS_OK);
  ASSERT_TRUE(c.crop_ratio_min == 0.5 && c.crop_ratio_max == 2);
  ASSERT_EQ_INT(set(&c, "flip_prob", "0"), WDS_OK);
  ASSERT_TRUE(c.flip_prob == 0);
  /* ColorJitter's single number and (min, max) forms */
  ASSERT_EQ_INT(set(&c, "--brightness", "0.4"), WDS_OK);
  ASSERT_TRUE(c.brightness[0] == 1 - 0.4 && c.brightness[1] == 1.4);
  ASSERT_EQ_INT(set(&c, "contrast", "2"), WDS_OK);
  ASSERT_TRUE(c.contrast[0] == 0 && c.contrast[1] == 3);
  ASSERT_EQ_INT(set(&c, "saturation", "1.25,1.25"), WDS_OK);
  ASSERT_TRUE(c.saturation[0] == 1.25 && c.saturation[1] == 1.25);
  ASSERT_EQ_INT(set(&c, "hue", "0.5"), WDS_OK);
  ASSERT_TRUE(c.hue[0] == -0.5 && c.hue[1] == 0.5);
  ASSERT_EQ_INT(set(&c, "hue", "-0.1,0.2"), WDS_OK);
  ASSERT_TRUE(c.hue[0] == -0.1 && c.hue[1] == 0.2);
  ASSERT_EQ_INT(set(&c, "image_dtype", "float16"), WDS_OK);
  ASSERT_EQ_INT(c.image_dtype, WDS_IMAGE_FLOAT16);
  ASSERT_EQ_INT(set(&c, "normalize_mean", "0.485,0.456,0.406"), WDS_OK);
  ASSERT_TRUE(c.normalize_mean[1] == 0.456);
  ASSERT_EQ_INT(set(&c, "normalize_std", "0.5"), WDS_OK); /* one for all */
  ASSERT_TRUE(c.normalize_std[0] == 0.5 && c.normalize_std[2] == 0.5);
  /* refused, naming the option as given, the config unchanged */
  struct {
    const char *name, *value, *says;
  } bad[] = {
      {"crop_scale", "0.5", "crop_scale needs two numbers"},
      {"crop_scale", "0,1", "0 < MIN <= MAX <= 1"},
      {"--crop-scale", "0.1,1.5", "--crop-scale needs"},
      {"crop_scale", "0.1,0.5,1", "crop_scale needs"},
      {"crop_ratio", "0,1", "crop_ratio needs two numbers"},
      {"crop_ratio", "-1,2", "0 < MIN <= MAX"},
      {"flip_prob", "1.5", "flip_prob needs a probability in [0, 1]"},
      {"--flip-prob", "-0.1", "--flip-prob needs a probability"},
      {"flip_prob", "x", "not \"x\""},
      {"brightness", "-1", "brightness needs a number B >= 0 or two"},
      {"brightness", "-1,1", "brightness needs"},
      {"hue", "0.6", "hue needs a number H in [0, 0.5]"},
      {"hue", "-0.2", "hue needs"},
      {"hue", "-0.6,0", "hue needs"},
      {"saturation", "nan", "saturation needs"},
      {"contrast", "1,2,3", "contrast needs"},
      {"normalize_mean", "1,2", "normalize_mean needs one number or three"},
      {"image_dtype", "float64",
       "image_dtype must be uint8, float32 or "
       "float16"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    wds_loader_config before = c;
    ASSERT_EQ_INT(set(&c, bad[i].name, bad[i].value), WDS_ERR_INVALID);
    ASSERT_CONTAINS(wds_last_error(), bad[i].says);
    ASSERT_TRUE(memcmp(&before, &c, sizeof c) == 0);
  }
}

/* wds_loader_open's checks of what one value cannot say: min <= max, std
 * not 0, normalize without a float dtype, jitter with GPU decoding. */
TEST(open_refuses) {
  wds_field_spec f = {.name = "jpg"};
  struct {
    const char *name, *value, *name2, *value2, *says;
  } bad[] = {
      {"crop_scale", "0.9,0.2", NULL, NULL, "crop_scale (0.9, 0.2)"},
      {"crop_ratio", "2,0.5", NULL, NULL, "crop_ratio (2, 0.5)"},
      {"brightness", "1.5,0.5", NULL, NULL,
       "brightness (1.5, 0.5): need 0 <= min <= max"},
      {"hue", "0.2,-0.2", NULL, NULL, "hue (0.2, -0.2)"},
      {"image_dtype", "float32", "normalize_std", "1,0,1",
       "normalize_std[1] 0"},
      {"normalize_mean", "0.5", NULL, NULL,
       "normalize_mean and normalize_std need image_dtype float32"},
      {"jpeg_decode", "gpu", "contrast", "0.2", "need jpeg_decode cpu"},
      {"jpeg_decode", "gpu", "image_dtype", "float16", "need jpeg_decode cpu"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    wds_loader_config c = WDS_LOADER_CONFIG_INIT;
    c.spec = "/nonexistent/x.tar";
    c.fields = &f;
    c.field_count = 1;
    c.rank = 0;
    c.world_size = 1;
    ASSERT_EQ_INT(set(&c, bad[i].name, bad[i].value), WDS_OK);
    if (bad[i].name2)
      ASSERT_EQ_INT(set(&c, bad[i].name2, bad[i].value2), WDS_OK);
    wds_loader *l = NULL;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
    ASSERT_TRUE(l == NULL);
    ASSERT_CONTAINS(wds_last_error(), bad[i].says);
  }
}

int main(void) {
  RUN(identity_factors_change_nothing);
  RUN(known_factors);
  RUN(jitter_draws);
  RUN(float16);
  RUN(normalize_layout);
  RUN(crop_ratio_and_flip);
  RUN(augmented_rows);
  RUN(option_values);
  RUN(open_refuses);
  return test_summary();
}
