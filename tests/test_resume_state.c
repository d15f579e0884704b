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

/* Each configuration that gives the saved batch count other samples is
 * refused, naming the saved value and this loader's. */
TEST(state_under_another_configuration_names_both_values) {
  char *st = state_after(cfg(0, 2), 4);
  ASSERT_TRUE(st != NULL);
  char err[1024];
  wds_loader *l;
  wds_loader_config c;

  c = cfg(0, 3); /* another world: 2 -> 3 */
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with world_size 2; this loader has world_size 3");
  ASSERT_CONTAINS(err, "epoch 0, 4 batches");
  c = cfg(0, 1); /* 2 -> 1 */
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with world_size 2; this loader has world_size 1");
  c = cfg(0, 2);
  c.workers = 3;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with workers 2; this loader has workers 3");
  c = cfg(0, 2);
  c.batch_size = 4;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with batch_size 3; this loader has batch_size 4");
  c = cfg(0, 2);
  size_t rbs[2] = {3, 5};
  c.rank_batch_sizes = rbs;
  c.rank_batch_size_count = 2;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with batch_size 3; this loader has batch_size 0");
  c = cfg(0, 2);
  c.shuffle_buffer = 6;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(
      err, "saved with shuffle_buffer 5; this loader has shuffle_buffer 6");
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

  /* Per-rank sizes saved: other sizes are refused, naming both. */
  c = cfg(1, 2);
  c.batch_size = 1;
  size_t a[2] = {2, 4}, b[2] = {4, 2};
  c.rank_batch_sizes = a;
  c.rank_batch_size_count = 2;
  st = state_after(c, 2);
  ASSERT_TRUE(st != NULL);
  c.rank_batch_sizes = b;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_ERR_INVALID);
  ASSERT_CONTAINS(err, "saved with per-rank batch sizes 2,4; this loader has "
                       "per-rank batch sizes 4,2");
  c.rank_batch_sizes = a;
  c.rank = 0;
  ASSERT_EQ_INT(open_with(c, st, err, &l), WDS_OK);
  wds_loader_close(l);
  free(st);
}

/* Not a state, another version, a corrupted one: refused, saying so. */
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

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/wds-test-resume-XXXXXX");
  if (!mkdtemp(tmpdir) || make_shards() != 0) {
    perror("fixture");
    return 1;
  }
  RUN(state_resumes_any_rank_of_the_same_job);
  RUN(state_under_another_configuration_names_both_values);
  RUN(foreign_and_corrupted_states_are_refused);
  for (size_t k = 0; k < 4; k++)
    free(urls[k]);
  test_remove_tree(tmpdir);
  return test_summary();
}
