/* items.c — recycled blocks and the items workers hand to the collator.
 *
 * A block (internal.h: wds__blk_head) is malloc memory with its capacity and
 * owning worker in front, or, when small and fresh, a piece of a larger
 * chunk ("Carving" below). A worker allocates from its own pool (`local`,
 * no lock); the collator hands blocks back in bulk after each batch into
 * the pool's `shared` list (under its mutex), which the worker takes over
 * whole when its own runs dry. A small request (16 KiB or less) is never
 * served by a block over 64 KiB (wds__blk_fits); when the top of the list
 * is such a block it looks BLK_SCAN blocks down, then in `shared`, for a
 * small one before carving a fresh one (the collator hands back small and
 * large blocks mixed). Sizes only grow to the largest seen; a pool
 * keeps at most `limit` blocks. The fast path of wds__blk_alloc (the last
 * block fits) is inline in internal.h.
 *
 * An item is one block: the header and a wds__field_value per output
 * field. Its raw sample and owned field data are blocks too. */
#include "loader/internal.h"

#include "base/mem.h"

#include <assert.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define BLK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BLK_ASAN 1
#endif
#endif
#ifdef BLK_ASAN
#include <sanitizer/asan_interface.h>
#define BLK_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define BLK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#define BLK_GAP ((size_t)32) /* a poisoned gap after each carved block */
#else
#define BLK_POISON(p, n) ((void)(p), (void)(n))
#define BLK_UNPOISON(p, n) ((void)(p), (void)(n))
#define BLK_GAP ((size_t)0)
#endif

#define BLK_POPULATE_BYTES ((size_t)64 << 10)

/* ---- Carving ----
 *
 * A loader makes most of its blocks while the first shuffle buffers fill:
 * for 1 KB samples, ten thousand blocks per worker. Each its own malloc,
 * they grow the worker's malloc arena a page at a time, and glibc grows a
 * thread's arena with one mprotect(2) per page besides the page fault
 * (7,300 mprotect calls and 7,000 faults in one 2-worker epoch of the 1 KB
 * set). So a fresh block of at most BLK_CARVE_MAX bytes is carved from the
 * pool's current chunk instead (chunks of 64 KiB, doubling to 1 MiB, their
 * pages made in one madvise(MADV_POPULATE_WRITE)). A carved block is
 * recycled like any other; freed, it drops its chunk's reference, and the
 * chunk is freed with its last block. Memory a chunk holds for blocks
 * already freed is not reused, so a pool carves at most BLK_CARVE_BUDGET
 * bytes of chunks in its life (the loader's), then mallocs as before.
 * Under AddressSanitizer the unused parts of a chunk, a gap after each
 * block and freed carved blocks are poisoned, so overflows and uses after
 * free are still caught. */

#define BLK_CARVE_MAX ((size_t)16 << 10)
#define BLK_CHUNK_MIN ((size_t)64 << 10)
#define BLK_CHUNK_MAX ((size_t)1 << 20)
#define BLK_CARVE_BUDGET ((uint64_t)64 << 20)

static_assert(sizeof(wds__blk_head) == 16 && sizeof(wds__blk_chunk) == 16,
              "blocks and chunks keep malloc's 16-byte alignment");

static void chunk_unref(wds__blk_chunk *c) {
  size_t refs = atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel);
  WDS__ASSERT(refs >= 1); /* a block or the pool held it */
  if (refs == 1) {
    BLK_UNPOISON(c, c->size);
    free(c);
  }
}

void wds__blk_free_carved(wds__blk_head *h) {
  wds__blk_chunk *c = (wds__blk_chunk *)(void *)((char *)h - h->chunk_off);
  WDS__ASSERT(h->chunk_off >= sizeof *c &&
              h->chunk_off + sizeof *h + h->cap <= c->size);
  BLK_POISON(h, sizeof *h + h->cap);
  chunk_unref(c);
}

/* A carved block of `bytes` (header included, a multiple of 16), or NULL
 * when the pool's budget is spent or no chunk can be had. */
static wds__blk_head *carve(wds__blk_pool *bp, size_t bytes) {
  size_t take = bytes + BLK_GAP;
  if (bp->carve_left < take) {
    size_t size = bp->chunk_next ? bp->chunk_next : BLK_CHUNK_MIN;
    if (bp->carved + size > BLK_CARVE_BUDGET)
      return NULL;
    wds__blk_chunk *c = malloc(size);
    if (!c)
      return NULL;
    wds__populate_write(c, size);
    atomic_init(&c->refs, 1);
    c->size = size;
    BLK_POISON(c + 1, size - sizeof *c);
    if (bp->chunk)
      chunk_unref(bp->chunk);
    bp->chunk = c;
    bp->carve = (char *)(c + 1);
    bp->carve_left = size - sizeof *c;
    bp->carved += size;
    bp->chunk_next = size < BLK_CHUNK_MAX ? 2 * size : BLK_CHUNK_MAX;
  }
  /* The current chunk holds the block, within the pool's budget. */
  WDS__ASSERT(bp->chunk && bp->carve_left >= take &&
              bp->carved <= BLK_CARVE_BUDGET);
  WDS__ASSERT(bp->carve >= (char *)(bp->chunk + 1) &&
              bp->carve + bp->carve_left ==
                  (char *)bp->chunk + bp->chunk->size);
  wds__blk_head *h = (wds__blk_head *)(void *)bp->carve;
  BLK_UNPOISON(h, bytes);
  h->chunk_off = (uint32_t)(bp->carve - (char *)bp->chunk);
  atomic_fetch_add_explicit(&bp->chunk->refs, 1, memory_order_relaxed);
  bp->carve += take;
  bp->carve_left -= take;
  return h;
}

/* How far down a free list a small request looks past large blocks. */
#define BLK_SCAN 16

/* A block of v's top BLK_SCAN that fits need (small), taken out of v (the
 * ones above it move down: the list's order is kept), or NULL. */
static void *take_small(void **v, size_t *len, size_t need) {
  size_t n = *len, stop = n > BLK_SCAN ? n - BLK_SCAN : 0;
  for (size_t i = n; i-- > stop;) {
    void *p = v[i];
    if (wds__blk_fits(((wds__blk_head *)p - 1)->cap, need)) {
      memmove(&v[i], &v[i + 1], (n - 1 - i) * sizeof *v);
      *len = n - 1;
      return p;
    }
  }
  return NULL;
}

void *wds__blk_alloc_slow(wds__blk_pool *bp, int owner, size_t need,
                          int populate, int *fresh) {
  if (fresh)
    *fresh = 0; /* recycled or carved: its pages are made */
  if (!bp)
    goto fresh;
  WDS__ASSERT(bp->local_len <= bp->local_cap);
  if (bp->local_len == 0) {
    pthread_mutex_lock(&bp->mu);
    WDS__ASSERT(bp->shared_len <= bp->shared_cap);
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
    void *p = bp->local[bp->local_len - 1];
    size_t cap = ((wds__blk_head *)p - 1)->cap;
    if (wds__blk_fits(cap, need)) {
      bp->local_len--;
      return p;
    }
    if (cap >= need) {
      /* Large, kept for a large request: a small block further down (the
       * collator hands back small and large mixed), else the shared list's,
       * else a fresh small one. */
      void *q = take_small(bp->local, &bp->local_len, need);
      if (!q) {
        pthread_mutex_lock(&bp->mu);
        q = take_small(bp->shared, &bp->shared_len, need);
        pthread_mutex_unlock(&bp->mu);
      }
      if (q)
        return q;
      break;
    }
    bp->local_len--;
    wds__blk_free(p); /* too small: sizes grow to the largest seen */
  }
fresh:;
  size_t cap = need + need / 8 + 64;
  wds__blk_head *h = NULL;
  if (bp && cap <= BLK_CARVE_MAX - sizeof *h) {
    cap = ((sizeof *h + cap + 15) & ~(size_t)15) - sizeof *h;
    h = carve(bp, sizeof *h + cap);
  }
  if (!h) {
    if (!(h = malloc(sizeof *h + cap)))
      return NULL;
    h->chunk_off = 0;
    if (fresh)
      *fresh = 1;
    /* A large block about to be written whole (a decoded image, a
     * deferred field's pread) is made at once. Only the bytes asked for,
     * not the slack, so the resident size does not grow; and never a block
     * a stream's bytes will be read into (populate 0): its size is a tar
     * header's claim, and the bytes may never come (populated, a 10 KB
     * shard claiming 1 GB made 1 GB resident per worker). The reader
     * populates such a block as its data arrives (wds__tar_read_into). */
    if (populate && need >= BLK_POPULATE_BYTES)
      wds__populate_write(h, sizeof *h + need);
  }
  h->cap = cap;
  h->owner = owner;
  WDS__ASSERT(cap >= need);
  return h + 1;
}

void wds__blk_flush(wds__blk_pool *bp, wds__blk_returns *r) {
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
  /* The shared list never grows past the pool's limit (the rest was
   * freed). */
  WDS__ASSERT(bp->shared_len <= bp->shared_cap && bp->shared_cap <= bp->limit);
  pthread_mutex_unlock(&bp->mu);
  for (; i < r->len; i++)
    wds__blk_free(r->v[i]);
  r->len = 0;
}

void wds__blk_pool_destroy(wds__blk_pool *bp) {
  for (size_t i = 0; i < bp->shared_len; i++)
    wds__blk_free(bp->shared[i]);
  for (size_t i = 0; i < bp->local_len; i++)
    wds__blk_free(bp->local[i]);
  free(bp->shared);
  free(bp->local);
  if (bp->chunk)
    chunk_unref(bp->chunk); /* freed now, or with its last block */
  pthread_mutex_destroy(&bp->mu);
  memset(bp, 0, sizeof *bp);
}

void wds__item_free(wds__item *it, size_t nfields) {
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

void wds__raw_free(wds__raw_sample *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->nfields; i++) {
    wds__blk_free(r->f[i].blk);
    wds__fh_put(r->f[i].fh);
  }
  wds__blk_free(r);
}

wds__item *wds__error_item(size_t nfields, int status, const char *msg) {
  wds__item *it = wds__item_new(NULL, 0, nfields, ITEM_ERROR);
  if (it) {
    it->status = status;
    it->msg = strdup(msg);
  }
  return it;
}

wds__raw_sample *wds__raw_hole(wds__blk_pool *bp, int owner, size_t shard) {
  wds__raw_sample *r = wds__blk_alloc(bp, owner, sizeof *r + 1);
  if (!r)
    return NULL;
  memset(r, 0, sizeof *r + 1);
  r->shard = shard;
  r->hole = 1;
  r->key = (const char *)(r + 1); /* "" */
  r->all_exts = r->key;
  return r;
}
