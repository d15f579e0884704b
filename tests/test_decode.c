/* test_decode.c — the field decoders (pipeline/decode.h): integers, .npy
 * parsing and copying, wds_npy_save, image errors, crop geometry and the
 * random crop's determinism, on inputs built here (TurboJPEG and a small
 * PNG writer over zlib); and recovery: after any bad input, and
 * whatever it decoded before, a decoder gives a fresh decoder's bytes (the
 * fuzz corpus's images, .npy and integers, cut and changed).
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
  if (b->n + n > b->cap || !b->d) { /* allocated even when empty */
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
  wds__image_opts o = {.width = w,
                       .height = h,
                       .channels = ch,
                       .crop = WDS_CROP_CENTER,
                       .scale_min = 0.08,
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
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr': '<i4', 'fortran_order': False, "
                       "'shape': (2, 3), }",
                       v, sizeof v, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.dtype, WDS_DTYPE_I32);
  ASSERT_EQ_INT(a.ndim, 2);
  ASSERT_EQ_INT(a.shape[0], 2);
  ASSERT_EQ_INT(a.shape[1], 3);
  ASSERT_EQ_INT(a.count, 6);
  ASSERT_EQ_INT(a.data_bytes, 24);
  /* any key order, double quotes, no trailing comma, version 2 and 3 */
  ASSERT_EQ_INT(npy_of(2,
                       "{ \"shape\":(6,),\"fortran_order\" :True ,"
                       "\"descr\":\"<i4\"}",
                       v, sizeof v, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.ndim, 1);
  ASSERT_EQ_INT(a.shape[0], 6);
  ASSERT_EQ_INT(a.fortran_order, 1);
  ASSERT_EQ_INT(npy_of(3, "{'descr':'|u1','fortran_order':False,'shape':()}", v,
                       1, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.ndim, 0);
  ASSERT_EQ_INT(a.count, 1);
  /* empty array, trailing bytes ignored */
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':'<f8','fortran_order':False,"
                       "'shape':(0, 5),}",
                       v, 3, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.count, 0);
  /* errors name the problem */
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<c8','fortran_order':False,'shape':()}", v,
                       8, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "'<c8'");
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':[('a','<i4')],'fortran_order':False,"
                       "'shape':()}",
                       v, 8, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "structured");
  ASSERT_EQ_INT(npy_of(1, "{'descr':'<i4','shape':(1,)}", v, 4, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "fortran_order");
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':'<i4','fortran_order':False,"
                       "'shape':(2,3)}",
                       v, 20, &a, &e),
                WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(e.msg, "24 bytes");
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':'<i8','fortran_order':False,"
                       "'shape':(4294967296, 4294967296, 4)}",
                       v, 8, &a, &e),
                WDS_ERR_LIMIT);
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':'<i8','fortran_order':False,"
                       "'shape':(1,1,1,1,1,1,1,1)}",
                       v, 8, &a, &e),
                WDS_ERR_LIMIT);
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':'<i8','fortran_order':False,"
                       "'shape':(-1,)}",
                       v, 8, &a, &e),
                WDS_ERR_FORMAT);
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':'<i8','fortran_order':False,"
                       "'shape':(1,), 'x': 1}",
                       v, 8, &a, &e),
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
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':'<i2','fortran_order':True,"
                       "'shape':(2,3)}",
                       f, sizeof f, &a, &e),
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
  ASSERT_EQ_INT(npy_of(1,
                       "{'descr':'>u2','fortran_order':True,"
                       "'shape':(2,2,3)}",
                       be, sizeof be, &a, &e),
                WDS_OK);
  ASSERT_EQ_INT(a.swap, 1);
  wds__npy_copy(&a, out3);
  for (int i = 0; i < 12; i++)
    ASSERT_EQ_INT(out3[i], i);
}

TEST(npy_save_roundtrip) {
  char dir[] = "/tmp/wds-test-decode-XXXXXX", path[256];
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/a.npy", dir);
  float data[24];
  for (int i = 0; i < 24; i++)
    data[i] = (float)i * 0.5f;
  int64_t shape[3] = {2, 3, 4};
  ASSERT_EQ_INT(wds_npy_save(path, WDS_DTYPE_F32, 3, shape, data), WDS_OK);
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
  ASSERT_EQ_INT(wds_npy_save(path, WDS_DTYPE_BYTES, 1, shape, data),
                WDS_ERR_INVALID);
  snprintf(path, sizeof path, "%s/no/such/dir/a.npy", dir);
  ASSERT_EQ_INT(wds_npy_save(path, WDS_DTYPE_U8, 0, NULL, data), WDS_ERR_IO);
  ASSERT_CONTAINS(wds_last_error(), "cannot create");
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
                  pix[3 * i + 2] * 7471u + 0x8000u) >>
                 16;
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

/* ---- resampling kernels (resize.h): every run-time path gives the bytes
 * of a plain int64 evaluation of the same taps ---- */

static uint64_t kern_rng = 0x9E3779B97F4A7C15ull;
static uint32_t kern_next(void) {
  kern_rng ^= kern_rng << 13;
  kern_rng ^= kern_rng >> 7;
  kern_rng ^= kern_rng << 17;
  return (uint32_t)(kern_rng >> 16);
}

/* Pillow's two passes written out directly from the taps, in int64. */
static void naive_resample(const uint8_t *src, size_t stride, int ch,
                           const wds__taps *tx, const wds__taps *ty,
                           uint8_t *out) {
  int first, last;
  wds__taps_span(ty, &first, &last);
  size_t row = (size_t)tx->count * (size_t)ch;
  uint8_t *tmp = malloc((size_t)(last - first) * row + 1);
  ASSERT_TRUE(tmp != NULL);
  int64_t half = (int64_t)1 << (WDS__RESIZE_BITS - 1);
  for (int y = first; y < last; y++)
    for (int i = 0; i < tx->count; i++)
      for (int c = 0; c < ch; c++) {
        int64_t v = half;
        for (int x = 0; x < tx->bounds[2 * i + 1]; x++)
          v += (int64_t)src[(size_t)y * stride +
                            (size_t)(tx->bounds[2 * i] + x) * (size_t)ch +
                            (size_t)c] *
               tx->taps[(size_t)i * (size_t)tx->ksize + (size_t)x];
        v >>= WDS__RESIZE_BITS;
        tmp[(size_t)(y - first) * row + (size_t)i * (size_t)ch + (size_t)c] =
            (uint8_t)(v < 0     ? 0
                      : v > 255 ? 255
                                : v);
      }
  for (int j = 0; j < ty->count; j++)
    for (size_t x = 0; x < row; x++) {
      int64_t v = half;
      for (int y = 0; y < ty->bounds[2 * j + 1]; y++)
        v += (int64_t)tmp[(size_t)(ty->bounds[2 * j] - first + y) * row + x] *
             ty->taps[(size_t)j * (size_t)ty->ksize + (size_t)y];
      v >>= WDS__RESIZE_BITS;
      out[(size_t)j * row + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  free(tmp);
}

/* One case: a source of sw x sh (fill: 0 noise, 1 all 255, 2 0/255
 * stripes) with pad bytes at each row's end, resampled to ow x oh by
 * plan (0 center, 1 random crop with flip) through every kernel set. The
 * source is allocated to its exact size, so ASan sees any read past it. */
static void kernels_case(int sw, int sh, int ow, int oh, int ch, int plan,
                         int fill, int pad) {
  size_t stride = (size_t)sw * (size_t)ch + (size_t)pad;
  size_t size = stride * (size_t)sh;
  uint8_t *src = malloc(size);
  ASSERT_TRUE(src != NULL);
  for (size_t i = 0; i < size; i++)
    src[i] = fill == 1   ? 255
             : fill == 2 ? ((i / (size_t)ch) % 3 ? 255 : 0)
                         : (uint8_t)kern_next();
  wds__crop_plan p;
  if (plan)
    wds__plan_random(sw, sh, ow, oh, 0.08, 1.0, (uint64_t)kern_next(), &p);
  else
    wds__plan_center(sw, sh, ow, oh, &p);
  wds__taps tx = {0}, ty = {0};
  ASSERT_EQ_INT(
      wds__taps_prepare(&tx, sw, p.x0, p.x1, p.total_w, p.off_x, ow, p.flip),
      0);
  ASSERT_EQ_INT(
      wds__taps_prepare(&ty, sh, p.y0, p.y1, p.total_h, p.off_y, oh, 0), 0);
  int first, last;
  wds__taps_span(&ty, &first, &last);
  size_t row = (size_t)ow * (size_t)ch, n = row * (size_t)oh;
  uint8_t *tmp = malloc((size_t)(last - first) * row);
  uint8_t *want = malloc(n), *got = malloc(n);
  ASSERT_TRUE(tmp && want && got);
  naive_resample(src, stride, ch, &tx, &ty, want);
  for (int isa = WDS__RESIZE_SCALAR; isa <= WDS__RESIZE_AVX2; isa++) {
    if (!wds__resize_isa_supported(isa))
      continue;
    memset(got, 0xA5, n);
    wds__resample_isa(isa, src, stride, ch, &tx, &ty, tmp, got);
    for (size_t i = 0; i < n; i++)
      if (got[i] != want[i]) {
        fprintf(stderr,
                "  %s kernels, %dx%dx%d -> %dx%d (plan %d, fill %d): byte "
                "%zu is %d, not %d\n",
                wds__resize_isa_name(isa), sw, sh, ch, ow, oh, plan, fill, i,
                got[i], want[i]);
        ASSERT_EQ_INT(got[i], want[i]);
      }
  }
  wds__taps_free(&tx);
  wds__taps_free(&ty);
  free(src);
  free(tmp);
  free(want);
  free(got);
}

TEST(resize_kernels_agree) {
  static int reported;
  if (!reported++) {
    fprintf(stderr, "  resize kernels run here:");
    for (int isa = WDS__RESIZE_SCALAR; isa <= WDS__RESIZE_AVX2; isa++)
      if (wds__resize_isa_supported(isa))
        fprintf(stderr, " %s", wds__resize_isa_name(isa));
    fprintf(stderr, " (best %s)\n",
            wds__resize_isa_name(wds__resize_isa_best()));
  }
  ASSERT_TRUE(wds__resize_isa_supported(WDS__RESIZE_SCALAR));
  ASSERT_TRUE(!wds__resize_isa_supported(WDS__RESIZE_AVX2 + 1));
  ASSERT_TRUE(wds__resize_isa_supported(wds__resize_isa_best()));
#if defined(__GNUC__) && defined(__x86_64__)
  ASSERT_TRUE(wds__resize_isa_supported(WDS__RESIZE_SSE2));
#endif
  static const int cases[][4] = {
      /* src w, h -> out w, h */
      {313, 235, 224, 224}, /* the photo path: DCT-scaled 500x375 */
      {500, 375, 224, 224}, {1, 1, 1, 1},         {1, 1, 5, 3},
      {1, 100, 7, 7},       {100, 1, 7, 7},       {2, 2, 1, 1},
      {3, 2, 17, 33},       {17, 9, 64, 48},      /* upscaling */
      {37, 41, 13, 29},     {226, 225, 224, 224}, /* odd crops */
      {640, 480, 1, 1},     {3000, 2, 2, 1},      /* filters of ~1,300 taps */
      {2, 3000, 1, 2},      {64, 64, 64, 64},     {65, 33, 31, 16},
      {5, 400, 33, 3}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int ch = 1; ch <= 3; ch += 2)
      for (int plan = 0; plan < 2; plan++)
        for (int fill = 0; fill < 3; fill++)
          kernels_case(cases[c][0], cases[c][1], cases[c][2], cases[c][3], ch,
                       plan, fill, (int)(c % 3) * 5 % 7);
  for (int r = 0; r < 60; r++) { /* random sizes */
    int sw = 1 + (int)(kern_next() % 300), sh = 1 + (int)(kern_next() % 300);
    int ow = 1 + (int)(kern_next() % 100), oh = 1 + (int)(kern_next() % 100);
    kernels_case(sw, sh, ow, oh, kern_next() % 2 ? 3 : 1,
                 (int)(kern_next() % 2), (int)(kern_next() % 3), 0);
  }
}

TEST(jpeg_scaled_size) {
  /* wds__decode_jpeg_scaled (bench/jpeg_baseline.c --dct-only) decodes at
   * the smallest DCT scale that still leaves the crop its pixels */
  wds__decoder *d = wds__decoder_new();
  wds__err e;
  int w = 0, h = 0;
  buf j = make_jpeg(500, 375, 3, TJSAMP_420);
  wds__image_opts o = center_opts(224, 224, 3);
  ASSERT_EQ_INT(wds__decode_jpeg_scaled(d, j.d, j.n, &o, &w, &h, &e), WDS_OK);
  ASSERT_EQ_INT(w, 313); /* 5/8: 235 rows >= 224, 4/8 would give 188 */
  ASSERT_EQ_INT(h, 235);
  o = center_opts(64, 64, 3);
  ASSERT_EQ_INT(wds__decode_jpeg_scaled(d, j.d, j.n, &o, &w, &h, &e), WDS_OK);
  ASSERT_EQ_INT(w, 125); /* 2/8: 94 rows >= 64; 1/8 would give 47 */
  ASSERT_EQ_INT(h, 94);
  o = center_opts(600, 600, 3); /* upscaling: full size */
  ASSERT_EQ_INT(wds__decode_jpeg_scaled(d, j.d, j.n, &o, &w, &h, &e), WDS_OK);
  ASSERT_EQ_INT(w, 500);
  ASSERT_EQ_INT(h, 375);
  o = center_opts(0, 224, 3);
  ASSERT_EQ_INT(wds__decode_jpeg_scaled(d, j.d, j.n, &o, &w, &h, &e),
                WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "bad output 0x224x3");
  o = center_opts(224, 224, 3);
  o.crop = WDS_CROP_RANDOM;
  o.scale_min = 0;
  ASSERT_EQ_INT(wds__decode_jpeg_scaled(d, j.d, j.n, &o, &w, &h, &e),
                WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "bad crop scale");
  o = center_opts(224, 224, 3);
  ASSERT_EQ_INT(wds__decode_jpeg_scaled(d, j.d + 1, j.n - 1, &o, &w, &h, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "not a JPEG");
  ASSERT_EQ_INT(wds__decode_jpeg_scaled(d, j.d, j.n / 2, &o, &w, &h, &e),
                WDS_ERR_TRUNCATED);
  wds__decoder_free(d);
  free(j.d);
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
    ASSERT_TRUE(p.x0 == q.x0 && p.x1 == q.x1 && p.y0 == q.y0 && p.y1 == q.y1 &&
                p.flip == q.flip);
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
        ASSERT_EQ_INT(a[(y * 64 + x) * 3 + c], b[(y * 64 + 63 - x) * 3 + c]);
  free(a);
  free(b);
  free(jpg.d);
  wds__decoder_free(d);
}

/* wds__decode_image_rows + its write (the loader's image rows, the last
 * pass run into the batch slot) give wds__decode_image's bytes, for JPEG
 * and PNG, RGB and gray, center and random crops, up- and downscaling; a
 * failure gives the same status and message, and a block only when its
 * alloc did. */
typedef struct rows_alloc {
  int calls, fail;
} rows_alloc;

static void *rows_alloc_fn(void *ctx, size_t n) {
  rows_alloc *a = ctx;
  a->calls++;
  return a->fail ? NULL : malloc(n);
}

TEST(image_rows_deferred) {
  buf jpg = make_jpeg(500, 375, 3, TJSAMP_420);
  buf jgray = make_jpeg(211, 307, 1, TJSAMP_GRAY);
  uint8_t *pix = gradient(60, 40, 3);
  buf png = make_png(pix, 60, 40, 3, 0);
  const buf *in[] = {&jpg, &jgray, &png};
  static const int sizes[][2] = {{224, 224}, {64, 48}, {97, 13}, {300, 200}};
  wds__decoder *d = wds__decoder_new(), *d2 = wds__decoder_new();
  wds__err e;
  for (size_t i = 0; i < 3; i++)
    for (size_t z = 0; z < 4; z++)
      for (int ch = 1; ch <= 3; ch += 2)
        for (int crop = 0; crop < 2; crop++)
          for (uint64_t key = 0; key < (crop ? 3u : 1u); key++) {
            wds__image_opts o = center_opts(sizes[z][0], sizes[z][1], ch);
            if (crop) {
              o.crop = WDS_CROP_RANDOM;
              o.rng_key = 77 + key;
            }
            size_t n = (size_t)o.width * (size_t)o.height * (size_t)ch;
            uint8_t *want = malloc(n), *got = malloc(n + 1);
            ASSERT_TRUE(want && got);
            ASSERT_EQ_INT(
                wds__decode_image(d, in[i]->d, in[i]->n, &o, want, &e), WDS_OK);
            rows_alloc a = {0, 0};
            void *block = NULL;
            void (*write)(const void *, void *) = NULL;
            ASSERT_EQ_INT(wds__decode_image_rows(d2, in[i]->d, in[i]->n, &o,
                                                 rows_alloc_fn, &a, &block,
                                                 &write, &e),
                          WDS_OK);
            ASSERT_TRUE(block && write && a.calls == 1);
            memset(got, 0xA5, n + 1);
            write(block, got);
            ASSERT_TRUE(memcmp(got, want, n) == 0);
            ASSERT_EQ_INT(got[n], 0xA5); /* nothing past the row */
            free(block);
            free(want);
            free(got);
          }
  /* failures: the same status and message as wds__decode_image */
  wds__image_opts o = center_opts(32, 32, 3);
  uint8_t out[32 * 32 * 3];
  wds__err e2;
  rows_alloc a = {0, 0};
  void *block = &a;
  void (*write)(const void *, void *) = NULL;
  ASSERT_EQ_INT(wds__decode_image(d, jpg.d, jpg.n / 2, &o, out, &e),
                WDS_ERR_TRUNCATED);
  ASSERT_EQ_INT(wds__decode_image_rows(d2, jpg.d, jpg.n / 2, &o, rows_alloc_fn,
                                       &a, &block, &write, &e2),
                WDS_ERR_TRUNCATED);
  ASSERT_STREQ(e2.msg, e.msg);
  ASSERT_TRUE(block == NULL && a.calls == 0);
  ASSERT_TRUE(wds__decode_image_rows(d2, png.d, 8, &o, rows_alloc_fn, &a,
                                     &block, &write, &e2) < 0);
  ASSERT_TRUE(block == NULL && a.calls == 0);
  a.fail = 1; /* out of memory: a status, no block */
  ASSERT_EQ_INT(wds__decode_image_rows(d2, png.d, png.n, &o, rows_alloc_fn, &a,
                                       &block, &write, &e2),
                WDS_ERR_NOMEM);
  ASSERT_TRUE(block == NULL && a.calls == 1);
  free(jpg.d);
  free(jgray.d);
  free(png.d);
  free(pix);
  wds__decoder_free(d);
  wds__decoder_free(d2);
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
  ASSERT_EQ_INT(wds__decode_image(d, (const uint8_t *)"GIF89a", 6, &o, out, &e),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(e.msg, "not a JPEG or PNG image");
  ASSERT_CONTAINS(e.msg, "47 49 46 38 39 61");
  wds__decoder_free(d);
}

/* ---- recovery: what a decoder decoded before never shows ---- */

/* Known-good inputs of every decoder (corpus files and generated images)
 * and the bytes a fresh decoder makes of each with each option set. Every
 * later decode of them, by a decoder that has just failed on a bad input,
 * must give the same bytes: this guards against a decoder left mid-header
 * by a JPEG cut in its headers, which made the next good JPEGs fail. */
enum { KIND_IMAGE, KIND_NPY, KIND_INT, N_OPTS = 3, MAX_GOOD = 20 };

typedef struct good_input {
  const char *name;
  int kind;
  buf data;
  uint8_t *ref[N_OPTS];
  size_t ref_n[N_OPTS];
} good_input;

static wds__image_opts recovery_opts(int k) {
  wds__image_opts o = center_opts(24, 16, 3); /* DCT-scaled JPEGs */
  if (k == 1) {
    o = center_opts(16, 16, 1);
    o.crop = WDS_CROP_RANDOM;
    o.rng_key = 7;
  } else if (k == 2) {
    o = center_opts(5, 7, 3);
  }
  return o;
}

/* Decodes data as kind (option set k) into *out (malloc'd; images: the
 * pixels; npy: dtype, shape and the copied array; int: the value). */
static int decode_any(wds__decoder *d, int kind, const uint8_t *data, size_t n,
                      int k, uint8_t **out, size_t *out_n) {
  wds__err e;
  e.msg[0] = '\0';
  *out = NULL;
  *out_n = 0;
  int rc;
  if (kind == KIND_IMAGE) {
    wds__image_opts o = recovery_opts(k);
    *out_n = (size_t)o.width * (size_t)o.height * (size_t)o.channels;
    *out = malloc(*out_n);
    rc = wds__decode_image(d, data, n, &o, *out, &e);
  } else if (kind == KIND_NPY) {
    wds__npy a;
    rc = wds__npy_parse(data, n, &a, &e);
    if (rc == WDS_OK) {
      size_t head = sizeof a.dtype + sizeof a.ndim + sizeof a.shape;
      *out_n = head + a.data_bytes;
      *out = calloc(1, *out_n);
      memcpy(*out, &a.dtype, sizeof a.dtype);
      memcpy(*out + sizeof a.dtype, &a.ndim, sizeof a.ndim);
      memcpy(*out + sizeof a.dtype + sizeof a.ndim, a.shape, sizeof a.shape);
      wds__npy_copy(&a, *out + head);
    }
  } else {
    int64_t v = 0;
    rc = wds__decode_int(data, n, &v, &e);
    *out_n = sizeof v;
    *out = malloc(sizeof v);
    memcpy(*out, &v, sizeof v);
  }
  if (rc != WDS_OK && !e.msg[0])
    rc = -1000; /* a failure without a message is a failure of the test */
  return rc;
}

static size_t load_goods(good_input *g) {
  static const struct {
    const char *name;
    int kind;
  } files[] = {
      {"tiny420.jpg", KIND_IMAGE},     {"tiny444-progressive.jpg", KIND_IMAGE},
      {"tiny-gray.jpg", KIND_IMAGE},   {"tiny-cmyk.jpg", KIND_IMAGE},
      {"tiny-rgb.png", KIND_IMAGE},    {"tiny-interlaced16.png", KIND_IMAGE},
      {"tiny-p-trns.png", KIND_IMAGE}, {"tiny-la.png", KIND_IMAGE},
      {"tiny-1bit.png", KIND_IMAGE},   {"f4-c.npy", KIND_NPY},
      {"i2-be-fortran.npy", KIND_NPY}, {"b1-v3.npy", KIND_NPY},
      {"u1-scalar-v2.npy", KIND_NPY},  {"int.txt", KIND_INT},
  };
  size_t n = 0;
  for (size_t i = 0; i < sizeof files / sizeof *files; i++, n++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/decode/%s",
             WDS_SOURCE_DIR, files[i].name);
    g[n].name = files[i].name;
    g[n].kind = files[i].kind;
    g[n].data.d = test_read_file(path, &g[n].data.n);
    if (!g[n].data.d)
      return 0;
  }
  /* larger ones: DCT scaling of a baseline JPEG, a PNG made here */
  g[n].name = "generated 4:2:0 JPEG";
  g[n].kind = KIND_IMAGE;
  g[n++].data = make_jpeg(96, 72, 3, TJSAMP_420);
  uint8_t *pix = gradient(45, 30, 3);
  g[n].name = "generated PNG";
  g[n].kind = KIND_IMAGE;
  g[n++].data = make_png(pix, 45, 30, 3, 0);
  free(pix);
  /* the reference: a fresh decoder per input and option set */
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < N_OPTS; k++) {
      wds__decoder *d = wds__decoder_new();
      int rc = decode_any(d, g[i].kind, g[i].data.d, g[i].data.n, k,
                          &g[i].ref[k], &g[i].ref_n[k]);
      wds__decoder_free(d);
      if (rc != WDS_OK) {
        printf("  %s: rc %d with a fresh decoder\n", g[i].name, rc);
        return 0;
      }
    }
  return n;
}

static void free_goods(good_input *g, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(g[i].data.d);
    for (int k = 0; k < N_OPTS; k++)
      free(g[i].ref[k]);
  }
}

/* Every good input once more with d (option sets rotating with round):
 * 0 if each gives its reference bytes. */
static int goods_match(wds__decoder *d, const good_input *g, size_t n,
                       size_t round, const char *after) {
  for (size_t i = 0; i < n; i++) {
    int k = (int)((i + round) % N_OPTS);
    uint8_t *out;
    size_t out_n;
    int rc =
        decode_any(d, g[i].kind, g[i].data.d, g[i].data.n, k, &out, &out_n);
    int same = rc == WDS_OK && out_n == g[i].ref_n[k] &&
               memcmp(out, g[i].ref[k], out_n) == 0;
    free(out);
    if (!same) {
      printf("  after %s: %s (options %d): rc %d, %s\n", after, g[i].name, k,
             rc, rc == WDS_OK ? "different bytes" : "failed");
      return 1;
    }
  }
  return 0;
}

/* The bad inputs made from a good one: variant v of data into *bad (a cut,
 * at every offset through the headers and every eighth one after; or one
 * byte changed, at every thirteenth offset, to 0xFF or its complement by
 * turns). Returns 0 when there are no more. */
static int bad_variant(const buf *data, size_t v, buf *bad, char *what,
                       size_t what_size) {
  const uint8_t *p = data->d;
  size_t n = data->n, hdr = n;
  for (size_t i = 0; i + 4 <= n; i++)
    if ((p[i] == 0xFF && p[i + 1] == 0xDA) || memcmp(p + i, "IDAT", 4) == 0) {
      hdr = i + 16 < n ? i + 16 : n;
      break;
    }
  size_t cuts = hdr + (n - hdr + 7) / 8, flips = (n + 12) / 13;
  if (v >= cuts + flips)
    return 0;
  bad->n = 0;
  if (v < cuts) {
    size_t at = v < hdr ? v : hdr + 8 * (v - hdr);
    buf_add(bad, p, at);
    snprintf(what, what_size, "cut at %zu", at);
  } else {
    size_t f = v - cuts, at = 13 * f;
    buf_add(bad, p, n);
    bad->d[at] = f % 2 ? 0xFF : (uint8_t)~p[at];
    snprintf(what, what_size, "byte %zu set to 0x%02x", at, bad->d[at]);
  }
  return 1;
}

TEST(recovery_after_bad_input) {
  good_input g[MAX_GOOD];
  memset(g, 0, sizeof g);
  size_t ng = load_goods(g);
  ASSERT_TRUE(ng > 0);
  wds__decoder *d = wds__decoder_new();
  buf bad = {0};
  char what[64], after[256];
  size_t round = 0;
  int failed = 0;
  for (size_t s = 0; s < ng && !failed; s++) {
    for (size_t v = 0;
         !failed && bad_variant(&g[s].data, v, &bad, what, sizeof what);
         v++, round++) {
      /* the bad input is decoded as a fresh decoder decodes it (images
       * may still decode: a changed byte in the data) */
      int k = (int)(round % N_OPTS);
      uint8_t *out, *want;
      size_t out_n, want_n;
      wds__decoder *fresh = wds__decoder_new();
      int rc = decode_any(d, g[s].kind, bad.d, bad.n, k, &out, &out_n);
      int want_rc =
          decode_any(fresh, g[s].kind, bad.d, bad.n, k, &want, &want_n);
      wds__decoder_free(fresh);
      snprintf(after, sizeof after, "%s %s (rc %d)", g[s].name, what, rc);
      if (rc != want_rc || (rc == WDS_OK && memcmp(out, want, out_n) != 0)) {
        printf("  %s: rc %d, a fresh decoder %d%s\n", after, rc, want_rc,
               rc == want_rc ? ", different bytes" : "");
        failed = 1;
      }
      free(out);
      free(want);
      failed = failed || goods_match(d, g, ng, round, after);
    }
  }
  free(bad.d);
  wds__decoder_free(d);
  free_goods(g, ng);
  ASSERT_EQ_INT(failed, 0);
}

/* The same through wds_decode_check (`wds verify --decode`): after a bad
 * input one checker still passes every good one, and says of the bad one
 * what a fresh checker says. */
TEST(recovery_checker) {
  good_input g[MAX_GOOD];
  memset(g, 0, sizeof g);
  size_t ng = load_goods(g);
  ASSERT_TRUE(ng > 0);
  static const char *const ext[] = {
      [KIND_IMAGE] = "jpg", [KIND_NPY] = "npy", [KIND_INT] = "cls"};
  wds_decode_checker *c;
  ASSERT_EQ_INT(wds_decode_checker_open(&c), WDS_OK);
  buf bad = {0};
  char what[64], err[256], want_err[256];
  int failed = 0;
  for (size_t s = 0; s < ng && !failed; s++) {
    for (size_t v = 0;
         !failed && bad_variant(&g[s].data, v, &bad, what, sizeof what); v++) {
      int rc = wds_decode_check(c, ext[g[s].kind], bad.d, bad.n);
      snprintf(err, sizeof err, "%s", rc == WDS_OK ? "" : wds_last_error());
      int want = wds_decode_check(NULL, ext[g[s].kind], bad.d, bad.n);
      snprintf(want_err, sizeof want_err, "%s",
               want == WDS_OK ? "" : wds_last_error());
      if (rc != want || strcmp(err, want_err) != 0) {
        printf("  %s %s: rc %d \"%s\", a fresh checker %d \"%s\"\n", g[s].name,
               what, rc, err, want, want_err);
        failed = 1;
      }
      for (size_t i = 0; i < ng && !failed; i++) {
        rc = wds_decode_check(c, ext[g[i].kind], g[i].data.d, g[i].data.n);
        if (rc != WDS_OK) {
          printf("  after %s %s: %s: rc %d \"%s\"\n", g[s].name, what,
                 g[i].name, rc, wds_last_error());
          failed = 1;
        }
      }
    }
  }
  free(bad.d);
  wds_decode_checker_close(c);
  free_goods(g, ng);
  ASSERT_EQ_INT(failed, 0);
}

/* j without its segments of marker m before the first scan. */
static buf jpeg_without(const buf *j, uint8_t m) {
  buf b = {0};
  size_t i = 2;
  buf_add(&b, j->d, 2);
  while (i + 4 <= j->n && j->d[i] == 0xFF && j->d[i + 1] != 0xDA) {
    size_t len = 2 + ((size_t)j->d[i + 2] << 8 | j->d[i + 3]);
    if (j->d[i + 1] != m)
      buf_add(&b, j->d + i, len);
    i += len;
  }
  buf_add(&b, j->d + i, j->n - i);
  return b;
}

/* j with every quantization table (0-3) and Huffman table (DC and AC 0-3)
 * defined again after its scan, before EOI: libjpeg reads them there, and
 * keeps them in the decompressor for the next image. */
static buf jpeg_with_trailing_tables(const buf *j) {
  buf b = {0};
  buf_add(&b, j->d, j->n - 2);
  uint8_t dqt[4 + 4 * 65] = {0xFF, 0xDB, 0x01, 0x06};
  for (int t = 0; t < 4; t++) {
    dqt[4 + 65 * t] = (uint8_t)t;
    for (int i = 1; i <= 64; i++)
      dqt[4 + 65 * t + i] = (uint8_t)(3 + t + i % 7);
  }
  buf_add(&b, dqt, sizeof dqt);
  for (int t = 0; t < 8; t++) {
    /* DC: 12 four-bit codes; AC: 162 eight-bit codes */
    uint8_t h[4 + 17 + 162] = {0xFF, 0xC4, 0, 0,
                               (uint8_t)((t / 4) << 4 | t % 4)};
    size_t count = t < 4 ? 12 : 162;
    h[4 + (t < 4 ? 4 : 8)] = (uint8_t)count;
    for (size_t i = 0; i < count; i++)
      h[21 + i] = (uint8_t)(t < 4 ? 11 - i : (i * 37 + 1) & 0xFF);
    h[2] = (uint8_t)((19 + count) >> 8);
    h[3] = (uint8_t)(19 + count);
    buf_add(&b, h, 21 + count);
  }
  buf_add(&b, "\xFF\xD9", 2);
  return b;
}

/* A table-less JPEG is decoded as a fresh decoder decodes it whatever the
 * decoder read before: libjpeg keeps quantization and Huffman tables from
 * image to image in one decompressor (for abbreviated datastreams), so an
 * image without DHT would otherwise get the previous image's Huffman tables
 * instead of the standard ones, and one without DQT its quantization
 * tables instead of an error: different pixels, or a row valid or not,
 * depending on which worker decoded what before it. */
TEST(jpeg_tables_not_carried) {
  static const char *const names[] = {"tiny420.jpg", "tiny-gray.jpg",
                                      "tiny-cmyk.jpg",
                                      "tiny444-progressive.jpg"};
  wds__decoder *d = wds__decoder_new();
  int failed = 0;
  for (size_t f = 0; f < sizeof names / sizeof *names && !failed; f++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/decode/%s",
             WDS_SOURCE_DIR, names[f]);
    buf j = {0};
    j.d = test_read_file(path, &j.n);
    ASSERT_TRUE(j.d != NULL);
    buf tables = jpeg_with_trailing_tables(&j);
    buf variants[3] = {jpeg_without(&j, 0xC4), jpeg_without(&j, 0xDB), j};
    for (int v = 0; v < 3 && !failed; v++) {
      for (int k = 0; k < N_OPTS && !failed; k++) {
        uint8_t *a, *b, *t;
        size_t an, bn, tn;
        wds__decoder *fresh = wds__decoder_new();
        int want = decode_any(fresh, KIND_IMAGE, variants[v].d, variants[v].n,
                              k, &a, &an);
        wds__decoder_free(fresh);
        /* the tables image itself decodes as the plain one (v == 2) */
        int trc = decode_any(d, KIND_IMAGE, tables.d, tables.n, k, &t, &tn);
        int rc =
            decode_any(d, KIND_IMAGE, variants[v].d, variants[v].n, k, &b, &bn);
        if (trc != WDS_OK || rc != want ||
            (rc == WDS_OK && memcmp(a, b, an) != 0) ||
            (v == 2 && memcmp(t, a, an) != 0)) {
          printf("  %s variant %d options %d: rc %d (tables image %d), "
                 "a fresh decoder %d\n",
                 names[f], v, k, rc, trc, want);
          failed = 1;
        }
        free(a);
        free(b);
        free(t);
      }
    }
    free(variants[0].d);
    free(variants[1].d);
    free(tables.d);
    free(j.d);
  }
  wds__decoder_free(d);
  ASSERT_EQ_INT(failed, 0);
}

/* ---- reference mode (driven by decode_ref.py) ---- */

static int ref_image(wds__decoder *d, const char *dir, const char *name, int w,
                     int h, int ch, const char *crop, const char *ref,
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
  int rc = !data || !want || rn != out_n
               ? -100
               : wds__decode_image(d, data, n, &o, out, &e);
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
      failed += ref_image(d, dir, name, w, h, ch, crop, ref, tol_mean, tol_max);
    } else if (sscanf(line, "npy %511s %d %d %lld %lld %lld %lld", name, &dtype,
                      &ndim, &s[0], &s[1], &s[2], &s[3]) >= 3) {
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
      char path[1024];
      snprintf(path, sizeof path, "%s/save_%d_%d.npy", dir, t, s);
      if (wds_npy_save(path, (wds_dtype)t, ndims[s], shapes[s], data) !=
          WDS_OK) {
        printf("FAIL save %s: %s\n", path, wds_last_error());
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
  RUN(resize_kernels_agree);
  RUN(jpeg_scaled_size);
  RUN(center_plan);
  RUN(random_plan);
  RUN(random_crop_images);
  RUN(image_rows_deferred);
  RUN(image_errors);
  RUN(image_not_image_message);
  RUN(recovery_after_bad_input);
  RUN(recovery_checker);
  RUN(jpeg_tables_not_carried);
  return test_summary();
}
