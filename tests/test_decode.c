/* test_decode.c — the field decoders (pipeline/decode.h): integers, .npy
 * parsing and copying, wds_npy_save, image errors, crop geometry and the
 * random crop's determinism, on inputs built here (TurboJPEG and a small
 * PNG writer over zlib).
 *
 * Modes used by tests/decode_ref.py, which compares against Pillow, numpy
 * and djpeg:
 *   test_decode --ref DIR    decode what DIR/manifest.txt lists and compare
 *                            with the reference bytes beside it
 *   test_decode --save DIR   write .npy files with wds_npy_save for numpy */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include "pipeline/decode.h"
#include "pipeline/resize.h"
#include "test.h"
#include "test_files.h"

/* ---- helpers ---- */

typedef struct buf {
  uint8_t *d;
  size_t n, cap;
} buf;

static void buf_add(buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->d = realloc(b->d, b->cap);
  }
  memcpy(b->d + b->n, p, n);
  b->n += n;
}

static void buf_be32(buf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8),
                  (uint8_t)v};
  buf_add(b, x, 4);
}

static void png_chunk(buf *b, const char *type, const uint8_t *p, size_t n,
                      int bad_crc) {
  buf_be32(b, (uint32_t)n);
  size_t at = b->n;
  buf_add(b, type, 4);
  if (n)
    buf_add(b, p, n);
  uLong crc = crc32(0, b->d + at, (uInt)(n + 4));
  buf_be32(b, (uint32_t)crc + (bad_crc ? 1u : 0u));
}

/* An 8-bit non-interlaced PNG of color type 0 (gray) or 2 (RGB). */
static buf make_png(const uint8_t *pix, int w, int h, int ch, int bad_crc) {
  buf b = {0};
  buf_add(&b, "\x89PNG\r\n\x1a\n", 8);
  uint8_t ihdr[13] = {0};
  for (int i = 0; i < 4; i++) {
    ihdr[i] = (uint8_t)((uint32_t)w >> (24 - 8 * i));
    ihdr[4 + i] = (uint8_t)((uint32_t)h >> (24 - 8 * i));
  }
  ihdr[8] = 8;
  ihdr[9] = ch == 3 ? 2 : 0;
  png_chunk(&b, "IHDR", ihdr, 13, 0);
  size_t row = (size_t)w * (size_t)ch, raw_n = (row + 1) * (size_t)h;
  uint8_t *raw = malloc(raw_n);
  for (int y = 0; y < h; y++) {
    raw[(size_t)y * (row + 1)] = 0; /* filter: none */
    memcpy(raw + (size_t)y * (row + 1) + 1, pix + (size_t)y * row, row);
  }
  uLongf zn = compressBound((uLong)raw_n);
  uint8_t *z = malloc(zn);
  compress(z, &zn, raw, (uLong)raw_n);
  png_chunk(&b, "IDAT", z, zn, bad_crc);
  png_chunk(&b, "IEND", NULL, 0, 0);
  free(raw);
  free(z);
  return b;
}

static uint8_t *gradient(int w, int h, int ch) {
  uint8_t *p = malloc((size_t)w * h * ch);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ch; c++)
        p[((size_t)y * w + x) * ch + c] =
            (uint8_t)((x * 255 / (w - 1 ? w - 1 : 1) + y * 3 + c * 60) & 0xff);
  return p;
}

static buf make_jpeg(int w, int h, int ch, int subsamp) {
  uint8_t *pix = gradient(w, h, ch);
  tjhandle tj = tjInitCompress();
  unsigned char *jpg = NULL;
  unsigned long n = 0;
  tjCompress2(tj, pix, w, 0, h, ch == 3 ? TJPF_RGB : TJPF_GRAY, &jpg, &n,
              ch == 3 ? subsamp : TJSAMP_GRAY, 90, 0);
  buf b = {0};
  buf_add(&b, jpg, n);
  tjFree(jpg);
  tjDestroy(tj);
  free(pix);
  return b;
}

static wds__image_opts center_opts(int w, int h, int ch) {
  wds__image_opts o = {.width = w, .height = h, .channels = ch,
                       .crop = WDS_CROP_CENTER, .scale_min = 0.08,
                       .scale_max = 1.0};
  return o;
}

/* ---- integers ---- */

static int int_of(const char *s, int64_t *v) {
  wds__err e;
  return wds__decode_int((const uint8_t *)s, strlen(s), v, &e);
}

TEST(int_cases) {
  int64_t v = 0;
  ASSERT_EQ_INT(int_of("42", &v), WDS_OK);
  ASSERT_EQ_INT(v, 42);
  ASSERT_EQ_INT(int_of("  -17\n", &v), WDS_OK);
  ASSERT_EQ_INT(v, -17);
  ASSERT_EQ_INT(int_of("+007", &v), WDS_OK);
  ASSERT_EQ_INT(v, 7);
  ASSERT_EQ_INT(int_of("\t9223372036854775807 ", &v), WDS_OK);
  ASSERT_TRUE(v == INT64_MAX);
  ASSERT_EQ_INT(int_of("-9223372036854775808", &v), WDS_OK);
  ASSERT_TRUE(v == INT64_MIN);
  ASSERT_EQ_INT(int_of("9223372036854775808", &v), WDS_ERR_LIMIT);
  ASSERT_EQ_INT(int_of("-9223372036854775809", &v), WDS_ERR_LIMIT);
  ASSERT_EQ_INT(int_of("99999999999999999999999", &v), WDS_ERR_LIMIT);
  ASSERT_EQ_INT(int_of("", &v), WDS_ERR_FORMAT);
  ASSERT_EQ_INT(int_of("   ", &v), WDS_ERR_FORMAT);
  ASSERT_EQ_INT(int_of("-", &v), WDS_ERR_FORMAT);
  ASSERT_EQ_INT(int_of("1_000", &v), WDS_ERR_FORMAT);
  ASSERT_EQ_INT(int_of("1 2", &v), WDS_ERR_FORMAT);
  ASSERT_EQ_INT(int_of("0x10", &v), WDS_ERR_FORMAT);
  ASSERT_EQ_INT(int_of("--1", &v), WDS_ERR_FORMAT);
  ASSERT_EQ_INT(int_of("3.0", &v), WDS_ERR_FORMAT);
  wds__err e;
  ASSERT_EQ_INT(wds__decode_int((const uint8_t *)"12\0", 3, &v, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "0x00");
}

/* ---- npy ---- */

/* A .npy of the given version with header text hdr (padded as numpy does
 * unless raw) and data. */
static buf make_npy(int major, const char *hdr, const void *data, size_t n) {
  buf b = {0};
  size_t pre = major == 1 ? 10 : 12, hl = strlen(hdr) + 1;
  while ((pre + hl) % 64)
    hl++;
  uint8_t p[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (uint8_t)major, 0};
  p[8] = (uint8_t)hl;
  p[9] = (uint8_t)(hl >> 8);
  buf_add(&b, p, pre);
  buf_add(&b, hdr, strlen(hdr));
  for (size_t i = strlen(hdr); i + 1 < hl; i++)
    buf_add(&b, " ", 1);
  buf_add(&b, "\n", 1);
  buf_add(&b, data, n);
  return b;
}

static int npy_of(int major, const char *hdr, const void *data, size_t n,
                  wds__npy *a, wds__err *e) {
  buf b = make_npy(major, hdr, data, n);
  int rc = wds__npy_parse(b.d, b.n, a, e);
  /* the parse result points into b: copy what the caller needs */
  static uint8_t keep[256];
  if (rc == WDS_OK && a->data_bytes <= sizeof keep) {
    memcpy(keep, a->data, a->data_bytes);
    a->data = keep;
  }
  free(b.d);
  return rc;
}

TEST(npy_headers) {
  wds__npy a;
  wds__err e;
  int32_t v[6] = {1, 2, 3, 4, 5, 6};
  ASSERT_EQ_INT(npy_of(1, "{'descr': '<i4', 'fortran_order': False, "
                          "'shape': (2, 3), }", v, sizeof v, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.dtype, WDS_DTYPE_I32);
  ASSERT_EQ_INT(a.ndim, 2);
  ASSERT_EQ_INT(a.shape[0], 2);
  ASSERT_EQ_INT(a.shape[1], 3);
  ASSERT_EQ_INT(a.count, 6);
  ASSERT_EQ_INT(a.data_bytes, 24);
  /* any key order, double quotes, no trailing comma, version 2 and 3 */
  ASSERT_EQ_INT(npy_of(2, "{ \"shape\":(6,),\"fortran_order\" :True ,"
                          "\"descr\":\"<i4\"}", v, sizeof v, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.ndim, 1);
  ASSERT_EQ_INT(a.shape[0], 6);
  ASSERT_EQ_INT(a.fortran_order, 1);
  ASSERT_EQ_INT(npy_of(3, "{'descr':'|u1','fortran_order':False,'shape':()}",
                       v, 1, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.ndim, 0);
  ASSERT_EQ_INT(a.count, 1);
  /* empty array, trailing bytes ignored */
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<f8','fortran_order':False,"
                          "'shape':(0, 5),}", v, 3, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.count, 0);
  /* errors name the problem */
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<c8','fortran_order':False,'shape':()}",
                       v, 8, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "'<c8'");
  ASSERT_EQ_INT(npy_of(1, "{'descr':[('a','<i4')],'fortran_order':False,"
                          "'shape':()}", v, 8, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "structured");
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<i4','shape':(1,)}", v, 4, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "fortran_order");
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<i4','fortran_order':False,"
                          "'shape':(2,3)}", v, 20, &a, &e),
                WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(e.msg, "24 bytes");
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<i8','fortran_order':False,"
                          "'shape':(4294967296, 4294967296, 4)}", v, 8, &a, &e),
                WDS_ERR_LIMIT);
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<i8','fortran_order':False,"
                          "'shape':(1,1,1,1,1,1,1,1)}", v, 8, &a, &e),
                WDS_ERR_LIMIT);
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<i8','fortran_order':False,"
                          "'shape':(-1,)}", v, 8, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<i8','fortran_order':False,"
                          "'shape':(1,), 'x': 1}", v, 8, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "'x'");
  ASSERT_EQ_INT(npy_of(4, "{}", v, 0, &a, &e), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "version 4.0");
  /* header longer than the buffer */
  uint8_t bad[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0x7f, '{'};
  ASSERT_EQ_INT(wds__npy_parse(bad, sizeof bad, &a, &e), WDS_ERR_TRUNCATED);
  ASSERT_EQ_INT(wds__npy_parse((const uint8_t *)"NUMPY", 5, &a, &e),
                WDS_ERR_FORMAT);
}

TEST(npy_copy_order) {
  wds__npy a;
  wds__err e;
  /* Fortran order 2x3: memory holds columns */
  int16_t f[6] = {1, 4, 2, 5, 3, 6}, out[6];
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<i2','fortran_order':True,"
                          "'shape':(2,3)}", f, sizeof f, &a, &e),
                WDS_OK);
  wds__npy_copy(&a, out);
  for (int i = 0; i < 6; i++)
    ASSERT_EQ_INT(out[i], i + 1);
  /* big-endian, 3-d Fortran */
  uint8_t be[2 * 2 * 3 * 2];
  for (int k = 0; k < 12; k++) { /* F index k holds the value of C index */
    int i0 = k % 2, i1 = (k / 2) % 2, i2 = k / 4;
    int c = (i0 * 2 + i1) * 3 + i2;
    be[2 * k] = (uint8_t)(c >> 8);
    be[2 * k + 1] = (uint8_t)(c + 0x100);
  }
  uint16_t out3[12];
  ASSERT_EQ_INT(npy_of(1, "{'descr':'>u2','fortran_order':True,"
                          "'shape':(2,2,3)}", be, sizeof be, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.swap, 1);
  wds__npy_copy(&a, out3);
  for (int i = 0; i < 12; i++)
    ASSERT_EQ_INT(out3[i], i);
}

TEST(npy_save_roundtrip) {
  char dir[] = "/tmp/wds-test-decode-XXXXXX", path[256], err[256];
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/a.npy", dir);
  float data[24];
  for (int i = 0; i < 24; i++)
    data[i] = (float)i * 0.5f;
  int64_t shape[3] = {2, 3, 4};
  ASSERT_EQ_INT(wds_npy_save(path, WDS_DTYPE_F32, 3, shape, data, err,
                             sizeof err),
                WDS_OK);
  FILE *fp = fopen(path, "rb");
  ASSERT_TRUE(fp != NULL);
  uint8_t file[1024];
  size_t n = fread(file, 1, sizeof file, fp);
  fclose(fp);
  ASSERT_EQ_INT(n, 128 + 96);
  wds__npy a;
  wds__err e;
  ASSERT_EQ_INT(wds__npy_parse(file, n, &a, &e), WDS_OK);
  ASSERT_EQ_INT(a.dtype, WDS_DTYPE_F32);
  ASSERT_EQ_INT(a.ndim, 3);
  ASSERT_EQ_INT(a.shape[2], 4);
  float back[24];
  wds__npy_copy(&a, back);
  ASSERT_TRUE(memcmp(back, data, sizeof data) == 0);
  ASSERT_EQ_INT(wds_npy_save(path, WDS_DTYPE_BYTES, 1, shape, data, err,
                             sizeof err),
                WDS_ERR_INVALID);
  snprintf(path, sizeof path, "%s/no/such/dir/a.npy", dir);
  ASSERT_EQ_INT(wds_npy_save(path, WDS_DTYPE_U8, 0, NULL, data, err,
                             sizeof err),
                WDS_ERR_IO);
  ASSERT_CONTAINS(err, "cannot create");
  snprintf(path, sizeof path, "%s/a.npy", dir);
  unlink(path);
  ASSERT_EQ_INT(rmdir(dir), 0); /* no temporary left behind */
}

TEST(dtype_names) {
  ASSERT_STREQ(wds_dtype_name(WDS_DTYPE_BOOL), "|b1");
  ASSERT_STREQ(wds_dtype_name(WDS_DTYPE_U8), "|u1");
  ASSERT_STREQ(wds_dtype_name(WDS_DTYPE_I16), "<i2");
  ASSERT_STREQ(wds_dtype_name(WDS_DTYPE_F16), "<f2");
  ASSERT_STREQ(wds_dtype_name(WDS_DTYPE_F64), "<f8");
  ASSERT_STREQ(wds_dtype_name(WDS_DTYPE_BYTES), "|u1");
  ASSERT_EQ_INT(wds_dtype_size(WDS_DTYPE_I64), 8);
  ASSERT_EQ_INT(wds_dtype_size(WDS_DTYPE_BYTES), 1);
  ASSERT_EQ_INT(wds_dtype_size((wds_dtype)99), 0);
}

/* ---- images ---- */

TEST(image_png_identity) {
  uint8_t *pix = gradient(37, 23, 3);
  buf png = make_png(pix, 37, 23, 3, 0);
  wds__decoder *d = wds__decoder_new();
  uint8_t out[37 * 23 * 3];
  wds__err e;
  wds__image_opts o = center_opts(37, 23, 3);
  ASSERT_EQ_INT(wds__decode_image(d, png.d, png.n, &o, out, &e), WDS_OK);
  ASSERT_TRUE(memcmp(out, pix, sizeof out) == 0);
  /* L from RGB: Pillow's L24 */
  uint8_t gray[37 * 23];
  o.channels = 1;
  ASSERT_EQ_INT(wds__decode_image(d, png.d, png.n, &o, gray, &e), WDS_OK);
  for (int i = 0; i < 37 * 23; i++) {
    unsigned l = (pix[3 * i] * 19595u + pix[3 * i + 1] * 38470u +
                  pix[3 * i + 2] * 7471u + 0x8000u) >> 16;
    ASSERT_EQ_INT(gray[i], l);
  }
  wds__decoder_free(d);
  free(png.d);
  free(pix);
}

TEST(image_constant_resize) {
  /* a constant image stays constant through any resize and crop */
  uint8_t pix[50 * 40];
  memset(pix, 77, sizeof pix);
  buf png = make_png(pix, 50, 40, 1, 0);
  wds__decoder *d = wds__decoder_new();
  uint8_t out[13 * 29 * 3];
  wds__err e;
  for (int crop = 0; crop < 2; crop++) {
    wds__image_opts o = center_opts(13, 29, 3);
    o.crop = (wds_crop)crop;
    o.rng_key = 5;
    ASSERT_EQ_INT(wds__decode_image(d, png.d, png.n, &o, out, &e), WDS_OK);
    for (size_t i = 0; i < sizeof out; i++)
      ASSERT_EQ_INT(out[i], 77);
  }
  wds__decoder_free(d);
  free(png.d);
}

TEST(center_plan) {
  wds__crop_plan p;
  wds__plan_center(500, 375, 224, 224, &p); /* torchvision: 298x224, 37 */
  ASSERT_EQ_INT(p.total_w, 298);
  ASSERT_EQ_INT(p.total_h, 224);
  ASSERT_EQ_INT(p.off_x, 37);
  ASSERT_EQ_INT(p.off_y, 0);
  wds__plan_center(375, 500, 224, 224, &p);
  ASSERT_EQ_INT(p.total_w, 224);
  ASSERT_EQ_INT(p.total_h, 298);
  ASSERT_EQ_INT(p.off_y, 37);
  wds__plan_center(300, 227, 224, 224, &p); /* 296: round(36 / 2) = 18 */
  ASSERT_EQ_INT(p.total_w, 296);
  ASSERT_EQ_INT(p.off_x, 36);
  wds__plan_center(227, 225, 224, 224, &p); /* 225: round(0.5) = 0 */
  ASSERT_EQ_INT(p.total_w, 225);
  ASSERT_EQ_INT(p.off_x, 0);
  wds__plan_center(229, 225, 224, 224, &p); /* 227: round(1.5) = 2 */
  ASSERT_EQ_INT(p.total_w, 227);
  ASSERT_EQ_INT(p.off_x, 2);
}

TEST(random_plan) {
  int flips = 0, fallback = 0;
  for (uint64_t key = 0; key < 200; key++) {
    wds__crop_plan p;
    wds__plan_random(500, 375, 224, 224, 0.08, 1.0, key, &p);
    ASSERT_TRUE(p.x0 >= 0 && p.x1 <= 500 && p.x0 < p.x1);
    ASSERT_TRUE(p.y0 >= 0 && p.y1 <= 375 && p.y0 < p.y1);
    double area = (p.x1 - p.x0) * (p.y1 - p.y0) / (500.0 * 375.0);
    double ratio = (p.x1 - p.x0) / (p.y1 - p.y0);
    ASSERT_TRUE(area <= 1.0);
    if (!(area > 0.07 && ratio > 0.74 && ratio < 1.35))
      fallback++;
    flips += p.flip;
    wds__crop_plan q;
    wds__plan_random(500, 375, 224, 224, 0.08, 1.0, key, &q);
    ASSERT_TRUE(p.x0 == q.x0 && p.x1 == q.x1 && p.y0 == q.y0 &&
                p.y1 == q.y1 && p.flip == q.flip);
  }
  ASSERT_TRUE(flips > 70 && flips < 130);
  ASSERT_EQ_INT(fallback, 0);
  /* a 10:1 strip cannot fit the ratio: fallback to a centered 4:3 crop */
  wds__crop_plan p;
  wds__plan_random(1000, 100, 64, 64, 0.9, 1.0, 1, &p);
  ASSERT_EQ_INT((int)(p.x1 - p.x0), 133);
  ASSERT_EQ_INT((int)(p.y1 - p.y0), 100);
  ASSERT_EQ_INT((int)p.x0, (1000 - 133) / 2);
}

TEST(random_crop_images) {
  buf jpg = make_jpeg(320, 240, 3, TJSAMP_420);
  wds__decoder *d = wds__decoder_new();
  enum { N = 64 * 48 * 3 };
  uint8_t *a = malloc(N), *b = malloc(N);
  wds__err e;
  wds__image_opts o = center_opts(64, 48, 3);
  o.crop = WDS_CROP_RANDOM;
  o.rng_key = 1234;
  ASSERT_EQ_INT(wds__decode_image(d, jpg.d, jpg.n, &o, a, &e), WDS_OK);
  ASSERT_EQ_INT(wds__decode_image(d, jpg.d, jpg.n, &o, b, &e), WDS_OK);
  ASSERT_TRUE(memcmp(a, b, N) == 0);
  int differ = 0;
  for (uint64_t k = 1; k < 20; k++) {
    o.rng_key = 1234 + k;
    ASSERT_EQ_INT(wds__decode_image(d, jpg.d, jpg.n, &o, b, &e), WDS_OK);
    differ += memcmp(a, b, N) != 0;
  }
  ASSERT_EQ_INT(differ, 19);
  /* a flipped crop is the mirror of the unflipped one: find a key of each
   * kind with the same plan by giving the whole image (scale 1, ratio of
   * the image: the fallback is never needed at 4:3) */
  o.scale_min = o.scale_max = 1.0;
  int seen[2] = {0, 0};
  uint8_t *ref[2] = {a, b};
  for (uint64_t k = 0; k < 200 && !(seen[0] && seen[1]); k++) {
    wds__crop_plan p;
    wds__plan_random(320, 240, 64, 48, 1.0, 1.0, k, &p);
    if (p.x1 - p.x0 != 320 || p.y1 - p.y0 != 240 || seen[p.flip])
      continue;
    o.rng_key = k;
    ASSERT_EQ_INT(wds__decode_image(d, jpg.d, jpg.n, &o, ref[p.flip], &e),
                  WDS_OK);
    seen[p.flip] = 1;
  }
  ASSERT_TRUE(seen[0] && seen[1]);
  for (int y = 0; y < 48; y++)
    for (int x = 0; x < 64; x++)
      for (int c = 0; c < 3; c++)
        ASSERT_EQ_INT(a[(y * 64 + x) * 3 + c],
                      b[(y * 64 + 63 - x) * 3 + c]);
  free(a);
  free(b);
  free(jpg.d);
  wds__decoder_free(d);
}

/* Runs every corrupt case with stderr redirected to a file, which must stay
 * empty: the decoders never print. */
TEST(image_errors) {
  fflush(stderr);
  int saved = dup(2);
  FILE *cap = tmpfile();
  ASSERT_TRUE(saved >= 0 && cap != NULL);
  dup2(fileno(cap), 2);

  wds__decoder *d = wds__decoder_new();
  uint8_t *out = malloc(32 * 32 * 3);
  wds__err e;
  wds__image_opts o = center_opts(32, 32, 3);
  int rc[16], k = 0;
  buf jpg = make_jpeg(200, 150, 3, TJSAMP_420);
  uint8_t *pix = gradient(60, 40, 3);
  buf png = make_png(pix, 60, 40, 3, 0);
  buf bad = make_png(pix, 60, 40, 3, 1);
  uint8_t rnd[300];
  for (size_t i = 0; i < sizeof rnd; i++)
    rnd[i] = (uint8_t)(i * 7919 >> 3);
  rc[k++] = wds__decode_image(d, rnd, sizeof rnd, &o, out, &e); /* 0 */
  rc[k++] = wds__decode_image(d, rnd, 0, &o, out, &e);
  rc[k++] = wds__decode_image(d, jpg.d, jpg.n / 2, &o, out, &e); /* 2 */
  char jmsg[WDS__ERR_SIZE];
  memcpy(jmsg, e.msg, sizeof jmsg);
  rc[k++] = wds__decode_image(d, jpg.d, 3, &o, out, &e);
  rc[k++] = wds__decode_image(d, bad.d, bad.n, &o, out, &e); /* 4 */
  char pmsg[WDS__ERR_SIZE];
  memcpy(pmsg, e.msg, sizeof pmsg);
  rc[k++] = wds__decode_image(d, png.d, png.n - 30, &o, out, &e);
  rc[k++] = wds__decode_image(d, png.d, 8, &o, out, &e); /* 6 */
  o.channels = 2;
  rc[k++] = wds__decode_image(d, png.d, png.n, &o, out, &e);
  o.channels = 3;
  o.crop = WDS_CROP_RANDOM;
  o.scale_min = 0;
  rc[k++] = wds__decode_image(d, png.d, png.n, &o, out, &e); /* 8 */
  o = center_opts(32, 32, 3);
  wds__decoder_set_max_pixels(d, 1000);
  rc[k++] = wds__decode_image(d, jpg.d, jpg.n, &o, out, &e);
  rc[k++] = wds__decode_image(d, png.d, png.n, &o, out, &e); /* 10 */
  wds__decoder_set_max_pixels(d, 0);
  rc[k++] = wds__decode_image(d, jpg.d, jpg.n, &o, out, &e);
  /* a JPEG cut in its entropy-coded data keeps decoding a good one after */
  rc[k++] = wds__decode_image(d, png.d, png.n, &o, out, &e); /* 12 */

  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  long printed = ftell(cap);
  fclose(cap);
  free(out);
  free(pix);
  free(png.d);
  free(bad.d);
  free(jpg.d);
  wds__decoder_free(d);

  ASSERT_EQ_INT(printed, 0);
  ASSERT_EQ_INT(rc[0], WDS_ERR_FORMAT);
  ASSERT_EQ_INT(rc[1], WDS_ERR_FORMAT);
  ASSERT_EQ_INT(rc[2], WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(jmsg, "JPEG: Premature end");
  ASSERT_TRUE(rc[3] < 0);
  ASSERT_EQ_INT(rc[4], WDS_ERR_FORMAT);
  ASSERT_CONTAINS(pmsg, "CRC");
  ASSERT_EQ_INT(rc[5], WDS_ERR_TRUNCATED);
  ASSERT_EQ_INT(rc[6], WDS_ERR_TRUNCATED);
  ASSERT_EQ_INT(rc[7], WDS_ERR_INVALID);
  ASSERT_EQ_INT(rc[8], WDS_ERR_INVALID);
  ASSERT_EQ_INT(rc[9], WDS_ERR_LIMIT);
  ASSERT_EQ_INT(rc[10], WDS_ERR_LIMIT);
  ASSERT_EQ_INT(rc[11], WDS_OK);
  ASSERT_EQ_INT(rc[12], WDS_OK);
}

TEST(image_not_image_message) {
  wds__decoder *d = wds__decoder_new();
  uint8_t out[3];
  wds__err e;
  wds__image_opts o = center_opts(1, 1, 3);
  ASSERT_EQ_INT(wds__decode_image(d, (const uint8_t *)"GIF89a", 6, &o, out,
                                  &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "not a JPEG or PNG image");
  ASSERT_CONTAINS(e.msg, "47 49 46 38 39 61");
  wds__decoder_free(d);
}

/* ---- reference mode (driven by decode_ref.py) ---- */


static int ref_image(wds__decoder *d, const char *dir, const char *name,
                     int w, int h, int ch, const char *crop, const char *ref,
                     double tol_mean, int tol_max) {
  char path[1024];
  size_t n = 0, rn = 0;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  uint8_t *data = test_read_file(path, &n);
  snprintf(path, sizeof path, "%s/%s", dir, ref);
  uint8_t *want = test_read_file(path, &rn);
  size_t out_n = (size_t)w * h * ch;
  uint8_t *out = malloc(out_n);
  wds__err e = {{0}};
  wds__image_opts o = center_opts(w, h, ch);
  int rc = !data || !want || rn != out_n ? -100
                                         : wds__decode_image(d, data, n, &o,
                                                             out, &e);
  (void)crop;
  int fail = 1;
  if (rc != WDS_OK) {
    printf("FAIL %s %dx%dx%d vs %s: rc %d %s\n", name, w, h, ch, ref, rc,
           e.msg);
  } else {
    uint64_t sum = 0;
    int maxd = 0;
    for (size_t i = 0; i < out_n; i++) {
      int dd = abs((int)out[i] - (int)want[i]);
      sum += (uint64_t)dd;
      if (dd > maxd)
        maxd = dd;
    }
    double mean = (double)sum / (double)out_n;
    fail = mean > tol_mean || maxd > tol_max;
    printf("%s %s %dx%dx%d vs %s: mean %.4f (<= %.2f) max %d (<= %d)\n",
           fail ? "FAIL" : "ok  ", name, w, h, ch, ref, mean, tol_mean, maxd,
           tol_max);
  }
  free(data);
  free(want);
  free(out);
  return fail;
}

static int ref_npy(const char *dir, const char *name, int dtype, int ndim,
                   const int64_t *shape) {
  char path[1024];
  size_t n = 0, rn = 0;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  uint8_t *data = test_read_file(path, &n);
  snprintf(path, sizeof path, "%s/%s.bin", dir, name);
  uint8_t *want = test_read_file(path, &rn);
  wds__npy a;
  wds__err e = {{0}};
  int rc = data && want ? wds__npy_parse(data, n, &a, &e) : -100;
  int fail = 1;
  if (rc == WDS_OK && (int)a.dtype == dtype && a.ndim == ndim &&
      a.data_bytes == rn &&
      memcmp(a.shape, shape, sizeof *shape * (size_t)ndim) == 0) {
    uint8_t *out = malloc(rn + 1);
    wds__npy_copy(&a, out);
    fail = rn && memcmp(out, want, rn) != 0;
    free(out);
  }
  if (fail)
    printf("FAIL npy %s: rc %d %s\n", name, rc, e.msg);
  free(data);
  free(want);
  return fail;
}

static int ref_error(wds__decoder *d, const char *dir, const char *name,
                     const char *status) {
  char path[1024];
  size_t n = 0;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  uint8_t *data = test_read_file(path, &n);
  uint8_t out[16 * 16 * 3];
  wds__err e = {{0}};
  wds__image_opts o = center_opts(16, 16, 3);
  int rc = data ? wds__decode_image(d, data, n, &o, out, &e) : -100;
  int fail = strcmp(wds_status_name(rc), status) != 0 || !e.msg[0];
  printf("%s error %s: %s \"%s\" (want %s)\n", fail ? "FAIL" : "ok  ", name,
         wds_status_name(rc), e.msg, status);
  free(data);
  return fail;
}

static int run_ref(const char *dir) {
  char path[1024], line[2048];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *m = fopen(path, "r");
  if (!m) {
    printf("FAIL cannot open %s\n", path);
    return 1;
  }
  wds__decoder *d = wds__decoder_new();
  int failed = 0, count = 0;
  while (fgets(line, sizeof line, m)) {
    char kind[16], name[512], ref[512], crop[16], status[64];
    int w, h, ch, tol_max, dtype, ndim;
    double tol_mean;
    int64_t shape[8] = {0};
    long long s[8];
    if (sscanf(line, "image %511s %d %d %d %15s %511s %lf %d", name, &w, &h,
               &ch, crop, ref, &tol_mean, &tol_max) == 8) {
      failed += ref_image(d, dir, name, w, h, ch, crop, ref, tol_mean,
                          tol_max);
    } else if (sscanf(line, "npy %511s %d %d %lld %lld %lld %lld", name,
                      &dtype, &ndim, &s[0], &s[1], &s[2], &s[3]) >= 3) {
      for (int i = 0; i < ndim && i < 4; i++)
        shape[i] = s[i];
      failed += ref_npy(dir, name, dtype, ndim, shape);
    } else if (sscanf(line, "error %511s %63s", name, status) == 2) {
      failed += ref_error(d, dir, name, status);
    } else if (sscanf(line, "%15s", kind) == 1) {
      printf("FAIL bad manifest line: %s", line);
      failed++;
    }
    count++;
  }
  fclose(m);
  wds__decoder_free(d);
  printf("%d checked, %d failed\n", count, failed);
  return failed || count == 0;
}

static int run_save(const char *dir) {
  static const int64_t shapes[3][3] = {{0}, {7}, {2, 3, 4}};
  static const int ndims[3] = {0, 1, 3};
  uint8_t data[24 * 8];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (uint8_t)(i * 131 + 7);
  for (int t = WDS_DTYPE_BOOL; t <= WDS_DTYPE_F64; t++) {
    if (t == WDS_DTYPE_BOOL)
      for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i % 3 == 0); /* numpy bools are 0 or 1 */
    for (int s = 0; s < 3; s++) {
      char path[1024], err[256];
      snprintf(path, sizeof path, "%s/save_%d_%d.npy", dir, t, s);
      if (wds_npy_save(path, (wds_dtype)t, ndims[s], shapes[s], data, err,
                       sizeof err) != WDS_OK) {
        printf("FAIL save %s: %s\n", path, err);
        return 1;
      }
    }
    if (t == WDS_DTYPE_BOOL)
      for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 131 + 7);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--ref") == 0)
    return run_ref(argv[2]);
  if (argc == 3 && strcmp(argv[1], "--save") == 0)
    return run_save(argv[2]);
  RUN(int_cases);
  RUN(npy_headers);
  RUN(npy_copy_order);
  RUN(npy_save_roundtrip);
  RUN(dtype_names);
  RUN(image_png_identity);
  RUN(image_constant_resize);
  RUN(center_plan);
  RUN(random_plan);
  RUN(random_crop_images);
  RUN(image_errors);
  RUN(image_not_image_message);
  return test_summary();
}
