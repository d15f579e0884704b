/* fuzz_decode.c — libFuzzer target for the field decoders: the image
 * decoder (JPEG via TurboJPEG, PNG via libpng, resize and crop) with a few
 * option sets, the .npy parser and copy, and the integer parser. Built as a
 * libFuzzer binary with -DWDS_FUZZ=ON (clang), and always as a replay driver
 * (fuzz_replay.c) over tests/fuzz/corpus/decode.
 *
 * The pixel limit is lowered to 2^22 so that the fuzzer's memory limit is
 * not hit by legitimately large headers. Besides the sanitizers it checks
 * the contract: every failure carries a message, a parsed .npy lies inside
 * the input, and decoding is a pure function of (data, opts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_image(wds__decoder *d, const uint8_t *data, size_t size,
                        const wds__image_opts *o) {
  size_t n = (size_t)o->width * (size_t)o->height * (size_t)o->channels;
  uint8_t *a = malloc(n), *b = malloc(n);
  wds__err e;
  e.msg[0] = '\0';
  int rc = wds__decode_image(d, data, size, o, a, &e);
  if (rc != WDS_OK && e.msg[0] == '\0')
    __builtin_trap();
  if (rc == WDS_OK && o->crop == WDS_CROP_RANDOM) {
    if (wds__decode_image(d, data, size, o, b, &e) != WDS_OK ||
        memcmp(a, b, n) != 0)
      __builtin_trap();
  }
  free(a);
  free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static wds__decoder *d; /* reused, as a worker reuses its decoder */
  if (!d) {
    d = wds__decoder_new();
    if (!d)
      return 0;
    wds__decoder_set_max_pixels(d, (uint64_t)1 << 22);
  }
  wds__image_opts o = {.width = 24, .height = 16, .channels = 3,
                       .crop = WDS_CROP_CENTER, .scale_min = 0.08,
                       .scale_max = 1.0, .rng_key = size};
  check_image(d, data, size, &o);
  o.channels = 1;
  o.crop = WDS_CROP_RANDOM;
  check_image(d, data, size, &o);
  o.width = o.height = 3;
  o.channels = 3;
  o.scale_min = 0.5;
  check_image(d, data, size, &o);

  wds__npy a;
  wds__err e;
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
  return 0;
}
