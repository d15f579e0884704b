/* test_blocks.c — the loader's recycled blocks (loader/items.c): small
 * fresh blocks carved from chunks, large ones malloc'd, the carving budget,
 * and chunks freed with their last block whichever thread frees it, also
 * after the pool is gone. Under AddressSanitizer the build also checks that
 * no block overlaps another and that every chunk is freed. */
#include <pthread.h>

#include "loader/internal.h"
#include "test.h"

static void pool_init(wds__blk_pool *bp) {
  memset(bp, 0, sizeof *bp);
  pthread_mutex_init(&bp->mu, NULL);
  bp->limit = 1 << 20;
}

static const wds__blk_head *head_of(const void *p) {
  return (const wds__blk_head *)p - 1;
}

/* Fills each block's whole capacity with its own byte, then checks every
 * block still holds it: blocks that overlapped would have overwritten one
 * another. */
static int fill_and_check(void **v, size_t n) {
  for (size_t i = 0; i < n; i++)
    memset(v[i], (int)(i % 251) + 1, head_of(v[i])->cap);
  for (size_t i = 0; i < n; i++) {
    const unsigned char *p = v[i];
    for (size_t k = 0; k < head_of(v[i])->cap; k++)
      if (p[k] != (unsigned char)(i % 251 + 1))
        return 0;
  }
  return 1;
}

TEST(small_fresh_blocks_are_carved) {
  wds__blk_pool bp;
  pool_init(&bp);
  enum { N = 3000 };
  static void *v[N];
  for (size_t i = 0; i < N; i++) {
    size_t need = 1 + (i * 7919) % 3000;
    v[i] = wds__blk_alloc(&bp, 3, need);
    ASSERT_TRUE(v[i] != NULL);
    ASSERT_TRUE(head_of(v[i])->chunk_off != 0);
    ASSERT_TRUE(head_of(v[i])->cap >= need);
    ASSERT_EQ_INT(head_of(v[i])->owner, 3);
    ASSERT_EQ_INT((uintptr_t)v[i] % 16, 0);
  }
  ASSERT_TRUE(fill_and_check(v, N));
  /* Freed in an order unrelated to carving: each chunk goes with its
   * last block (a leak or a double free shows under the sanitizers). */
  for (size_t i = 0; i < N; i += 2)
    wds__blk_free(v[i]);
  for (size_t i = 1; i < N; i += 2)
    wds__blk_free(v[i]);
  wds__blk_pool_destroy(&bp);
}

TEST(recycled_blocks_come_back_before_new_ones) {
  wds__blk_pool bp;
  pool_init(&bp);
  void *a = wds__blk_alloc(&bp, 0, 1000);
  void *b = wds__blk_alloc(&bp, 0, 1000);
  ASSERT_TRUE(a && b && a != b);
  wds__blk_returns r = {0};
  wds__blk_return(&r, a);
  wds__blk_return(&r, b);
  wds__blk_flush(&bp, &r);
  void *c = wds__blk_alloc(&bp, 0, 900);
  void *d = wds__blk_alloc(&bp, 0, 1000);
  ASSERT_TRUE((c == a && d == b) || (c == b && d == a));
  /* Too small for the next: freed, and a fresh block carved. */
  wds__blk_return(&r, c);
  wds__blk_flush(&bp, &r);
  void *e = wds__blk_alloc(&bp, 0, 5000);
  ASSERT_TRUE(e != NULL && head_of(e)->cap >= 5000);
  ASSERT_TRUE(head_of(e)->chunk_off != 0);
  free(r.v);
  wds__blk_free(d);
  wds__blk_free(e);
  wds__blk_pool_destroy(&bp);
}

TEST(large_blocks_and_no_pool_are_malloced) {
  wds__blk_pool bp;
  pool_init(&bp);
  void *big = wds__blk_alloc(&bp, 0, 64 << 10);
  void *loose = wds__blk_alloc(NULL, 0, 100);
  ASSERT_TRUE(big && loose);
  ASSERT_EQ_INT(head_of(big)->chunk_off, 0);
  ASSERT_EQ_INT(head_of(loose)->chunk_off, 0);
  memset(big, 1, head_of(big)->cap);
  memset(loose, 1, head_of(loose)->cap);
  wds__blk_free(big);
  wds__blk_free(loose);
  wds__blk_pool_destroy(&bp);
}

TEST(a_chunk_outlives_its_pool) {
  wds__blk_pool bp;
  pool_init(&bp);
  void *v[10];
  for (int i = 0; i < 10; i++)
    ASSERT_TRUE((v[i] = wds__blk_alloc(&bp, 0, 200)) != NULL);
  wds__blk_pool_destroy(&bp);
  ASSERT_TRUE(fill_and_check(v, 10));
  for (int i = 0; i < 10; i++)
    wds__blk_free(v[i]);
}

TEST(carving_stops_at_its_budget) {
  wds__blk_pool bp;
  pool_init(&bp);
  /* 15 KiB blocks: 64 MiB of chunks hold about 4,300 of them. */
  enum { N = 6000 };
  static void *v[N];
  size_t carved = 0, malloced = 0;
  for (size_t i = 0; i < N; i++) {
    ASSERT_TRUE((v[i] = wds__blk_alloc(&bp, 0, 12 << 10)) != NULL);
    if (head_of(v[i])->chunk_off)
      carved++;
    else
      malloced++;
    /* Once malloc'd, never carved again. */
    ASSERT_TRUE(!(malloced && head_of(v[i])->chunk_off));
  }
  ASSERT_TRUE(carved > 4000 && carved < 5000);
  ASSERT_TRUE(malloced > 1000);
  ASSERT_TRUE(bp.carved <= (uint64_t)64 << 20);
  for (size_t i = 0; i < N; i++)
    wds__blk_free(v[i]);
  wds__blk_pool_destroy(&bp);
}

typedef struct half {
  void **v;
  size_t from, n;
} half;

static void *free_every_other(void *arg) {
  half *h = arg;
  for (size_t i = h->from; i < h->n; i += 2)
    wds__blk_free(h->v[i]);
  return NULL;
}

TEST(blocks_freed_on_two_threads) {
  wds__blk_pool bp;
  pool_init(&bp);
  enum { N = 20000 };
  static void *v[N];
  for (size_t i = 0; i < N; i++)
    ASSERT_TRUE((v[i] = wds__blk_alloc(&bp, 0, 64 + i % 500)) != NULL);
  half a = {v, 0, N}, b = {v, 1, N};
  pthread_t t;
  ASSERT_EQ_INT(pthread_create(&t, NULL, free_every_other, &a), 0);
  free_every_other(&b);
  wds__blk_pool_destroy(&bp);
  pthread_join(t, NULL);
}

/* The image/defer steady state: each sample asks a small block (its raw
 * header), then two large ones (a deferred field, a decoded image); the
 * collator hands them back large, small, large. After a warm-up batch
 * every request is served by a recycled block: none carved, none
 * malloc'd, also when the top of the free list is a large block and the
 * request small. */
TEST(small_blocks_are_recycled_past_large_ones) {
  wds__blk_pool bp;
  pool_init(&bp);
  enum { B = 8, ROUNDS = 40 };
  void *prev[3 * B], *cur[3 * B];
  wds__blk_returns r = {0};
  uint64_t carved_after_warmup = 0;
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < B; i++) {
      void **s = &cur[3 * i];
      s[0] = wds__blk_alloc(&bp, 0, 2000);
      s[1] = wds__blk_alloc(&bp, 0, 100 << 10);
      s[2] = wds__blk_alloc(&bp, 0, 100 << 10);
      ASSERT_TRUE(s[0] && s[1] && s[2]);
    }
    ASSERT_TRUE(fill_and_check(cur, 3 * B));
    if (round == 1)
      carved_after_warmup = bp.carved;
    if (round >= 2) { /* every block one of the last round's */
      ASSERT_EQ_U64(bp.carved, carved_after_warmup);
      for (int i = 0; i < 3 * B; i++) {
        int seen = 0;
        for (int k = 0; k < 3 * B && !seen; k++)
          seen = cur[i] == prev[k];
        if (!seen)
          printf("  round %d: block %d (%s) is fresh\n", round, i,
                 i % 3 ? "large" : "small");
        ASSERT_TRUE(seen);
      }
    }
    for (int i = 0; i < B; i++) {
      wds__blk_return(&r, cur[3 * i + 1]);
      wds__blk_return(&r, cur[3 * i]);
      wds__blk_return(&r, cur[3 * i + 2]);
    }
    wds__blk_flush(&bp, &r);
    memcpy(prev, cur, sizeof prev);
  }
  free(r.v);
  wds__blk_pool_destroy(&bp);
}

int main(void) {
  RUN(small_fresh_blocks_are_carved);
  RUN(recycled_blocks_come_back_before_new_ones);
  RUN(large_blocks_and_no_pool_are_malloced);
  RUN(a_chunk_outlives_its_pool);
  RUN(carving_stops_at_its_budget);
  RUN(blocks_freed_on_two_threads);
  RUN(small_blocks_are_recycled_past_large_ones);
  return test_summary();
}
