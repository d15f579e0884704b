/* items.c — recycled blocks and the items workers hand to the collator.
 *
 * A block (internal.h: blk_head) is malloc memory with its capacity and
 * owning worker in front. A worker allocates from its own pool (`local`,
 * no lock); the collator hands blocks back in bulk after each batch into
 * the pool's `shared` list (under its mutex), which the worker takes over
 * whole when its own runs dry. Sizes only grow to the largest seen; a pool
 * keeps at most `limit` blocks. The fast path of wds__blk_alloc (the last
 * block fits) is inline in internal.h.
 *
 * An item is one block: the header and a wds__field_value per output
 * field. Its raw sample and owned field data are blocks too. */
#include "loader/internal.h"

#include <sys/mman.h>

#define BLK_POPULATE_BYTES ((size_t)64 << 10)

void *wds__blk_alloc_slow(blk_pool *bp, int owner, size_t need) {
  if (!bp)
    goto fresh;
  if (bp->local_len == 0) {
    pthread_mutex_lock(&bp->mu);
    void **t = bp->local;
    size_t tc = bp->local_cap;
    bp->local = bp->shared;
    bp->local_cap = bp->shared_cap;
    bp->local_len = bp->shared_len;
    bp->shared = t;
    bp->shared_cap = tc;
    bp->shared_len = 0;
    pthread_mutex_unlock(&bp->mu);
  }
  while (bp->local_len > 0) {
    void *p = bp->local[--bp->local_len];
    if (((blk_head *)p - 1)->cap >= need)
      return p;
    wds__blk_free(p); /* too small: sizes grow to the largest seen */
  }
fresh:;
  size_t cap = need + need / 8 + 64;
  blk_head *h = malloc(sizeof *h + cap);
  if (!h)
    return NULL;
  h->cap = cap;
  h->owner = owner;
#ifdef MADV_POPULATE_WRITE
  /* A large block is about to be written whole (a field read into it, a
   * decoded image): its pages are made in one call instead of one fault
   * each, which costs several times more on a VM. Only the bytes asked
   * for, not the slack, so the resident size does not grow. */
  if (need >= BLK_POPULATE_BYTES) {
    uintptr_t a = ((uintptr_t)h + 4095) & ~(uintptr_t)4095;
    uintptr_t z = ((uintptr_t)h + sizeof *h + need) & ~(uintptr_t)4095;
    if (z > a)
      (void)madvise((void *)a, z - a, MADV_POPULATE_WRITE);
  }
#endif
  return h + 1;
}

void wds__blk_flush(blk_pool *bp, blk_returns *r) {
  if (r->len == 0)
    return;
  pthread_mutex_lock(&bp->mu);
  size_t i = 0;
  if (bp->shared_len + r->len > bp->shared_cap && bp->shared_cap < bp->limit) {
    size_t c = bp->shared_len + r->len;
    if (c > bp->limit)
      c = bp->limit;
    void **nv = realloc(bp->shared, c * sizeof *nv);
    if (nv) {
      bp->shared = nv;
      bp->shared_cap = c;
    }
  }
  for (; i < r->len && bp->shared_len < bp->shared_cap; i++)
    bp->shared[bp->shared_len++] = r->v[i];
  pthread_mutex_unlock(&bp->mu);
  for (; i < r->len; i++)
    wds__blk_free(r->v[i]);
  r->len = 0;
}

void wds__blk_pool_destroy(blk_pool *bp) {
  for (size_t i = 0; i < bp->shared_len; i++)
    wds__blk_free(bp->shared[i]);
  for (size_t i = 0; i < bp->local_len; i++)
    wds__blk_free(bp->local[i]);
  free(bp->shared);
  free(bp->local);
  pthread_mutex_destroy(&bp->mu);
  memset(bp, 0, sizeof *bp);
}

void wds__item_free(item *it, size_t nfields) {
  if (!it)
    return;
  if (it->kind == ITEM_SAMPLE)
    for (size_t i = 0; i < nfields; i++)
      if (it->f[i].owned)
        wds__blk_free(it->f[i].data);
  free(it->msg);
  wds__raw_free(it->raw);
  wds__blk_free(it);
}

void wds__raw_free(raw_sample *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->nfields; i++)
    wds__blk_free(r->f[i].blk);
  wds__blk_free(r);
}

item *wds__error_item(size_t nfields, int status, const char *msg) {
  item *it = wds__item_new(NULL, 0, nfields, ITEM_ERROR);
  if (it) {
    it->status = status;
    it->msg = strdup(msg);
  }
  return it;
}

raw_sample *wds__raw_hole(blk_pool *bp, int owner, size_t shard) {
  raw_sample *r = wds__blk_alloc(bp, owner, sizeof *r + 1);
  if (!r)
    return NULL;
  memset(r, 0, sizeof *r + 1);
  r->shard = shard;
  r->hole = 1;
  r->key = (const char *)(r + 1); /* "" */
  r->all_exts = r->key;
  return r;
}
