/* test_shuffle.c — the loader's shuffle buffer (loader/shuffle.c) without
 * threads: its input is a list pulled one sample at a time. Determinism of
 * the pick order for a key, the `initial` fill, the byte bound, the
 * pass-through of a buffer of 0 or 1, and a failing pull. */
#include "loader/shuffle.h"
#include "test.h"

#define MAX_IN 256

/* A list of samples: sample i has shard i and `bytes` bytes of data
 * (`big` bytes from sample `big_from` on, when big_from is set). */
typedef struct list {
  size_t n, next;
  uint64_t bytes;
  size_t fail_at; /* pull number that fails (SIZE_MAX: none) */
  size_t pulls;
  size_t big_from; /* 0: every sample has `bytes` */
  uint64_t big;
  const wds__shuffle *sh; /* when set: the most it held with a pulled sample */
  uint64_t peak;
} list;

static int list_pull(void *ctx, wds__raw_sample **out) {
  list *li = ctx;
  *out = NULL;
  if (li->pulls++ == li->fail_at)
    return -1;
  if (li->next == li->n)
    return 0;
  wds__raw_sample *r = wds__raw_hole(NULL, 0, li->next++);
  if (!r)
    return -1;
  r->hole = 0;
  r->data_bytes =
      li->big_from && r->shard >= li->big_from ? li->big : li->bytes;
  if (li->sh && li->sh->bytes + r->data_bytes > li->peak)
    li->peak = li->sh->bytes + r->data_bytes; /* it is added next */
  *out = r;
  return 0;
}

/* Runs the buffer over n samples; out[] gets the shards in output order.
 * Returns how many came out, or -1 on a failed pull. */
static int run_order(size_t n, size_t cap, size_t initial, uint64_t cap_bytes,
                     uint64_t key, size_t *out) {
  list li = {n, 0, 10, SIZE_MAX, 0, 0, 0, NULL, 0};
  wds__shuffle sh;
  if (wds__shuffle_init(&sh, cap, initial, cap_bytes, key) != WDS_OK)
    return -1;
  int k = 0;
  for (;;) {
    wds__raw_sample *r;
    if (wds__shuffle_next(&sh, list_pull, &li, &r) != 0) {
      k = -1;
      break;
    }
    if (!r)
      break;
    out[k++] = r->shard;
    wds__blk_free(r);
  }
  wds__shuffle_free(&sh);
  return k;
}

static int is_permutation(const size_t *v, size_t n) {
  int seen[MAX_IN] = {0};
  for (size_t i = 0; i < n; i++) {
    if (v[i] >= n || seen[v[i]])
      return 0;
    seen[v[i]] = 1;
  }
  return 1;
}

TEST(same_key_same_order) {
  size_t a[MAX_IN], b[MAX_IN];
  ASSERT_EQ_INT(run_order(100, 16, 0, 1u << 30, 42, a), 100);
  ASSERT_EQ_INT(run_order(100, 16, 0, 1u << 30, 42, b), 100);
  ASSERT_TRUE(is_permutation(a, 100));
  ASSERT_TRUE(memcmp(a, b, sizeof(size_t) * 100) == 0);
  ASSERT_EQ_INT(run_order(100, 16, 0, 1u << 30, 43, b), 100);
  ASSERT_TRUE(memcmp(a, b, sizeof(size_t) * 100) != 0);
}

/* The order for a key is part of the loader's contract (resume, the same
 * batches on any machine): pinned here. */
TEST(pinned_order) {
  static const size_t want[12] = {1, 3, 5, 4, 2, 7, 8, 9, 11, 6, 0, 10};
  size_t got[MAX_IN];
  ASSERT_EQ_INT(run_order(12, 4, 0, 1u << 30, 7, got), 12);
  for (size_t i = 0; i < 12; i++)
    if (got[i] != want[i]) {
      for (size_t k = 0; k < 12; k++)
        printf("%zu%s", got[k], k == 11 ? "\n" : ", ");
      ASSERT_EQ_INT(got[i], want[i]);
    }
}

TEST(no_buffer_passes_through) {
  size_t got[MAX_IN];
  for (size_t cap = 0; cap <= 1; cap++) {
    ASSERT_EQ_INT(run_order(20, cap, 0, 1u << 30, 5, got), 20);
    for (size_t i = 0; i < 20; i++)
      ASSERT_EQ_INT(got[i], i);
  }
}

TEST(initial_fill) {
  list li = {50, 0, 10, SIZE_MAX, 0, 0, 0, NULL, 0};
  wds__shuffle sh;
  ASSERT_EQ_INT(wds__shuffle_init(&sh, 16, 4, 1u << 30, 9), WDS_OK);
  ASSERT_EQ_INT(sh.initial, 4);
  wds__raw_sample *r;
  ASSERT_EQ_INT(wds__shuffle_next(&sh, list_pull, &li, &r), 0);
  ASSERT_TRUE(r != NULL);
  ASSERT_EQ_INT(li.pulls, 4); /* the first output once 4 are buffered */
  ASSERT_TRUE(r->shard < 4);
  wds__blk_free(r);
  wds__shuffle_free(&sh);
  /* 0, or more than the buffer: the whole buffer. */
  ASSERT_EQ_INT(wds__shuffle_init(&sh, 16, 0, 1u << 30, 9), WDS_OK);
  ASSERT_EQ_INT(sh.initial, 16);
  wds__shuffle_free(&sh);
  ASSERT_EQ_INT(wds__shuffle_init(&sh, 16, 17, 1u << 30, 9), WDS_OK);
  ASSERT_EQ_INT(sh.initial, 16);
  wds__shuffle_free(&sh);
}

TEST(byte_bound) {
  /* 1000 samples of 100 bytes, room for 1000 samples but 350 bytes: the
   * buffer never holds much more than 350 bytes (one sample over). */
  list li = {1000, 0, 100, SIZE_MAX, 0, 0, 0, NULL, 0};
  wds__shuffle sh;
  ASSERT_EQ_INT(wds__shuffle_init(&sh, 1000, 0, 350, 3), WDS_OK);
  size_t n = 0, max_len = 0;
  uint64_t max_bytes = 0;
  size_t order[1000];
  for (;;) {
    wds__raw_sample *r;
    ASSERT_EQ_INT(wds__shuffle_next(&sh, list_pull, &li, &r), 0);
    if (!r)
      break;
    if (sh.bytes > max_bytes)
      max_bytes = sh.bytes;
    if (sh.len > max_len)
      max_len = sh.len;
    order[n++] = r->shard;
    wds__blk_free(r);
  }
  wds__shuffle_free(&sh);
  ASSERT_EQ_INT(n, 1000);
  ASSERT_TRUE(max_bytes <= 350 + 100);
  ASSERT_TRUE(max_len <= 4);
  int seen[1000] = {0};
  for (size_t i = 0; i < n; i++) {
    ASSERT_TRUE(order[i] < 1000 && !seen[order[i]]);
    seen[order[i]] = 1;
  }
}

/* Mixed sizes: 99 samples of 1 byte, then 1,000-byte ones, at a byte cap
 * of 100 and room for 1000 samples. The bound holds as for one size: under
 * the cap plus the sample just added (or two samples, when one alone is
 * over the cap), not the ~99 large samples (99,000 bytes) a buffer would
 * keep if it emitted only one sample per input while over its cap: over
 * it, the buffer emits and reads nothing until it is under again (or down
 * to one sample). */
TEST(byte_bound_with_mixed_sizes) {
  list li = {400, 0, 1, SIZE_MAX, 0, 99, 1000, NULL, 0};
  wds__shuffle sh;
  ASSERT_EQ_INT(wds__shuffle_init(&sh, 1000, 0, 100, 3), WDS_OK);
  li.sh = &sh;
  size_t n = 0;
  static size_t order[400];
  int over_and_read = 0; /* calls that read more while over the cap */
  for (;;) {
    int over = sh.bytes >= 100 && sh.len > 1;
    size_t pulls = li.pulls;
    wds__raw_sample *r;
    ASSERT_EQ_INT(wds__shuffle_next(&sh, list_pull, &li, &r), 0);
    if (!r)
      break;
    over_and_read += over && li.pulls != pulls;
    order[n++] = r->shard;
    wds__blk_free(r);
  }
  wds__shuffle_free(&sh);
  printf("  at most %llu bytes held; %d reads while over the cap\n",
         (unsigned long long)li.peak, over_and_read);
  ASSERT_EQ_INT(n, 400);
  ASSERT_TRUE(li.peak < 100 + 1000 || li.peak == 2 * 1000);
  ASSERT_EQ_INT(over_and_read, 0);
  int seen[400] = {0};
  for (size_t i = 0; i < n; i++) {
    ASSERT_TRUE(order[i] < 400 && !seen[order[i]]);
    seen[order[i]] = 1;
  }
}

TEST(failing_pull) {
  for (size_t cap = 1; cap <= 8; cap += 7) {
    list li = {50, 0, 10, 5, 0, 0, 0, NULL, 0};
    wds__shuffle sh;
    ASSERT_EQ_INT(wds__shuffle_init(&sh, cap, 0, 1u << 30, 1), WDS_OK);
    int rc = 0;
    size_t outs = 0;
    for (;;) {
      wds__raw_sample *r;
      if ((rc = wds__shuffle_next(&sh, list_pull, &li, &r)) != 0)
        break;
      ASSERT_TRUE(r != NULL);
      outs++;
      wds__blk_free(r);
    }
    ASSERT_EQ_INT(rc, -1);
    ASSERT_TRUE(outs <= 5);
    wds__shuffle_free(&sh); /* frees what is still buffered */
  }
}

int main(void) {
  RUN(same_key_same_order);
  RUN(pinned_order);
  RUN(no_buffer_passes_through);
  RUN(initial_fill);
  RUN(byte_bound);
  RUN(byte_bound_with_mixed_sizes);
  RUN(failing_pull);
  return test_summary();
}
