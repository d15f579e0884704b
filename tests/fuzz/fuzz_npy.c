/* fuzz_npy.c — libFuzzer target for the .npy parser alone
 * (wds__npy_parse and wds__npy_copy, pipeline/npy.c), which fuzz_decode
 * also reaches but slowly (its image decodes dominate its run). Built as a
 * libFuzzer binary with -DWDS_FUZZ=ON (clang), and always as a replay
 * driver (fuzz_replay.c) over tests/fuzz/corpus/npy and corpus/decode;
 * scripts/fuzz.sh runs it.
 *
 * Besides the sanitizers it checks the contract: a failure has a message;
 * a parsed array lies inside the input (data and data_bytes), its
 * data_bytes is count times the dtype's size, its count the product of
 * its shape, its ndim within 0..7; the copy writes data_bytes and no more
 * (a guard after it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  wds__npy a;
  wds__err e;
  e.msg[0] = '\0';
  int rc = wds__npy_parse(data, size, &a, &e);
  if (rc != WDS_OK) {
    if (rc > 0 || !e.msg[0])
      abort();
    return 0;
  }
  if (a.ndim < 0 || a.ndim > 7 || a.data < data ||
      a.data_bytes > size - (size_t)(a.data - data))
    abort();
  size_t count = 1;
  for (int i = 0; i < a.ndim; i++) {
    if (a.shape[i] < 0)
      abort();
    count *= (size_t)a.shape[i];
  }
  if (count != a.count)
    abort();
  if (a.count && a.data_bytes % a.count)
    abort();
  if (a.data_bytes > ((size_t)64 << 20))
    return 0; /* fine, but not copied: the fuzzer's memory */
  uint8_t *dst = malloc(a.data_bytes + 8);
  if (!dst)
    return 0;
  memset(dst + a.data_bytes, 0xA5, 8);
  wds__npy_copy(&a, dst);
  for (int i = 0; i < 8; i++)
    if (dst[a.data_bytes + i] != 0xA5)
      abort();
  free(dst);
  return 0;
}
