/* shuffle.c — the shuffle buffer, WebDataset's _shuffle: no threads, no
 * loader; its input comes from a pull function (a worker's feed, or a
 * test's list).
 *
 * The pick order is a pure function of the RNG key and of the input's
 * sizes, never of timing. Memory: at most cap samples, and field data
 * under cap_bytes plus one sample (or two samples, when one alone is over
 * cap_bytes; shuffle.h says how). The per-sample path (add, pick, next)
 * is inline in shuffle.h, where the worker's loop calls it. */
#include "loader/shuffle.h"

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

void wds__shuffle_free(wds__shuffle *sh) {
  for (size_t i = 0; i < sh->len; i++)
    wds__raw_free(sh->buf[i]);
  free(sh->buf);
  sh->buf = NULL;
  sh->len = 0;
}
