/* test_mix.c — the loader with several sources (wds_source_config):
 * resampled frequencies against the weights, exact mode's repeats and
 * proportions counted per sample over all ranks and epochs, each rank
 * reading every source from its first batch, resume, determinism across
 * runs and thread timings, one source == the spec alone, and the
 * configurations that are refused.
 *
 * Fixtures are shards written at test time: source k's sample i (in its
 * natural order) has id k * 1000 + i in its .cls field, so every row tells
 * which source and which sample it is, and the row's source index
 * (wds_batch.sources) is checked against it. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shards/tarw.h"
#include "test.h"
#include "test_files.h"
#include "wds/loader.h"

static char tmpdir[256];
static int fixture_seq;

/* A source: n shards of the given counts, ids from base; spec names them
 * all ("DIR/mixN-{000..K}.tar"). */
typedef struct src_set {
  char spec[512];
  char first[512]; /* the first shard's path */
  uint64_t total;
} src_set;

static int make_source(src_set *s, size_t n, const uint64_t *counts,
                       int64_t base) {
  memset(s, 0, sizeof *s);
  int set = fixture_seq++;
  int64_t id = base;
  for (size_t k = 0; k < n; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/mix%d-%03zu.tar", tmpdir, set, k);
    if (k == 0)
      snprintf(s->first, sizeof s->first, "%s", path);
    wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
    wds__tarw *w;
    wds__err e;
    if (wds__tarw_open_path(path, &o, &w, &e) != WDS_OK)
      return -1;
    for (uint64_t i = 0; i < counts[k]; i++, id++) {
      char name[64], val[64];
      snprintf(name, sizeof name, "k%zu/%llu.cls", k, (unsigned long long)i);
      snprintf(val, sizeof val, "%lld", (long long)id);
      wds__tarw_add(w, name, val, strlen(val), &e);
    }
    if (wds__tarw_finish(w, &e) != WDS_OK) {
      wds__tarw_close(w);
      return -1;
    }
    wds__tarw_close(w);
    s->total += counts[k];
  }
  if (n == 1)
    snprintf(s->spec, sizeof s->spec, "%s", s->first);
  else
    snprintf(s->spec, sizeof s->spec, "%s/mix%d-{000..%03zu}.tar", tmpdir, set,
             n - 1);
  return 0;
}

static const wds_field_spec cls_only[] = {{"cls", WDS_DECODE_AUTO, 0, 0, 0}};

static wds_loader_config mix_cfg(const wds_source_config *src, size_t n) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.sources = src;
  c.source_count = n;
  c.rank = 0;
  c.world_size = 1;
  c.fields = cls_only;
  c.field_count = 1;
  return c;
}

/* Rows of one or more epochs: id (-1 invalid), source, batch sizes. */
typedef struct rows {
  int64_t *id;  /* per row: its id, or -1 for an invalid row */
  int64_t *raw; /* per row: the id its data holds, valid or not (a padding
                   row's is the sample it repeats) */
  uint32_t *src;
  size_t n, cap;
  size_t *batch_rows;
  size_t batches, bcap;
  int bad_source; /* a row's source disagreed with its id */
} rows;

static void rows_free(rows *o) {
  free(o->id);
  free(o->raw);
  free(o->src);
  free(o->batch_rows);
  memset(o, 0, sizeof *o);
}

static void rows_push(rows *o, const wds_batch *b) {
  if (o->batches == o->bcap) {
    o->bcap = o->bcap ? 2 * o->bcap : 64;
    o->batch_rows = realloc(o->batch_rows, o->bcap * sizeof *o->batch_rows);
  }
  o->batch_rows[o->batches++] = b->rows;
  const int64_t *cls = b->fields[0].data;
  for (size_t r = 0; r < b->rows; r++) {
    if (o->n == o->cap) {
      o->cap = o->cap ? 2 * o->cap : 256;
      o->id = realloc(o->id, o->cap * sizeof *o->id);
      o->raw = realloc(o->raw, o->cap * sizeof *o->raw);
      o->src = realloc(o->src, o->cap * sizeof *o->src);
    }
    o->id[o->n] = b->valid[r] ? cls[r] : -1;
    o->raw[o->n] = cls[r];
    o->src[o->n] = b->sources[r];
    if (b->valid[r] && (uint64_t)(cls[r] / 1000) != b->sources[r])
      o->bad_source = 1;
    o->n++;
  }
}

/* Runs `epochs` epochs (each ending in WDS_EOF) into o; the status. */
static int run_epochs(wds_loader *l, int epochs, rows *o) {
  for (int e = 0; e < epochs; e++) {
    const wds_batch *b;
    int rc;
    while ((rc = wds_loader_next(l, &b)) == WDS_OK) {
      rows_push(o, b);
      wds_loader_release(l, b);
    }
    if (rc != WDS_EOF) {
      printf("  next: %s\n", wds_last_error());
      return rc;
    }
  }
  return WDS_OK;
}

static int run_cfg(const wds_loader_config *c, int epochs, rows *o) {
  wds_loader *l;
  memset(o, 0, sizeof *o);
  int rc = wds_loader_open(c, &l);
  if (rc != WDS_OK) {
    printf("  open: %s\n", wds_last_error());
    return rc;
  }
  rc = run_epochs(l, epochs, o);
  wds_loader_close(l);
  return rc;
}

static int same_rows(const rows *a, const rows *b) {
  return a->n == b->n && a->batches == b->batches &&
         memcmp(a->id, b->id, a->n * sizeof *a->id) == 0 &&
         memcmp(a->src, b->src, a->n * sizeof *a->src) == 0;
}

/* ---- one source is the spec alone ---- */

TEST(one_source_is_the_spec_alone) {
  uint64_t counts[4] = {7, 11, 5, 9};
  src_set a;
  ASSERT_EQ_INT(make_source(&a, 4, counts, 0), 0);
  for (int mode = 0; mode < 3; mode++) {
    for (int world = 1; world <= 2; world++) {
      wds_source_config sc = {a.spec, NULL, 0, 0, 0};
      wds_loader_config c = mix_cfg(&sc, 1);
      c.mode = (wds_mode)mode;
      c.workers = 2;
      c.world_size = world;
      c.rank = world - 1;
      c.batch_size = 3;
      c.shuffle_buffer = 4;
      c.seed = 5;
      c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 40 : 0;
      rows m, p;
      ASSERT_EQ_INT(run_cfg(&c, 2, &m), WDS_OK);
      c.sources = NULL;
      c.source_count = 0;
      c.spec = a.spec;
      ASSERT_EQ_INT(run_cfg(&c, 2, &p), WDS_OK);
      ASSERT_TRUE(m.n > 0);
      ASSERT_TRUE(same_rows(&m, &p));
      ASSERT_TRUE(!m.bad_source && !p.bad_source);
      for (size_t i = 0; i < m.n; i++)
        ASSERT_EQ_INT((int)m.src[i], 0);
      if (mode == WDS_MODE_RESAMPLED) { /* a weight changes nothing alone */
        sc.weight = 3;
        c.spec = NULL;
        c.sources = &sc;
        c.source_count = 1;
        rows w;
        ASSERT_EQ_INT(run_cfg(&c, 2, &w), WDS_OK);
        ASSERT_TRUE(same_rows(&m, &w));
        rows_free(&w);
      }
      rows_free(&m);
      rows_free(&p);
    }
  }
}

/* ---- resampled mode: frequencies ---- */

TEST(resampled_frequencies_follow_the_weights) {
  uint64_t ca[3] = {20, 30, 10}, cb[2] = {5, 7}, cc[1] = {40};
  src_set a, b, d;
  ASSERT_EQ_INT(make_source(&a, 3, ca, 0), 0);
  ASSERT_EQ_INT(make_source(&b, 2, cb, 1000), 0);
  ASSERT_EQ_INT(make_source(&d, 1, cc, 2000), 0);
  /* weights 1 : 3 : 6 (the last given as a proportion) */
  wds_source_config sc[3] = {{a.spec, NULL, 1, 0, 0},
                             {b.spec, NULL, 3, 0, 0},
                             {d.spec, NULL, 0, 6, 0}};
  const double p[3] = {0.1, 0.3, 0.6};
  for (int world = 1; world <= 2; world++) {
    for (int rank = 0; rank < world; rank++) {
      wds_loader_config c = mix_cfg(sc, 3);
      c.mode = WDS_MODE_RESAMPLED;
      c.samples_per_epoch = 12000;
      c.workers = 3;
      c.world_size = world;
      c.rank = rank;
      c.batch_size = 16;
      c.shuffle_buffer = 50;
      c.seed = 11;
      rows o;
      ASSERT_EQ_INT(run_cfg(&c, 1, &o), WDS_OK);
      ASSERT_EQ_U64(o.n, 12000);
      ASSERT_TRUE(!o.bad_source);
      uint64_t k[3] = {0, 0, 0};
      for (size_t i = 0; i < o.n; i++) {
        ASSERT_TRUE(o.src[i] < 3);
        k[o.src[i]]++;
      }
      for (int s = 0; s < 3; s++) {
        double mean = (double)o.n * p[s];
        double sd = sqrt((double)o.n * p[s] * (1 - p[s]));
        if (fabs((double)k[s] - mean) > 3 * sd)
          printf("  world %d rank %d source %d: %llu of %zu, expected %.0f "
                 "+- %.0f\n",
                 world, rank, s, (unsigned long long)k[s], o.n, mean, 3 * sd);
        ASSERT_TRUE(fabs((double)k[s] - mean) <= 3 * sd);
      }
      /* The first batch mixes sources already. */
      int first_mixed = 0;
      for (size_t i = 1; i < o.batch_rows[0]; i++)
        first_mixed |= o.src[i] != o.src[0];
      ASSERT_TRUE(first_mixed);
      rows_free(&o);
    }
  }
}

/* ---- exact mode: repeats and proportions ---- */

/* Source of id: 0, 1, 2 for ids in the thousands. */
TEST(exact_repeats_and_proportions_per_epoch) {
  /* A: 23 samples, repeat 2; B: 10 samples, repeat 0.5 (5 per epoch, a
   * window that moves: epochs 0 and 1 cover all 10); C: 12 samples,
   * proportion 0.2 of E = 23 + 10 + 12 = 45: round(9) = 9 per epoch. */
  uint64_t ca[3] = {8, 6, 9}, cb[2] = {4, 6}, cc[2] = {5, 7};
  src_set a, b, d;
  ASSERT_EQ_INT(make_source(&a, 3, ca, 0), 0);
  ASSERT_EQ_INT(make_source(&b, 2, cb, 1000), 0);
  ASSERT_EQ_INT(make_source(&d, 2, cc, 2000), 0);
  wds_source_config sc[3] = {{a.spec, NULL, 0, 0, 2},
                             {b.spec, NULL, 0, 0, 0.5},
                             {d.spec, NULL, 0, 0.2, 0}};
  const uint64_t total[3] = {23, 10, 12}, per_epoch[3] = {46, 5, 9};
  for (int world = 1; world <= 3; world++) {
    for (int drop = 0; drop <= 1; drop++) {
      uint64_t seen_b[10] = {0};
      for (int epoch = 0; epoch < 2; epoch++) {
        /* counts[source][sample] over all ranks */
        uint64_t cnt[3][23];
        memset(cnt, 0, sizeof cnt);
        uint64_t per_src[3] = {0, 0, 0}, pad_src[3] = {0, 0, 0};
        size_t batches0 = 0;
        for (int rank = 0; rank < world; rank++) {
          wds_loader_config c = mix_cfg(sc, 3);
          c.mode = WDS_MODE_EXACT;
          c.workers = 2;
          c.world_size = world;
          c.rank = rank;
          c.batch_size = 4;
          c.drop_last = drop;
          /* drop_last's sampler tail only: every row of a partial last
           * batch counted (drop_last alone drops that batch too) */
          c.last_batch = WDS_LAST_KEEP;
          c.shuffle_buffer = 5;
          c.seed = 21;
          c.epoch = (uint64_t)epoch;
          rows o;
          ASSERT_EQ_INT(run_cfg(&c, 1, &o), WDS_OK);
          ASSERT_TRUE(!o.bad_source);
          if (rank == 0)
            batches0 = o.batches;
          ASSERT_EQ_U64(o.batches, batches0); /* equal steps on all ranks */
          for (size_t i = 0; i < o.n; i++) {
            /* An invalid row (nothing fails here) is the source's padding,
             * its data a repeat of one of its samples. */
            uint32_t s = o.src[i];
            uint64_t k = (uint64_t)(o.raw[i] % 1000);
            ASSERT_TRUE(s < 3 && k < total[s]);
            ASSERT_EQ_U64((uint64_t)(o.raw[i] / 1000), s);
            if (o.id[i] >= 0)
              cnt[s][k]++;
            else
              pad_src[s]++;
            per_src[s]++;
          }
          /* Every rank reads every source from its first batches: the
           * first 2 batches hold at least 2 sources. */
          int mixed = 0;
          for (size_t i = 1; i < 8 && i < o.n; i++)
            mixed |= o.src[i] != o.src[0];
          ASSERT_TRUE(mixed);
          rows_free(&o);
        }
        for (int s = 0; s < 3; s++) {
          uint64_t w = (uint64_t)world, n = per_epoch[s];
          uint64_t rows_s = drop ? n / w * w : (n + w - 1) / w * w;
          ASSERT_EQ_U64(per_src[s], rows_s);
          /* The padding (at most world - 1 rows) is marked invalid. */
          ASSERT_EQ_U64(pad_src[s], drop ? 0 : rows_s - n);
          /* Every sample its number of times as valid rows, bar the drop
           * (at most world - 1 fewer). */
          uint64_t over = 0, under = 0, distinct = 0;
          for (uint64_t k = 0; k < total[s]; k++) {
            uint64_t want = s == 0   ? 2
                            : s == 1 ? 0 /* checked below */
                                     : 0;
            if (s == 0) {
              if (cnt[s][k] > want)
                over += cnt[s][k] - want;
              else
                under += want - cnt[s][k];
            }
            distinct += cnt[s][k] > 0;
            if (s == 1)
              seen_b[k] += cnt[s][k];
          }
          if (s == 0) {
            ASSERT_TRUE(over == 0 && (drop ? under < w : under == 0));
          } else {
            /* a subset of n samples, each once (bar the drop) */
            uint64_t extra = 0;
            for (uint64_t k = 0; k < total[s]; k++)
              extra += cnt[s][k] > 1 ? cnt[s][k] - 1 : 0;
            ASSERT_EQ_U64(extra, 0);
            ASSERT_TRUE(distinct <= n &&
                        (drop ? distinct + w > n : distinct == n));
          }
        }
        if (epoch == 0 && !drop) {
          /* B's window in epoch 0 is its first 5 samples. */
          for (uint64_t k = 0; k < 5; k++)
            ASSERT_TRUE(seen_b[k] >= 1);
        }
      }
      if (!drop) /* over epochs 0 and 1 every sample of B is seen */
        for (int k = 0; k < 10; k++)
          ASSERT_TRUE(seen_b[k] >= 1);
    }
  }
}

/* With per-rank batch sizes each source is split in proportion to them:
 * equal steps on every rank, rank r's batches of B_r rows, every sample of
 * each source its number of times over the ranks (bar the padding). */
TEST(exact_mix_with_rank_batch_sizes) {
  uint64_t ca[3] = {9, 7, 10}, cb[2] = {6, 5};
  src_set a, b;
  ASSERT_EQ_INT(make_source(&a, 3, ca, 0), 0);
  ASSERT_EQ_INT(make_source(&b, 2, cb, 1000), 0);
  wds_source_config sc[2] = {{a.spec, NULL, 0, 0, 0}, {b.spec, NULL, 0, 0, 2}};
  const size_t sizes[2] = {3, 1};
  const uint64_t total[2] = {26, 11}, times[2] = {1, 2};
  uint64_t cnt[2][26], pads[2] = {0, 0};
  memset(cnt, 0, sizeof cnt);
  size_t steps = 0;
  for (int rank = 0; rank < 2; rank++) {
    wds_loader_config c = mix_cfg(sc, 2);
    c.mode = WDS_MODE_EXACT;
    c.workers = 2;
    c.world_size = 2;
    c.rank = rank;
    c.rank_batch_sizes = sizes;
    c.rank_batch_size_count = 2;
    c.shuffle_buffer = 4;
    c.seed = 8;
    rows o;
    ASSERT_EQ_INT(run_cfg(&c, 1, &o), WDS_OK);
    ASSERT_TRUE(!o.bad_source);
    if (rank == 0)
      steps = o.batches;
    ASSERT_EQ_U64(o.batches, steps);
    for (size_t i = 0; i < o.batches; i++)
      ASSERT_EQ_U64(o.batch_rows[i], sizes[rank]);
    for (size_t i = 0; i < o.n; i++) {
      /* an invalid row (nothing fails here) is padding */
      ASSERT_TRUE(o.raw[i] >= 0 && o.raw[i] / 1000 == o.src[i]);
      if (o.id[i] >= 0)
        cnt[o.src[i]][o.id[i] % 1000]++;
      else
        pads[o.src[i]]++;
    }
    rows_free(&o);
  }
  /* steps: ceil(26 / 4) + ceil(22 / 4) = 7 + 6 */
  ASSERT_EQ_U64(steps, 13);
  for (int s = 0; s < 2; s++) {
    uint64_t over = 0;
    for (uint64_t k = 0; k < total[s]; k++) {
      ASSERT_TRUE(cnt[s][k] >= times[s]);
      over += cnt[s][k] - times[s];
    }
    ASSERT_EQ_U64(over, 0);   /* valid rows: each its number of times */
    ASSERT_TRUE(pads[s] < 4); /* padding: less than the sum of the sizes */
  }
}

/* ---- resume and determinism ---- */

TEST(resume_equals_the_uninterrupted_tail) {
  uint64_t ca[3] = {11, 4, 9}, cb[2] = {6, 5};
  src_set a, b;
  ASSERT_EQ_INT(make_source(&a, 3, ca, 0), 0);
  ASSERT_EQ_INT(make_source(&b, 2, cb, 1000), 0);
  for (int mode = 1; mode <= 2; mode++) {
    wds_source_config sc[2] = {{a.spec, NULL, 0, 0, 0},
                               {b.spec, NULL, 0, 0, 0}};
    if (mode == WDS_MODE_EXACT)
      sc[1].repeat = 1.5;
    else
      sc[1].weight = 2;
    wds_loader_config c = mix_cfg(sc, 2);
    c.mode = (wds_mode)mode;
    c.workers = 2;
    c.batch_size = 3;
    c.shuffle_buffer = 6;
    c.seed = 3;
    c.world_size = 2;
    c.rank = 1;
    c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 17 : 0;
    rows full;
    ASSERT_EQ_INT(run_cfg(&c, 2, &full), WDS_OK);
    wds_loader *l;
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    uint64_t nb0 = wds_loader_epoch_batches(l);
    wds_loader_close(l);
    ASSERT_TRUE(nb0 > 2);
    for (uint64_t k = 0; k <= nb0; k++) {
      c.resume_batches = k;
      rows part;
      ASSERT_EQ_INT(run_cfg(&c, 2, &part), WDS_OK);
      size_t skip_rows = 0;
      for (size_t i = 0; i < k; i++)
        skip_rows += full.batch_rows[i];
      ASSERT_EQ_U64(part.batches, full.batches - k);
      ASSERT_EQ_U64(part.n, full.n - skip_rows);
      ASSERT_TRUE(
          memcmp(part.id, full.id + skip_rows, part.n * sizeof *part.id) == 0);
      ASSERT_TRUE(memcmp(part.src, full.src + skip_rows,
                         part.n * sizeof *part.src) == 0);
      rows_free(&part);
    }
    rows_free(&full);
  }
}

TEST(identical_across_runs_and_thread_timings) {
  uint64_t ca[2] = {9, 12}, cb[1] = {10};
  src_set a, b;
  ASSERT_EQ_INT(make_source(&a, 2, ca, 0), 0);
  ASSERT_EQ_INT(make_source(&b, 1, cb, 1000), 0);
  /* The same shard of B read through a slow pipe. */
  char slow[1200];
  snprintf(slow, sizeof slow, "pipe:sleep 0.05; cat %s", b.first);
  for (int mode = 1; mode <= 2; mode++) {
    wds_source_config sc[2] = {{a.spec, NULL, 0, 0, 0},
                               {b.spec, NULL, 0, 0, 0}};
    if (mode == WDS_MODE_RESAMPLED) {
      sc[0].weight = 1;
      sc[1].weight = 1;
    } else {
      sc[1].proportion = 0.5;
    }
    wds_loader_config c = mix_cfg(sc, 2);
    c.mode = (wds_mode)mode;
    c.workers = 3;
    c.batch_size = 4;
    c.shuffle_buffer = 5;
    c.seed = 77;
    c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 60 : 0;
    rows x, y, z, other;
    ASSERT_EQ_INT(run_cfg(&c, 2, &x), WDS_OK);
    c.prefetch_batches = 2;
    ASSERT_EQ_INT(run_cfg(&c, 2, &y), WDS_OK);
    c.prefetch_batches = 7;
    c.eager_next_epoch = 1;
    sc[1].spec = slow;
    ASSERT_EQ_INT(run_cfg(&c, 2, &z), WDS_OK);
    ASSERT_TRUE(x.n > 0);
    ASSERT_TRUE(same_rows(&x, &y));
    ASSERT_TRUE(same_rows(&x, &z));
    sc[1].spec = b.spec;
    c.seed = 78;
    ASSERT_EQ_INT(run_cfg(&c, 2, &other), WDS_OK);
    ASSERT_TRUE(!same_rows(&x, &other));
    rows_free(&x);
    rows_free(&y);
    rows_free(&z);
    rows_free(&other);
  }
}

/* ---- refused configurations ---- */

static void expect_refused(const wds_loader_config *c, const char *needle) {
  wds_loader *l = NULL;
  int rc = wds_loader_open(c, &l);
  if (rc == WDS_OK) {
    wds_loader_close(l);
    TEST_FAIL_("opened a config that should be refused (%s)", needle);
    return;
  }
  ASSERT_TRUE(l == NULL);
  ASSERT_CONTAINS(wds_last_error(), needle);
}

TEST(refused_configurations_say_why) {
  uint64_t ca[2] = {3, 4}, cb[1] = {5};
  src_set a, b;
  ASSERT_EQ_INT(make_source(&a, 2, ca, 0), 0);
  ASSERT_EQ_INT(make_source(&b, 1, cb, 1000), 0);
  wds_source_config sc[2] = {{a.spec, NULL, 0, 0, 0}, {b.spec, NULL, 0, 0, 0}};
  wds_loader_config c = mix_cfg(sc, 2);
  c.mode = WDS_MODE_PLAIN;
  expect_refused(&c, "plain mode");
  c.mode = WDS_MODE_EXACT;
  sc[1].weight = 2;
  expect_refused(&c, "weight is for resampled mode");
  sc[1].weight = 0;
  sc[1].repeat = 2;
  c.mode = WDS_MODE_RESAMPLED;
  c.samples_per_epoch = 10;
  expect_refused(&c, "repeat is for exact mode");
  sc[1].proportion = 0.5;
  expect_refused(&c, "more than one of weight, proportion and repeat");
  sc[1].repeat = 0;
  sc[1].proportion = -1;
  expect_refused(&c, "proportion -1");
  sc[1].proportion = 0;
  sc[1].index_path = "x.json";
  expect_refused(&c, "only used in exact mode");
  sc[1].index_path = NULL;
  c.spec = a.spec;
  expect_refused(&c, "not both");
  c.spec = NULL;
  sc[1].spec = "";
  expect_refused(&c, "source 1 has no spec");
  sc[1].spec = b.spec;
  c.mode = WDS_MODE_EXACT;
  c.samples_per_epoch = 0;
  sc[1].repeat = 0.01; /* round(0.05) = 0 */
  expect_refused(&c, "gives no sample per epoch");
  sc[1].repeat = 0;
  c.source_count = 0;
  expect_refused(&c, "0 sources");
  c.source_count = 2;
  c.index_path = "x.json";
  expect_refused(&c, "its own index");
  c.index_path = NULL;
  /* and the fine config opens */
  wds_loader *l;
  ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  ASSERT_EQ_U64(wds_loader_epoch_batches(l), 12);
  wds_loader_close(l);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-mix-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(one_source_is_the_spec_alone);
  RUN(resampled_frequencies_follow_the_weights);
  RUN(exact_repeats_and_proportions_per_epoch);
  RUN(exact_mix_with_rank_batch_sizes);
  RUN(resume_equals_the_uninterrupted_tail);
  RUN(identical_across_runs_and_thread_timings);
  RUN(refused_configurations_say_why);
  test_remove_tree(tmpdir);
  return test_summary();
}
