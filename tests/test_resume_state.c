/* test_resume_state.c — the saved position (wds_loader_state,
 * wds_loader_config.resume_state): a state resumes where it was saved, on
 * any rank of the same job; under a configuration that would give its
 * batch count other samples (another world size, per-rank sizes, batch
 * size, workers, shuffle buffer, mode, seed, data) the open fails naming
 * both values; a foreign, other-version or corrupted text fails naming
 * what is wrong.
 *
 * Fixtures: shards written at test time; sample i's .cls is its global
 * id. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "shards/tarw.h"
#include "test.h"
#include "test_files.h"
#include "wds/loader.h"
#include "wds/reader.h"

static char tmpdir[256];
static char *urls[4];
static const uint64_t counts[4] = {13, 7, 11, 9}; /* 40 samples */

static int make_shards(void) {
  uint64_t id = 0;
  for (size_t k = 0; k < 4; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/r%zu.tar", tmpdir, k);
    urls[k] = strdup(path);
    wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
    wds__tarw *w;
    wds__err e;
    if (wds__tarw_open_path(path, &o, &w, &e) != WDS_OK)
      return -1;
    for (uint64_t i = 0; i < counts[k]; i++, id++) {
      char name[64], val[64];
      snprintf(name, sizeof name, "s%zu/%llu.cls", k, (unsigned long long)i);
      snprintf(val, sizeof val, "%llu", (unsigned long long)id);
      wds__tarw_add(w, name, val, strlen(val), &e);
    }
    if (wds__tarw_finish(w, &e) != WDS_OK) {
      wds__tarw_close(w);
      return -1;
    }
    wds__tarw_close(w);
  }
  return 0;
}

static const wds_field_spec cls[] = {{"cls", WDS_DECODE_AUTO, 0, 0, 0}};

static wds_loader_config cfg(int rank, int world) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.urls = (const char *const *)urls;
  c.url_count = 4;
  c.rank = rank;
  c.world_size = world;
  c.mode = WDS_MODE_EXACT;
  c.workers = 2;
  c.batch_size = 3;
  c.shuffle_buffer = 5;
  c.seed = 9;
  c.fields = cls;
  c.field_count = 1;
  return c;
}

/* The ids of the next `batches` batches (all of the epoch: SIZE_MAX). */
static size_t take(wds_loader *l, size_t batches, int64_t *ids, size_t cap) {
  size_t n = 0;
  const wds_batch *b;
  for (size_t k = 0; k < batches && wds_loader_next(l, &b) == WDS_OK; k++) {
    const int64_t *v = b->fields[0].data;
    for (size_t r = 0; r < b->rows && n < cap; r++)
      ids[n++] = b->valid[r] ? v[r] : -1;
    wds_loader_release(l, b);
  }
  return n;
}

/* The state after k batches of rank `rank` of `world`. */
static char *state_after(wds_loader_config c, size_t k) {
  wds_loader *l;
  int64_t ids[64];
  if (wds_loader_open(&c, &l) != WDS_OK)
    return NULL;
  take(l, k, ids, 64);
  char *t = NULL;
  if (wds_loader_state(l, &t) != WDS_OK)
    t = NULL;
  wds_loader_close(l);
  return t;
}

/* Opens c with state; WDS_OK, or the status with the message in err. */
static int open_with(wds_loader_config c, const char *state, char *err,
                     wds_loader **out) {
  c.resume_state = state;
  int rc = wds_loader_open(&c, out);
  snprintf(err, 1024, "%s", rc == WDS_OK ? "" : wds_last_error());
  return rc;
}

/* A state saved by rank 0 resumes rank 1 at the same position: its
 * batches are the uninterrupted run's. */
TEST(state_resumes_any_rank_of_the_same_job) {
  for (int rank = 0; rank < 2; rank++) {
    wds_loader_config c = cfg(rank, 2);
    wds_loader *l;
    int64_t full[64], part[64];
    ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
    size_t nf = take(l, SIZE_MAX, full, 64);
    wds_loader_close(l);
    ASSERT_EQ_U64(nf, 20); /* ceil(40 / 2) = 20 rows per rank */
    char *st = state_after(cfg(0, 2), 4);
    ASSERT_TRUE(st != NULL);
    ASSERT_CONTAINS(st, "wds-loader-state 1\nepoch=0\nbatches=4\n");
    char err[1024];
    ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_OK);
    uint64_t e, b;
    wds_loader_position(l, &e, &b);
    ASSERT_EQ_U64(e, 0);
    ASSERT_EQ_U64(b, 4);
    size_t np = take(l, SIZE_MAX, part, 64);
    wds_loader_close(l);
    ASSERT_EQ_U64(np, nf - 12);
    ASSERT_TRUE(memcmp(part, full + 12, np * sizeof *part) == 0);
    free(st);
  }
}

/* What cannot be continued exactly is refused, naming the saved value and
 * this loader's: in exact mode, a state whose shuffle buffer's byte bound
 * may have changed its order (the replay of an elastic resume cannot know
 * it) under another world, sizes, workers or shuffle; in resampled and
 * plain modes another world, batch size or workers; in any mode another
 * seed, mode or data. */
TEST(state_under_another_configuration_names_both_values) {
  char *st = state_after(cfg(0, 2), 4);
  ASSERT_TRUE(st != NULL);
  char err[1024];
  wds_loader *l;
  wds_loader_config c;
  static const char bound[] =
      "saved with a shuffle buffer of 5 samples and shuffle_buffer_bytes "
      "1073741824, max_sample_bytes 1073741824: its byte bound may have "
      "changed";

  c = cfg(0, 3); /* another world: 2 -> 3 */
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, bound);
  c = cfg(0, 1); /* 2 -> 1 */
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, bound);
  c = cfg(0, 2);
  c.workers = 3;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, bound);
  c = cfg(0, 2);
  c.batch_size = 4;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, bound);
  c = cfg(0, 2);
  c.mode = WDS_MODE_RESAMPLED;
  c.samples_per_epoch = 20;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with mode exact; this loader has mode resampled");
  c = cfg(0, 2);
  c.seed = 10;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with seed 9; this loader has seed 10");
  c = cfg(0, 2);
  c.url_count = 3; /* other data */
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with data");
  free(st);

  /* Plain mode: no elastic resume (a rank's count is not known before
   * it reads). */
  for (int mode = 0; mode < 1; mode++) {
    c = cfg(0, 2);
    c.mode = mode ? WDS_MODE_RESAMPLED : WDS_MODE_PLAIN;
    c.samples_per_epoch = mode ? 20 : 0;
    c.shuffle_buffer = 0;
    c.workers = mode ? 2 : 1;
    st = state_after(c, 2);
    ASSERT_TRUE(st != NULL);
    wds_loader_config d = c;
    d.world_size = 3;
    ASSERT_EQ_INT(open_with(d, st, err, &l), WDS_ERR_INVALID);
    ASSERT_CONTAINS(err,
                    "saved with world_size 2; this loader has world_size 3");
    ASSERT_CONTAINS(err, "epoch 0, 2 batches");
    d = c;
    d.batch_size = 4;
    ASSERT_EQ_INT(open_with(d, st, err, &l), WDS_ERR_INVALID);
    ASSERT_CONTAINS(err,
                    "saved with batch_size 3; this loader has batch_size 4");
    d = c;
    d.workers = 3;
    ASSERT_EQ_INT(open_with(d, st, err, &l), WDS_ERR_INVALID);
    ASSERT_CONTAINS(err, "saved with workers");
    free(st);
  }
  c = cfg(1, 2);
  c.mode = WDS_MODE_RESAMPLED;
  c.samples_per_epoch = 20;
  c.batch_size = 1;
  size_t a[2] = {2, 4}, b[2] = {4, 2};
  c.rank_batch_sizes = a;
  c.rank_batch_size_count = 2;
  st = state_after(c, 2);
  ASSERT_TRUE(st != NULL);
  c.rank_batch_sizes = b; /* resampled: an elastic resume */
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_OK);
  ASSERT_EQ_INT(wds_loader_elastic(l, NULL, NULL, NULL), 1);
  wds_loader_close(l);
  c.rank_batch_sizes = a;
  c.rank = 0;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_OK);
  ASSERT_EQ_INT(wds_loader_elastic(l, NULL, NULL, NULL), 0);
  wds_loader_close(l);
  c.seed = 10;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with seed 9; this loader has seed 10");
  free(st);

  /* Exact mixing: another world is an elastic resume (the sources'
   * remainders re-dealt; elastic_resume_with_mixing checks the samples). */
  wds_source_config src[2] = {{urls[0], NULL, 0, 0, 1},
                              {urls[1], NULL, 0, 0, 2}};
  c = cfg(0, 2);
  c.urls = NULL;
  c.url_count = 0;
  c.sources = src;
  c.source_count = 2;
  c.shuffle_buffer = 0;
  st = state_after(c, 2);
  ASSERT_TRUE(st != NULL);
  c.world_size = 3;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_OK);
  ASSERT_EQ_INT(wds_loader_elastic(l, NULL, NULL, NULL), 1);
  wds_loader_close(l);
  free(st);

  /* Plain mode: a rank's samples are not known before it reads its
   * shards, so another world is refused naming both. */
  c = cfg(0, 2);
  c.mode = WDS_MODE_PLAIN;
  c.workers = 1;
  c.shuffle_buffer = 0;
  st = state_after(c, 1);
  ASSERT_TRUE(st != NULL);
  c.world_size = 3;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with world_size 2; this loader has world_size 3");
  ASSERT_CONTAINS(err, "an elastic resume takes exact or resampled mode");
  free(st);
}

/* Not a state, another version, a corrupted one: refused, saying so. */
/* A state text with one line's value replaced and its check line
 * recomputed (FNV-1a 64 of every byte before it), as an older writer
 * wrote it. */
static char *restate(const char *st, const char *from, const char *to) {
  const char *at = strstr(st, from);
  if (!at)
    return NULL;
  size_t n = strlen(st) + strlen(to);
  char *t = malloc(n + 1);
  snprintf(t, n + 1, "%.*s%s%s", (int)(at - st), st, to, at + strlen(from));
  char *chk = strstr(t, "\ncheck=") + 1;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *c = t; c < chk; c++)
    h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
  snprintf(chk, 24, "check=%016" PRIx64 "\n", h);
  return t;
}

/* In resampled mode shard_shuffle does nothing (shards are drawn with
 * replacement) and is refused off: a state a resampled run with
 * shard_shuffle=0 wrote before that refusal resumes where it was, the same
 * batches as the state written now (shard_shuffle=1). */
TEST(resampled_state_written_with_shard_shuffle_off_resumes) {
  wds_loader_config c = cfg(0, 2);
  c.mode = WDS_MODE_RESAMPLED;
  c.samples_per_epoch = 40;
  char *st = state_after(c, 2);
  ASSERT_TRUE(st != NULL);
  ASSERT_CONTAINS(st, "\nmode=resampled\n");
  ASSERT_CONTAINS(st, "\nshard_shuffle=1\n");
  char *old = restate(st, "\nshard_shuffle=1\n", "\nshard_shuffle=0\n");
  ASSERT_TRUE(old != NULL);
  char err[1024];
  wds_loader *l;
  int64_t a[64], b[64];
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_OK);
  size_t na = take(l, SIZE_MAX, a, 64);
  wds_loader_close(l);
  int rc = open_with(c, old, err, &l);
  if (rc != WDS_OK)
    printf("  %s\n", err);
  ASSERT_EQ_INT(rc, WDS_OK);
  uint64_t e, bt;
  wds_loader_position(l, &e, &bt);
  ASSERT_EQ_U64(bt, 2);
  size_t nb = take(l, SIZE_MAX, b, 64);
  wds_loader_close(l);
  ASSERT_TRUE(na > 0);
  ASSERT_EQ_U64(nb, na);
  ASSERT_TRUE(memcmp(a, b, na * sizeof *a) == 0);
  free(old);
  free(st);
}

TEST(foreign_and_corrupted_states_are_refused) {
  char *st = state_after(cfg(0, 2), 1);
  ASSERT_TRUE(st != NULL);
  char err[1024];
  wds_loader *l;
  wds_loader_config c = cfg(0, 2);
  ASSERT_EQ_INT(open_with(c, "{\"epoch\": 1}", err, &l), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(err, "not a wds loader state");
  char *v2 = strdup(st);
  v2[strlen("wds-loader-state ")] = '2';
  ASSERT_EQ_INT(open_with(c, v2, err, &l), WDS_ERR_FORMAT);
  ASSERT_CONTAINS(err, "version 2; this build reads version 1");
  free(v2);
  char *ed = strdup(st);
  char *p = strstr(ed, "batches=1");
  ASSERT_TRUE(p != NULL);
  p[8] = '2'; /* batches=2: edited */
  ASSERT_EQ_INT(open_with(c, ed, err, &l), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(err, "checksum mismatch");
  free(ed);
  char *cut = strdup(st);
  cut[strlen(cut) / 2] = 0;
  ASSERT_EQ_INT(open_with(c, cut, err, &l), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(err, "no check line");
  free(cut);
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_OK);
  wds_loader_close(l);
  free(st);
}

/* ---- elastic resume (exact mode) ---- */

/* A second set: 7 shards of uneven sizes (73 samples), ids 0..72. */
static char *eurls[7];
static const uint64_t ecounts[7] = {9, 14, 3, 12, 8, 17, 10};
#define ETOTAL 73
static char eindex[600];
/* The mix's two sources: e0..e3 (ids 0..37) and e4..e6 (ids 38..72), each
 * with its own index. */
#define ESPLIT 4
#define EFIRST_B 38
static char eindex_src[2][600];
/* The 7 shards' index with per-sample detail (each member's offset and
 * size, as `wds index` writes it): what an elastic resume replays a byte
 * bound with. */
static char eindex_detail[600];

static int make_detail_index(void) {
  snprintf(eindex_detail, sizeof eindex_detail, "%s/e-index-detail.json",
           tmpdir);
  FILE *ix = fopen(eindex_detail, "w");
  if (!ix)
    return -1;
  fprintf(ix, "{\"wids_version\": 1, \"shardlist\": [");
  for (size_t k = 0; k < 7; k++) {
    wds_reader_config rc = WDS_READER_CONFIG_INIT;
    rc.urls = (const char *const *)&eurls[k];
    rc.url_count = 1;
    wds_reader *r;
    if (wds_reader_open(&rc, &r) != WDS_OK) {
      fclose(ix);
      return -1;
    }
    fprintf(ix, "%s{\"url\": \"%s\", \"nsamples\": %llu, \"samples\": [",
            k ? ", " : "", eurls[k], (unsigned long long)ecounts[k]);
    const wds_sample *smp;
    for (int j = 0; wds_reader_next(r, &smp) == WDS_OK; j++) {
      fprintf(ix, "%s{\"key\": \"%s\", \"fields\": {", j ? ", " : "", smp->key);
      for (size_t f = 0; f < smp->field_count; f++)
        fprintf(ix, "%s\"%s\": [%llu, %llu]", f ? ", " : "", smp->fields[f].ext,
                (unsigned long long)smp->fields[f].offset,
                (unsigned long long)smp->fields[f].size_bytes);
      fprintf(ix, "}}");
    }
    wds_reader_close(r);
    fprintf(ix, "]}");
  }
  fprintf(ix, "]}\n");
  return fclose(ix);
}
static char *especs[2];

static int make_elastic_shards(void) {
  uint64_t id = 0;
  FILE *ix;
  snprintf(eindex, sizeof eindex, "%s/e-index.json", tmpdir);
  if (!(ix = fopen(eindex, "w")))
    return -1;
  fprintf(ix, "{\"wids_version\": 1, \"shardlist\": [");
  for (size_t k = 0; k < 7; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/e%zu.tar", tmpdir, k);
    eurls[k] = strdup(path);
    fprintf(ix, "%s{\"url\": \"%s\", \"nsamples\": %llu}", k ? ", " : "", path,
            (unsigned long long)ecounts[k]);
    wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
    wds__tarw *w;
    wds__err e;
    if (wds__tarw_open_path(path, &o, &w, &e) != WDS_OK)
      return -1;
    for (uint64_t i = 0; i < ecounts[k]; i++, id++) {
      char name[64], val[64];
      snprintf(name, sizeof name, "e%zu/%llu.cls", k, (unsigned long long)i);
      snprintf(val, sizeof val, "%llu", (unsigned long long)id);
      wds__tarw_add(w, name, val, strlen(val), &e);
    }
    if (wds__tarw_finish(w, &e) != WDS_OK) {
      wds__tarw_close(w);
      return -1;
    }
    wds__tarw_close(w);
  }
  fprintf(ix, "]}\n");
  if (fclose(ix) != 0)
    return -1;
  for (int s = 0; s < 2; s++) {
    char spec[4096] = "";
    snprintf(eindex_src[s], sizeof eindex_src[s], "%s/e-index-%d.json", tmpdir,
             s);
    if (!(ix = fopen(eindex_src[s], "w")))
      return -1;
    fprintf(ix, "{\"wids_version\": 1, \"shardlist\": [");
    for (size_t k = s ? ESPLIT : 0; k < (s ? 7 : ESPLIT); k++) {
      fprintf(ix, "%s{\"url\": \"%s\", \"nsamples\": %llu}",
              k == (s ? ESPLIT : 0) ? "" : ", ", eurls[k],
              (unsigned long long)ecounts[k]);
    }
    snprintf(spec, sizeof spec, "%s/e{%d..%d}.tar", tmpdir, s ? ESPLIT : 0,
             s ? 6 : ESPLIT - 1);
    fprintf(ix, "]}\n");
    if (fclose(ix) != 0 || !(especs[s] = strdup(spec)))
      return -1;
  }
  return 0;
}

/* One side of a trial: world, sizes, workers, shuffle. */
typedef struct side {
  int world, workers;
  size_t batch, rbs[4];
  int use_rbs;
  size_t sbuf;
  wds_last_batch last;
  int drop_last;
  /* The mix (the same on both sides: it fixes the epoch's samples):
   * source s repeat factor or proportion (0: unset); mixed 0 = one
   * source, the 7 shards. */
  int mixed;
  double repeat[2], proportion[2];
  size_t sbytes; /* shuffle_buffer_bytes; 0: the default */
} side;

static uint64_t rnd_state = 88172645463325252ULL;
static uint64_t rnd(uint64_t n) {
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 7;
  rnd_state ^= rnd_state << 17;
  return rnd_state % n;
}

static side random_side(void) {
  side s;
  memset(&s, 0, sizeof s);
  s.world = 1 + (int)rnd(4);
  s.workers = 1 + (int)rnd(3);
  s.use_rbs = rnd(3) == 0;
  s.batch = 1 + rnd(5);
  for (int r = 0; r < 4; r++)
    s.rbs[r] = 1 + rnd(4);
  s.sbuf = rnd(2) ? 0 : 2 + rnd(6);
  s.last = s.use_rbs ? WDS_LAST_KEEP : (wds_last_batch)rnd(3);
  s.drop_last = rnd(4) == 0;
  return s;
}

static wds_source_config esrc[2];

static wds_loader_config side_cfg(const side *s, int rank, uint64_t epoch,
                                  int with_index) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  if (s->mixed) {
    for (int k = 0; k < 2; k++)
      esrc[k] =
          (wds_source_config){especs[k], with_index ? eindex_src[k] : NULL, 0,
                              s->proportion[k], s->repeat[k]};
    c.sources = esrc;
    c.source_count = 2;
  } else {
    c.urls = (const char *const *)eurls;
    c.url_count = 7;
    c.index_path = with_index ? eindex : NULL;
  }
  c.rank = rank;
  c.world_size = s->world;
  c.mode = WDS_MODE_EXACT;
  c.workers = s->workers;
  c.batch_size = s->use_rbs ? 1 : s->batch;
  if (s->use_rbs) {
    c.rank_batch_sizes = s->rbs;
    c.rank_batch_size_count = (size_t)s->world;
  }
  c.shuffle_buffer = s->sbuf;
  c.max_sample_bytes = 4096; /* the byte bound cannot bind: replayable */
  if (s->sbytes) /* ... unless set (elastic_resume_where_the_byte_bound_bound)
                  */
    c.shuffle_buffer_bytes = s->sbytes;
  c.last_batch = s->last;
  c.drop_last = s->drop_last;
  c.seed = 21;
  c.epoch = epoch;
  c.fields = cls;
  c.field_count = 1;
  return c;
}

static void describe(const char *what, const side *s) {
  if (s->mixed)
    printf("  mix: repeat %g, %g; proportion %g, %g\n", s->repeat[0],
           s->repeat[1], s->proportion[0], s->proportion[1]);
  printf("  %s: world %d, workers %d, %s", what, s->world, s->workers,
         s->use_rbs ? "sizes" : "batch");
  if (s->use_rbs)
    for (int r = 0; r < s->world; r++)
      printf("%s%zu", r ? "," : " ", s->rbs[r]);
  else
    printf(" %zu", s->batch);
  printf(", shuffle %zu, last %d, drop_last %d\n", s->sbuf, (int)s->last,
         s->drop_last);
}

/* How many times sample `id` (0 .. ETOTAL-1) occurs in epoch `epoch` of
 * side s: once without a mix; with one, its source's whole passes k_s =
 * n_s / T_s plus one inside the window of r_s = n_s mod T_s samples of its
 * natural order from (epoch * r_s) mod T_s (mix.c). */
static uint64_t occurrences(const side *s, uint64_t epoch, uint64_t id) {
  if (!s->mixed)
    return 1;
  int k = id >= EFIRST_B;
  uint64_t T = k ? ETOTAL - EFIRST_B : EFIRST_B, p = id - (k ? EFIRST_B : 0);
  double want = s->repeat[k] > 0       ? s->repeat[k] * (double)T
                : s->proportion[k] > 0 ? s->proportion[k] * (double)ETOTAL
                                       : (double)T;
  uint64_t n = (uint64_t)llround(want), r = n % T;
  uint64_t pos0 = (epoch % T) * r % T;
  return n / T + ((p + T - pos0) % T < r);
}

/* A random mix: each source a repeat factor (0.5 .. 2.5), a proportion of
 * the epoch (0.2 .. 0.7) or neither. */
static void random_mix(side *s) {
  s->mixed = 1;
  for (int k = 0; k < 2; k++) {
    s->repeat[k] = s->proportion[k] = 0;
    switch (rnd(3)) {
    case 0:
      s->repeat[k] = 0.5 + (double)rnd(9) / 4;
      break;
    case 1:
      s->proportion[k] = 0.2 + (double)rnd(6) / 10;
      break;
    }
  }
}

/* For random (W, sizes, workers, shuffle, stop point) and (W', sizes',
 * workers', shuffle'), over one source and over a random mix of two: the
 * valid rows the old ranks delivered before the stop plus those the new
 * ranks deliver for the rest of the epoch hold every sample of the epoch
 * exactly as many times as the epoch has it (once; with a mix, its
 * source's count: n_s in all), none missed, none repeated: the padding
 * (the old plan's and the new ranks') is delivered as invalid rows
 * holding repeats; every new rank takes the same number of steps, which
 * wds_loader_epoch_batches said; the next epoch equals a fresh run's on
 * W'. With and without an index. */
TEST(elastic_resume_delivers_every_sample_once) {
  int trials = 0, mixed_trials = 0;
  for (int t = 0; t < 240; t++) {
    int with_index = t % 2;
    side a = random_side(), b = random_side();
    if (t % 3 == 2) {
      random_mix(&a);
      b.mixed = 1;
      memcpy(b.repeat, a.repeat, sizeof a.repeat);
      memcpy(b.proportion, a.proportion, sizeof a.proportion);
    }
    uint64_t epoch = rnd(3);
    int64_t seen[ETOTAL];
    memset(seen, 0, sizeof seen);
    /* The old ranks, each stopped after B batches. */
    wds_loader *l;
    wds_loader_config c0 = side_cfg(&a, 0, epoch, with_index);
    if (wds_loader_open(&c0, &l) != WDS_OK) {
      /* drop_last leaving a rank nothing, or a source under one step */
      if (!strstr(wds_last_error(), "would get no") &&
          !strstr(wds_last_error(), "no step"))
        printf("  %s\n", wds_last_error());
      ASSERT_TRUE(strstr(wds_last_error(), "would get no") ||
                  strstr(wds_last_error(), "no step"));
      continue;
    }
    uint64_t nb = wds_loader_epoch_batches(l);
    wds_loader_close(l);
    uint64_t B = rnd(nb + 1);
    char *st = NULL;
    int saver = (int)rnd((uint64_t)a.world);
    uint64_t invalid = 0;
    for (int r = 0; r < a.world; r++) {
      wds_loader_config c = side_cfg(&a, r, epoch, with_index);
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      int64_t ids[512];
      size_t n = take(l, B, ids, 512);
      for (size_t i = 0; i < n; i++) {
        if (ids[i] >= 0)
          seen[ids[i]]++;
        else
          invalid++;
      }
      if (r == saver)
        ASSERT_EQ_INT(wds_loader_state(l, &st), WDS_OK);
      wds_loader_close(l);
    }
    uint64_t steps = UINT64_MAX;
    for (int r = 0; r < b.world; r++) {
      wds_loader_config c = side_cfg(&b, r, 0, with_index);
      c.resume_state = st;
      int rc = wds_loader_open(&c, &l);
      if (rc != WDS_OK) {
        describe("old", &a);
        describe("new", &b);
        printf("  B %llu: %s\n", (unsigned long long)B, wds_last_error());
        ASSERT_EQ_INT(rc, WDS_OK);
      }
      uint64_t ep, done;
      wds_loader_position(l, &ep, &done);
      ASSERT_EQ_U64(ep, epoch);
      /* The same configuration: a plain resume, bit-identical to the
       * uninterrupted run (test_loader's); another: the remainder. */
      int el = wds_loader_elastic(l, NULL, NULL, NULL);
      ASSERT_EQ_U64(done, el ? 0 : B);
      uint64_t want = wds_loader_epoch_batches(l) - done;
      int64_t ids[1024];
      size_t n = 0, k = 0;
      const wds_batch *bt;
      int rc2;
      while ((rc2 = wds_loader_next(l, &bt)) == WDS_OK) {
        const int64_t *v = bt->fields[0].data;
        for (size_t i = 0; i < bt->rows && n < 1024; i++) {
          /* an invalid row (nothing fails here) is padding: its data a
           * repeat of a sample of the epoch */
          ASSERT_TRUE(v[i] >= 0 && v[i] < ETOTAL);
          ids[n++] = bt->valid[i] ? v[i] : -1;
        }
        wds_loader_release(l, bt);
        k++;
      }
      ASSERT_EQ_INT(rc2, WDS_EOF);
      ASSERT_EQ_U64(k, want);
      if (steps == UINT64_MAX)
        steps = k;
      ASSERT_EQ_U64(k, steps); /* every new rank the same steps */
      for (size_t i = 0; i < n; i++) {
        if (ids[i] >= 0)
          seen[ids[i]]++;
        else
          invalid++;
      }
      /* The next epoch: a fresh run's on the new world. */
      int64_t nx[1024], fr[1024];
      size_t nn = take(l, SIZE_MAX, nx, 1024);
      wds_loader_close(l);
      wds_loader_config f = side_cfg(&b, r, epoch + 1, with_index);
      ASSERT_EQ_INT(wds_loader_open(&f, &l), WDS_OK);
      size_t nf = take(l, SIZE_MAX, fr, 1024);
      wds_loader_close(l);
      ASSERT_EQ_U64(nn, nf);
      ASSERT_TRUE(memcmp(nx, fr, nn * sizeof *nx) == 0);
    }
    free(st);
    /* Every sample its count as valid rows, none repeated; none missed but
     * what a fresh run of the new ranks leaves out: drop_last's tail of the
     * remainder (< the sum of their weights, per source with a mix), a
     * partial last batch with last_batch drop (< a batch per rank). */
    uint64_t sum_b = 0;
    for (int r = 0; r < b.world; r++)
      sum_b += b.use_rbs ? b.rbs[r] : 1;
    uint64_t may_miss =
        (b.drop_last ? (sum_b - 1) * (b.mixed ? 2 : 1) : 0) +
        (b.last == WDS_LAST_DROP ? (uint64_t)b.world * (b.batch - 1) : 0);
    uint64_t missed = 0, repeated = 0;
    for (int i = 0; i < ETOTAL; i++) {
      uint64_t want = occurrences(&a, epoch, (uint64_t)i);
      if ((uint64_t)seen[i] > want)
        repeated += (uint64_t)seen[i] - want;
      else
        missed += want - (uint64_t)seen[i];
    }
    if (missed > may_miss || repeated) {
      describe("old", &a);
      describe("new", &b);
      printf("  B %llu, index %d, epoch %llu: %llu samples never delivered, "
             "%llu repeated as valid rows (%llu invalid rows)\n",
             (unsigned long long)B, with_index, (unsigned long long)epoch,
             (unsigned long long)missed, (unsigned long long)repeated,
             (unsigned long long)invalid);
    }
    ASSERT_TRUE(missed <= may_miss);
    ASSERT_EQ_U64(repeated, 0);
    trials++;
    mixed_trials += a.mixed;
  }
  printf("  %d trials (%d with a mix)\n", trials, mixed_trials);
  ASSERT_TRUE(trials > 150 && mixed_trials > 50);
}

/* A state saved inside a remainder (2 -> 3 ranks, stopped again after k
 * of its batches) opens on a third world (1, 2 or 4 ranks), over one
 * source or a mix: the three jobs between them deliver every sample of the
 * epoch exactly as often as the epoch has it (once; with a mix, its
 * source's count) as a valid row (the padding is invalid rows). */
TEST(elastic_resume_of_an_elastic_resume) {
  for (int t = 0; t < 36; t++) {
    side a = random_side(), b = random_side(), c3 = random_side();
    a.world = 2;
    b.world = 3;
    c3.world = 1 + (int)rnd(4);
    a.drop_last = b.drop_last = c3.drop_last = 0;
    a.last = b.last = c3.last = WDS_LAST_KEEP;
    if (t % 3 == 1) { /* over a mix: each source's remainder, twice */
      random_mix(&a);
      b.mixed = c3.mixed = 1;
      memcpy(b.repeat, a.repeat, sizeof a.repeat);
      memcpy(c3.repeat, a.repeat, sizeof a.repeat);
      memcpy(b.proportion, a.proportion, sizeof a.proportion);
      memcpy(c3.proportion, a.proportion, sizeof a.proportion);
    }
    int with_index = t % 2;
    int64_t seen[ETOTAL];
    memset(seen, 0, sizeof seen);
    wds_loader *l;
    char *st = NULL, *st2 = NULL;
    int64_t ids[512];
    uint64_t B = 1 + rnd(3), k = rnd(3);
    for (int r = 0; r < a.world; r++) {
      wds_loader_config c = side_cfg(&a, r, 1, with_index);
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      size_t n = take(l, B, ids, 512);
      for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0)
          seen[ids[i]]++;
      if (r == 1)
        ASSERT_EQ_INT(wds_loader_state(l, &st), WDS_OK);
      wds_loader_close(l);
    }
    for (int r = 0; r < b.world; r++) {
      wds_loader_config c = side_cfg(&b, r, 0, with_index);
      c.resume_state = st;
      int orc = wds_loader_open(&c, &l);
      if (orc != WDS_OK)
        printf("  %s\n", wds_last_error());
      ASSERT_EQ_INT(orc, WDS_OK);
      int old_world = 0;
      uint64_t left = 0;
      ASSERT_EQ_INT(wds_loader_elastic(l, &old_world, &left, NULL), 1);
      ASSERT_EQ_INT(old_world, 2);
      size_t n = take(l, k, ids, 512);
      for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0)
          seen[ids[i]]++;
      if (r == 2) {
        ASSERT_EQ_INT(wds_loader_state(l, &st2), WDS_OK);
        ASSERT_TRUE(strstr(st2, "\nfrom=\n") == NULL); /* carries its origin */
      }
      wds_loader_close(l);
    }
    for (int r = 0; r < c3.world; r++) {
      wds_loader_config c = side_cfg(&c3, r, 0, with_index);
      c.resume_state = st2;
      int orc = wds_loader_open(&c, &l);
      if (orc != WDS_OK)
        printf("  %s\n", wds_last_error());
      ASSERT_EQ_INT(orc, WDS_OK);
      size_t n = take(l, SIZE_MAX, ids, 512);
      for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0)
          seen[ids[i]]++;
      int old_world = 0;
      ASSERT_EQ_INT(wds_loader_elastic(l, &old_world, NULL, NULL),
                    0); /* ended */
      wds_loader_close(l);
    }
    free(st);
    free(st2);
    uint64_t sum = 0, repeats = 0;
    for (int r = 0; r < 2; r++)
      sum += a.use_rbs ? a.rbs[r] : 1;
    for (int r = 0; r < 3; r++)
      sum += b.use_rbs ? b.rbs[r] : 1;
    for (int r = 0; r < c3.world; r++)
      sum += c3.use_rbs ? c3.rbs[r] : 1;
    for (int i = 0; i < ETOTAL; i++) {
      uint64_t want = occurrences(&a, 1, (uint64_t)i);
      if ((uint64_t)seen[i] < want) {
        describe("first", &a);
        describe("second", &b);
        describe("third", &c3);
        printf("  B %llu, k %llu: sample %d delivered %lld of %llu times\n",
               (unsigned long long)B, (unsigned long long)k, i,
               (long long)seen[i], (unsigned long long)want);
      }
      ASSERT_TRUE((uint64_t)seen[i] >= want);
      repeats += (uint64_t)seen[i] - want;
    }
    (void)sum;
    ASSERT_EQ_U64(repeats, 0); /* the padding is invalid rows */
  }
}

/* A shuffle buffer whose byte bound bound in the saved run (each .cls is 1
 * or 2 bytes, the bound a few bytes: the buffer holds a few samples, not
 * its count): without the samples' sizes the old order cannot be
 * replayed, so the resume is refused, saying that an index lifts it; with
 * an index holding the per-sample detail the replay binds where the old
 * run did, and the valid rows before and after the stop are every sample
 * once. The bound did bind: the old ranks' order differs from the one
 * without it in most trials. */
TEST(elastic_resume_where_the_byte_bound_bound) {
  int trials = 0, bound = 0;
  for (int t = 0; t < 60; t++) {
    side a = random_side(), b = random_side();
    a.sbuf = 4 + rnd(8);
    a.sbytes = 2 + rnd(6);
    a.drop_last = 0;
    a.last = WDS_LAST_KEEP;
    b.drop_last = 0;
    b.last = WDS_LAST_KEEP;
    if (a.world == b.world && a.workers == b.workers)
      b.world = a.world % 4 + 1; /* another world: an elastic resume */
    uint64_t epoch = rnd(3);
    int64_t seen[ETOTAL];
    memset(seen, 0, sizeof seen);
    wds_loader *l;
    wds_loader_config c0 = side_cfg(&a, 0, epoch, 1);
    c0.index_path = eindex_detail;
    ASSERT_EQ_INT(wds_loader_open(&c0, &l), WDS_OK);
    uint64_t nb = wds_loader_epoch_batches(l);
    wds_loader_close(l);
    uint64_t B = 1 + rnd(nb);
    char *st = NULL;
    for (int r = 0; r < a.world; r++) {
      wds_loader_config c = side_cfg(&a, r, epoch, 1);
      c.index_path = eindex_detail;
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      int64_t ids[512], free_ids[512];
      size_t n = take(l, B, ids, 512);
      for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0)
          seen[ids[i]]++;
      if (r == 0)
        ASSERT_EQ_INT(wds_loader_state(l, &st), WDS_OK);
      wds_loader_close(l);
      /* The same rank without the bound: another order where it bound. */
      c.shuffle_buffer_bytes = (size_t)1 << 30;
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      size_t n2 = take(l, B, free_ids, 512);
      wds_loader_close(l);
      if (r == 0)
        bound += n2 != n || memcmp(ids, free_ids, n * sizeof *ids) != 0;
    }
    char err[1024];
    /* Without the sizes: refused, naming the values and the remedy. */
    wds_loader_config cn = side_cfg(&b, 0, 0, 0);
    ASSERT_EQ_INT(open_with(cn, st, err, &l), WDS_ERR_INVALID);
    ASSERT_CONTAINS(err, "shuffle_buffer_bytes");
    ASSERT_CONTAINS(err, "an index with per-sample detail");
    /* An index without the detail (counts only) does not lift it. */
    cn.index_path = eindex;
    ASSERT_EQ_INT(open_with(cn, st, err, &l), WDS_ERR_INVALID);
    ASSERT_CONTAINS(err, "an index with per-sample detail");
    uint64_t steps = UINT64_MAX;
    for (int r = 0; r < b.world; r++) {
      wds_loader_config c = side_cfg(&b, r, 0, 1);
      c.index_path = eindex_detail;
      int rc = open_with(c, st, err, &l);
      if (rc != WDS_OK) {
        describe("old", &a);
        describe("new", &b);
        printf("  %s\n", err);
      }
      ASSERT_EQ_INT(rc, WDS_OK);
      ASSERT_EQ_INT(wds_loader_elastic(l, NULL, NULL, NULL), 1);
      int64_t ids[512];
      size_t n = 0, k = 0;
      const wds_batch *bt;
      while (wds_loader_next(l, &bt) == WDS_OK) {
        const int64_t *v = bt->fields[0].data;
        for (size_t i = 0; i < bt->rows && n < 512; i++)
          ids[n++] = bt->valid[i] ? v[i] : -1;
        wds_loader_release(l, bt);
        k++;
      }
      wds_loader_close(l);
      if (steps == UINT64_MAX)
        steps = k;
      ASSERT_EQ_U64(k, steps);
      for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0)
          seen[ids[i]]++;
    }
    free(st);
    for (int i = 0; i < ETOTAL; i++) {
      if (seen[i] != 1) {
        describe("old", &a);
        describe("new", &b);
        printf("  B %llu, bound %zu bytes: sample %d delivered %lld times\n",
               (unsigned long long)B, a.sbytes, i, (long long)seen[i]);
      }
      ASSERT_EQ_U64(seen[i], 1);
    }
    trials++;
  }
  printf("  %d trials, the bound changed the order in %d\n", trials, bound);
  ASSERT_TRUE(bound > trials / 2);
}

/* Resampled mode: the epoch's count (samples_per_epoch on each old rank)
 * minus what the old ranks drew is re-dealt to the new ranks in equal
 * steps: the old rows plus the new ones are the epoch's count, plus fewer
 * than the sum of the new batch sizes (equal steps round up). */
TEST(elastic_resume_in_resampled_mode_redeals_the_count) {
  for (int t = 0; t < 40; t++) {
    side a = random_side(), b = random_side();
    a.last = b.last = WDS_LAST_KEEP;
    uint64_t spe = 10 + rnd(30);
    wds_loader *l;
    char *st = NULL;
    uint64_t rows = 0, B = 0;
    for (int r = 0; r < a.world; r++) {
      wds_loader_config c = side_cfg(&a, r, 0, 0);
      c.mode = WDS_MODE_RESAMPLED;
      c.samples_per_epoch = spe;
      ASSERT_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
      if (r == 0)
        B = rnd(wds_loader_epoch_batches(l) + 1);
      int64_t ids[512];
      rows += take(l, B, ids, 512);
      if (r == a.world - 1)
        ASSERT_EQ_INT(wds_loader_state(l, &st), WDS_OK);
      wds_loader_close(l);
    }
    uint64_t epoch_total = 0, sum_b = 0, steps = UINT64_MAX;
    for (int r = 0; r < a.world; r++)
      epoch_total += a.use_rbs ? 0 : spe;
    if (a.use_rbs) { /* S = ceil(spe * W / sum) steps, rank r S * B_r */
      uint64_t sum = 0;
      for (int r = 0; r < a.world; r++)
        sum += a.rbs[r];
      uint64_t S = (spe * (uint64_t)a.world + sum - 1) / sum;
      epoch_total = S * sum;
    }
    for (int r = 0; r < b.world; r++) {
      sum_b += b.use_rbs ? b.rbs[r] : 1;
      wds_loader_config c = side_cfg(&b, r, 0, 0);
      c.mode = WDS_MODE_RESAMPLED;
      c.samples_per_epoch = spe;
      c.resume_state = st;
      int orc = wds_loader_open(&c, &l);
      if (orc != WDS_OK)
        printf("  %s\n", wds_last_error());
      ASSERT_EQ_INT(orc, WDS_OK);
      int el = wds_loader_elastic(l, NULL, NULL, NULL);
      uint64_t want = wds_loader_epoch_batches(l), k = 0;
      const wds_batch *bt;
      while (wds_loader_next(l, &bt) == WDS_OK) {
        rows += bt->rows;
        k++;
        wds_loader_release(l, bt);
      }
      uint64_t ep, done;
      wds_loader_position(l, &ep, &done);
      wds_loader_close(l);
      if (!el) { /* the same configuration: a plain resume */
        ASSERT_EQ_U64(k, want - B);
        continue;
      }
      ASSERT_EQ_U64(k, want);
      if (steps == UINT64_MAX)
        steps = k;
      ASSERT_EQ_U64(k, steps);
    }
    free(st);
    ASSERT_TRUE(rows >= epoch_total);
    ASSERT_TRUE(rows < epoch_total + sum_b * (b.use_rbs ? 1 : b.batch));
  }
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-resume-XXXXXX");
  if (!mkdtemp(tmpdir) || make_shards() != 0 || make_elastic_shards() != 0 ||
      make_detail_index() != 0) {
    perror("fixture");
    return 1;
  }
  RUN(state_resumes_any_rank_of_the_same_job);
  RUN(state_under_another_configuration_names_both_values);
  RUN(resampled_state_written_with_shard_shuffle_off_resumes);
  RUN(foreign_and_corrupted_states_are_refused);
  RUN(elastic_resume_delivers_every_sample_once);
  RUN(elastic_resume_of_an_elastic_resume);
  RUN(elastic_resume_where_the_byte_bound_bound);
  RUN(elastic_resume_in_resampled_mode_redeals_the_count);
  for (size_t k = 0; k < 4; k++)
    free(urls[k]);
  for (size_t k = 0; k < 7; k++)
    free(eurls[k]);
  free(especs[0]);
  free(especs[1]);
  test_remove_tree(tmpdir);
  return test_summary();
}
