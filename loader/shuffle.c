/* shuffle.c — the shuffle buffer, WebDataset's _shuffle: no threads, no
 * loader; its input comes from a pull function (a worker's feed, or a
 * test's list).
 *
 * The pick order is a pure function of the RNG key and of the input's
 * sizes, never of timing. Memory: at most cap samples and about cap_bytes
 * of field data (plus one sample). */
#include "loader/internal.h"

int wds__shuffle_init(wds__shuffle *sh, size_t cap, size_t initial,
                      uint64_t cap_bytes, uint64_t key) {
  memset(sh, 0, sizeof *sh);
  wds__rng_init(&sh->rng, key);
  sh->cap = cap;
  sh->cap_bytes = cap_bytes;
  sh->initial = initial == 0 || initial > cap ? cap : initial;
  if (cap > 1 && !(sh->buf = malloc(cap * sizeof *sh->buf)))
    return WDS_ERR_NOMEM;
  return WDS_OK;
}

static void shuffle_add(wds__shuffle *sh, raw_sample *s) {
  sh->buf[sh->len++] = s;
  sh->bytes += s->data_bytes;
}

static raw_sample *shuffle_pick(wds__shuffle *sh) {
  size_t k = (size_t)wds__rng_below(&sh->rng, sh->len);
  raw_sample *s = sh->buf[k];
  sh->buf[k] = sh->buf[--sh->len];
  sh->bytes -= s->data_bytes;
  return s;
}

/* Per input: add it, add one more while under capacity, and emit a random
 * element once `initial` are buffered; at the end drain in random order.
 * Capacity is counted in samples and in bytes: at cap_bytes the buffer is
 * full (no second add) and, like one at `initial`, emits, so it never holds
 * much more than cap_bytes plus one sample. Both depend on the data only,
 * so the order stays a pure function of the configuration.
 * Returns 0 with *out (NULL at the end) or -1 when pull failed. */
int wds__shuffle_next(wds__shuffle *sh, wds__sample_pull pull, void *ctx,
                      raw_sample **out) {
  *out = NULL;
  if (sh->cap <= 1)
    return pull(ctx, out);
  for (;;) {
    if (!sh->src_done) {
      raw_sample *s;
      if (pull(ctx, &s) != 0)
        return -1;
      if (!s) {
        sh->src_done = 1;
        continue;
      }
      shuffle_add(sh, s);
      if (sh->len < sh->cap && sh->bytes < sh->cap_bytes) {
        if (pull(ctx, &s) != 0)
          return -1;
        if (s)
          shuffle_add(sh, s);
        else
          sh->src_done = 1;
      }
      if (sh->len >= sh->initial || sh->bytes >= sh->cap_bytes) {
        *out = shuffle_pick(sh);
        return 0;
      }
      continue;
    }
    if (sh->len > 0)
      *out = shuffle_pick(sh);
    return 0;
  }
}

void wds__shuffle_free(wds__shuffle *sh) {
  for (size_t i = 0; i < sh->len; i++)
    wds__blk_free(sh->buf[i]);
  free(sh->buf);
  sh->buf = NULL;
  sh->len = 0;
}
