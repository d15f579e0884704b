/* test_index_bounds.c — the loader's exact mode with an index it cannot
 * trust: a count of 0 for a shard that has samples, counts no
 * shard or data set can hold, counts that contradict the index's own
 * tar_bytes and sample lists, the numbers the errors give when a count is
 * wrong by a plausible amount, and the read that checks a count of 0
 * ending at the read timeout or the caller's interrupt check.
 *
 * Shards are written at test time with the internal tar writer: shard k,
 * sample i has key "s<k>/<i>", a .cls field holding a global id and a .txt
 * field. Indexes are written by hand, as a doctored or stale index would
 * be. */
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shards/tarw.h"
#include "test.h"
#include "test_interrupt.h"
#include "wds/loader.h"

static char tmpdir[256];
static int fixture_seq;

/* ---- fixtures ---- */

typedef struct shardset {
  char urls[4][512];
  size_t n;
} shardset;

/* n shards with counts[k] samples each (compression: enum
 * wds__tarw_compression). */
static int make_shards(shardset *s, size_t n, const uint64_t *counts,
                       int compression) {
  int set = fixture_seq++;
  uint64_t id = 0;
  s->n = n;
  for (size_t k = 0; k < n; k++) {
    snprintf(s->urls[k], sizeof s->urls[k], "%s/set%d-%zu.tar%s", tmpdir, set,
             k, compression == WDS__TARW_ZSTD ? ".zst" : "");
    wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
    o.compression = compression;
    wds__tarw *w;
    wds__err e;
    if (wds__tarw_open_path(s->urls[k], &o, &w, &e) != WDS_OK) {
      printf("  tarw: %s\n", e.msg);
      return -1;
    }
    for (uint64_t i = 0; i < counts[k]; i++, id++) {
      char name[64], val[64];
      snprintf(name, sizeof name, "s%zu/%llu.cls", k, (unsigned long long)i);
      snprintf(val, sizeof val, "%llu", (unsigned long long)id);
      wds__tarw_add(w, name, val, strlen(val), &e);
      snprintf(name, sizeof name, "s%zu/%llu.txt", k, (unsigned long long)i);
      wds__tarw_add(w, name, name, strlen(name), &e);
    }
    if (wds__tarw_finish(w, &e) != WDS_OK) {
      printf("  tarw: %s\n", e.msg);
      wds__tarw_close(w);
      return -1;
    }
    wds__tarw_close(w);
  }
  return 0;
}

/* Writes an index giving shard k the count text counts[k] ("6", or a number
 * too large for any integer type) and extra[k] (more JSON members, or "")
 * into path. urls[k] NULL: s's own. */
static void write_index(const char *path, const shardset *s,
                        const char *const *counts, const char *const *extra,
                        const char *const *urls) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  fputs("{\"wids_version\": 1, \"shardlist\": [", f);
  for (size_t k = 0; k < s->n; k++)
    fprintf(f, "%s{\"url\": \"%s\", \"nsamples\": %s%s}", k ? ", " : "",
            urls && urls[k] ? urls[k] : s->urls[k], counts[k],
            extra && extra[k] ? extra[k] : "");
  fputs("]}\n", f);
  fclose(f);
}

static const wds_field_spec cls_only[] = {{"cls", WDS_DECODE_AUTO, 0, 0, 0}};

static wds_loader_config exact_cfg(const shardset *s, const char *index) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = (const char *const *)NULL;
  c.url_count = s->n;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.mode = WDS_MODE_EXACT;
  c.index_path = index;
  c.fields = cls_only;
  c.field_count = 1;
  c.batch_size = 4;
  return c;
}

/* One epoch: rows (valid and not), the status that ended it, its message. */
typedef struct run_out {
  uint64_t rows, valid, batches;
  int status; /* of open, else of the epoch's end */
  int opened;
  char err[1024];
  char log[4096]; /* the loader's log: what was skipped */
  uint64_t skipped;
} run_out;

static void keep_log(void *ctx, const char *message) {
  run_out *o = ctx;
  size_t n = strlen(o->log);
  snprintf(o->log + n, sizeof o->log - n, "%s\n", message);
}

static void run(wds_loader_config c, const shardset *s, run_out *o) {
  const char *urls[4];
  for (size_t k = 0; k < s->n; k++)
    urls[k] = s->urls[k];
  c.urls = urls;
  memset(o, 0, sizeof *o);
  c.log = keep_log;
  c.log_ctx = o;
  wds_loader *l;
  o->status = wds_loader_open(&c, &l);
  if (o->status != WDS_OK) {
    snprintf(o->err, sizeof o->err, "%s", wds_last_error());
    return;
  }
  o->opened = 1;
  const wds_batch *b;
  while ((o->status = wds_loader_next(l, &b)) == WDS_OK) {
    o->batches++;
    o->rows += b->rows;
    for (size_t r = 0; r < b->rows; r++)
      o->valid += b->valid[r] != 0;
    wds_loader_release(l, b);
  }
  snprintf(o->err, sizeof o->err, "%s", wds_last_error());
  wds_loader_stats st;
  wds_loader_stats_get(l, &st);
  o->skipped = st.skipped;
  wds_loader_close(l);
}

/* Only opens (and closes): for configurations that, before the fix, opened
 * on counts that would have run (nearly) forever. */
static int open_only(wds_loader_config c, const shardset *s, char *err,
                     size_t n) {
  const char *urls[4];
  for (size_t k = 0; k < s->n; k++)
    urls[k] = s->urls[k];
  c.urls = urls;
  wds_loader *l;
  int rc = wds_loader_open(&c, &l);
  snprintf(err, n, "%s", rc == WDS_OK ? "" : wds_last_error());
  wds_loader_close(rc == WDS_OK ? l : NULL);
  return rc;
}

/* ---- tests ---- */

TEST(zero_count_for_a_shard_with_samples) {
  /* Guards against "nsamples": 0 dropping a whole shard silently, even
   * under --on-error stop (no plan had a piece of it, so nothing read it). */
  uint64_t counts[3] = {6, 6, 6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 3, counts, WDS__TARW_NONE), 0);
  char ix[512];
  snprintf(ix, sizeof ix, "%s/zero.json", tmpdir);
  write_index(ix, &s, (const char *const[]){"6", "0", "6"}, NULL, NULL);
  run_out o;
  run(exact_cfg(&s, ix), &s, &o);
  ASSERT_EQ_INT(o.status, WDS_ERR_CORRUPT);
  ASSERT_TRUE(!o.opened);
  ASSERT_CONTAINS(o.err, ix);
  ASSERT_CONTAINS(o.err, s.urls[1]);
  ASSERT_CONTAINS(o.err, "the index gives 0 samples, but the shard has 6");

  /* Under skip: counted and logged; the epoch is the
   * index's (12 samples), the shard's samples are not read. */
  wds_loader_config c = exact_cfg(&s, ix);
  c.on_error = WDS_ON_ERROR_SKIP;
  run(c, &s, &o);
  ASSERT_EQ_INT(o.status, WDS_EOF);
  ASSERT_EQ_U64(o.skipped, 1);
  ASSERT_EQ_U64(o.valid, 12);
  ASSERT_CONTAINS(o.log, "the index gives 0 samples, but the shard has 6");

  /* A shard that really is empty is fine. */
  uint64_t empty[2] = {0, 5};
  shardset e;
  ASSERT_EQ_INT(make_shards(&e, 2, empty, WDS__TARW_NONE), 0);
  snprintf(ix, sizeof ix, "%s/empty.json", tmpdir);
  write_index(ix, &e, (const char *const[]){"0", "5"}, NULL, NULL);
  run(exact_cfg(&e, ix), &e, &o);
  ASSERT_EQ_INT(o.status, WDS_EOF);
  ASSERT_EQ_U64(o.valid, 5);
}

/* The shard an index gives 0 samples is read at open to check it is empty:
 * a read that stalls (a FIFO without a writer) ends at the read timeout,
 * or as soon as the caller's interrupt check says stop (Ctrl-C in
 * Python), under either error policy: an interrupt is not a skip. */
TEST(the_zero_count_check_obeys_the_timeout_and_the_interrupt) {
  uint64_t counts[1] = {6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, WDS__TARW_NONE), 0);
  s.n = 2;
  snprintf(s.urls[1], sizeof s.urls[1], "%s/stalled.fifo", tmpdir);
  ASSERT_EQ_INT(mkfifo(s.urls[1], 0600), 0);
  char ix[512], err[1024];
  snprintf(ix, sizeof ix, "%s/fifo-zero.json", tmpdir);
  write_index(ix, &s, (const char *const[]){"6", "0"}, NULL, NULL);
  wds_loader_config c = exact_cfg(&s, ix);
  c.read_timeout_ms = 300;
  double t0 = test_now_s();
  ASSERT_EQ_INT(open_only(c, &s, err, sizeof err), WDS_ERR_TIMEOUT);
  ASSERT_TRUE(test_now_s() - t0 < 3);
  ASSERT_CONTAINS(err, "no data for 0.3 s");
  for (int skip = 0; skip < 2; skip++) {
    interrupter it = {.caller = pthread_self(), .after = 3};
    c.read_timeout_ms = 5000;
    c.interrupt = interrupt_check;
    c.interrupt_ctx = &it;
    c.on_error = skip ? WDS_ON_ERROR_SKIP : WDS_ON_ERROR_STOP;
    t0 = test_now_s();
    int rc = open_only(c, &s, err, sizeof err);
    double dt = test_now_s() - t0;
    printf("  %s: %d after %.2f s: %s\n", skip ? "skip" : "stop", rc, dt, err);
    ASSERT_EQ_INT(rc, WDS_ERR_CANCELLED);
    ASSERT_TRUE(dt < 2);
    ASSERT_CONTAINS(err, "interrupted");
    ASSERT_CONTAINS(err, s.urls[1]);
    ASSERT_EQ_INT(atomic_load(&it.other_thread), 0);
  }
  unlink(s.urls[1]);
}

TEST(counts_no_shard_can_hold) {
  /* Guards against counts that wrap or never end: 2^64-1 wrapped the
   * total; 10^15 under skip made invalid filler batches without end. Both are
   * refused at open, naming the index and the shard, whatever the error policy.
   */
  uint64_t counts[2] = {6, 6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 2, counts, WDS__TARW_NONE), 0);
  char ix[512], err[1024];
  snprintf(ix, sizeof ix, "%s/huge.json", tmpdir);
  const char *bad[] = {"18446744073709551615", "1000000000000000", "100000"};
  for (size_t i = 0; i < 3; i++) {
    write_index(ix, &s, (const char *const[]){"6", bad[i]}, NULL, NULL);
    for (int policy = 0; policy < 2; policy++) {
      wds_loader_config c = exact_cfg(&s, ix);
      c.on_error = policy ? WDS_ON_ERROR_SKIP : WDS_ON_ERROR_STOP;
      ASSERT_EQ_INT(open_only(c, &s, err, sizeof err), WDS_ERR_CORRUPT);
      ASSERT_CONTAINS(err, ix);
      ASSERT_CONTAINS(err, s.urls[1]);
      ASSERT_CONTAINS(err, bad[i]);
      ASSERT_CONTAINS(err, "in a plain tar");
    }
  }
  /* The most a plain tar of this size can hold is accepted (and found
   * short when read). */
  FILE *f = fopen(s.urls[1], "rb");
  ASSERT_TRUE(f != NULL);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  char most[32], over[32];
  snprintf(most, sizeof most, "%ld", size / 512 - 1);
  snprintf(over, sizeof over, "%ld", size / 512);
  write_index(ix, &s, (const char *const[]){"6", most}, NULL, NULL);
  ASSERT_EQ_INT(open_only(exact_cfg(&s, ix), &s, err, sizeof err), WDS_OK);
  write_index(ix, &s, (const char *const[]){"6", over}, NULL, NULL);
  ASSERT_EQ_INT(open_only(exact_cfg(&s, ix), &s, err, sizeof err),
                WDS_ERR_CORRUPT);

  /* Shards with no size to go by (pipe:): only what no stream can hold,
   * and a total that would not fit in 64 bits of tar bytes. */
  char pipes[2][512];
  for (int k = 0; k < 2; k++)
    snprintf(pipes[k], sizeof pipes[k], "pipe:cat %.400s", s.urls[k]);
  shardset p = s;
  for (int k = 0; k < 2; k++)
    snprintf(p.urls[k], sizeof p.urls[k], "%s", pipes[k]);
  write_index(ix, &p, (const char *const[]){"6", "18446744073709551615"}, NULL,
              NULL);
  /* (an index naming pipe: commands is refused unless allowed) */
  ASSERT_EQ_INT(open_only(exact_cfg(&p, ix), &p, err, sizeof err),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(err, "is a pipe: command read from a file");
  wds_loader_config pc = exact_cfg(&p, ix);
  pc.allow_pipe_from_files = 1;
  ASSERT_EQ_INT(open_only(pc, &p, err, sizeof err), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(err, pipes[1]);
  ASSERT_CONTAINS(err, "more than any shard can hold");
  write_index(ix, &p,
              (const char *const[]){"18014398509481984", "18014398509481984"},
              NULL, NULL);
  ASSERT_EQ_INT(open_only(pc, &p, err, sizeof err), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(err, "add up to more than 36028797018963967 samples");
  ASSERT_CONTAINS(err, pipes[1]);
}

TEST(counts_the_index_itself_contradicts) {
  /* tar_bytes (what `wds index` records) bounds the count even where the
   * file cannot be looked at; a "samples" list must have nsamples
   * entries, though the loader does not keep it. */
  uint64_t counts[2] = {6, 6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 2, counts, WDS__TARW_NONE), 0);
  char ix[512], err[1024];
  snprintf(ix, sizeof ix, "%s/self.json", tmpdir);
  write_index(ix, &s, (const char *const[]){"6", "100"},
              (const char *const[]){"", ", \"tar_bytes\": 13312"}, NULL);
  ASSERT_EQ_INT(open_only(exact_cfg(&s, ix), &s, err, sizeof err),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(err, ix);
  ASSERT_CONTAINS(err, s.urls[1]);
  ASSERT_CONTAINS(err, "\"nsamples\" 100 is more than its \"tar_bytes\" "
                       "13312 can hold (at most 25");
  write_index(ix, &s, (const char *const[]){"6", "7"},
              (const char *const[]){"", ", \"samples\": [{}, {}, {}, {}, {}, "
                                        "{}]"},
              NULL);
  ASSERT_EQ_INT(open_only(exact_cfg(&s, ix), &s, err, sizeof err),
                WDS_ERR_FORMAT);
  ASSERT_CONTAINS(err, "lists 6 samples but \"nsamples\" is 7");
  ASSERT_CONTAINS(err, s.urls[1]);
  write_index(
      ix, &s, (const char *const[]){"6", "6"},
      (const char *const[]){
          ", \"tar_bytes\": 13312",
          ", \"samples\": [{}, {}, {}, {}, {}, {}], \"tar_bytes\": 7168"},
      NULL);
  ASSERT_EQ_INT(open_only(exact_cfg(&s, ix), &s, err, sizeof err), WDS_OK);
}

TEST(wrong_counts_name_the_right_numbers) {
  /* A shard of 6 that the index says has 20, read by two ranks: rank 1's
   * piece starts at sample 10, past the shard's end. The messages gave the
   * piece's bounds ("ended after sample 10, ... promised 10"/"20"); they
   * give the shard's true count and the index's. */
  uint64_t counts[1] = {6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, WDS__TARW_NONE), 0);
  char ix[512];
  snprintf(ix, sizeof ix, "%s/wrong.json", tmpdir);
  write_index(ix, &s, (const char *const[]){"20"}, NULL, NULL);
  for (int rank = 0; rank < 2; rank++) {
    wds_loader_config c = exact_cfg(&s, ix);
    c.world_size = 2;
    c.rank = rank;
    run_out o;
    run(c, &s, &o);
    ASSERT_EQ_INT(o.status, WDS_ERR_TRUNCATED);
    ASSERT_CONTAINS(o.err, s.urls[0]);
    ASSERT_CONTAINS(o.err, "ended after 6 samples, but the index");
    ASSERT_CONTAINS(o.err, ix);
    ASSERT_CONTAINS(o.err, "promised 20");
    /* Under skip: the rank's 10 rows, topped up with invalid ones. */
    c.on_error = WDS_ON_ERROR_SKIP;
    run(c, &s, &o);
    ASSERT_EQ_INT(o.status, WDS_EOF);
    ASSERT_EQ_U64(o.rows, 10);
    ASSERT_EQ_U64(o.valid, rank == 0 ? 6 : 0);
    ASSERT_EQ_U64(o.skipped, 1);
  }
  /* Too small: the error gives the true count too. */
  write_index(ix, &s, (const char *const[]){"4"}, NULL, NULL);
  run_out o;
  run(exact_cfg(&s, ix), &s, &o);
  ASSERT_EQ_INT(o.status, WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(o.err, "has more samples than the 4 the index");
  ASSERT_CONTAINS(o.err, "gives (6); sample \"s0/4\" and later are not read");

  /* The counting pass (no index) still gives the right epoch. */
  run(exact_cfg(&s, NULL), &s, &o);
  ASSERT_EQ_INT(o.status, WDS_EOF);
  ASSERT_EQ_U64(o.valid, 6);
}

TEST(compressed_shards_hold_more_than_their_size) {
  /* Small samples compress far below 512 bytes each: a true count above
   * filesize / 512 is fine for zstd; one beyond zstd's 32768:1 is not. */
  uint64_t counts[1] = {400};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, WDS__TARW_ZSTD), 0);
  FILE *f = fopen(s.urls[0], "rb");
  ASSERT_TRUE(f != NULL);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  ASSERT_TRUE(size / 512 < 400);
  char ix[512], err[1024], over[32];
  snprintf(ix, sizeof ix, "%s/zstd.json", tmpdir);
  write_index(ix, &s, (const char *const[]){"400"}, NULL, NULL);
  run_out o;
  run(exact_cfg(&s, ix), &s, &o);
  ASSERT_EQ_INT(o.status, WDS_EOF);
  ASSERT_EQ_U64(o.valid, 400);
  snprintf(over, sizeof over, "%ld", size * 64);
  write_index(ix, &s, (const char *const[]){over}, NULL, NULL);
  ASSERT_EQ_INT(open_only(exact_cfg(&s, ix), &s, err, sizeof err),
                WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(err, "in zstd data");
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-index-bounds.XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(zero_count_for_a_shard_with_samples);
  RUN(counts_no_shard_can_hold);
  RUN(counts_the_index_itself_contradicts);
  RUN(wrong_counts_name_the_right_numbers);
  RUN(compressed_shards_hold_more_than_their_size);
  RUN(the_zero_count_check_obeys_the_timeout_and_the_interrupt);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0)
    printf("could not remove %s\n", tmpdir);
  return test_summary();
}
