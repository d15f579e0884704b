/* fuzz_decode.c — libFuzzer target for the field decoders: the image
 * decoder (JPEG via TurboJPEG, PNG via libpng, resize and crop) with a few
 * option sets, the .npy parser and copy, and the integer parser. Built as a
 * libFuzzer binary with -DWDS_FUZZ=ON (clang), and always as a replay driver
 * (fuzz_replay.c) over tests/fuzz/corpus/decode.
 *
 * The pixel limit is lowered to 2^22 so that the fuzzer's memory limit is
 * not hit by legitimately large headers. Besides the sanitizers it checks
 * the contract: every failure carries a message, a parsed .npy lies inside
 * the input, and decoding is a pure function of (data, opts) — whatever
 * the decoder decoded before:
 * - the input is decoded by the one decoder kept from input to input (as a
 *   worker keeps its decoder), which has just decoded a JPEG that leaves
 *   foreign quantization and Huffman tables in its TurboJPEG handle, and by
 *   a fresh decoder: same status, message and bytes;
 * - then known-good inputs made once at start (a baseline and a
 *   progressive JPEG, a PNG, a .npy) are decoded by the kept decoder and
 *   must give the bytes a fresh decoder gave them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "pipeline/decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PIXELS ((uint64_t)1 << 22)
#define GOOD_W 19
#define GOOD_H 13

static wds__decoder *new_decoder(void) {
  wds__decoder *d = wds__decoder_new();
  if (!d)
    __builtin_trap();
  wds__decoder_set_max_pixels(d, MAX_PIXELS);
  return d;
}

/* ---- known-good inputs ---- */

typedef struct blob {
  uint8_t *d;
  size_t n;
} blob;

static void add(blob *b, const void *p, size_t n) {
  uint8_t *nd = realloc(b->d, b->n + n);
  if (!nd)
    __builtin_trap();
  memcpy(nd + b->n, p, n);
  b->d = nd;
  b->n += n;
}

static void be32(blob *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8),
                  (uint8_t)v};
  add(b, x, 4);
}

static uint8_t *pixels(void) {
  static uint8_t p[GOOD_W * GOOD_H * 3];
  for (size_t i = 0; i < sizeof p; i++)
    p[i] = (uint8_t)(i * 13 + i / (GOOD_W * 3) * 29);
  return p;
}

static blob make_jpeg(int flags) {
  tjhandle tj = tjInitCompress();
  unsigned char *jpg = NULL;
  unsigned long n = 0;
  blob b = {0};
  if (!tj || tjCompress2(tj, pixels(), GOOD_W, 0, GOOD_H, TJPF_RGB, &jpg, &n,
                         TJSAMP_420, 80, flags) != 0)
    __builtin_trap();
  add(&b, jpg, n);
  tjFree(jpg);
  tjDestroy(tj);
  return b;
}

static void png_chunk(blob *b, const char *type, const uint8_t *p, size_t n) {
  be32(b, (uint32_t)n);
  size_t at = b->n;
  add(b, type, 4);
  add(b, p, n);
  be32(b, (uint32_t)crc32(0, b->d + at, (uInt)(n + 4)));
}

static blob make_png(void) {
  blob b = {0};
  add(&b, "\x89PNG\r\n\x1a\n", 8);
  uint8_t ihdr[13] = {0, 0, 0, GOOD_W, 0, 0, 0, GOOD_H, 8, 2, 0, 0, 0};
  png_chunk(&b, "IHDR", ihdr, sizeof ihdr);
  uint8_t raw[(GOOD_W * 3 + 1) * GOOD_H], z[sizeof raw + 64];
  for (int y = 0; y < GOOD_H; y++) {
    raw[y * (GOOD_W * 3 + 1)] = (uint8_t)(y % 5); /* every filter type */
    memcpy(raw + y * (GOOD_W * 3 + 1) + 1, pixels() + y * GOOD_W * 3,
           GOOD_W * 3);
  }
  uLongf zn = sizeof z;
  if (compress(z, &zn, raw, sizeof raw) != Z_OK)
    __builtin_trap();
  png_chunk(&b, "IDAT", z, zn);
  png_chunk(&b, "IEND", (const uint8_t *)"", 0);
  return b;
}

/* j with every quantization table (0-3) and Huffman table (DC and AC 0-3)
 * defined again between its scan and EOI: libjpeg reads them there and
 * keeps them in the handle for the next image. */
static blob with_foreign_tables(const blob *j) {
  blob b = {0};
  add(&b, j->d, j->n - 2);
  uint8_t dqt[4 + 4 * 65] = {0xFF, 0xDB, 0x01, 0x06};
  for (int t = 0; t < 4; t++) {
    dqt[4 + 65 * t] = (uint8_t)t;
    for (int i = 1; i <= 64; i++)
      dqt[4 + 65 * t + i] = (uint8_t)(2 + t + i % 5);
  }
  add(&b, dqt, sizeof dqt);
  for (int t = 0; t < 8; t++) {
    /* DC: 12 four-bit codes; AC: 162 eight-bit codes */
    size_t count = t < 4 ? 12 : 162;
    uint8_t h[4 + 17 + 162] = {0xFF, 0xC4, (uint8_t)((19 + count) >> 8),
                               (uint8_t)(19 + count),
                               (uint8_t)((t / 4) << 4 | t % 4)};
    h[4 + (t < 4 ? 4 : 8)] = (uint8_t)count;
    for (size_t i = 0; i < count; i++)
      h[21 + i] = (uint8_t)(t < 4 ? 11 - i : (i * 37 + 1) & 0xFF);
    add(&b, h, 21 + count);
  }
  add(&b, "\xFF\xD9", 2);
  return b;
}

/* A 2x3 big-endian int16 array in Fortran order (.npy version 1.0). */
static blob make_npy(void) {
  static const char hdr[] =
      "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }";
  static const uint8_t v[12] = {0, 1, 0, 4, 0, 2, 0, 5, 0, 3, 0, 6};
  blob b = {0};
  add(&b, "\x93NUMPY\x01\x00\x76\x00", 10); /* header: 118 bytes */
  add(&b, hdr, sizeof hdr - 1);
  while (b.n < 127)
    add(&b, " ", 1);
  add(&b, "\n", 1);
  add(&b, v, sizeof v);
  return b;
}

enum { N_GOOD = 3, N_OPTS = 3, MAX_OUT = 24 * 16 * 3 };

static struct {
  blob image[N_GOOD];
  blob foreign_tables;
  blob npy;
  uint8_t ref[N_GOOD][N_OPTS][MAX_OUT];
  int16_t npy_ref[6];
} good;

static wds__image_opts opts(int k, size_t size) {
  wds__image_opts o = {.width = 24,
                       .height = 16,
                       .channels = 3,
                       .crop = WDS_CROP_CENTER,
                       .scale_min = 0.08,
                       .scale_max = 1.0,
                       .rng_key = size};
  if (k == 1) {
    o.channels = 1;
    o.crop = WDS_CROP_RANDOM;
  } else if (k == 2) {
    o.width = o.height = 3;
    o.crop = WDS_CROP_RANDOM;
    o.scale_min = 0.5;
  }
  return o;
}

static size_t out_bytes(const wds__image_opts *o) {
  return (size_t)o->width * (size_t)o->height * (size_t)o->channels;
}

static void init_good(void) {
  good.image[0] = make_jpeg(0);
  good.image[1] = make_jpeg(TJFLAG_PROGRESSIVE);
  good.image[2] = make_png();
  good.foreign_tables = with_foreign_tables(&good.image[0]);
  for (int g = 0; g < N_GOOD; g++)
    for (int k = 0; k < N_OPTS; k++) {
      wds__decoder *f = new_decoder();
      wds__image_opts o = opts(k, 0);
      wds__err e;
      if (wds__decode_image(f, good.image[g].d, good.image[g].n, &o,
                            good.ref[g][k], &e) != WDS_OK)
        __builtin_trap();
      wds__decoder_free(f);
    }
  good.npy = make_npy();
  wds__npy a;
  wds__err e;
  if (wds__npy_parse(good.npy.d, good.npy.n, &a, &e) != WDS_OK ||
      a.data_bytes != sizeof good.npy_ref)
    __builtin_trap();
  wds__npy_copy(&a, good.npy_ref);
}

/* ---- checks ---- */

static void check_image(wds__decoder *d, const uint8_t *data, size_t size,
                        const wds__image_opts *o) {
  size_t n = out_bytes(o);
  uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);
  wds__err e, fe;
  e.msg[0] = fe.msg[0] = '\0';
  int rc = wds__decode_image(d, data, size, o, a, &e);
  if (rc != WDS_OK && e.msg[0] == '\0')
    __builtin_trap();
  if (rc == WDS_OK && o->crop == WDS_CROP_RANDOM) {
    if (wds__decode_image(d, data, size, o, b, &e) != WDS_OK ||
        memcmp(a, b, n) != 0)
      __builtin_trap();
  }
  wds__decoder *f = new_decoder();
  int frc = wds__decode_image(f, data, size, o, c, &fe);
  wds__decoder_free(f);
  if (frc != rc || (rc == WDS_OK && memcmp(a, c, n) != 0) ||
      (rc != WDS_OK && strcmp(e.msg, fe.msg) != 0))
    __builtin_trap();
  free(a);
  free(b);
  free(c);
}

/* d decodes every known-good input as a fresh decoder did. */
static void check_good(wds__decoder *d) {
  uint8_t out[MAX_OUT];
  wds__err e;
  for (int g = 0; g < N_GOOD; g++)
    for (int k = 0; k < N_OPTS; k++) {
      wds__image_opts o = opts(k, 0);
      if (wds__decode_image(d, good.image[g].d, good.image[g].n, &o, out, &e) !=
              WDS_OK ||
          memcmp(out, good.ref[g][k], out_bytes(&o)) != 0)
        __builtin_trap();
    }
  wds__npy a;
  int16_t v[6];
  if (wds__npy_parse(good.npy.d, good.npy.n, &a, &e) != WDS_OK ||
      a.data_bytes != sizeof v)
    __builtin_trap();
  wds__npy_copy(&a, v);
  if (memcmp(v, good.npy_ref, sizeof v) != 0)
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static wds__decoder *d; /* reused, as a worker reuses its decoder */
  if (!d) {
    init_good();
    d = new_decoder();
  }
  uint8_t scratch[MAX_OUT];
  wds__err e;
  wds__image_opts o = opts(0, 0);
  if (wds__decode_image(d, good.foreign_tables.d, good.foreign_tables.n, &o,
                        scratch, &e) != WDS_OK ||
      memcmp(scratch, good.ref[0][0], out_bytes(&o)) != 0)
    __builtin_trap();
  for (int k = 0; k < N_OPTS; k++) {
    o = opts(k, size);
    check_image(d, data, size, &o);
  }
  check_good(d);

  wds__npy a;
  e.msg[0] = '\0';
  int rc = wds__npy_parse(data, size, &a, &e);
  if (rc != WDS_OK && e.msg[0] == '\0')
    __builtin_trap();
  if (rc == WDS_OK) {
    if (a.data < data || a.data_bytes > size ||
        a.data + a.data_bytes > data + size)
      __builtin_trap();
    void *dst = malloc(a.data_bytes ? a.data_bytes : 1);
    wds__npy_copy(&a, dst);
    free(dst);
  }
  int64_t v;
  e.msg[0] = '\0';
  rc = wds__decode_int(data, size, &v, &e);
  if (rc != WDS_OK && e.msg[0] == '\0')
    __builtin_trap();
  check_good(d);
  return 0;
}
