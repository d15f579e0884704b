/* fuzz_index.c — libFuzzer target for the shard-set index parser
 * (loader/index.c): strict JSON with escapes, numbers, nesting and skipped
 * values. The input is parsed from a buffer that is not NUL-terminated.
 * Besides the sanitizers it checks the contract: on failure a message and an
 * empty index; on success non-empty urls with resolved paths, and every url
 * found again by wds__index_lookup with its own count (or reported stale:
 * lookups stat local paths, which may exist on the fuzzing machine); parsed
 * again with WDS__INDEX_SAMPLES, the per-sample detail is consistent; every
 * accepted count fits its tar_bytes; the loader's parse
 * (WDS__INDEX_COUNT_SAMPLES) lies between the other two in strictness.
 * With WDS__INDEX_HASHES (the "sha256" objects of `wds index --hashes`):
 * never accepts what the count parse rejects; kept hashes are one list per
 * sample (nsamples of them, ascending starts) or none; checking a member
 * against them never crashes, and the full parse keeps the same hashes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "loader/index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An exact-size copy, so reading past the end is caught by ASan. */
  char *text = malloc(size ? size : 1);
  if (!text)
    return 0;
  if (size)
    memcpy(text, data, size);
  wds__index ix;
  wds__err e;
  e.msg[0] = '\0';
  int rc = wds__index_parse(text, size, "dir", &ix, &e);
  if (rc != WDS_OK) {
    if (e.msg[0] == '\0' || ix.count != 0 || ix.shards != NULL)
      abort();
    if (wds__esc_needed(e.msg, 0)) /* printable (base/text.h) */
      abort();
  } else {
    for (size_t i = 0; i < ix.count; i++) {
      const wds__index_entry *s = &ix.shards[i];
      if (!s->url || !s->url[0] || !s->path || s->filesize < -1)
        abort();
      uint64_t tb = s->tar_bytes >= 0 ? (uint64_t)s->tar_bytes : 0;
      if (s->tar_bytes >= 0 && s->nsamples > (tb >= 1024 ? tb / 512 - 1 : 0))
        abort();
      uint64_t n = 0;
      int lr = wds__index_lookup(&ix, s->url, &n, &e);
      if (lr == WDS_OK ? n != s->nsamples : lr != WDS_ERR_CORRUPT)
        abort();
    }
  }
  wds__index_free(&ix);
  /* Again keeping the per-sample detail: it never accepts what the plain
   * parse rejects, and a kept list has nsamples entries. */
  int rc2 =
      wds__index_parse_flags(text, size, "dir", WDS__INDEX_SAMPLES, &ix, &e);
  if (rc2 == WDS_OK) {
    if (rc != WDS_OK)
      abort();
    for (size_t i = 0; i < ix.count; i++) {
      const wds__index_entry *s = &ix.shards[i];
      if (s->has_samples && s->sample_count != s->nsamples)
        abort();
      for (size_t j = 0; j < s->sample_count; j++)
        if (!s->samples[j].key ||
            (s->samples[j].field_count && !s->samples[j].fields))
          abort();
    }
  } else if (e.msg[0] == '\0' || ix.count != 0 || ix.shards != NULL) {
    abort();
  }
  wds__index_free(&ix);
  int rc3 = wds__index_parse_flags(text, size, "dir", WDS__INDEX_COUNT_SAMPLES,
                                   &ix, &e);
  if ((rc2 == WDS_OK && rc3 != WDS_OK) || (rc3 == WDS_OK && rc != WDS_OK))
    abort();
  if (rc3 == WDS_OK)
    for (size_t i = 0; i < ix.count; i++)
      if (ix.shards[i].has_samples || ix.shards[i].samples)
        abort(); /* counted, not kept */
  wds__index_free(&ix);
  wds__index hx, fx;
  int rc4 = wds__index_parse_flags(
      text, size, "dir", WDS__INDEX_COUNT_SAMPLES | WDS__INDEX_HASHES, &hx, &e);
  if (rc4 == WDS_OK && rc3 != WDS_OK)
    abort();
  if (rc4 != WDS_OK && (hx.count != 0 || e.msg[0] == '\0'))
    abort();
  for (size_t i = 0; rc4 == WDS_OK && i < hx.count; i++) {
    const wds__index_hashes *h = &hx.shards[i].hashes;
    if (!h->count) {
      if (h->start || h->m || h->nm)
        abort();
      continue;
    }
    if (h->count != hx.shards[i].nsamples || h->start[0] != 0 ||
        h->start[h->count] != h->nm)
      abort();
    for (size_t j = 0; j < h->count; j++)
      if (h->start[j] > h->start[j + 1])
        abort();
    wds__err he;
    (void)wds__index_hash_check(h, 0, "txt", text, size, &he);
    if (wds__index_hash_check(h, h->count, "txt", "", 0, &he) == WDS_OK)
      abort();
  }
  int rc5 = wds__index_parse_flags(
      text, size, "dir", WDS__INDEX_SAMPLES | WDS__INDEX_HASHES, &fx, &e);
  if (rc5 == WDS_OK && (rc2 != WDS_OK || rc4 != WDS_OK))
    abort();
  for (size_t i = 0; rc5 == WDS_OK && i < fx.count; i++) {
    const wds__index_hashes *a = &fx.shards[i].hashes,
                            *b = &hx.shards[i].hashes;
    if (a->count != b->count || a->nm != b->nm ||
        (a->nm && memcmp(a->m, b->m, a->nm * sizeof *a->m) != 0))
      abort();
  }
  wds__index_free(&fx);
  wds__index_free(&hx);
  free(text);
  return 0;
}
