/* fuzz_s3_listing.c — libFuzzer target for S3's XML as wds reads it
 * (shards/s3.c, through libxml2 loaded on first use): one ListObjectsV2
 * page (wds__s3_parse_listing: the keys, IsTruncated,
 * NextContinuationToken) and an error body (wds__s3_error_detail: its
 * <Code> and <Message>). Built as a libFuzzer binary with -DWDS_FUZZ=ON
 * (clang), and always as a replay driver (fuzz_replay.c) over
 * tests/fuzz/corpus/s3_listing; scripts/fuzz.sh runs it.
 *
 * Besides the sanitizers (and libxml2's own bounds: no network, no
 * entities expanded past its limits) it checks the contract: a failure has
 * a message and leaves no continuation token; every key handed out is a
 * non-empty string; the error detail is a terminated, printable string
 * within its buffer. Without libxml2 (a build without it) both calls fail
 * cleanly, which is checked too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "shards/s3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int add_key(void *ud, const char *key) {
  size_t *n = ud;
  if (!key || !*key)
    abort();
  (*n)++;
  return *n > 100000 ? WDS_ERR_LIMIT : WDS_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t keys = 0;
  int truncated = -1;
  char *next = (char *)1;
  wds__err e;
  e.msg[0] = '\0';
  int rc = wds__s3_parse_listing((const char *)data, size, add_key, &keys,
                                 &truncated, &next, &e);
  if (rc != WDS_OK && (!e.msg[0] || next))
    abort();
  if (truncated != 0 && truncated != 1)
    abort();
  if (next) {
    volatile size_t n = strlen(next); /* a string: ASan checks its end */
    (void)n;
  }
  free(next);

  char detail[160];
  memset(detail, 'x', sizeof detail);
  wds__s3_error_detail((const char *)data, size, detail, 120);
  if (!memchr(detail, '\0', 120) || detail[120] != 'x' ||
      wds__esc_needed(detail, 0))
    abort();
  return 0;
}
