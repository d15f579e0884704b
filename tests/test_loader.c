/* test_loader.c — the loader: plans, epoch modes, determinism, resume,
 * shuffle quality, error policy, batch layout, bounded memory.
 *
 * Fixtures are shards written at test time with the internal tar writer.
 * Sample ids are global and unique: shard s, sample i has key
 * "s<s>/<i>", a .cls field holding its global id and a .txt field with the
 * key's text, so every test can tell exactly which samples went where. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "base/rng.h"
#include "loader/plan.h"
#include "pipeline/decode.h"
#include "shards/tarw.h"
#include "test.h"
#include "test_files.h"
#include "test_interrupt.h"
#include "wds/loader.h"
#include "wds/reader.h"

static char tmpdir[256];
static int fixture_seq;

/* ---- fixtures ---- */

typedef struct shardset {
  char **urls;
  size_t n;
  uint64_t *counts;
  uint64_t total;
  uint64_t *first_id; /* global id of each shard's first sample */
} shardset;

static void shardset_free(shardset *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->urls[i]);
  free(s->urls);
  free(s->counts);
  free(s->first_id);
  memset(s, 0, sizeof *s);
}

/* Writes n shards with the given sample counts. bad_cls_id: the sample whose
 * .cls is not a number (-1: none). */
static int make_shards(shardset *s, size_t n, const uint64_t *counts,
                       int64_t bad_cls_id) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->urls = calloc(n, sizeof *s->urls);
  s->counts = calloc(n, sizeof *s->counts);
  s->first_id = calloc(n, sizeof *s->first_id);
  int set = fixture_seq++;
  uint64_t id = 0;
  for (size_t k = 0; k < n; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/set%d-%03zu.tar", tmpdir, set, k);
    s->urls[k] = strdup(path);
    s->counts[k] = counts[k];
    s->first_id[k] = id;
    wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
    wds__tarw *w;
    wds__err e;
    if (wds__tarw_open_path(path, &o, &w, &e) != WDS_OK) {
      printf("  tarw: %s\n", e.msg);
      return -1;
    }
    for (uint64_t i = 0; i < counts[k]; i++, id++) {
      char name[64], val[64];
      snprintf(name, sizeof name, "s%zu/%llu.cls", k, (unsigned long long)i);
      if ((int64_t)id == bad_cls_id)
        snprintf(val, sizeof val, "x%llu", (unsigned long long)id);
      else
        snprintf(val, sizeof val, "%llu", (unsigned long long)id);
      wds__tarw_add(w, name, val, strlen(val), &e);
      snprintf(name, sizeof name, "s%zu/%llu.txt", k, (unsigned long long)i);
      snprintf(val, sizeof val, "s%zu/%llu", k, (unsigned long long)i);
      wds__tarw_add(w, name, val, strlen(val), &e);
    }
    if (wds__tarw_finish(w, &e) != WDS_OK) {
      printf("  tarw: %s\n", e.msg);
      wds__tarw_close(w);
      return -1;
    }
    wds__tarw_close(w);
    s->total += counts[k];
  }
  return 0;
}

static const wds_field_spec cls_txt[] = {{"cls", WDS_DECODE_AUTO, 0, 0, 0},
                                         {"txt", WDS_DECODE_AUTO, 0, 0, 0}};

static wds_loader_config base_cfg(const shardset *s) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = (const char *const *)s->urls;
  c.url_count = s->n;
  c.rank = 0;
  c.world_size = 1;
  c.fields = cls_txt;
  c.field_count = 2;
  return c;
}

/* One epoch's output: per batch its rows' ids (-1 for invalid rows). */
typedef struct run_out {
  int64_t *ids; /* per row: its id, or -1 for an invalid row */
  int64_t *raw; /* per row: the id its data holds, valid or not (a padding
                   row's is the sample it repeats; a failed row's 0) */
  size_t n, cap;
  size_t *batch_rows;
  size_t batches, bcap;
  int status;
  char err[1024];
} run_out;

static void out_free(run_out *o) {
  free(o->ids);
  free(o->raw);
  free(o->batch_rows);
  memset(o, 0, sizeof *o);
}

static void out_push_batch(run_out *o, const wds_batch *b) {
  if (o->batches == o->bcap) {
    o->bcap = o->bcap ? 2 * o->bcap : 64;
    o->batch_rows = realloc(o->batch_rows, o->bcap * sizeof *o->batch_rows);
  }
  o->batch_rows[o->batches++] = b->rows;
  const int64_t *cls = b->rows ? b->fields[0].data : NULL;
  for (size_t r = 0; r < b->rows; r++) {
    if (o->n == o->cap) {
      o->cap = o->cap ? 2 * o->cap : 256;
      o->ids = realloc(o->ids, o->cap * sizeof *o->ids);
      o->raw = realloc(o->raw, o->cap * sizeof *o->raw);
    }
    o->raw[o->n] = cls[r];
    o->ids[o->n] = b->valid[r] ? cls[r] : -1;
    o->n++;
  }
}

/* The loader's log kept (cfg.log): what was skipped under
 * WDS_ON_ERROR_SKIP is told there. */
typedef struct log_keep {
  char text[8192];
} log_keep;

static void log_keep_fn(void *ctx, const char *message) {
  log_keep *k = ctx;
  size_t n = strlen(k->text);
  snprintf(k->text + n, sizeof k->text - n, "%s\n", message);
}

/* Runs one epoch of an open loader into o. */
static void run_epoch(wds_loader *l, run_out *o) {
  const wds_batch *b;
  int rc;
  while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
    out_push_batch(o, b);
    wds_loader_release(l, b);
  }
  o->status = rc;
  snprintf(o->err, sizeof o->err, "%s", wds_last_error());
}

static int run_cfg(const wds_loader_config *c, run_out *o) {
  wds_loader *l;
  memset(o, 0, sizeof *o);
  int rc = wds_loader_open(c, &l);
  if (rc != WDS_OK) {
    o->status = rc;
    snprintf(o->err, sizeof o->err, "%s", wds_last_error());
    return rc;
  }
  run_epoch(l, o);
  wds_loader_close(l);
  return o->status == WDS_EOF ? WDS_OK : o->status;
}

/* ---- plan and rng (pure functions) ---- */

TEST(rng_is_uniform_and_keys_differ) {
  wds__rng r;
  wds__rng_init(&r, wds__rng_key(1, 2, 3, 4, 5));
  int hist[10] = {0};
  for (int i = 0; i < 100000; i++)
    hist[wds__rng_below(&r, 10)]++;
  for (int i = 0; i < 10; i++)
    ASSERT_TRUE(hist[i] > 9500 && hist[i] < 10500);
  ASSERT_TRUE(wds__rng_key(1, 2, 3, 4, 5) != wds__rng_key(1, 2, 3, 4, 6));
  ASSERT_TRUE(wds__rng_key(1, 2, 3, 4, 5) != wds__rng_key(1, 2, 4, 4, 5));
  ASSERT_EQ_U64(wds__rng_key(7, 1, 0, 0, 0), wds__rng_key(7, 1, 0, 0, 0));
}

TEST(plain_plan_splits_by_rank_then_worker) {
  for (int world = 1; world <= 3; world++)
    for (int workers = 1; workers <= 2; workers++) {
      size_t shards = 7;
      int seen[7] = {0};
      for (int rank = 0; rank < world; rank++) {
        wds__plan_input in = {shards,         NULL, 9, rank, world, workers,
                              WDS_MODE_PLAIN, 1,    0, 0,    NULL};
        wds__epoch_plan p;
        wds__err e;
        ASSERT_EQ_INT(wds__plan_epoch(&in, 3, &p, &e), WDS_OK);
        size_t order[7];
        wds__plan_shard_order(&in, 3, order);
        size_t mine = 0;
        for (int w = 0; w < workers; w++)
          for (size_t i = 0; i < p.w[w].count; i++) {
            /* worker w holds rank list [w::workers], rank list is
             * order[rank::world] */
            size_t rank_pos = i * (size_t)workers + (size_t)w;
            ASSERT_EQ_U64(p.w[w].pieces[i].shard,
                          order[(size_t)rank + rank_pos * (size_t)world]);
            seen[p.w[w].pieces[i].shard]++;
            mine++;
          }
        ASSERT_EQ_U64(mine, (shards - (size_t)rank + (size_t)world - 1) /
                                (size_t)world);
        wds__plan_free(&p);
      }
      for (int i = 0; i < 7; i++)
        ASSERT_EQ_INT(seen[i], 1);
    }
}

TEST(shard_order_changes_with_epoch_not_rank) {
  size_t a[50], b[50], c[50];
  wds__plan_input in = {50, NULL, 1, 0, 4, 1, WDS_MODE_PLAIN, 1, 0, 0, NULL};
  wds__plan_shard_order(&in, 0, a);
  in.rank = 3;
  wds__plan_shard_order(&in, 0, b);
  ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
  wds__plan_shard_order(&in, 1, c);
  ASSERT_TRUE(memcmp(a, c, sizeof a) != 0);
  in.shard_shuffle = 0;
  wds__plan_shard_order(&in, 5, c);
  for (size_t i = 0; i < 50; i++)
    ASSERT_EQ_U64(c[i], i);
}

TEST(open_time_errors_name_counts_and_remedies) {
  uint64_t counts[3] = {2, 2, 2};
  wds__plan_input in = {3, counts, 0, 0, 4, 1, WDS_MODE_PLAIN, 1, 0, 0, NULL};
  wds__err e;
  ASSERT_EQ_INT(wds__plan_check(&in, &e), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "3 shards for 4 ranks");
  ASSERT_CONTAINS(e.msg, "resampled");
  in.world = 1;
  in.workers = 5;
  ASSERT_EQ_INT(wds__plan_check(&in, &e), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "fewer than its 5 workers");
  ASSERT_CONTAINS(e.msg, "at most 3 workers");
  in.mode = WDS_MODE_EXACT;
  ASSERT_EQ_INT(wds__plan_check(&in, &e), WDS_OK);
  in.world = 7;
  in.drop_last = 1;
  ASSERT_EQ_INT(wds__plan_check(&in, &e), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "6 samples");
  in.mode = WDS_MODE_RESAMPLED;
  ASSERT_EQ_INT(wds__plan_check(&in, &e), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "samples_per_epoch");

  shardset s;
  uint64_t c2[2] = {3, 3};
  ASSERT_EQ_INT(make_shards(&s, 2, c2, -1), 0);
  wds_loader_config c = base_cfg(&s);
  c.world_size = 3;
  c.rank = 2;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_TRUE(l == NULL);
  ASSERT_CONTAINS(wds_last_error(), "rank 2 would get no shard");
  c.world_size = 1;
  c.rank = 0;
  c.batch_size = 0;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "batch size");
  shardset_free(&s);
}

/* ---- the DistributedSampler cases ---- */

/* drop_last decides the last batch's policy when last_batch is not given
 * (WDS_LOADER_CONFIG_INIT's WDS_LAST_AUTO), in the library for every front
 * end (torch's drop_last); a policy given explicitly wins. 10 samples,
 * batches of 4: 2 batches dropping the partial one, 3 keeping it. */
TEST(drop_last_decides_an_unset_last_batch) {
  uint64_t counts[2] = {6, 4};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 2, counts, -1), 0);
  static const struct {
    int drop, last; /* last -1: not given */
    uint64_t batches;
    const char *state;
  } cases[] = {{1, -1, 2, "last_batch=drop"},
               {0, -1, 3, "last_batch=keep"},
               {1, WDS_LAST_KEEP, 3, "last_batch=keep"},
               {0, WDS_LAST_DROP, 2, "last_batch=drop"},
               {1, WDS_LAST_PAD, 3, "last_batch=pad"}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    wds_loader_config c = base_cfg(&s);
    ASSERT_EQ_INT(c.last_batch, WDS_LAST_AUTO);
    c.mode = WDS_MODE_EXACT;
    c.batch_size = 4;
    c.workers = 1;
    c.drop_last = cases[k].drop;
    if (cases[k].last >= 0)
      c.last_batch = (wds_last_batch)cases[k].last;
    ASSERT_EQ_INT(wds_loader_config_check(&c, WDS_OPTION_NAMES_KEYWORD),
                  WDS_OK);
    wds_loader *l = NULL;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    ASSERT_EQ_U64(wds_loader_epoch_batches(l), cases[k].batches);
    char *st = NULL;
    ASSERT_EQ_INT(wds_loader_state(l, &st), WDS_OK);
    ASSERT_CONTAINS(st, cases[k].state);
    free(st);
    run_out o;
    ASSERT_EQ_INT(run_cfg(&c, &o), WDS_OK);
    ASSERT_EQ_U64(o.batches, cases[k].batches);
    out_free(&o);
    wds_loader_close(l);
  }
  shardset_free(&s);
}

/* torch.utils.data.DistributedSampler + DataLoader, per rank:
 *   num_samples = ceil((N - world) / world) if drop_last and N % world
 *                 else ceil(N / world)
 *   batches     = num_samples // bs if drop_last else ceil(num_samples / bs)
 * Worked out for the seed cases (world 2, batch 4):
 *   N  drop_last=False     drop_last=True
 *   5  3 samples, 1 batch  2 samples, 0 batches
 *   6  3, 1                3, 0
 *   8  4, 1                4, 1
 *   10 5, 2                5, 1 */
TEST(distributed_sampler_cases) {
  static const struct {
    uint64_t n;
    int drop;
    uint64_t samples, batches;
  } cases[] = {{5, 0, 3, 1}, {5, 1, 2, 0}, {6, 0, 3, 1},  {6, 1, 3, 0},
               {8, 0, 4, 1}, {8, 1, 4, 1}, {10, 0, 5, 2}, {10, 1, 5, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    /* The samples in two shards of uneven size. */
    uint64_t counts[2] = {cases[k].n / 2 + 1, cases[k].n - cases[k].n / 2 - 1};
    shardset s;
    ASSERT_EQ_INT(make_shards(&s, 2, counts, -1), 0);
    uint64_t seen[16] = {0}, padded[16] = {0}, rows_total = 0;
    for (int rank = 0; rank < 2; rank++) {
      wds_loader_config c = base_cfg(&s);
      c.mode = WDS_MODE_EXACT;
      c.world_size = 2;
      c.rank = rank;
      c.batch_size = 4;
      c.workers = 2;
      c.drop_last = cases[k].drop;
      c.last_batch = cases[k].drop ? WDS_LAST_DROP : WDS_LAST_KEEP;
      run_out o;
      int rc = run_cfg(&c, &o);
      if (rc != WDS_OK)
        printf("  case n=%llu drop=%d: %s\n", (unsigned long long)cases[k].n,
               cases[k].drop, o.err);
      ASSERT_EQ_INT(rc, WDS_OK);
      ASSERT_EQ_U64(o.batches, cases[k].batches);
      wds_loader *l;
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      ASSERT_EQ_U64(wds_loader_epoch_batches(l), cases[k].batches);
      wds_loader_close(l);
      /* Samples per rank before batching: the same run keeping the partial
       * batch. */
      c.last_batch = WDS_LAST_KEEP;
      run_out o2;
      ASSERT_EQ_INT(run_cfg(&c, &o2), WDS_OK);
      ASSERT_EQ_U64(o2.n, cases[k].samples);
      for (size_t i = 0; i < o2.n; i++) {
        /* A valid row is a sample; an invalid one (nothing fails here) is
         * padding, its data the sample it repeats. */
        int64_t id = o2.ids[i] >= 0 ? o2.ids[i] : o2.raw[i];
        ASSERT_TRUE(id >= 0 && id < (int64_t)cases[k].n);
        (o2.ids[i] >= 0 ? seen : padded)[id]++;
      }
      rows_total += o2.n;
      out_free(&o);
      out_free(&o2);
    }
    /* Every sample once as a valid row; the padding repeats the first
     * samples, marked invalid; drop_last drops the tail. */
    uint64_t per = cases[k].samples;
    for (uint64_t i = 0; i < cases[k].n; i++) {
      uint64_t pad = i < per * 2 - cases[k].n && !cases[k].drop ? 1 : 0;
      uint64_t expect = cases[k].drop && i >= per * 2 ? 0 : 1;
      ASSERT_EQ_U64(seen[i], expect);
      ASSERT_EQ_U64(padded[i], pad);
    }
    ASSERT_EQ_U64(rows_total, per * 2);
    shardset_free(&s);
  }
}

/* The rank split alone: ranges in proportion to the weights, the same
 * number of steps on every rank, padding below the sum of the weights;
 * with no weights, DistributedSampler's sizes. */
TEST(rank_split_by_weights) {
  static const size_t w[] = {24, 8, 8};
  uint64_t cut[5];
  /* 100 samples, sum 40: 3 steps, 120 positions, 20 of them padding. */
  ASSERT_EQ_U64(wds__plan_rank_split(100, w, 3, 0, cut), 3);
  ASSERT_EQ_U64(cut[0], 0);
  ASSERT_EQ_U64(cut[1], 72);
  ASSERT_EQ_U64(cut[2], 96);
  ASSERT_EQ_U64(cut[3], 120);
  /* drop_last: 2 steps, 80 positions, 20 dropped. */
  ASSERT_EQ_U64(wds__plan_rank_split(100, w, 3, 1, cut), 2);
  ASSERT_EQ_U64(cut[1], 48);
  ASSERT_EQ_U64(cut[3], 80);
  /* Fewer samples than one step of every rank. */
  ASSERT_EQ_U64(wds__plan_rank_split(39, w, 3, 1, cut), 0);
  ASSERT_EQ_U64(wds__plan_rank_split(0, w, 3, 0, cut), 0);
  ASSERT_EQ_U64(wds__plan_rank_split(1, w, 3, 0, cut), 1);
  ASSERT_EQ_U64(cut[3], 40);
  /* No weights: ceil / floor of total / world per rank. */
  ASSERT_EQ_U64(wds__plan_rank_split(10, NULL, 4, 0, cut), 3);
  ASSERT_EQ_U64(cut[2], 6);
  ASSERT_EQ_U64(cut[3], 9);
  ASSERT_EQ_U64(cut[4], 12);
  ASSERT_EQ_U64(wds__plan_rank_split(10, NULL, 4, 1, NULL), 2);
  /* Random cases: the invariants. */
  wds__rng r;
  wds__rng_init(&r, 77);
  for (int iter = 0; iter < 2000; iter++) {
    int world = 1 + (int)wds__rng_below(&r, 8);
    size_t ws[8];
    uint64_t sum = 0, c[9];
    for (int k = 0; k < world; k++)
      sum += ws[k] = 1 + (size_t)wds__rng_below(&r, 40);
    uint64_t total = wds__rng_below(&r, 1000);
    int drop = (int)wds__rng_below(&r, 2);
    uint64_t steps = wds__plan_rank_split(total, ws, world, drop, c);
    ASSERT_EQ_U64(steps, drop ? total / sum : (total + sum - 1) / sum);
    ASSERT_EQ_U64(c[0], 0);
    for (int k = 0; k < world; k++)
      ASSERT_EQ_U64(c[k + 1] - c[k], steps * ws[k]);
    if (drop)
      ASSERT_TRUE(c[world] <= total && total - c[world] < sum);
    else
      ASSERT_TRUE(c[world] >= total && c[world] - total < sum);
  }
}

/* The plan with rank weights: a rank's pieces cover exactly its range of
 * the rank-major sequence, split over its workers; plain mode refuses. */
TEST(plan_with_rank_weights) {
  uint64_t counts[5] = {7, 0, 13, 4, 9}; /* 33 samples */
  size_t w[3] = {5, 1, 2};               /* sum 8: 5 steps, 40 positions */
  uint64_t seen[33] = {0}, rows = 0;
  for (int rank = 0; rank < 3; rank++) {
    wds__plan_input in = {5, counts, 9, rank, 3, 3, WDS_MODE_EXACT, 1, 0, 0, w};
    wds__epoch_plan p;
    wds__err e;
    ASSERT_EQ_INT(wds__plan_epoch(&in, 2, &p, &e), WDS_OK);
    ASSERT_EQ_U64(p.steps, 5);
    ASSERT_EQ_U64(p.rank_samples, 5 * w[rank]);
    ASSERT_EQ_U64(p.total_samples, 33);
    uint64_t mine = 0;
    for (int k = 0; k < p.workers; k++) {
      uint64_t q = 0;
      for (size_t i = 0; i < p.w[k].count; i++) {
        const wds__piece *pc = &p.w[k].pieces[i];
        ASSERT_TRUE(pc->begin < pc->end && pc->end <= counts[pc->shard]);
        q += pc->end - pc->begin;
        uint64_t first = 0;
        for (size_t j = 0; j < pc->shard; j++)
          first += counts[j];
        for (uint64_t x = pc->begin; x < pc->end; x++)
          seen[first + x]++;
      }
      ASSERT_EQ_U64(p.w[k].quota, q);
      mine += q;
    }
    ASSERT_EQ_U64(mine, p.rank_samples);
    rows += mine;
    wds__plan_free(&p);
  }
  ASSERT_EQ_U64(rows, 40);
  uint64_t extra = 0;
  for (int i = 0; i < 33; i++) {
    ASSERT_TRUE(seen[i] >= 1);
    extra += seen[i] - 1;
  }
  ASSERT_EQ_U64(extra, 7); /* padding < sum of the weights */
  /* Resampled: S = ceil(spe * world / sum), rank r draws S * w[r]. */
  wds__plan_input rs = {5, NULL, 9, 0, 3, 2, WDS_MODE_RESAMPLED, 1, 0, 10, w};
  wds__epoch_plan p;
  wds__err e;
  ASSERT_EQ_INT(wds__plan_epoch(&rs, 0, &p, &e), WDS_OK);
  ASSERT_EQ_U64(p.steps, 4); /* ceil(30 / 8) */
  ASSERT_EQ_U64(p.rank_samples, 20);
  ASSERT_EQ_U64(p.w[0].quota + p.w[1].quota, 20);
  wds__plan_free(&p);
  /* Plain mode and bad weights are refused, saying why. */
  wds__plan_input pl = {5, NULL, 9, 0, 3, 1, WDS_MODE_PLAIN, 1, 0, 0, w};
  ASSERT_EQ_INT(wds__plan_check(&pl, &e), WDS_ERR_INVALID);
  ASSERT_TRUE(strstr(e.msg, "plain mode") != NULL);
  size_t bad[3] = {4, 0, 4};
  wds__plan_input zb = {5, counts, 9, 0, 3, 1, WDS_MODE_EXACT, 1, 0, 0, bad};
  ASSERT_EQ_INT(wds__plan_check(&zb, &e), WDS_ERR_INVALID);
  ASSERT_TRUE(strstr(e.msg, "rank 1's batch size 0") != NULL);
  size_t big[3] = {30, 2, 2};
  wds__plan_input few = {5, counts, 9, 0, 3, 1, WDS_MODE_EXACT, 1, 1, 0, big};
  ASSERT_EQ_INT(wds__plan_check(&few, &e), WDS_ERR_INVALID);
  ASSERT_TRUE(strstr(e.msg, "add up to 34") != NULL);
}

/* ---- properties over many configurations ---- */

static uint64_t expect_batches(uint64_t samples, size_t bs, int policy) {
  return policy == WDS_LAST_DROP ? samples / bs : (samples + bs - 1) / bs;
}

TEST(properties_exact_resampled_plain) {
  wds__rng r;
  wds__rng_init(&r, 12345);
  int combos = 0;
  for (int iter = 0; iter < 60; iter++) {
    size_t nshards = 1 + (size_t)wds__rng_below(&r, 7);
    uint64_t counts[8];
    for (size_t i = 0; i < nshards; i++)
      counts[i] = wds__rng_below(&r, 14); /* uneven, some empty */
    int world = 1 + (int)wds__rng_below(&r, 4);
    int workers = 1 + (int)wds__rng_below(&r, 4);
    size_t bs = 1 + (size_t)wds__rng_below(&r, 5);
    int mode = (int)wds__rng_below(&r, 3);
    int drop = (int)wds__rng_below(&r, 2);
    int policy = (int)wds__rng_below(&r, 3);
    size_t shuffle = wds__rng_below(&r, 2) ? 1 + wds__rng_below(&r, 20) : 0;
    uint64_t spe = 1 + wds__rng_below(&r, 30);
    shardset s;
    ASSERT_EQ_INT(make_shards(&s, nshards, counts, -1), 0);
    if (mode == WDS_MODE_EXACT && s.total == 0) {
      shardset_free(&s);
      continue;
    }
    if (mode == WDS_MODE_PLAIN && nshards < (size_t)(world * workers)) {
      shardset_free(&s);
      continue;
    }
    uint64_t per_rank = 0;
    if (mode == WDS_MODE_EXACT)
      per_rank = drop ? s.total / (uint64_t)world
                      : (s.total + (uint64_t)world - 1) / (uint64_t)world;
    if (mode == WDS_MODE_EXACT && per_rank == 0) {
      shardset_free(&s);
      continue;
    }
    if (mode == WDS_MODE_RESAMPLED && s.total == 0) {
      shardset_free(&s);
      continue;
    }
    combos++;
    uint64_t *seen = calloc(s.total + 1, sizeof *seen);
    uint64_t appearances = 0, invalid = 0, nbatches = (uint64_t)-1;
    for (int epoch = 0; epoch < 2; epoch++) {
      memset(seen, 0, (s.total + 1) * sizeof *seen);
      appearances = invalid = 0;
      for (int rank = 0; rank < world; rank++) {
        wds_loader_config c = base_cfg(&s);
        c.mode = (wds_mode)mode;
        c.world_size = world;
        c.rank = rank;
        c.workers = workers;
        c.batch_size = bs;
        c.drop_last = drop;
        c.last_batch = (wds_last_batch)policy;
        c.shuffle_buffer = shuffle;
        c.epoch = (uint64_t)epoch;
        c.seed = (uint64_t)iter;
        if (mode == WDS_MODE_RESAMPLED)
          c.samples_per_epoch = spe;
        run_out o;
        int rc = run_cfg(&c, &o);
        if (rc != WDS_OK)
          printf("  iter %d: %s\n", iter, o.err);
        ASSERT_EQ_INT(rc, WDS_OK);
        if (mode != WDS_MODE_PLAIN) {
          uint64_t want = mode == WDS_MODE_EXACT ? per_rank : spe;
          /* every rank: the same number of batches, fixed in advance */
          ASSERT_EQ_U64(o.batches, expect_batches(want, bs, policy));
          if (nbatches == (uint64_t)-1)
            nbatches = o.batches;
          ASSERT_EQ_U64(o.batches, nbatches);
        }
        for (size_t b = 0; b + 1 < o.batches; b++)
          ASSERT_EQ_U64(o.batch_rows[b], bs);
        if (policy == WDS_LAST_PAD && o.batches)
          ASSERT_EQ_U64(o.batch_rows[o.batches - 1], bs);
        for (size_t i = 0; i < o.n; i++)
          if (o.ids[i] >= 0) {
            ASSERT_TRUE((uint64_t)o.ids[i] < s.total);
            seen[o.ids[i]]++;
            appearances++;
          } else {
            /* padding (nothing fails here): a repeat of a sample */
            ASSERT_TRUE(o.raw[i] >= 0 && (uint64_t)o.raw[i] < s.total);
            invalid++;
          }
        out_free(&o);
      }
      if (mode == WDS_MODE_PLAIN) {
        /* exactly once; a dropped last batch per rank loses < bs each */
        uint64_t missing = 0;
        for (uint64_t i = 0; i < s.total; i++) {
          ASSERT_TRUE(seen[i] <= 1);
          missing += seen[i] == 0;
        }
        if (policy != WDS_LAST_DROP)
          ASSERT_EQ_U64(missing, 0);
        else
          ASSERT_TRUE(missing <= (uint64_t)world * (bs - 1));
      } else if (mode == WDS_MODE_EXACT && policy == WDS_LAST_KEEP) {
        /* exactly once as valid rows, plus the documented padding as
         * invalid rows */
        uint64_t pad = drop ? 0 : per_rank * (uint64_t)world - s.total;
        uint64_t extra = 0, missing = 0;
        for (uint64_t i = 0; i < s.total; i++) {
          if (seen[i] == 0)
            missing++;
          else
            extra += seen[i] - 1;
        }
        ASSERT_EQ_U64(extra, 0);
        if (drop) {
          ASSERT_EQ_U64(missing, s.total - per_rank * (uint64_t)world);
        } else {
          ASSERT_EQ_U64(missing, 0);
        }
        ASSERT_EQ_U64(invalid, pad);
        ASSERT_EQ_U64(appearances + invalid, per_rank * (uint64_t)world);
      }
    }
    free(seen);
    shardset_free(&s);
  }
  printf("  %d configurations\n", combos);
  ASSERT_TRUE(combos >= 30);
}

/* Per-rank batch sizes over random shard sets, sizes, worker counts, modes
 * and drop_last: every rank takes the same number of steps, each of its
 * batches has exactly its size in rows; exact mode gives every sample once
 * over the ranks plus padding below the sum (or drops less than the sum);
 * a second run with other prefetch and workers timing gives the same
 * batches; resuming at a random batch gives the uninterrupted tail. */
TEST(properties_rank_batch_sizes) {
  wds__rng r;
  wds__rng_init(&r, 4242);
  int combos = 0;
  for (int iter = 0; iter < 40; iter++) {
    size_t nshards = 1 + (size_t)wds__rng_below(&r, 6);
    uint64_t counts[8];
    for (size_t i = 0; i < nshards; i++)
      counts[i] = wds__rng_below(&r, 16); /* uneven, some empty */
    int world = 1 + (int)wds__rng_below(&r, 4);
    size_t sizes[4];
    uint64_t sum = 0;
    for (int k = 0; k < world; k++)
      sum += sizes[k] = 1 + (size_t)wds__rng_below(&r, 6);
    int workers = 1 + (int)wds__rng_below(&r, 4);
    int mode = wds__rng_below(&r, 2) ? WDS_MODE_EXACT : WDS_MODE_RESAMPLED;
    int drop = (int)wds__rng_below(&r, 2);
    int policy = (int)wds__rng_below(&r, 3); /* changes nothing here */
    size_t shuffle = wds__rng_below(&r, 2) ? 1 + wds__rng_below(&r, 20) : 0;
    uint64_t spe = 1 + wds__rng_below(&r, 25);
    shardset s;
    ASSERT_EQ_INT(make_shards(&s, nshards, counts, -1), 0);
    uint64_t steps = mode == WDS_MODE_EXACT
                         ? (drop ? s.total / sum : (s.total + sum - 1) / sum)
                         : (spe * (uint64_t)world + sum - 1) / sum;
    if (s.total == 0 || steps == 0) {
      shardset_free(&s);
      continue;
    }
    combos++;
    uint64_t *seen = calloc(s.total, sizeof *seen);
    uint64_t appearances = 0, invalid = 0;
    for (int rank = 0; rank < world; rank++) {
      wds_loader_config c = base_cfg(&s);
      c.mode = (wds_mode)mode;
      c.world_size = world;
      c.rank = rank;
      c.workers = workers;
      c.rank_batch_sizes = sizes;
      c.rank_batch_size_count = (size_t)world;
      c.drop_last = drop;
      c.last_batch = (wds_last_batch)policy;
      c.shuffle_buffer = shuffle;
      c.seed = (uint64_t)iter;
      c.epoch = 1;
      if (mode == WDS_MODE_RESAMPLED)
        c.samples_per_epoch = spe;
      run_out o;
      int rc = run_cfg(&c, &o);
      if (rc != WDS_OK)
        printf("  iter %d: %s\n", iter, o.err);
      ASSERT_EQ_INT(rc, WDS_OK);
      wds_loader *l;
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      ASSERT_EQ_U64(wds_loader_epoch_batches(l), steps);
      wds_loader_close(l);
      ASSERT_EQ_U64(o.batches, steps);
      for (size_t b = 0; b < o.batches; b++)
        ASSERT_EQ_U64(o.batch_rows[b], sizes[rank]);
      for (size_t i = 0; i < o.n; i++) {
        /* An invalid row (nothing fails here) is exact mode's padding, its
         * data a repeat of a sample. */
        int64_t id = o.ids[i] >= 0 ? o.ids[i] : o.raw[i];
        ASSERT_TRUE(id >= 0 && (uint64_t)id < s.total);
        ASSERT_TRUE(o.ids[i] >= 0 || mode == WDS_MODE_EXACT);
        if (o.ids[i] >= 0)
          seen[id]++;
        else
          invalid++;
        appearances++;
      }
      /* Other thread timing (prefetch, eager start): the same batches. */
      c.prefetch_batches = 2 + (size_t)wds__rng_below(&r, 5);
      c.eager_next_epoch = 1;
      run_out o2;
      ASSERT_EQ_INT(run_cfg(&c, &o2), WDS_OK);
      ASSERT_EQ_U64(o2.n, o.n);
      ASSERT_TRUE(memcmp(o2.ids, o.ids, o.n * sizeof *o.ids) == 0);
      out_free(&o2);
      /* Resume at batch k: the rest of the epoch. */
      uint64_t k = wds__rng_below(&r, steps + 1);
      c.resume_batches = k;
      run_out o3;
      ASSERT_EQ_INT(run_cfg(&c, &o3), WDS_OK);
      ASSERT_EQ_U64(o3.batches, steps - k);
      ASSERT_EQ_U64(o3.n, o.n - k * sizes[rank]);
      ASSERT_TRUE(o3.n == 0 || memcmp(o3.ids, o.ids + k * sizes[rank],
                                      o3.n * sizeof *o.ids) == 0);
      out_free(&o3);
      out_free(&o);
    }
    ASSERT_EQ_U64(appearances, steps * sum);
    if (mode == WDS_MODE_EXACT) {
      uint64_t extra = 0, missing = 0;
      for (uint64_t i = 0; i < s.total; i++) {
        ASSERT_TRUE(seen[i] <= (steps * sum + s.total - 1) / s.total);
        if (seen[i] == 0)
          missing++;
        else
          extra += seen[i] - 1;
      }
      /* valid rows: every sample once; the padding is invalid */
      ASSERT_EQ_U64(extra, 0);
      if (drop) {
        ASSERT_EQ_U64(invalid, 0);
        ASSERT_EQ_U64(missing, s.total - steps * sum);
        ASSERT_TRUE(missing < sum);
      } else {
        ASSERT_EQ_U64(missing, 0);
        ASSERT_EQ_U64(invalid, steps * sum - s.total);
        ASSERT_TRUE(invalid < sum);
        /* the padding repeats the first samples of the sequence: with
         * shard_shuffle the sequence is permuted, so only its size is
         * checked here (rank_split_by_weights checks the wrap) */
      }
    }
    free(seen);
    shardset_free(&s);
  }
  printf("  %d configurations\n", combos);
  ASSERT_TRUE(combos >= 25);
}

/* One epoch of rows as (source << 32 | id), -1 for an invalid row. */
static void out_push_mixed(run_out *o, const wds_batch *b) {
  if (o->batches == o->bcap) {
    o->bcap = o->bcap ? 2 * o->bcap : 64;
    o->batch_rows = realloc(o->batch_rows, o->bcap * sizeof *o->batch_rows);
  }
  o->batch_rows[o->batches++] = b->rows;
  const int64_t *cls = b->rows ? b->fields[0].data : NULL;
  for (size_t r = 0; r < b->rows; r++) {
    if (o->n == o->cap) {
      o->cap = o->cap ? 2 * o->cap : 256;
      o->ids = realloc(o->ids, o->cap * sizeof *o->ids);
      o->raw = realloc(o->raw, o->cap * sizeof *o->raw);
    }
    o->raw[o->n] = (int64_t)((uint64_t)b->sources[r] << 32 | (uint64_t)cls[r]);
    o->ids[o->n] = b->valid[r] ? o->raw[o->n] : -1;
    o->n++;
  }
}

static int run_mixed(const wds_loader_config *c, run_out *o) {
  wds_loader *l;
  const wds_batch *b;
  memset(o, 0, sizeof *o);
  int rc = wds_loader_open(c, &l);
  if (rc != WDS_OK) {
    o->status = rc;
    snprintf(o->err, sizeof o->err, "%s", wds_last_error());
    return rc;
  }
  while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
    out_push_mixed(o, b);
    wds_loader_release(l, b);
  }
  o->status = rc;
  snprintf(o->err, sizeof o->err, "%s", wds_last_error());
  wds_loader_close(l);
  return rc == WDS_EOF ? WDS_OK : rc;
}

/* properties_rank_batch_sizes with 1-3 sources (random shard sets): exact
 * mode with a random repeat or proportion per source, resampled mode with
 * random weights. Every rank takes the same steps (exact: the sum of each
 * source's ceil(n_s / sum of sizes), floor with drop_last), its batch
 * size in rows per step; exact: each sample of source s appears k_s or
 * k_s + 1 times over all ranks (k_s whole passes, +1 in the epoch's
 * window), plus a padding under the sum of the sizes per source (or minus
 * a drop); resume = the uninterrupted tail; prefetch and an eager start
 * change nothing. */
TEST(properties_mixed_sources) {
  wds__rng r;
  wds__rng_init(&r, 777);
  int combos = 0, exact_combos = 0, refused = 0;
  for (int iter = 0; iter < 36; iter++) {
    size_t nsrc = 1 + (size_t)wds__rng_below(&r, 3);
    shardset s[3];
    char *specs[3];
    wds_source_config sc[3];
    uint64_t all = 0;
    for (size_t k = 0; k < nsrc; k++) {
      size_t nshards = 1 + (size_t)wds__rng_below(&r, 4);
      uint64_t counts[4] = {0, 0, 0, 0};
      for (size_t i = 0; i < nshards; i++)
        counts[i] = wds__rng_below(&r, 12); /* uneven, some empty */
      counts[0] += 1;                       /* every source has samples */
      ASSERT_EQ_INT(make_shards(&s[k], nshards, counts, -1), 0);
      all += s[k].total;
      /* The set's shards as one spec: "{a,b,...}" of their paths. */
      size_t len = 3;
      for (size_t i = 0; i < nshards; i++)
        len += strlen(s[k].urls[i]) + 1;
      specs[k] = malloc(len + 8);
      strcpy(specs[k], s[k].urls[0]);
      if (nshards > 1) {
        /* set<N>-{000..00M}.tar: the urls differ only in the number. */
        char *dash = strrchr(specs[k], '-');
        snprintf(dash + 1, len + 8 - (size_t)(dash + 1 - specs[k]),
                 "{000..%03zu}.tar", nshards - 1);
      }
    }
    int world = 1 + (int)wds__rng_below(&r, 3);
    size_t sizes[3];
    uint64_t sum = 0;
    for (int k = 0; k < world; k++)
      sum += sizes[k] = 1 + (size_t)wds__rng_below(&r, 5);
    int workers = 1 + (int)wds__rng_below(&r, 3);
    int mode = wds__rng_below(&r, 2) ? WDS_MODE_EXACT : WDS_MODE_RESAMPLED;
    int drop = (int)wds__rng_below(&r, 2);
    size_t shuffle = wds__rng_below(&r, 2) ? 1 + wds__rng_below(&r, 20) : 0;
    uint64_t spe = 1 + wds__rng_below(&r, 25);
    uint64_t epoch = wds__rng_below(&r, 4);
    uint64_t n[3], steps = 0;
    static const double amounts[] = {0.5, 1, 1.5, 2, 0.25, 0.75};
    for (size_t k = 0; k < nsrc; k++) {
      memset(&sc[k], 0, sizeof sc[k]);
      sc[k].spec = specs[k];
      double a = amounts[wds__rng_below(&r, 6)];
      double want = (double)s[k].total;
      if (mode == WDS_MODE_RESAMPLED) {
        if (wds__rng_below(&r, 3))
          sc[k].weight = a;
      } else if (wds__rng_below(&r, 2)) {
        sc[k].repeat = a;
        want = a * (double)s[k].total;
      } else if (wds__rng_below(&r, 2)) {
        sc[k].proportion = a;
        want = a * (double)all;
      }
      n[k] = (uint64_t)(want + 0.5); /* llround of a positive value */
      steps += drop ? n[k] / sum : (n[k] + sum - 1) / sum;
    }
    int skip = 0;
    for (size_t k = 0; k < nsrc; k++)
      skip |= n[k] == 0; /* refused: no sample of a source */
    if (mode == WDS_MODE_RESAMPLED)
      steps = (spe * (uint64_t)world + sum - 1) / sum;
    if (skip)
      goto next;
    if (mode == WDS_MODE_EXACT && drop) {
      /* Each source is split alone: one under a step is refused. */
      size_t short_src = nsrc;
      for (size_t k = nsrc; k-- > 0;)
        if (n[k] < sum)
          short_src = k;
      if (short_src < nsrc) {
        wds_loader_config c = WDS_LOADER_CONFIG_INIT;
        c.sources = sc;
        c.source_count = nsrc;
        c.world_size = world;
        c.fields = cls_txt;
        c.field_count = 2;
        c.rank_batch_sizes = sizes;
        c.rank_batch_size_count = (size_t)world;
        c.mode = WDS_MODE_EXACT;
        c.drop_last = 1;
        wds_loader *l = NULL;
        ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
        char want[32];
        snprintf(want, sizeof want, "source %zu (", short_src);
        ASSERT_CONTAINS(wds_last_error(), want);
        ASSERT_CONTAINS(wds_last_error(), "a rank would get no step");
        refused++;
        goto next;
      }
    }
    if (steps == 0)
      goto next;
    combos++;
    exact_combos += mode == WDS_MODE_EXACT;
    uint64_t *seen[3];
    uint64_t rows_of[3] = {0, 0, 0}, pad_of[3] = {0, 0, 0};
    for (size_t k = 0; k < nsrc; k++)
      seen[k] = calloc(s[k].total, sizeof *seen[k]);
    for (int rank = 0; rank < world; rank++) {
      wds_loader_config c = WDS_LOADER_CONFIG_INIT;
      c.sources = sc;
      c.source_count = nsrc;
      c.rank = rank;
      c.world_size = world;
      c.fields = cls_txt;
      c.field_count = 2;
      c.mode = (wds_mode)mode;
      c.workers = workers;
      c.rank_batch_sizes = sizes;
      c.rank_batch_size_count = (size_t)world;
      c.drop_last = drop;
      c.shuffle_buffer = shuffle;
      c.seed = (uint64_t)iter;
      c.epoch = epoch;
      if (mode == WDS_MODE_RESAMPLED)
        c.samples_per_epoch = spe;
      run_out o;
      int rc = run_mixed(&c, &o);
      if (rc != WDS_OK)
        printf("  iter %d: %s\n", iter, o.err);
      ASSERT_EQ_INT(rc, WDS_OK);
      ASSERT_EQ_U64(o.batches, steps);
      for (size_t b = 0; b < o.batches; b++)
        ASSERT_EQ_U64(o.batch_rows[b], sizes[rank]);
      for (size_t i = 0; i < o.n; i++) {
        /* An invalid row (nothing fails here) is a source's padding (exact
         * mode), its data a repeat of one of its samples. */
        ASSERT_TRUE(o.ids[i] >= 0 || mode == WDS_MODE_EXACT);
        uint64_t src = (uint64_t)o.raw[i] >> 32, id = o.raw[i] & 0xffffffffu;
        ASSERT_TRUE(src < nsrc && id < s[src].total);
        if (o.ids[i] >= 0)
          seen[src][id]++;
        else
          pad_of[src]++;
        rows_of[src]++;
      }
      /* Other thread timing (prefetch, eager start): the same batches. */
      c.prefetch_batches = 2 + (size_t)wds__rng_below(&r, 5);
      c.eager_next_epoch = 1;
      run_out o2;
      ASSERT_EQ_INT(run_mixed(&c, &o2), WDS_OK);
      ASSERT_EQ_U64(o2.n, o.n);
      ASSERT_TRUE(memcmp(o2.ids, o.ids, o.n * sizeof *o.ids) == 0);
      out_free(&o2);
      /* Resume at batch k: the rest of the epoch. */
      uint64_t k = wds__rng_below(&r, steps + 1);
      c.resume_batches = k;
      run_out o3;
      ASSERT_EQ_INT(run_mixed(&c, &o3), WDS_OK);
      ASSERT_EQ_U64(o3.batches, steps - k);
      ASSERT_EQ_U64(o3.n, o.n - k * sizes[rank]);
      ASSERT_TRUE(o3.n == 0 || memcmp(o3.ids, o.ids + k * sizes[rank],
                                      o3.n * sizeof *o.ids) == 0);
      out_free(&o3);
      out_free(&o);
    }
    if (mode == WDS_MODE_EXACT)
      for (size_t k = 0; k < nsrc; k++) {
        /* Source k: steps_k x sum rows over all ranks; sample p (its
         * natural position, = its id) k_s times, once more inside the
         * window of r samples from (epoch x r) mod T. */
        uint64_t T = s[k].total, passes = n[k] / T, rest = n[k] % T;
        uint64_t steps_k = drop ? n[k] / sum : (n[k] + sum - 1) / sum;
        uint64_t pos0 = (epoch % T) * rest % T, extra = 0, missing = 0;
        ASSERT_EQ_U64(rows_of[k], steps_k * sum);
        for (uint64_t p = 0; p < T; p++) {
          uint64_t want = passes + ((p + T - pos0) % T < rest);
          if (seen[k][p] > want)
            extra += seen[k][p] - want;
          else
            missing += want - seen[k][p];
        }
        /* valid rows: each sample its count; the padding invalid */
        ASSERT_EQ_U64(extra, 0);
        if (drop) {
          ASSERT_EQ_U64(pad_of[k], 0);
          ASSERT_EQ_U64(missing, n[k] - steps_k * sum);
          ASSERT_TRUE(missing < sum);
        } else {
          ASSERT_EQ_U64(missing, 0);
          ASSERT_EQ_U64(pad_of[k], steps_k * sum - n[k]);
          ASSERT_TRUE(pad_of[k] < sum);
        }
      }
    for (size_t k = 0; k < nsrc; k++)
      free(seen[k]);
  next:
    for (size_t k = 0; k < nsrc; k++) {
      free(specs[k]);
      shardset_free(&s[k]);
    }
  }
  printf("  %d configurations (%d exact), %d refused (drop_last: a source "
         "under one step)\n",
         combos, exact_combos, refused);
  ASSERT_TRUE(combos >= 20 && exact_combos >= 8);
}

/* What rank_batch_sizes refuses, saying why; without them every batch is
 * as before (the tests above run with none). */
TEST(rank_batch_sizes_errors) {
  uint64_t counts[3] = {10, 10, 10};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 3, counts, -1), 0);
  size_t sizes[3] = {4, 2, 2};
  wds_loader_config c = base_cfg(&s);
  c.mode = WDS_MODE_EXACT;
  c.world_size = 2;
  c.rank_batch_sizes = sizes;
  c.rank_batch_size_count = 3;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "3 per-rank batch sizes for a world size "
                                    "of 2");
  c.world_size = 3;
  c.rank = 1;
  c.batch_size = 5;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "batch_size 5, but rank_batch_sizes gives "
                                    "rank 1 2");
  c.batch_size = 2; /* the same value: accepted */
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  ASSERT_EQ_U64(wds_loader_epoch_batches(l), 4); /* ceil(30 / 8) */
  wds_loader_close(l);
  c.mode = WDS_MODE_PLAIN;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "plain mode");
  c.mode = WDS_MODE_EXACT;
  sizes[2] = 0;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "rank 2's batch size 0");
  sizes[2] = 40;
  c.drop_last = 1;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "add up to 46");
  c.rank_batch_sizes = NULL;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "rank_batch_sizes is NULL");
  shardset_free(&s);
}

/* Shards through `pipe:` commands that each sleep a different time (10 to
 * 90 ms, fixed per shard): thread timing changes, the batches must not. */
TEST(output_is_independent_of_thread_timing) {
  uint64_t counts[6] = {9, 3, 12, 7, 1, 8};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 6, counts, -1), 0);
  char *slow[6];
  for (int i = 0; i < 6; i++) {
    char cmd[700];
    /* /bin/sh may be dash (no $RANDOM): the delays vary by shard here. */
    snprintf(cmd, sizeof cmd, "pipe:sleep 0.0%d; cat %s", (i * 37) % 90 + 10,
             s.urls[i]);
    slow[i] = strdup(cmd);
  }
  for (int mode = 0; mode < 3; mode++) {
    wds_loader_config c = base_cfg(&s);
    c.mode = (wds_mode)mode;
    c.workers = 3;
    c.batch_size = 4;
    c.shuffle_buffer = 5;
    c.seed = 77;
    c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 50 : 0;
    run_out a, b, d;
    ASSERT_EQ_INT(run_cfg(&c, &a), WDS_OK);
    c.prefetch_batches = 2;
    ASSERT_EQ_INT(run_cfg(&c, &b), WDS_OK);
    c.urls = (const char *const *)slow;
    c.prefetch_batches = 7;
    c.eager_next_epoch = 1; /* starts epoch 1 early: epoch 0 unchanged */
    ASSERT_EQ_INT(run_cfg(&c, &d), WDS_OK);
    c.eager_next_epoch = 0;
    ASSERT_EQ_U64(a.n, b.n);
    ASSERT_EQ_U64(a.n, d.n);
    ASSERT_TRUE(a.n > 0);
    ASSERT_TRUE(memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0);
    ASSERT_TRUE(memcmp(a.ids, d.ids, a.n * sizeof *a.ids) == 0);
    /* Another seed: another order. */
    c.urls = (const char *const *)s.urls;
    c.seed = 78;
    run_out e;
    ASSERT_EQ_INT(run_cfg(&c, &e), WDS_OK);
    ASSERT_TRUE(e.n != a.n || memcmp(a.ids, e.ids, a.n * sizeof *a.ids) != 0);
    out_free(&a);
    out_free(&b);
    out_free(&d);
    out_free(&e);
  }
  for (int i = 0; i < 6; i++)
    free(slow[i]);
  shardset_free(&s);
}

/* Per-rank batch sizes with shards through `pipe:` commands that sleep
 * different times: every rank's batches are those of the plain files. */
TEST(rank_batch_sizes_independent_of_thread_timing) {
  uint64_t counts[5] = {9, 14, 3, 11, 6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 5, counts, -1), 0);
  char *slow[5];
  for (int i = 0; i < 5; i++) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "pipe:sleep 0.0%d; cat %s", (i * 53) % 90 + 10,
             s.urls[i]);
    slow[i] = strdup(cmd);
  }
  size_t sizes[3] = {7, 2, 4};
  for (int mode = 1; mode < 3; mode++)
    for (int rank = 0; rank < 3; rank++) {
      wds_loader_config c = base_cfg(&s);
      c.mode = (wds_mode)mode;
      c.world_size = 3;
      c.rank = rank;
      c.workers = 3;
      c.shuffle_buffer = 4;
      c.seed = 11;
      c.rank_batch_sizes = sizes;
      c.rank_batch_size_count = 3;
      c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 20 : 0;
      run_out a, b;
      ASSERT_EQ_INT(run_cfg(&c, &a), WDS_OK);
      c.urls = (const char *const *)slow;
      c.prefetch_batches = 2;
      ASSERT_EQ_INT(run_cfg(&c, &b), WDS_OK);
      ASSERT_TRUE(a.n > 0);
      ASSERT_EQ_U64(a.n, b.n);
      ASSERT_EQ_U64(a.batches, mode == WDS_MODE_EXACT ? 4 : 5);
      ASSERT_TRUE(memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0);
      out_free(&a);
      out_free(&b);
    }
  for (int i = 0; i < 5; i++)
    free(slow[i]);
  shardset_free(&s);
}

TEST(assignment_changes_with_the_epoch) {
  uint64_t counts[12];
  for (int i = 0; i < 12; i++)
    counts[i] = 5;
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 12, counts, -1), 0);
  for (int mode = 0; mode < 2; mode++) {
    wds_loader_config c = base_cfg(&s);
    c.mode = (wds_mode)mode;
    c.world_size = 3;
    c.rank = 1;
    c.workers = 2;
    run_out e0, e1;
    ASSERT_EQ_INT(run_cfg(&c, &e0), WDS_OK);
    c.epoch = 1;
    ASSERT_EQ_INT(run_cfg(&c, &e1), WDS_OK);
    ASSERT_EQ_U64(e0.n, 20);
    ASSERT_EQ_U64(e1.n, 20);
    /* different sets of samples, not just another order */
    int differ = 0;
    for (size_t i = 0; i < e0.n && !differ; i++) {
      int found = 0;
      for (size_t j = 0; j < e1.n; j++)
        found |= e0.ids[i] == e1.ids[j];
      differ = !found;
    }
    ASSERT_TRUE(differ);
    out_free(&e0);
    out_free(&e1);
  }
  shardset_free(&s);
}

/* ---- shuffle quality ---- */

TEST(shuffle_positions_are_close_to_uniform) {
  uint64_t counts[1] = {100};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  enum { EPOCHS = 400 };
  double sum[100] = {0};
  wds_loader_config c = base_cfg(&s);
  c.workers = 1;
  c.batch_size = 10;
  c.shuffle_buffer = 100;
  c.seed = 5;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  for (int ep = 0; ep < EPOCHS; ep++) {
    run_out o = {0};
    run_epoch(l, &o);
    ASSERT_EQ_INT(o.status, WDS_EOF);
    ASSERT_EQ_U64(o.n, 100);
    for (size_t i = 0; i < o.n; i++)
      sum[o.ids[i]] += (double)i;
    out_free(&o);
  }
  wds_loader_close(l);
  /* Mean position of each sample: 49.5 +- 28.9 / sqrt(400) = 1.44 under a
   * uniform shuffle; 6 is over 4 standard deviations. */
  double worst = 0;
  for (int k = 0; k < 100; k++) {
    double d = sum[k] / EPOCHS - 49.5;
    if (d < 0)
      d = -d;
    if (d > worst)
      worst = d;
  }
  printf("  largest deviation of a mean position: %.2f\n", worst);
  ASSERT_TRUE(worst < 6.0);
  shardset_free(&s);
}

/* Mean distance, in output positions, between samples that were neighbours
 * in the shard (ids k and k + 1 of o's 1000). */
static double neighbour_distance(const run_out *o) {
  size_t pos[1000];
  for (size_t i = 0; i < 1000; i++)
    pos[o->ids[i]] = i;
  double mean = 0;
  for (size_t k = 0; k + 1 < 1000; k++)
    mean += pos[k] > pos[k + 1] ? (double)(pos[k] - pos[k + 1])
                                : (double)(pos[k + 1] - pos[k]);
  return mean / 999;
}

TEST(large_buffer_separates_neighbours) {
  uint64_t counts[1] = {1000};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  wds_loader_config c = base_cfg(&s);
  c.workers = 1;
  c.batch_size = 50;
  c.shuffle_buffer = 1000;
  run_out o;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_OK);
  ASSERT_EQ_U64(o.n, 1000);
  double mean = neighbour_distance(&o);
  /* Uniform random positions: expected distance n/3 = 333. Unshuffled: 1. */
  printf("  mean distance between shard neighbours: %.0f\n", mean);
  ASSERT_TRUE(mean > 250);
  /* With a small buffer, neighbours stay close (WebDataset's semantics). */
  c.shuffle_buffer = 10;
  run_out o2;
  ASSERT_EQ_INT(run_cfg(&c, &o2), WDS_OK);
  double mean2 = neighbour_distance(&o2);
  ASSERT_TRUE(mean2 < 30);
  out_free(&o);
  out_free(&o2);
  shardset_free(&s);
}

/* ---- resume ---- */

/* Batches of `epochs` epochs as one sequence of ids with epoch markers. */
static void run_epochs(wds_loader *l, int epochs, run_out *o) {
  for (int e = 0; e < epochs; e++) {
    run_epoch(l, o);
    out_push_batch(o, &(wds_batch){0}); /* marker: a 0-row batch */
  }
}

/* eager_next_epoch: the same batches over 3 epochs; set_epoch() after an
 * eagerly started epoch gives the epoch asked for. */
TEST(eager_next_epoch_changes_nothing) {
  uint64_t counts[4] = {11, 5, 9, 14};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 4, counts, -1), 0);
  for (int mode = 0; mode < 3; mode++) {
    wds_loader_config c = base_cfg(&s);
    c.mode = (wds_mode)mode;
    c.workers = 2;
    c.batch_size = 3;
    c.shuffle_buffer = 6;
    c.seed = 5;
    c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 30 : 0;
    run_out a, b, x, y;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    wds_loader *l;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    run_epochs(l, 3, &a);
    wds_loader_close(l);
    c.eager_next_epoch = 1;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    run_epochs(l, 3, &b);
    /* Epoch 3 is being read; jump to 7 instead. */
    ASSERT_EQ_INT(wds_loader_set_epoch(l, 7), WDS_OK);
    run_epoch(l, &x);
    wds_loader_close(l);
    c.eager_next_epoch = 0;
    c.epoch = 7;
    ASSERT_EQ_INT(run_cfg(&c, &y), WDS_OK);
    ASSERT_EQ_U64(a.n, b.n);
    ASSERT_TRUE(a.n > 0);
    ASSERT_TRUE(memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0);
    ASSERT_EQ_U64(x.n, y.n);
    ASSERT_TRUE(memcmp(x.ids, y.ids, x.n * sizeof *x.ids) == 0);
    out_free(&a);
    out_free(&b);
    out_free(&x);
    out_free(&y);
  }
  shardset_free(&s);
}

/* eager_next_epoch overlaps the epochs: once the last batch of an epoch
 * is out, the next epoch's workers read (its shards are opened) before the
 * caller asks for the end; the batches stay those of a loader without
 * overlap, and set_epoch() of the epoch already being read keeps it. */
TEST(next_epoch_overlaps_the_last_batches) {
  uint64_t counts[4] = {20, 20, 20, 20};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 4, counts, -1), 0);
  for (int mode = 0; mode < 3; mode++) {
    wds_loader_config c = base_cfg(&s);
    c.mode = (wds_mode)mode;
    c.workers = 2;
    c.batch_size = 4;
    c.shuffle_buffer = 8;
    c.seed = 11;
    c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 40 : 0;
    run_out a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    wds_loader *l;
    wds_loader_stats st0, st;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    run_epochs(l, 1, &a);
    wds_loader_stats_get(l, &st0); /* what epoch 0 reads */
    run_epochs(l, 2, &a);
    wds_loader_close(l);
    size_t per_epoch = 0;
    while (a.batch_rows[per_epoch]) /* up to epoch 0's marker */
      per_epoch++;
    ASSERT_TRUE(per_epoch > 0);
    c.eager_next_epoch = 1;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    const wds_batch *bt;
    for (size_t k = 0; k < per_epoch; k++) {
      ASSERT_EQ_INT(wds_loader_next(l, &bt), WDS_OK);
      out_push_batch(&b, bt);
      wds_loader_release(l, bt);
    }
    /* Epoch 0's workers have ended; epoch 1's read now, before the end of
     * epoch 0 is asked for. */
    int overlapped = 0;
    for (int t = 0; t < 20000 && !overlapped; t++) {
      wds_loader_stats_get(l, &st);
      overlapped = st.bytes_read > st0.bytes_read;
      if (!overlapped)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    ASSERT_TRUE(overlapped);
    ASSERT_EQ_INT(wds_loader_next(l, &bt), WDS_EOF);
    out_push_batch(&b, &(wds_batch){0});
    ASSERT_EQ_INT(wds_loader_set_epoch(l, 1), WDS_OK); /* kept: the same */
    run_epochs(l, 2, &b);
    wds_loader_close(l);
    ASSERT_EQ_U64(a.n, b.n);
    ASSERT_EQ_U64(a.batches, b.batches);
    ASSERT_TRUE(memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0);
    out_free(&a);
    out_free(&b);
  }
  shardset_free(&s);
}

TEST(resume_equals_an_uninterrupted_run) {
  uint64_t counts[5] = {11, 4, 9, 13, 6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 5, counts, -1), 0);
  for (int mode = 0; mode < 3; mode++) {
    wds_loader_config c = base_cfg(&s);
    c.mode = (wds_mode)mode;
    c.workers = 2;
    c.batch_size = 3;
    c.shuffle_buffer = 6;
    c.seed = 3;
    c.world_size = mode == WDS_MODE_PLAIN ? 1 : 2;
    c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 17 : 0;
    wds_loader *l;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    run_out full = {0};
    run_epochs(l, 2, &full);
    wds_loader_close(l);
    size_t nb0 = 0;
    while (full.batch_rows[nb0] != 0)
      nb0++;
    for (size_t k = 0; k <= nb0; k++) {
      c.resume_batches = k;
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      uint64_t ep, done;
      wds_loader_position(l, &ep, &done);
      ASSERT_EQ_U64(ep, 0);
      ASSERT_EQ_U64(done, k);
      run_out part = {0};
      run_epochs(l, 2, &part);
      wds_loader_position(l, &ep, &done);
      ASSERT_EQ_U64(ep, 2);
      ASSERT_EQ_U64(done, 0);
      wds_loader_close(l);
      /* part == full minus its first k batches */
      size_t skip_rows = 0;
      for (size_t b = 0; b < k; b++)
        skip_rows += full.batch_rows[b];
      ASSERT_EQ_U64(part.batches, full.batches - k);
      ASSERT_EQ_U64(part.n, full.n - skip_rows);
      ASSERT_TRUE(memcmp(part.ids, full.ids + skip_rows,
                         part.n * sizeof *part.ids) == 0);
      out_free(&part);
    }
    out_free(&full);
  }
  shardset_free(&s);
}

TEST(resume_does_not_decode_delivered_samples) {
  uint64_t counts[2] = {8, 8};
  shardset s;
  /* Sample 0 (the first of shard 0) has a bad .cls. */
  ASSERT_EQ_INT(make_shards(&s, 2, counts, 0), 0);
  wds_loader_config c = base_cfg(&s);
  c.workers = 1;
  c.batch_size = 4;
  c.shard_shuffle = 0;
  run_out o;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(o.err, "s0/0");
  ASSERT_CONTAINS(o.err, "set");
  ASSERT_CONTAINS(o.err, "'cls'");
  out_free(&o);
  /* Resuming after the first batch never decodes the bad sample. */
  c.resume_batches = 1;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_OK);
  ASSERT_EQ_U64(o.n, 12);
  ASSERT_EQ_INT(o.ids[0], 4);
  out_free(&o);
  shardset_free(&s);
}

/* Plain mode learns an epoch's length only by reading it: a resume point
 * past the end is an error of the first next() naming both (it was an
 * empty epoch: `wds batches --resume-at 2^64-1` printed nothing, exit 0);
 * the end itself is a resume point (no batch, then the epoch's end). */
TEST(plain_resume_past_the_end_is_an_error) {
  uint64_t counts[3] = {11, 4, 9}; /* 24 samples */
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 3, counts, -1), 0);
  for (int drop = 0; drop < 2; drop++) {
    wds_loader_config c = base_cfg(&s);
    c.mode = WDS_MODE_PLAIN;
    c.workers = 2;
    c.batch_size = 5;
    c.last_batch = drop ? WDS_LAST_DROP : WDS_LAST_KEEP;
    uint64_t nb = drop ? 4 : 5;
    const uint64_t ks[] = {nb, nb + 1, 1000, UINT64_MAX / 5};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
      c.resume_batches = ks[i];
      run_out o;
      int rc = run_cfg(&c, &o);
      if (ks[i] == nb) {
        ASSERT_EQ_INT(rc, WDS_OK);
        ASSERT_EQ_U64(o.batches, 0);
      } else {
        ASSERT_EQ_INT(rc, WDS_ERR_INVALID);
        char want[160];
        snprintf(want, sizeof want,
                 "resume at batch %llu of epoch 0, but the epoch has %llu "
                 "batches (24 samples): past its end",
                 (unsigned long long)ks[i], (unsigned long long)nb);
        ASSERT_CONTAINS(o.err, want);
      }
      out_free(&o);
    }
  }
  shardset_free(&s);
}

/* ---- errors ---- */

TEST(skip_policy_keeps_rows_and_counts) {
  uint64_t counts[2] = {5, 5};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 2, counts, 7), 0);
  wds_loader_config c = base_cfg(&s);
  c.workers = 1;
  c.batch_size = 5;
  c.shard_shuffle = 0;
  c.on_error = WDS_ON_ERROR_SKIP;
  log_keep lk = {{0}};
  c.log = log_keep_fn;
  c.log_ctx = &lk;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  run_out o = {0};
  run_epoch(l, &o);
  ASSERT_EQ_INT(o.status, WDS_EOF);
  ASSERT_EQ_U64(o.n, 10);
  for (int64_t i = 0; i < 10; i++)
    ASSERT_EQ_INT(o.ids[i], i == 7 ? -1 : i);
  wds_loader_stats st;
  wds_loader_stats_get(l, &st);
  ASSERT_EQ_U64(st.skipped, 1);
  ASSERT_EQ_U64(st.fill_rows, 1);
  ASSERT_EQ_U64(st.batches, 2);
  ASSERT_EQ_U64(st.samples, 10);
  ASSERT_CONTAINS(lk.text, "skipped: ");
  ASSERT_CONTAINS(lk.text, "s1/2");
  ASSERT_CONTAINS(lk.text, "x7");
  wds_loader_close(l);
  out_free(&o);

  /* A missing shard: stop names it; skip goes on (exact mode tops the
   * rank up with invalid rows, so the batch count still holds). */
  char *urls[3] = {s.urls[0], "/nonexistent/wds-missing.tar", s.urls[1]};
  c.urls = (const char *const *)urls;
  c.url_count = 3;
  c.on_error = WDS_ON_ERROR_STOP;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_ERR_OPEN);
  ASSERT_CONTAINS(o.err, "wds-missing.tar");
  out_free(&o);
  c.on_error = WDS_ON_ERROR_SKIP;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_OK);
  ASSERT_EQ_U64(o.n, 10);
  out_free(&o);
  shardset_free(&s);
}

TEST(exact_mode_tops_up_a_short_shard) {
  uint64_t counts[2] = {6, 6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 2, counts, -1), 0);
  /* An index that claims 9 samples in shard 1: the 3 it lacks become
   * invalid rows, so both ranks still get 8 samples. */
  char ix[600];
  snprintf(ix, sizeof ix, "%s/short-index.json", tmpdir);
  FILE *f = fopen(ix, "w");
  ASSERT_TRUE(f != NULL);
  fprintf(f,
          "{\"wids_version\": 1, \"shardlist\": [{\"url\": \"%s\", "
          "\"nsamples\": 6}, {\"url\": \"%s\", \"nsamples\": 9}]}\n",
          s.urls[0], s.urls[1]);
  fclose(f);
  uint64_t rows = 0, invalid = 0, batches[2];
  for (int rank = 0; rank < 2; rank++) {
    wds_loader_config c = base_cfg(&s);
    c.mode = WDS_MODE_EXACT;
    c.index_path = ix;
    c.world_size = 2;
    c.rank = rank;
    c.workers = 2;
    c.batch_size = 3;
    c.on_error = WDS_ON_ERROR_SKIP;
    run_out o;
    int rc = run_cfg(&c, &o);
    if (rc != WDS_OK)
      printf("  %s\n", o.err);
    ASSERT_EQ_INT(rc, WDS_OK);
    batches[rank] = o.batches;
    rows += o.n;
    for (size_t i = 0; i < o.n; i++)
      invalid += o.ids[i] < 0;
    out_free(&o);
  }
  ASSERT_EQ_U64(batches[0], 3);
  ASSERT_EQ_U64(batches[1], 3);
  ASSERT_EQ_U64(rows, 15 + 1); /* 15 per the index, padded to 2 x 8 */
  ASSERT_TRUE(invalid >= 3);

  /* The short shard is an error, not a silent fill: stop names it... */
  wds_loader_config c = base_cfg(&s);
  c.mode = WDS_MODE_EXACT;
  c.index_path = ix;
  c.workers = 1;
  c.batch_size = 3;
  run_out o;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(o.err, s.urls[1]);
  ASSERT_CONTAINS(o.err, "promised 9");
  out_free(&o);
  /* ... and skip counts it and logs the message. */
  c.on_error = WDS_ON_ERROR_SKIP;
  log_keep lk = {{0}};
  c.log = log_keep_fn;
  c.log_ctx = &lk;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  run_out o2 = {0};
  run_epoch(l, &o2);
  ASSERT_EQ_INT(o2.status, WDS_EOF);
  wds_loader_stats st;
  wds_loader_stats_get(l, &st);
  ASSERT_EQ_U64(st.skipped, 1);
  ASSERT_CONTAINS(lk.text, "promised 9");
  wds_loader_close(l);
  out_free(&o2);

  /* A count that is too small would leave samples unread: an error too. */
  f = fopen(ix, "w");
  ASSERT_TRUE(f != NULL);
  fprintf(f,
          "{\"wids_version\": 1, \"shardlist\": [{\"url\": \"%s\", "
          "\"nsamples\": 6}, {\"url\": \"%s\", \"nsamples\": 4}]}\n",
          s.urls[0], s.urls[1]);
  fclose(f);
  c.on_error = WDS_ON_ERROR_STOP;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(o.err, "has more samples than the 4");
  ASSERT_CONTAINS(o.err, "s1/4");
  out_free(&o);
  shardset_free(&s);
}

/* Padding repeats keys from the slot's own key store, which may move when
 * it grows: long keys and a large batch make it grow while padding. */
TEST(padding_with_long_keys) {
  char path[512], name[400];
  snprintf(path, sizeof path, "%s/longkeys.tar", tmpdir);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &e), WDS_OK);
  for (int i = 0; i < 3; i++) {
    char key[300];
    memset(key, 'a' + i, 250);
    key[250] = '\0';
    snprintf(name, sizeof name, "%s.cls", key);
    wds__tarw_add(w, name, "1", 1, &e);
  }
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);
  wds_field_spec fs[1] = {{"cls", WDS_DECODE_INT, 0, 0, 0}};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.spec = path;
  c.rank = 0;
  c.world_size = 1;
  c.fields = fs;
  c.field_count = 1;
  c.batch_size = 64;
  c.last_batch = WDS_LAST_PAD;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *b;
  ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
  ASSERT_EQ_U64(b->rows, 64);
  for (size_t r = 0; r < 64; r++) {
    ASSERT_EQ_U64(strlen(b->keys[r]), 250);
    ASSERT_EQ_INT(b->keys[r][0], 'a' + (int)(r % 3));
    ASSERT_EQ_INT(b->valid[r], r < 3);
  }
  wds_loader_release(l, b);
  wds_loader_close(l);
}

/* With every slot held, the end of the epoch (which needs no slot) is
 * returned, every time: the answer must not depend on thread timing. */
TEST(end_of_epoch_with_every_slot_held) {
  uint64_t counts[1] = {6};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  for (int rep = 0; rep < 50; rep++) {
    wds_loader_config c = base_cfg(&s);
    c.batch_size = 3;
    c.prefetch_batches = 2;
    wds_loader *l;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    const wds_batch *a, *b, *d;
    ASSERT_EQ_INT(wds_loader_next(l, &a), WDS_OK);
    ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
    ASSERT_EQ_INT(wds_loader_next(l, &d), WDS_EOF);
    wds_loader_release(l, a);
    wds_loader_release(l, b);
    wds_loader_close(l);
  }
  shardset_free(&s);
}

/* ---- batch layout ---- */

static size_t npy_bytes(uint8_t *out, int rows, int cols, int base) {
  char hdr[128];
  int n = snprintf(hdr, sizeof hdr,
                   "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, "
                   "%d), }",
                   rows, cols);
  int total = 10 + n + 1;
  int pad = (64 - total % 64) % 64;
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  uint16_t hl = (uint16_t)(n + pad + 1);
  out[8] = (uint8_t)(hl & 0xff);
  out[9] = (uint8_t)(hl >> 8);
  memcpy(out + 10, hdr, (size_t)n);
  memset(out + 10 + n, ' ', (size_t)pad);
  out[10 + n + pad] = '\n';
  size_t at = (size_t)(10 + n + pad + 1);
  for (int i = 0; i < rows * cols; i++) {
    int32_t v = base + i;
    memcpy(out + at, &v, 4);
    at += 4;
  }
  return at;
}

TEST(batch_layout_bytes_ints_npy_and_pad) {
  char path[512];
  snprintf(path, sizeof path, "%s/layout.tar", tmpdir);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &e), WDS_OK);
  for (int i = 0; i < 5; i++) {
    char name[64], val[64];
    uint8_t npy[256];
    snprintf(name, sizeof name, "k%d.cls", i);
    snprintf(val, sizeof val, " %d\n", -i);
    wds__tarw_add(w, name, val, strlen(val), &e);
    snprintf(name, sizeof name, "k%d.npy", i);
    size_t n = npy_bytes(npy, 2, 3, 10 * i);
    wds__tarw_add(w, name, npy, n, &e);
    snprintf(name, sizeof name, "k%d.txt", i);
    wds__tarw_add(w, name, "abcdefgh", (size_t)i, &e);
  }
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);

  wds_field_spec fs[3] = {{"cls", WDS_DECODE_AUTO, 0, 0, 0},
                          {"npy", WDS_DECODE_AUTO, 0, 0, 0},
                          {"TXT;json", WDS_DECODE_AUTO, 0, 0, 0}};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.spec = path;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.fields = fs;
  c.field_count = 3;
  c.batch_size = 3;
  c.last_batch = WDS_LAST_PAD;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *b1, *b2, *b3;
  ASSERT_EQ_INT(wds_loader_next(l, &b1), WDS_OK);
  ASSERT_EQ_INT(wds_loader_next(l, &b2), WDS_OK); /* both held at once */
  ASSERT_EQ_U64(b1->rows, 3);
  ASSERT_STREQ(b1->keys[2], "k2");
  ASSERT_EQ_INT(b1->fields[0].dtype, WDS_DTYPE_I64);
  ASSERT_EQ_INT(((const int64_t *)b1->fields[0].data)[2], -2);
  ASSERT_EQ_INT(b1->fields[1].dtype, WDS_DTYPE_I32);
  ASSERT_EQ_INT(b1->fields[1].ndim, 3);
  ASSERT_EQ_INT(b1->fields[1].shape[0], 3);
  ASSERT_EQ_INT(b1->fields[1].shape[1], 2);
  ASSERT_EQ_INT(b1->fields[1].shape[2], 3);
  ASSERT_EQ_INT(((const int32_t *)b1->fields[1].data)[6 + 5], 10 + 5);
  ASSERT_EQ_INT(b1->fields[2].dtype, WDS_DTYPE_BYTES);
  ASSERT_EQ_U64(b1->fields[2].offsets[3], 0 + 1 + 2);
  ASSERT_EQ_U64(b1->fields[2].size_bytes, 3);
  ASSERT_STREQ(b1->fields[2].name, "TXT;json");
  ASSERT_TRUE(memcmp(b1->fields[2].data, "aab", 3) == 0);
  /* the padded last batch: k3, k4, then k3 again marked invalid */
  ASSERT_EQ_U64(b2->rows, 3);
  ASSERT_STREQ(b2->keys[0], "k3");
  ASSERT_STREQ(b2->keys[2], "k3");
  ASSERT_EQ_INT(b2->valid[1], 1);
  ASSERT_EQ_INT(b2->valid[2], 0);
  ASSERT_EQ_INT(((const int64_t *)b2->fields[0].data)[2], -3);
  ASSERT_EQ_U64(b2->fields[2].offsets[3], 3 + 4 + 3);
  ASSERT_EQ_INT(wds_loader_next(l, &b3), WDS_EOF);
  wds_loader_release(l, b1);
  wds_loader_release(l, b2);
  wds_loader_close(l);
}

/* JPEG's spellings: a field named "jpg" also takes a sample's "jpeg" (read
 * lower-cased from .JPEG), and "jpeg" a "jpg", after the names the spec
 * lists; a sample with both gives the one named. Bytes rows show which. */
TEST(jpg_and_jpeg_match_each_other) {
  char path[512];
  snprintf(path, sizeof path, "%s/spellings.tar", tmpdir);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &e), WDS_OK);
  wds__tarw_add(w, "a.jpg", "A", 1, &e);
  wds__tarw_add(w, "b.JPEG", "B", 1, &e);
  wds__tarw_add(w, "c.jpeg", "C", 1, &e);
  wds__tarw_add(w, "d.JPG", "D", 1, &e);
  wds__tarw_add(w, "e.jpeg", "e", 1, &e); /* both: the named one wins */
  wds__tarw_add(w, "e.jpg", "E", 1, &e);
  wds__tarw_add(w, "f.png", "F", 1, &e);
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);
  static const struct {
    const char *name, *want;
  } cases[] = {{"jpg", "ABCDE"}, {"JPEG", "ABCDe"}, {"png;jpg", "ABCDEF"}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    wds_field_spec fs[1] = {{cases[k].name, WDS_DECODE_BYTES, 0, 0, 0}};
    wds_loader_config c = WDS_LOADER_CONFIG_INIT;
    c.spec = path;
    c.rank = 0;
    c.world_size = 1;
    c.workers = 1;
    c.fields = fs;
    c.field_count = 1;
    c.batch_size = 6;
    c.on_error = WDS_ON_ERROR_SKIP; /* f (no jpg) skipped */
    wds_loader *l;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    const wds_batch *b;
    char got[8] = "";
    size_t n = 0;
    int rc;
    while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
      for (size_t r = 0; r < b->rows && n < 7; r++)
        if (b->valid[r] &&
            b->fields[0].offsets[r + 1] > b->fields[0].offsets[r])
          got[n++] = ((const char *)b->fields[0].data)[b->fields[0].offsets[r]];
      wds_loader_release(l, b);
    }
    ASSERT_EQ_INT(rc, WDS_EOF);
    ASSERT_STREQ(got, cases[k].want);
    wds_loader_close(l);
  }
}

TEST(holding_every_slot_is_an_error_not_a_hang) {
  uint64_t counts[1] = {20};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  wds_loader_config c = base_cfg(&s);
  c.workers = 1;
  c.prefetch_batches = 2;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *a, *b, *d;
  ASSERT_EQ_INT(wds_loader_next(l, &a), WDS_OK);
  ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
  ASSERT_TRUE(a->slot != b->slot);
  ASSERT_EQ_INT(wds_loader_next(l, &d), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "release one");
  wds_loader_release(l, a);
  ASSERT_EQ_INT(wds_loader_next(l, &d), WDS_OK);
  ASSERT_EQ_INT(((const int64_t *)d->fields[0].data)[0], 2);
  /* set_epoch abandons the epoch; held batches stay readable */
  ASSERT_EQ_INT(wds_loader_set_epoch(l, 5), WDS_OK);
  ASSERT_EQ_INT(((const int64_t *)b->fields[0].data)[0], 1);
  wds_loader_release(l, b);
  wds_loader_release(l, d);
  ASSERT_EQ_INT(wds_loader_next(l, &d), WDS_OK);
  ASSERT_EQ_U64(d->epoch, 5);
  ASSERT_EQ_U64(d->index, 0);
  wds_loader_release(l, d);
  wds_loader_close(l);
  shardset_free(&s);
}

/* wds_loader_release_after(): a stand-in for a DMA copy and its CUDA event
 * that completes late. The "copy" reads the slot only when the fence says
 * done, `polls` polls after the release (or at wait()), as a copy queued
 * behind a long kernel does; if the loader gave the slot to a worker before
 * that, the copy reads another batch's rows. */
typedef struct late_copy {
  const int64_t *src; /* the slot's cls column */
  size_t rows;
  int slot;
  int64_t dst[16];
  int polls, copied, dropped, waited;
} late_copy;

static int late_done(void *p) {
  late_copy *c = p;
  if (!c->copied) {
    if (c->polls-- > 0)
      return 0;
    memcpy(c->dst, c->src, c->rows * sizeof *c->dst);
    c->copied = 1;
  }
  return 1;
}

static void late_wait(void *p) {
  late_copy *c = p;
  c->waited++;
  c->polls = 0;
  late_done(p);
}

static void late_drop(void *p) { ((late_copy *)p)->dropped++; }

enum { LATE_EPOCHS = 3, LATE_MAX = 64 };

/* Every batch of LATE_EPOCHS epochs copied late: mode 0 polls only (no
 * wait()), 1 wait() only (done() never completes by polling), 2 the early
 * release a fence prevents (wds_loader_release, the copy made when a later
 * batch arrives in the same slot). Returns the batches; ids[k][row] the
 * rows next() gave. */
static size_t late_run(const shardset *s, int mode, late_copy *cp,
                       int64_t ids[][16], size_t *rows) {
  wds_loader_config c = base_cfg(s);
  c.workers = 2;
  c.batch_size = 4;
  c.prefetch_batches = 2;
  c.shuffle_buffer = 8;
  c.seed = 3;
  wds_loader *l;
  if (wds_loader_open(&c, &l) != WDS_OK)
    return 0;
  size_t k = 0;
  for (int e = 0; e < LATE_EPOCHS; e++) {
    const wds_batch *b;
    int rc;
    while ((rc = wds_loader_next(l, &b)) == WDS_OK && k < LATE_MAX) {
      late_copy *cc = &cp[k];
      memset(cc, 0, sizeof *cc);
      cc->src = b->fields[0].data;
      cc->rows = b->rows;
      memcpy(ids[k], b->fields[0].data, b->rows * sizeof(int64_t));
      rows[k] = b->rows;
      cc->slot = b->slot;
      if (mode == 2) {
        /* The copies of earlier batches in this slot run now, late: they
         * read this batch (no race: it is delivered, not being filled). */
        for (size_t j = 0; j < k; j++)
          if (!cp[j].copied && cp[j].slot == b->slot)
            late_done(&cp[j]);
        wds_loader_release(l, b);
      } else {
        cc->polls = mode == 1 ? 1 << 30 : 3;
        wds_release_fence f = {late_done, mode == 1 ? late_wait : NULL,
                               late_drop, cc};
        if (wds_loader_release_after(l, b, &f) != WDS_OK)
          return 0;
      }
      k++;
    }
    if (rc != WDS_EOF)
      return 0;
  }
  for (size_t i = 0; mode == 2 && i < k; i++)
    late_done(&cp[i]); /* while the slots are still allocated */
  wds_loader_close(l); /* waits for the fences still pending */
  return k;
}

TEST(release_after_a_fence_keeps_the_slot_until_done) {
  uint64_t counts[3] = {10, 7, 9};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 3, counts, -1), 0);
  static late_copy cp[LATE_MAX];
  static int64_t ids[LATE_MAX][16];
  size_t rows[LATE_MAX];
  for (int mode = 0; mode < 2; mode++) {
    size_t n = late_run(&s, mode, cp, ids, rows);
    ASSERT_EQ_U64(n, LATE_EPOCHS * 7); /* 26 samples in batches of 4 */
    int waited = 0;
    for (size_t k = 0; k < n; k++) {
      ASSERT_EQ_INT(cp[k].copied, 1);
      ASSERT_EQ_INT(cp[k].dropped, 1); /* once, after the copy */
      ASSERT_TRUE(memcmp(cp[k].dst, ids[k], rows[k] * sizeof(int64_t)) == 0);
      waited += cp[k].waited;
    }
    if (mode == 1)
      ASSERT_TRUE(waited > 0);
  }
  /* The control: released at once, the late copies read refilled slots, so
   * the comparison above would fail without the fences. */
  size_t n = late_run(&s, 2, cp, ids, rows);
  ASSERT_EQ_U64(n, LATE_EPOCHS * 7);
  size_t differ = 0;
  for (size_t k = 0; k + 1 < n; k++)
    differ += memcmp(cp[k].dst, ids[k], rows[k] * sizeof(int64_t)) != 0;
  printf("  control: %zu of %zu batches copied late differ after an early "
         "release\n",
         differ, n - 1);
  ASSERT_TRUE(differ > 0);
  shardset_free(&s);
}

TEST(release_after_refuses_what_is_not_held) {
  uint64_t counts[1] = {8};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  wds_loader_config c = base_cfg(&s);
  c.workers = 1;
  c.batch_size = 2;
  c.prefetch_batches = 2;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *a, *b;
  ASSERT_EQ_INT(wds_loader_next(l, &a), WDS_OK);
  late_copy cc = {0};
  cc.src = a->fields[0].data;
  cc.rows = a->rows;
  cc.polls = 1 << 30;
  wds_release_fence none = {NULL, NULL, late_drop, &cc};
  ASSERT_EQ_INT(wds_loader_release_after(l, a, &none), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "done()");
  wds_release_fence f = {late_done, late_wait, late_drop, &cc};
  ASSERT_EQ_INT(wds_loader_release_after(l, a, &f), WDS_OK);
  /* Given back already: refused, and not dropped twice. */
  ASSERT_EQ_INT(wds_loader_release_after(l, a, &f), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "not held");
  wds_loader_release(l, a); /* a no-op on a fenced slot */
  /* Both slots out (one held, one fenced) is not "every slot held": the
   * next batch waits for the fence (its wait()). */
  ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
  const wds_batch *d;
  ASSERT_EQ_INT(wds_loader_next(l, &d), WDS_OK);
  ASSERT_EQ_INT(cc.waited, 1);
  ASSERT_EQ_INT(cc.dropped, 1);
  ASSERT_EQ_INT(cc.copied, 1);
  wds_loader_release(l, b);
  late_copy c2 = {0};
  c2.src = d->fields[0].data;
  c2.rows = d->rows;
  c2.polls = 1 << 30;
  wds_release_fence f2 = {late_done, late_wait, late_drop, &c2};
  ASSERT_EQ_INT(wds_loader_release_after(l, d, &f2), WDS_OK);
  wds_loader_close(l); /* waits for c2 and drops it */
  ASSERT_EQ_INT(c2.copied, 1);
  ASSERT_EQ_INT(c2.dropped, 1);
  shardset_free(&s);
}

/* wds_loader_release() from another thread while this one is in next():
 * a consumer handing batches to other threads (the Python binding's garbage
 * collector does). Every batch arrives, in order; TSan checks the rest. */
typedef struct releaser {
  wds_loader *l;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const wds_batch *q[8];
  size_t head, len;
  int done;
} releaser;

static void *release_later(void *arg) {
  releaser *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (r->len == 0 && !r->done)
      pthread_cond_wait(&r->cv, &r->mu);
    if (r->len == 0)
      break;
    const wds_batch *b = r->q[r->head];
    r->head = (r->head + 1) % 8;
    r->len--;
    pthread_mutex_unlock(&r->mu);
    struct timespec pause = {0, 2 * 1000 * 1000};
    nanosleep(&pause, NULL);
    wds_loader_release(r->l, b);
    pthread_mutex_lock(&r->mu);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

TEST(release_from_another_thread) {
  uint64_t counts[2] = {15, 15};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 2, counts, -1), 0);
  wds_loader_config c = base_cfg(&s);
  c.workers = 2;
  c.prefetch_batches = 2;
  c.batch_size = 2;
  releaser r = {.head = 0};
  ASSERT_EQ_INT(wds_loader_open(&c, &r.l), WDS_OK);
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  pthread_t t;
  ASSERT_EQ_INT(pthread_create(&t, NULL, release_later, &r), 0);
  uint64_t got = 0, retries = 0;
  int rc;
  for (;;) {
    const wds_batch *b;
    rc = wds_loader_next(r.l, &b);
    if (rc == WDS_ERR_INVALID) { /* every slot is with the releaser */
      retries++;
      struct timespec pause = {0, 1000 * 1000};
      nanosleep(&pause, NULL);
      continue;
    }
    if (rc != WDS_OK)
      break;
    if (b->index != got)
      break;
    got++;
    pthread_mutex_lock(&r.mu);
    r.q[(r.head + r.len) % 8] = b;
    r.len++;
    pthread_cond_signal(&r.cv);
    pthread_mutex_unlock(&r.mu);
  }
  pthread_mutex_lock(&r.mu);
  r.done = 1;
  pthread_cond_signal(&r.cv);
  pthread_mutex_unlock(&r.mu);
  pthread_join(t, NULL);
  printf("  %llu batches, %llu retries with every slot held\n",
         (unsigned long long)got, (unsigned long long)retries);
  ASSERT_EQ_INT(rc, WDS_EOF);
  ASSERT_EQ_U64(got, 15);
  wds_loader_close(r.l);
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.mu);
  shardset_free(&s);
}

TEST(environment_rank_and_world) {
  int r, w;
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "8", 1);
  wds_env_rank_world(&r, &w);
  ASSERT_EQ_INT(r, 3);
  ASSERT_EQ_INT(w, 8);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  wds_env_rank_world(&r, &w);
  ASSERT_EQ_INT(r, 1);
  ASSERT_EQ_INT(w, 2);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  wds_env_rank_world(&r, &w);
  ASSERT_EQ_INT(w, 4);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  wds_env_rank_world(&r, &w);
  ASSERT_EQ_INT(r, 0);
  ASSERT_EQ_INT(w, 1);

  /* The loader reads them when rank/world are -1; explicit values win. */
  uint64_t counts[4] = {2, 2, 2, 2};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 4, counts, -1), 0);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "4", 1);
  wds_loader_config c = base_cfg(&s);
  c.rank = -1;
  c.world_size = -1;
  c.workers = 1;
  run_out o;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_OK);
  ASSERT_EQ_U64(o.n, 2);
  out_free(&o);
  c.world_size = 1;
  c.rank = 0;
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_OK);
  ASSERT_EQ_U64(o.n, 8);
  out_free(&o);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  shardset_free(&s);
}

/* ---- images through the loader ---- */

TEST(images_decode_into_fixed_shapes_deterministically) {
  char path[512];
  snprintf(path, sizeof path, "%s/images.tar", tmpdir);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &e), WDS_OK);
  tjhandle tj = tjInitCompress();
  ASSERT_TRUE(tj != NULL);
  for (int i = 0; i < 6; i++) {
    int W = 80 + 16 * i, H = 60 + 8 * i;
    uint8_t *rgb = malloc((size_t)W * H * 3);
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        uint8_t *p = rgb + ((size_t)y * W + x) * 3;
        p[0] = (uint8_t)(x * 255 / W);
        p[1] = (uint8_t)(y * 255 / H);
        p[2] = (uint8_t)(40 * i);
      }
    unsigned char *jpg = NULL;
    unsigned long jsize = 0;
    ASSERT_EQ_INT(tjCompress2(tj, rgb, W, 0, H, TJPF_RGB, &jpg, &jsize,
                              TJSAMP_420, 90, 0),
                  0);
    char name[64], val[16];
    snprintf(name, sizeof name, "img%d.jpg", i);
    wds__tarw_add(w, name, jpg, jsize, &e);
    snprintf(name, sizeof name, "img%d.cls", i);
    snprintf(val, sizeof val, "%d", i);
    wds__tarw_add(w, name, val, strlen(val), &e);
    tjFree(jpg);
    free(rgb);
  }
  tjDestroy(tj);
  /* a corrupt image last */
  wds__tarw_add(w, "img6.jpg", "\xff\xd8\xff\xe0garbage", 11, &e);
  wds__tarw_add(w, "img6.cls", "6", 1, &e);
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);

  wds_field_spec fs[2] = {{"jpg;png", WDS_DECODE_AUTO, 3, 32, 24},
                          {"cls", WDS_DECODE_AUTO, 0, 0, 0}};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.spec = path;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.fields = fs;
  c.field_count = 2;
  c.batch_size = 7;
  c.crop = WDS_CROP_RANDOM;
  c.on_error = WDS_ON_ERROR_SKIP;
  c.log = log_keep_fn;
  uint8_t *first = NULL;
  for (int rep = 0; rep < 2; rep++) {
    log_keep lk = {{0}};
    c.log_ctx = &lk;
    wds_loader *l;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    const wds_batch *b;
    ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
    ASSERT_EQ_U64(b->rows, 7);
    ASSERT_EQ_INT(b->fields[0].dtype, WDS_DTYPE_U8);
    ASSERT_EQ_INT(b->fields[0].ndim, 4);
    ASSERT_EQ_INT(b->fields[0].shape[1], 24);
    ASSERT_EQ_INT(b->fields[0].shape[2], 32);
    ASSERT_EQ_INT(b->fields[0].shape[3], 3);
    ASSERT_EQ_U64(b->fields[0].size_bytes, 7 * 24 * 32 * 3);
    ASSERT_EQ_INT(b->valid[6], 0); /* the corrupt one */
    ASSERT_EQ_INT(b->valid[0], 1);
    const uint8_t *px = b->fields[0].data;
    /* the blue channel of image i is 40 * i, whatever the crop */
    for (int i = 0; i < 6; i++) {
      int v = px[(size_t)i * 24 * 32 * 3 + (12 * 32 + 16) * 3 + 2];
      ASSERT_TRUE(v >= 40 * i - 6 && v <= 40 * i + 6);
    }
    if (rep == 0) {
      first = malloc(b->fields[0].size_bytes);
      memcpy(first, px, b->fields[0].size_bytes);
    } else {
      ASSERT_TRUE(memcmp(first, px, b->fields[0].size_bytes) == 0);
    }
    wds_loader_stats st;
    wds_loader_stats_get(l, &st);
    ASSERT_EQ_U64(st.skipped, 1);
    ASSERT_CONTAINS(lk.text, "img6");
    wds_loader_release(l, b);
    wds_loader_close(l);
  }
  free(first);
}

/* Image rows are written into the slot by the copy job (the decoder's
 * last pass, deferred): every row equals wds__decode_image of its sample,
 * RGB and gray, in full batches (copied by the workers and the collator)
 * and the last, partial one, with 1 and 2 workers. */
TEST(image_rows_equal_the_decoder) {
  char path[512];
  snprintf(path, sizeof path, "%s/rows.tar", tmpdir);
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  enum { N = 11 };
  unsigned char *jpg[N];
  unsigned long jsize[N];
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &e), WDS_OK);
  tjhandle tj = tjInitCompress();
  ASSERT_TRUE(tj != NULL);
  for (int i = 0; i < N; i++) {
    int W = 45 + 23 * i, H = 33 + 17 * (i % 4), gray = i % 3 == 0;
    int ch = gray ? 1 : 3;
    uint8_t *pix = malloc((size_t)W * H * ch);
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        for (int k = 0; k < ch; k++)
          pix[((size_t)y * W + x) * ch + k] =
              (uint8_t)((x * 7 + y * 13 + k * 50 + i * 31) ^ (x * y));
    jpg[i] = NULL;
    jsize[i] = 0;
    ASSERT_EQ_INT(tjCompress2(tj, pix, W, 0, H, gray ? TJPF_GRAY : TJPF_RGB,
                              &jpg[i], &jsize[i],
                              gray ? TJSAMP_GRAY : TJSAMP_420, 85, 0),
                  0);
    char name[64];
    snprintf(name, sizeof name, "r%02d.jpg", i);
    wds__tarw_add(w, name, jpg[i], jsize[i], &e);
    free(pix);
  }
  tjDestroy(tj);
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);
  wds__decoder *d = wds__decoder_new();
  for (int ch = 1; ch <= 3; ch += 2)
    for (int workers = 1; workers <= 2; workers++) {
      wds_field_spec fs[1] = {{"jpg", WDS_DECODE_AUTO, ch, 40, 30}};
      wds_loader_config c = WDS_LOADER_CONFIG_INIT;
      c.spec = path;
      c.rank = 0;
      c.world_size = 1;
      c.workers = 1;
      c.fields = fs;
      c.field_count = 1;
      c.batch_size = 4;
      c.shuffle_buffer = 5;
      c.seed = (uint64_t)(ch * 10 + workers);
      const char *urls[2] = {path, path};
      if (workers == 2) { /* two workers need two shards: the same one */
        c.spec = NULL;
        c.urls = urls;
        c.url_count = 2;
        c.workers = 2;
      }
      wds_loader *l;
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      size_t row = (size_t)40 * 30 * (size_t)ch, seen = 0;
      uint8_t *want = malloc(row);
      const wds_batch *b;
      int rc;
      while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
        ASSERT_EQ_U64(b->fields[0].size_bytes, b->rows * row);
        for (size_t r = 0; r < b->rows; r++) {
          int i = atoi(b->keys[r] + 1);
          ASSERT_TRUE(i >= 0 && i < N && b->valid[r]);
          wds__image_opts io = {40,   30,  ch, WDS_CROP_CENTER,
                                0.08, 1.0, 0,  NULL};
          ASSERT_EQ_INT(wds__decode_image(d, jpg[i], jsize[i], &io, want, &e),
                        WDS_OK);
          ASSERT_TRUE(memcmp((const uint8_t *)b->fields[0].data + r * row, want,
                             row) == 0);
          seen++;
        }
        wds_loader_release(l, b);
      }
      ASSERT_EQ_INT(rc, WDS_EOF);
      ASSERT_EQ_U64(seen, (uint64_t)N * (uint64_t)workers);
      free(want);
      wds_loader_close(l);
    }
  wds__decoder_free(d);
  for (int i = 0; i < N; i++)
    tjFree(jpg[i]);
}

/* ---- memory ---- */

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0)
      kib = atol(line + 6);
  if (f)
    fclose(f);
  return kib;
}

TEST(rss_stays_flat_over_epochs) {
  uint64_t counts[4] = {300, 300, 300, 300};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 4, counts, -1), 0);
  wds_loader_config c = base_cfg(&s);
  c.workers = 2;
  c.batch_size = 32;
  c.shuffle_buffer = 200;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  long after2 = 0;
  for (int ep = 0; ep < 20; ep++) {
    run_out o = {0};
    run_epoch(l, &o);
    ASSERT_EQ_INT(o.status, WDS_EOF);
    ASSERT_EQ_U64(o.n, 1200);
    out_free(&o);
    if (ep == 1)
      after2 = rss_kib();
  }
  long after20 = rss_kib();
  wds_loader_close(l);
  printf("  RSS after 2 epochs: %ld KiB, after 20: %ld KiB\n", after2, after20);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  printf("  (growth not asserted under ASan/TSan: they hold freed memory "
         "in quarantine)\n");
#else
  ASSERT_TRUE(after20 - after2 < 4096);
#endif
  shardset_free(&s);
}

/* ---- stalls, cancellation, the shuffle buffer's byte bound ---- */

/* A shard's list plus a pipe: command that never writes (it would sleep for
 * a minute: every test below must end long before). */
#define STALL "pipe:sleep 61"

TEST(read_timeout_names_the_shard_and_the_wait) {
  uint64_t counts[1] = {40};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  const char *urls[2] = {s.urls[0], STALL};
  wds_loader_config c = base_cfg(&s);
  c.urls = urls;
  c.url_count = 2;
  c.mode = WDS_MODE_PLAIN;
  c.batch_size = 8;
  c.read_timeout_ms = 300;
  run_out o;
  double t0 = test_now_s();
  ASSERT_EQ_INT(run_cfg(&c, &o), WDS_ERR_TIMEOUT);
  double dt = test_now_s() - t0;
  printf("  stop policy: %s (after %.2f s)\n", o.err, dt);
  ASSERT_TRUE(dt < 10);
  ASSERT_CONTAINS(o.err, STALL);
  ASSERT_CONTAINS(o.err, "no data for 0.");
  out_free(&o);
  /* Skip policy: the stalled shard is counted and the rest delivered. */
  c.on_error = WDS_ON_ERROR_SKIP;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  memset(&o, 0, sizeof o);
  run_epoch(l, &o);
  wds_loader_stats st;
  wds_loader_stats_get(l, &st);
  wds_loader_close(l);
  ASSERT_EQ_INT(o.status, WDS_EOF);
  ASSERT_EQ_U64(o.n, 40);
  ASSERT_EQ_U64(st.skipped, 1);
  out_free(&o);
  shardset_free(&s);
}

typedef struct next_call {
  wds_loader *l;
  int rc;
  double returned;
} next_call;

static void *call_next(void *arg) {
  next_call *n = arg;
  const wds_batch *b;
  n->rc = wds_loader_next(n->l, &b);
  n->returned = test_now_s();
  if (n->rc == WDS_OK)
    wds_loader_release(n->l, b);
  return NULL;
}

TEST(interrupt_check_ends_waits_and_next_goes_on) {
  uint64_t counts[1] = {8};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  interrupter it = {.caller = pthread_self(), .after = 3};
  /* exact mode's counting pass at open, on a stalled command */
  const char *stall[1] = {STALL};
  wds_loader_config c = base_cfg(&s);
  c.urls = stall;
  c.url_count = 1;
  c.mode = WDS_MODE_EXACT;
  c.read_timeout_ms = -1; /* only the interrupt can end the waits */
  c.interrupt = interrupt_check;
  c.interrupt_ctx = &it;
  wds_loader *l = NULL;
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_CANCELLED);
  ASSERT_TRUE(test_now_s() - t0 < 5);
  ASSERT_CONTAINS(wds_last_error(), "interrupted while counting");
  ASSERT_TRUE(atomic_load(&it.calls) >= 3);
  /* next(): interrupted while the shard's command sleeps, then the same
   * loader delivers the batch it was waiting for */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "pipe:sleep 3; cat %s", s.urls[0]);
  const char *slow[1] = {cmd};
  c.urls = slow;
  c.mode = WDS_MODE_PLAIN;
  c.batch_size = 8;
  atomic_store(&it.calls, 0);
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  const wds_batch *b = NULL;
  t0 = test_now_s();
  ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_ERR_CANCELLED);
  ASSERT_TRUE(test_now_s() - t0 < 2.5); /* the command sleeps 3 s */
  ASSERT_CONTAINS(wds_last_error(), "interrupted while waiting for batch 0");
  uint64_t e = 9, n = 9;
  wds_loader_position(l, &e, &n);
  ASSERT_EQ_U64(e, 0);
  ASSERT_EQ_U64(n, 0);
  it.after = 1 << 30; /* from now on: go on waiting */
  ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
  ASSERT_EQ_U64(b->rows, 8);
  wds_loader_release(l, b);
  ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_EOF);
  wds_loader_close(l);
  ASSERT_EQ_INT(atomic_load(&it.other_thread), 0);
  shardset_free(&s);
}

static void count_log(void *ctx, const char *msg) {
  (void)msg;
  atomic_fetch_add((atomic_int *)ctx, 1);
}

/* An interrupt during exact mode's counting pass is not a bad shard: under
 * skip, the counters stop without noting the shards they were reading (or
 * would have read) as skipped (a counter once noted its cancelled reader's
 * error again and again, and open never returned). */
TEST(an_interrupted_count_skips_nothing) {
  interrupter it = {.caller = pthread_self(), .after = 3};
  const char *stall[3] = {STALL, STALL, STALL};
  atomic_int logged = 0;
  uint64_t counts[1] = {1};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  wds_loader_config c = base_cfg(&s);
  c.urls = stall;
  c.url_count = 3;
  c.workers = 1;
  c.mode = WDS_MODE_EXACT;
  c.on_error = WDS_ON_ERROR_SKIP;
  c.read_timeout_ms = -1;
  c.interrupt = interrupt_check;
  c.interrupt_ctx = &it;
  c.log = count_log;
  c.log_ctx = &logged;
  wds_loader *l = NULL;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_ERR_CANCELLED);
  ASSERT_CONTAINS(wds_last_error(), "interrupted while counting");
  printf("  %d messages logged\n", atomic_load(&logged));
  ASSERT_EQ_INT(atomic_load(&logged), 0);
  shardset_free(&s);
}

TEST(interrupt_check_cancels_a_reader) {
  interrupter it = {.caller = pthread_self(), .after = 3};
  wds_reader_config rc = WDS_READER_CONFIG_INIT;
  rc.spec = STALL;
  rc.read_timeout_ms = -1;
  rc.interrupt = interrupt_check;
  rc.interrupt_ctx = &it;
  wds_reader *r = NULL;
  ASSERT_EQ_INT(wds_reader_open(&rc, &r), WDS_OK);
  const wds_sample *smp;
  double t0 = test_now_s();
  ASSERT_EQ_INT(wds_reader_next(r, &smp), WDS_ERR_CANCELLED);
  ASSERT_TRUE(test_now_s() - t0 < 5);
  ASSERT_CONTAINS(wds_last_error(), "interrupted");
  /* cancelled, as wds_reader_cancel() leaves it */
  ASSERT_EQ_INT(wds_reader_next(r, &smp), WDS_ERR_CANCELLED);
  t0 = test_now_s();
  wds_reader_close(r);
  ASSERT_TRUE(test_now_s() - t0 < 5);
  ASSERT_EQ_INT(atomic_load(&it.other_thread), 0);
}

TEST(cancel_wakes_a_next_blocked_on_a_read) {
  const char *urls[1] = {STALL};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = urls;
  c.url_count = 1;
  c.rank = 0;
  c.world_size = 1;
  c.mode = WDS_MODE_PLAIN;
  c.fields = cls_txt;
  c.field_count = 2;
  c.read_timeout_ms = -1; /* never: only the cancel can end it */
  next_call n = {0};
  ASSERT_EQ_INT(wds_loader_open(&c, &n.l), WDS_OK);
  pthread_t t;
  ASSERT_EQ_INT(pthread_create(&t, NULL, call_next, &n), 0);
  struct timespec pause = {0, 300 * 1000 * 1000};
  nanosleep(&pause, NULL);
  double t0 = test_now_s();
  wds_loader_cancel(n.l);
  pthread_join(t, NULL);
  printf("  next() returned %.3f s after the cancel\n", n.returned - t0);
  ASSERT_EQ_INT(n.rc, WDS_ERR_CANCELLED);
  ASSERT_TRUE(n.returned - t0 < 2.0);
  const wds_batch *b;
  ASSERT_EQ_INT(wds_loader_next(n.l, &b), WDS_ERR_CANCELLED); /* for good */
  ASSERT_CONTAINS(wds_last_error(), "cancelled");
  t0 = test_now_s();
  wds_loader_close(n.l);
  ASSERT_TRUE(test_now_s() - t0 < 2.0);
}

TEST(set_epoch_and_close_return_while_a_worker_is_blocked) {
  uint64_t counts[1] = {8};
  shardset s;
  ASSERT_EQ_INT(make_shards(&s, 1, counts, -1), 0);
  const char *urls[2] = {s.urls[0], STALL};
  wds_loader_config c = base_cfg(&s);
  c.urls = urls;
  c.url_count = 2;
  c.mode = WDS_MODE_PLAIN;
  c.workers = 1; /* reads the 8 samples, then blocks on the stalled shard */
  c.shard_shuffle = 0;
  c.batch_size = 4;
  c.read_timeout_ms = -1;
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  for (int round = 0; round < 2; round++) {
    const wds_batch *b;
    ASSERT_EQ_INT(wds_loader_next(l, &b), WDS_OK);
    ASSERT_EQ_U64(b->rows, 4);
    wds_loader_release(l, b);
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL); /* the worker is now in the stalled read */
    double t0 = test_now_s();
    if (round == 0) {
      ASSERT_EQ_INT(wds_loader_set_epoch(l, 0), WDS_OK);
    } else {
      wds_loader_close(l);
      l = NULL;
    }
    double dt = test_now_s() - t0;
    printf("  %s returned in %.3f s\n", round ? "close" : "set_epoch", dt);
    ASSERT_TRUE(dt < 2.0);
  }
  shardset_free(&s);
}

/* Shards of n samples, each a .cls (its id) and a .bin of size bytes. */
static int make_big_shard(const char *path, int n, size_t size) {
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  if (wds__tarw_open_path(path, &o, &w, &e) != WDS_OK)
    return -1;
  uint8_t *data = calloc(1, size);
  for (int i = 0; i < n; i++) {
    char name[64], val[32];
    snprintf(name, sizeof name, "%06d.cls", i);
    snprintf(val, sizeof val, "%d", i);
    wds__tarw_add(w, name, val, strlen(val), &e);
    snprintf(name, sizeof name, "%06d.bin", i);
    memset(data, i & 0xff, size);
    wds__tarw_add(w, name, data, size, &e);
  }
  free(data);
  int rc = wds__tarw_finish(w, &e);
  wds__tarw_close(w);
  return rc == WDS_OK ? 0 : -1;
}

TEST(shuffle_buffer_is_bounded_in_bytes) {
  char path[512];
  snprintf(path, sizeof path, "%s/big.tar", tmpdir);
  ASSERT_EQ_INT(make_big_shard(path, 200, 10000), 0);
  static const wds_field_spec cls_bin[] = {{"cls", WDS_DECODE_AUTO, 0, 0, 0},
                                           {"bin", WDS_DECODE_BYTES, 0, 0, 0}};
  const char *urls[1] = {path};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = urls;
  c.url_count = 1;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.fields = cls_bin;
  c.field_count = 2;
  c.batch_size = 10;
  c.shuffle_buffer = 100;
  /* How far ahead of its reading position a sample can come out: at most
   * the buffer's length at an emission, less one. */
  size_t ahead_max[3];
  const size_t caps[3] = {0 /* default: 1 GiB, the 100 samples bind */,
                          35000 /* 3 samples of 10 KB, a 4th fills it */,
                          1 /* less than a sample: it passes alone */};
  for (int k = 0; k < 3; k++) {
    c.shuffle_buffer_bytes = caps[k];
    run_out o;
    ASSERT_EQ_INT(run_cfg(&c, &o), WDS_OK);
    ASSERT_EQ_U64(o.n, 200);
    ahead_max[k] = 0;
    for (size_t p = 0; p < o.n; p++) {
      size_t id = (size_t)o.ids[p];
      if (id > p && id - p > ahead_max[k])
        ahead_max[k] = id - p;
    }
    /* Still every sample once, and the same order on a second run. */
    run_out o2;
    ASSERT_EQ_INT(run_cfg(&c, &o2), WDS_OK);
    ASSERT_TRUE(memcmp(o.ids, o2.ids, o.n * sizeof *o.ids) == 0);
    out_free(&o2);
    out_free(&o);
  }
  printf("  furthest ahead: %zu (100 samples), %zu (35000 bytes), %zu (1 "
         "byte)\n",
         ahead_max[0], ahead_max[1], ahead_max[2]);
  ASSERT_TRUE(ahead_max[0] > 10); /* the test can tell the bounds apart */
  ASSERT_TRUE(ahead_max[1] <= 4);
  ASSERT_EQ_U64(ahead_max[2], 0); /* in reading order */
}

/* Large fields are read by the reader straight into the loader's blocks
 * (and unwanted ones skipped unread); rows are copied into the slot by
 * several threads. Every row's bytes must be its sample's, with 1 and 3
 * workers, in plain and exact mode (where rank 1 of 2 starts its pieces
 * inside shards, dropping the samples before them unread). */
static uint8_t big_byte(int id, size_t i) {
  return (uint8_t)(i * 7 + (size_t)id * 13 + (i >> 11));
}

TEST(large_fields_arrive_intact) {
  static const size_t sizes[] = {200000, 1000, 70000, 0, 16384, 16383, 130000};
  enum { N = 60 };
  const char *urls[4];
  char paths[4][512];
  uint8_t *data = malloc(200000);
  ASSERT_TRUE(data != NULL);
  for (int k = 0; k < 4; k++) {
    snprintf(paths[k], sizeof paths[k], "%s/large-%d.tar", tmpdir, k);
    urls[k] = paths[k];
    wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
    wds__tarw *w;
    wds__err e;
    ASSERT_EQ_INT(wds__tarw_open_path(paths[k], &o, &w, &e), WDS_OK);
    for (int i = 0; i < N / 4; i++) {
      int id = k * (N / 4) + i;
      char name[64], val[32];
      size_t n = sizes[id % 7];
      snprintf(name, sizeof name, "%06d.big", id); /* unwanted */
      memset(data, 0xee, 150000);
      wds__tarw_add(w, name, data, 150000, &e);
      snprintf(name, sizeof name, "%06d.cls", id);
      snprintf(val, sizeof val, "%d", id);
      wds__tarw_add(w, name, val, strlen(val), &e);
      for (size_t j = 0; j < n; j++)
        data[j] = big_byte(id, j);
      snprintf(name, sizeof name, "%06d.bin", id);
      wds__tarw_add(w, name, data, n, &e);
    }
    ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
    wds__tarw_close(w);
  }
  free(data);
  static const wds_field_spec cls_bin[] = {{"cls", WDS_DECODE_AUTO, 0, 0, 0},
                                           {"bin", WDS_DECODE_BYTES, 0, 0, 0}};
  for (int mode = 0; mode < 2; mode++)
    for (int workers = 1; workers <= 3; workers += 2) {
      wds_loader_config c = WDS_LOADER_CONFIG_INIT;
      c.urls = urls;
      c.url_count = 4;
      c.mode = mode ? WDS_MODE_EXACT : WDS_MODE_PLAIN;
      c.rank = mode ? 1 : 0;
      c.world_size = mode ? 2 : 1;
      c.workers = workers;
      c.fields = cls_bin;
      c.field_count = 2;
      c.batch_size = 7;
      c.shuffle_buffer = 10;
      c.read_buffer_bytes = 65536; /* large fields outgrow the window */
      wds_loader *l;
      if (wds_loader_open(&c, &l) != WDS_OK)
        printf("  %s\n", wds_last_error());
      ASSERT_TRUE(l != NULL);
      const wds_batch *b;
      int rows = 0, seen[N] = {0}, rc;
      while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
        const int64_t *cls = b->fields[0].data;
        const uint8_t *bin = b->fields[1].data;
        const uint64_t *off = b->fields[1].offsets;
        for (size_t r = 0; r < b->rows; r++) {
          if (!b->valid[r])
            continue;
          int id = (int)cls[r];
          ASSERT_TRUE(id >= 0 && id < N && !seen[id]);
          seen[id] = 1;
          ASSERT_EQ_U64(off[r + 1] - off[r], sizes[id % 7]);
          for (size_t j = 0; j < sizes[id % 7]; j++)
            if (bin[off[r] + j] != big_byte(id, j)) {
              TEST_FAIL_("sample %d byte %zu differs (workers %d, mode %d)", id,
                         j, workers, mode);
              wds_loader_release(l, b);
              wds_loader_close(l);
              return;
            }
          rows++;
        }
        wds_loader_release(l, b);
      }
      ASSERT_EQ_INT(rc, WDS_EOF);
      ASSERT_EQ_INT(rows, mode ? N / 2 : N);
      wds_loader_close(l);
    }
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-loader-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(rng_is_uniform_and_keys_differ);
  RUN(plain_plan_splits_by_rank_then_worker);
  RUN(shard_order_changes_with_epoch_not_rank);
  RUN(open_time_errors_name_counts_and_remedies);
  RUN(drop_last_decides_an_unset_last_batch);
  RUN(distributed_sampler_cases);
  RUN(rank_split_by_weights);
  RUN(plan_with_rank_weights);
  RUN(properties_exact_resampled_plain);
  RUN(properties_rank_batch_sizes);
  RUN(properties_mixed_sources);
  RUN(rank_batch_sizes_errors);
  RUN(output_is_independent_of_thread_timing);
  RUN(rank_batch_sizes_independent_of_thread_timing);
  RUN(assignment_changes_with_the_epoch);
  RUN(shuffle_positions_are_close_to_uniform);
  RUN(large_buffer_separates_neighbours);
  RUN(eager_next_epoch_changes_nothing);
  RUN(next_epoch_overlaps_the_last_batches);
  RUN(resume_equals_an_uninterrupted_run);
  RUN(resume_does_not_decode_delivered_samples);
  RUN(plain_resume_past_the_end_is_an_error);
  RUN(skip_policy_keeps_rows_and_counts);
  RUN(exact_mode_tops_up_a_short_shard);
  RUN(padding_with_long_keys);
  RUN(end_of_epoch_with_every_slot_held);
  RUN(batch_layout_bytes_ints_npy_and_pad);
  RUN(jpg_and_jpeg_match_each_other);
  RUN(holding_every_slot_is_an_error_not_a_hang);
  RUN(release_from_another_thread);
  RUN(release_after_a_fence_keeps_the_slot_until_done);
  RUN(release_after_refuses_what_is_not_held);
  RUN(environment_rank_and_world);
  RUN(images_decode_into_fixed_shapes_deterministically);
  RUN(image_rows_equal_the_decoder);
  RUN(rss_stays_flat_over_epochs);
  RUN(read_timeout_names_the_shard_and_the_wait);
  RUN(cancel_wakes_a_next_blocked_on_a_read);
  RUN(set_epoch_and_close_return_while_a_worker_is_blocked);
  RUN(interrupt_check_ends_waits_and_next_goes_on);
  RUN(an_interrupted_count_skips_nothing);
  RUN(interrupt_check_cancels_a_reader);
  RUN(shuffle_buffer_is_bounded_in_bytes);
  RUN(large_fields_arrive_intact);
  test_remove_tree(tmpdir);
  return test_summary();
}
