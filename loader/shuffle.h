/* shuffle.h — the shuffle buffer (shuffle.c), WebDataset's _shuffle.
 * Internal.
 *
 * No threads and no loader: its input comes from a pull function (a
 * worker's feed, or a test's list). wds__shuffle_next runs once per
 * sample in the worker's loop, so it is inline here (the worker's pull,
 * a constant there, is then called directly). */
#ifndef WDS_LOADER_SHUFFLE_H
#define WDS_LOADER_SHUFFLE_H

#include "loader/internal.h"

/* Where the shuffle buffer's input comes from: 0 with *out (NULL at the
 * end), or -1 when the caller must stop. */
typedef int (*wds__sample_pull)(void *ctx, wds__raw_sample **out);

typedef struct wds__shuffle {
  wds__raw_sample **buf;
  size_t len, cap, initial;
  uint64_t bytes, cap_bytes; /* field data held, and its bound */
  int src_done;
  wds__rng rng;
} wds__shuffle;

/* cap samples (0/1: no shuffling), at most cap_bytes of field data, the
 * first output once `initial` are buffered (0 or more than cap: cap), the
 * picks drawn from an RNG keyed by key. WDS_OK or WDS_ERR_NOMEM. */
int wds__shuffle_init(wds__shuffle *sh, size_t cap, size_t initial,
                      uint64_t cap_bytes, uint64_t key);

/* Frees the samples still buffered (blocks) and the buffer. */
void wds__shuffle_free(wds__shuffle *sh);

static inline void wds__shuffle_add(wds__shuffle *sh, wds__raw_sample *s) {
  WDS__ASSERT(sh->len < sh->cap); /* never more than cap samples */
  /* input only under the byte cap, or to a single sample (next, below) */
  WDS__ASSERT(sh->bytes < sh->cap_bytes || sh->len <= 1);
  sh->buf[sh->len++] = s;
  sh->bytes += s->data_bytes;
}

static inline wds__raw_sample *wds__shuffle_pick(wds__shuffle *sh) {
  WDS__ASSERT(sh->len > 0);
  size_t k = (size_t)wds__rng_below(&sh->rng, sh->len);
  wds__raw_sample *s = sh->buf[k];
  sh->buf[k] = sh->buf[--sh->len];
  /* bytes is the sum of the buffered samples' data_bytes. */
  WDS__ASSERT(sh->bytes >= s->data_bytes &&
              (sh->len > 0 || sh->bytes == s->data_bytes));
  sh->bytes -= s->data_bytes;
  return s;
}

/* Per input: add it, add one more while under capacity, and emit a random
 * element once `initial` are buffered; at the end drain in random order.
 * Capacity is counted in samples and in bytes: at cap_bytes the buffer is
 * full (no second add) and, like one at `initial`, emits; while it is still
 * at cap_bytes after that (samples of mixed sizes), each call emits without
 * reading, down to one sample. So the field data it holds is under
 * cap_bytes plus the sample just added, or is two samples when one alone
 * is over cap_bytes. All of it depends on the data only, so the order
 * stays a pure function of the configuration (and is WebDataset's while
 * the byte cap does not bind). Returns 0 with *out (NULL at the end) or -1
 * when pull failed. */
static inline int wds__shuffle_next(wds__shuffle *sh, wds__sample_pull pull,
                                    void *ctx, wds__raw_sample **out) {
  *out = NULL;
  if (sh->cap <= 1)
    return pull(ctx, out);
  for (;;) {
    if (!sh->src_done) {
      if (sh->bytes >= sh->cap_bytes && sh->len > 1) {
        *out = wds__shuffle_pick(sh); /* over the byte cap: no input */
        return 0;
      }
      wds__raw_sample *s;
      if (pull(ctx, &s) != 0)
        return -1;
      if (!s) {
        sh->src_done = 1;
        continue;
      }
      wds__shuffle_add(sh, s);
      if (sh->len < sh->cap && sh->bytes < sh->cap_bytes) {
        if (pull(ctx, &s) != 0)
          return -1;
        if (s)
          wds__shuffle_add(sh, s);
        else
          sh->src_done = 1;
      }
      if (sh->len >= sh->initial || sh->bytes >= sh->cap_bytes) {
        *out = wds__shuffle_pick(sh);
        return 0;
      }
      continue;
    }
    if (sh->len > 0)
      *out = wds__shuffle_pick(sh);
    return 0;
  }
}

#endif
