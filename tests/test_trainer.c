/* test_trainer.c — unit tests of wds-train's parts: the learning-rate
 * schedule, checkpoint files (round trip, validation), the CPU backend's
 * gradients (against finite differences, invalid rows ignored) and its
 * threaded all-reduce (every rank gets the same bits). */
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include "tests/test.h"
#include "trainer/backend.h"
#include "trainer/checkpoint.h"
#include "trainer/train.h"

TEST(lr_schedule) {
  ASSERT_TRUE(fabs(tr_lr_at(0, 100, 10, 1.0) - 0.1) < 1e-12);
  ASSERT_TRUE(fabs(tr_lr_at(9, 100, 10, 1.0) - 1.0) < 1e-12);
  ASSERT_TRUE(fabs(tr_lr_at(10, 100, 10, 1.0) - 1.0) < 1e-12);
  ASSERT_TRUE(fabs(tr_lr_at(55, 100, 10, 1.0) - 0.5) < 1e-12);
  ASSERT_TRUE(tr_lr_at(99, 100, 10, 1.0) < 0.001);
  ASSERT_TRUE(tr_lr_at(99, 100, 10, 1.0) > 0.0);
  for (uint64_t s = 11; s < 100; s++)
    ASSERT_TRUE(tr_lr_at(s, 100, 10, 1.0) < tr_lr_at(s - 1, 100, 10, 1.0));
  ASSERT_TRUE(fabs(tr_lr_at(0, 10, 0, 0.5) - 0.5) < 1e-12);
}

TEST(checkpoint_round_trip_and_validation) {
  char path[256];
  wds__err err;
  snprintf(path, sizeof path, "/tmp/test_trainer_%ld.ck", (long)getpid());
  tr_checkpoint c = {.layers = 2,
                     .dims = {4, 3, 2},
                     .step = 7,
                     .total_steps = 9,
                     .loader_epoch = 1,
                     .loader_batches = 3,
                     .fingerprint = 42,
                     .seed = 5};
  tr_model_config m = {.layers = 2, .dims = {4, 3, 2}};
  c.param_count = tr_model_param_count(&m);
  ASSERT_EQ_U64(c.param_count, 4 * 3 + 3 + 3 * 2 + 2);
  float w[23], v[23];
  for (int i = 0; i < 23; i++) {
    w[i] = (float)i * 0.25f - 1.0f;
    v[i] = -(float)i;
  }
  c.weights = w;
  c.momentum = v;
  ASSERT_EQ_INT(tr_checkpoint_save(path, &c, &err), 0);
  tr_checkpoint r;
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), 0);
  ASSERT_EQ_U64(r.step, 7);
  ASSERT_EQ_U64(r.loader_epoch, 1);
  ASSERT_EQ_U64(r.loader_batches, 3);
  ASSERT_EQ_U64(r.fingerprint, 42);
  ASSERT_EQ_INT(r.dims[2], 2);
  ASSERT_TRUE(memcmp(r.weights, w, sizeof w) == 0);
  ASSERT_TRUE(memcmp(r.momentum, v, sizeof v) == 0);
  tr_checkpoint_free(&r);
  /* Every single-byte change is caught. */
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f != NULL);
  unsigned char buf[1024];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  for (size_t i = 0; i < n; i++) {
    buf[i] ^= 0x10;
    f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    buf[i] ^= 0x10;
    err.msg[0] = 0;
    /* The version field (bytes 8..11) says another format; any other byte
     * makes a corrupt file. */
    ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err),
                  i >= 8 && i < 12 ? WDS_ERR_FORMAT : WDS_ERR_CORRUPT);
    ASSERT_TRUE(strstr(err.msg, path) != NULL);
    ASSERT_TRUE(r.weights == NULL);
  }
  f = fopen(path, "wb");
  fwrite(buf, 1, n - 1, f);
  fclose(f);
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(err.msg, "truncated");
  unlink(path);
}

/* A file of 1 TiB (sparse) is refused from its header, without reading or
 * allocating its size: one that is not a checkpoint (bad magic), and one
 * whose header is a checkpoint's but whose size is not; a version 2 file
 * with more per-rank sizes than a checkpoint holds. (Before, the whole file
 * was read first: malloc of 1 TiB failed, "read failed"; ASan aborted.) */
TEST(checkpoint_header_is_checked_before_the_rest_is_read) {
  char path[256];
  wds__err err;
  snprintf(path, sizeof path, "/tmp/test_trainer_big_%ld.ck", (long)getpid());
  tr_checkpoint c = {.layers = 1, .dims = {3, 2}, .step = 1, .total_steps = 2};
  tr_model_config m = {.layers = 1, .dims = {3, 2}};
  c.param_count = tr_model_param_count(&m);
  float w[8] = {0}, v[8] = {0};
  c.weights = w;
  c.momentum = v;
  ASSERT_EQ_INT(tr_checkpoint_save(path, &c, &err), 0);
  off_t tib = (off_t)1 << 40;
  ASSERT_EQ_INT(truncate(path, tib), 0);
  tr_checkpoint r;
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(err.msg, "1099511627776 bytes, expected");
  ASSERT_TRUE(r.weights == NULL);
  FILE *f = fopen(path, "r+b");
  ASSERT_TRUE(f != NULL);
  fputs("NOTACKPT", f);
  fclose(f);
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), WDS_ERR_CORRUPT);
  ASSERT_CONTAINS(err.msg, "bad magic");
  /* Version 2 (per-rank sizes): at most 2^20 of them. */
  uint32_t sizes[2] = {4, 4};
  c.rank_sizes = sizes;
  c.rank_sizes_count = 2;
  ASSERT_EQ_INT(tr_checkpoint_save(path, &c, &err), 0);
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), WDS_OK);
  ASSERT_EQ_U64(r.rank_sizes_count, 2);
  tr_checkpoint_free(&r);
  ASSERT_EQ_INT(truncate(path, tib), 0);
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(err.msg, "per-rank batch sizes; extended");
  unlink(path);
}

/* Version 3: the job's ranks, the elastic fingerprint and the loader's
 * saved state round-trip; every byte is covered by the checksum; a file
 * cut short or extended says so. */
TEST(checkpoint_keeps_the_loader_state) {
  char path[256];
  wds__err err;
  snprintf(path, sizeof path, "/tmp/test_trainer_ls_%ld.ck", (long)getpid());
  tr_model_config m = {.layers = 1, .dims = {3, 2}};
  float w[8], v[8];
  for (int i = 0; i < 8; i++)
    w[i] = v[i] = (float)i;
  char state[] = "wds-loader-state 1\nepoch=2\n";
  tr_checkpoint c = {.layers = 1,
                     .dims = {3, 2},
                     .step = 4,
                     .weights = w,
                     .momentum = v,
                     .world = 3,
                     .elastic_fingerprint = 0x1234567890abcdefULL,
                     .loader_state = state};
  c.param_count = tr_model_param_count(&m);
  ASSERT_EQ_INT(tr_checkpoint_save(path, &c, &err), 0);
  tr_checkpoint r;
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), 0);
  ASSERT_EQ_U64(r.world, 3);
  ASSERT_EQ_U64(r.elastic_fingerprint, 0x1234567890abcdefULL);
  ASSERT_TRUE(r.loader_state && strcmp(r.loader_state, state) == 0);
  ASSERT_EQ_U64(r.rank_sizes_count, 0);
  tr_checkpoint_free(&r);
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f != NULL);
  unsigned char buf[1024];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  ASSERT_EQ_U64(buf[8], 3); /* version 3 */
  for (size_t i = 0; i < n; i++) {
    buf[i] ^= 0x10;
    f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    buf[i] ^= 0x10;
    int rc = tr_checkpoint_load(path, &r, &err);
    /* the version field: another format; a length field: another size;
     * any other byte: corrupt */
    ASSERT_TRUE(i >= 8 && i < 12
                    ? rc == WDS_ERR_FORMAT
                    : rc == WDS_ERR_CORRUPT || rc == WDS_ERR_TRUNCATED);
    ASSERT_TRUE(r.loader_state == NULL && r.weights == NULL);
  }
  f = fopen(path, "wb");
  fwrite(buf, 1, n - 3, f);
  fclose(f);
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), WDS_ERR_TRUNCATED);
  ASSERT_CONTAINS(err.msg, "truncated or extended");
  unlink(path);
}

/* Version 2: a run with per-rank batch sizes keeps them in its checkpoint;
 * every byte is still covered by the checksum. */
TEST(checkpoint_keeps_rank_sizes) {
  char path[256];
  wds__err err;
  snprintf(path, sizeof path, "/tmp/test_trainer_rs_%ld.ck", (long)getpid());
  tr_model_config m = {.layers = 1, .dims = {3, 2}};
  float w[8], v[8];
  for (int i = 0; i < 8; i++)
    w[i] = v[i] = (float)i;
  uint32_t sizes[3] = {24, 8, 8};
  tr_checkpoint c = {.layers = 1,
                     .dims = {3, 2},
                     .step = 4,
                     .weights = w,
                     .momentum = v,
                     .rank_sizes = sizes,
                     .rank_sizes_count = 3};
  c.param_count = tr_model_param_count(&m);
  ASSERT_EQ_U64(c.param_count, 8);
  ASSERT_EQ_INT(tr_checkpoint_save(path, &c, &err), 0);
  tr_checkpoint r;
  ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err), 0);
  ASSERT_EQ_U64(r.rank_sizes_count, 3);
  ASSERT_TRUE(r.rank_sizes[0] == 24 && r.rank_sizes[1] == 8 &&
              r.rank_sizes[2] == 8);
  ASSERT_EQ_U64(r.step, 4);
  ASSERT_TRUE(memcmp(r.weights, w, sizeof w) == 0);
  tr_checkpoint_free(&r);
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f != NULL);
  unsigned char buf[1024];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  ASSERT_EQ_U64(buf[8], 2); /* version 2 */
  for (size_t i = 0; i < n; i++) {
    buf[i] ^= 0x10;
    f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    buf[i] ^= 0x10;
    ASSERT_EQ_INT(tr_checkpoint_load(path, &r, &err),
                  i >= 8 && i < 12 ? WDS_ERR_FORMAT : WDS_ERR_CORRUPT);
    ASSERT_TRUE(r.rank_sizes == NULL && r.weights == NULL);
  }
  unlink(path);
}

/* A small model and batch: 3 rows (one invalid), 2x2x1 images. */
static const uint8_t g_img[3 * 4] = {10, 200, 30, 90, 250, 5,
                                     60, 120, 0,  0,  255, 255};
static const int64_t g_lab[3] = {1, 2, 0};
static const uint8_t g_valid[3] = {1, 1, 0};

static double loss_of(const tr_backend *be, tr_rank *r, const float *w,
                      size_t np) {
  wds__err err;
  float *tmp = malloc(np * sizeof(float));
  memcpy(tmp, w, np * sizeof(float));
  be->set_state(r, tmp, NULL, &err);
  free(tmp);
  tr_batch_view v = {g_img, g_lab, g_valid, 3, 0, 3, 0};
  double loss = 0;
  uint64_t correct = 0, count = 0;
  be->evaluate(r, &v, &loss, &correct, &count, &err);
  return loss / (double)count;
}

TEST(cpu_gradients_match_finite_differences) {
  const tr_backend *be = &tr_backend_cpu;
  tr_model_config m = {.layers = 2, .dims = {4, 5, 3}, .seed = 3};
  size_t np = tr_model_param_count(&m);
  wds__err err;
  tr_group *g;
  tr_rank *r;
  tr_group_config gc = tr_group_config_local(1, np);
  ASSERT_EQ_INT(be->group_create(&gc, &g, &err), 0);
  ASSERT_EQ_INT(be->rank_create(g, 0, &m, 3, &r, &err), 0);
  float *w = malloc(np * sizeof(float)), *grad0 = malloc(np * sizeof(float));
  be->get_state(r, w, NULL, &err);
  tr_batch_view v = {g_img, g_lab, g_valid, 3, 0, 3, 0};
  ASSERT_EQ_INT(be->forward_backward(r, &v, &err), 0);
  ASSERT_EQ_INT(be->allreduce(r, &err), 0);
  double ls, cnt;
  ASSERT_EQ_INT(be->take_loss(r, &ls, &cnt, &err), 0);
  ASSERT_TRUE(cnt == 2.0); /* the invalid row is not counted */
  /* The gradient: an SGD step with lr 1, no momentum/decay, moves the
   * weights by -grad/count. */
  ASSERT_EQ_INT(be->sgd_step(r, 1.0f, &err), 0);
  be->get_state(r, grad0, NULL, &err);
  int bad = 0;
  for (size_t i = 0; i < np; i++) {
    double g_an = (double)w[i] - (double)grad0[i];
    float save = w[i];
    w[i] = save + 1e-2f;
    double lp = loss_of(be, r, w, np);
    w[i] = save - 1e-2f;
    double lm = loss_of(be, r, w, np);
    w[i] = save;
    double g_fd = (lp - lm) / 2e-2;
    if (fabs(g_an - g_fd) > 2e-3 + 2e-2 * fabs(g_fd)) {
      printf("  param %zu: analytic %g, finite difference %g\n", i, g_an, g_fd);
      bad++;
    }
  }
  free(w);
  free(grad0);
  be->rank_destroy(r);
  be->group_destroy(g);
  ASSERT_EQ_INT(bad, 0);
}

typedef struct ar_arg {
  tr_group *g;
  int rank;
  float out[64];
  int rc;
} ar_arg;

/* Each rank trains on different rows; after the all-reduce and step all
 * ranks hold the same bits. Repeated to give thread timing a chance. */
static void *ar_main(void *p) {
  ar_arg *a = p;
  const tr_backend *be = &tr_backend_cpu;
  tr_model_config m = {.layers = 2,
                       .dims = {4, 6, 3},
                       .seed = 1,
                       .momentum = 0.9f,
                       .weight_decay = 1e-3f};
  wds__err err;
  tr_rank *r;
  a->rc = be->rank_create(a->g, a->rank, &m, 1, &r, &err);
  if (a->rc)
    return NULL;
  for (int it = 0; it < 20 && !a->rc; it++) {
    tr_batch_view v = {g_img, g_lab, g_valid, 3, (size_t)(a->rank % 3), 1, 0};
    a->rc |= be->forward_backward(r, &v, &err);
    a->rc |= be->allreduce(r, &err);
    a->rc |= be->sgd_step(r, 0.1f, &err);
  }
  be->get_state(r, a->out, NULL, &err);
  be->rank_destroy(r);
  return NULL;
}

TEST(cpu_allreduce_identical_on_every_rank) {
  for (int ranks = 2; ranks <= 4; ranks++) {
    tr_group *g;
    wds__err err;
    tr_model_config m = {.layers = 2, .dims = {4, 6, 3}};
    size_t np = tr_model_param_count(&m);
    ASSERT_TRUE(np <= 64);
    tr_group_config gc = tr_group_config_local(ranks, np);
    ASSERT_EQ_INT(tr_backend_cpu.group_create(&gc, &g, &err), 0);
    ar_arg args[4];
    pthread_t t[4];
    for (int i = 0; i < ranks; i++) {
      memset(&args[i], 0, sizeof args[i]);
      args[i].g = g;
      args[i].rank = i;
      pthread_create(&t[i], NULL, ar_main, &args[i]);
    }
    for (int i = 0; i < ranks; i++)
      pthread_join(t[i], NULL);
    tr_backend_cpu.group_destroy(g);
    for (int i = 0; i < ranks; i++) {
      ASSERT_EQ_INT(args[i].rc, 0);
      ASSERT_TRUE(memcmp(args[i].out, args[0].out, np * sizeof(float)) == 0);
    }
  }
}

/* Per-rank batch sizes on given batches: ranks of 5, 2 and 1 rows over
 * one batch of 8 (two rows invalid) take, after the all-reduce of sums and
 * counts, the step a single rank takes over all 8 rows; every rank holds
 * the same bits. */
#define UNEQ_ROWS 8
static uint8_t u_img[UNEQ_ROWS * 4];
static int64_t u_lab[UNEQ_ROWS];
static uint8_t u_valid[UNEQ_ROWS];

typedef struct uneq_arg {
  tr_group *g;
  int rank;
  size_t row0, rows;
  float out[64], grad[66];
  int rc;
} uneq_arg;

static void *uneq_main(void *p) {
  uneq_arg *a = p;
  const tr_backend *be = &tr_backend_cpu;
  tr_model_config m = {.layers = 2,
                       .dims = {4, 6, 3},
                       .seed = 5,
                       .momentum = 0.9f,
                       .weight_decay = 1e-3f};
  wds__err err;
  tr_rank *r;
  a->rc = be->rank_create(a->g, a->rank, &m, a->rows, &r, &err);
  if (a->rc)
    return NULL;
  for (int it = 0; it < 5 && !a->rc; it++) {
    tr_batch_view v = {u_img, u_lab, u_valid, UNEQ_ROWS, a->row0, a->rows, 0};
    a->rc |= be->forward_backward(r, &v, &err);
    a->rc |= be->allreduce(r, &err);
    if (it == 0)
      a->rc |= be->get_grad(r, a->grad, &err);
    a->rc |= be->sgd_step(r, 0.1f, &err);
  }
  be->get_state(r, a->out, NULL, &err);
  be->rank_destroy(r);
  return NULL;
}

static int run_uneq(const size_t *sizes, int ranks, uneq_arg *args, size_t np) {
  tr_group *g;
  wds__err err;
  tr_group_config gc = tr_group_config_local(ranks, np);
  if (tr_backend_cpu.group_create(&gc, &g, &err) != 0)
    return -1;
  pthread_t t[4];
  size_t row0 = 0;
  for (int i = 0; i < ranks; i++) {
    memset(&args[i], 0, sizeof args[i]);
    args[i].g = g;
    args[i].rank = i;
    args[i].row0 = row0;
    args[i].rows = sizes[i];
    row0 += sizes[i];
    pthread_create(&t[i], NULL, uneq_main, &args[i]);
  }
  for (int i = 0; i < ranks; i++)
    pthread_join(t[i], NULL);
  tr_backend_cpu.group_destroy(g);
  for (int i = 0; i < ranks; i++)
    if (args[i].rc)
      return -1;
  return 0;
}

TEST(cpu_unequal_rank_rows_step_as_one_rank) {
  for (int i = 0; i < UNEQ_ROWS * 4; i++)
    u_img[i] = (uint8_t)(37 * i + 11);
  for (int i = 0; i < UNEQ_ROWS; i++) {
    u_lab[i] = i % 3;
    u_valid[i] = i != 2 && i != 6;
  }
  tr_model_config m = {.layers = 2, .dims = {4, 6, 3}};
  size_t np = tr_model_param_count(&m);
  ASSERT_TRUE(np <= 64);
  static const size_t one[1] = {UNEQ_ROWS}, three[3] = {5, 2, 1};
  uneq_arg a1[1], a3[3];
  ASSERT_EQ_INT(run_uneq(one, 1, a1, np), 0);
  ASSERT_EQ_INT(run_uneq(three, 3, a3, np), 0);
  /* The summed gradient, the loss sum and the count: as one rank's. */
  ASSERT_TRUE(a3[0].grad[np + 1] == 6.0f && a1[0].grad[np + 1] == 6.0f);
  double worst = 0, big = 0;
  for (size_t i = 0; i < np + 1; i++) {
    double d = fabs((double)a3[0].grad[i] - (double)a1[0].grad[i]);
    worst = d > worst ? d : worst;
    big = fabs((double)a1[0].grad[i]) > big ? fabs((double)a1[0].grad[i]) : big;
  }
  ASSERT_TRUE(big > 0 && worst <= 1e-5 * big);
  /* After 5 steps (momentum, decay): the same weights, within rounding of
   * the sum's order; bit-identical on every rank. */
  for (size_t i = 0; i < np; i++)
    ASSERT_TRUE(fabs((double)a3[0].out[i] - (double)a1[0].out[i]) <=
                1e-5 * (1 + fabs((double)a1[0].out[i])));
  for (int k = 1; k < 3; k++)
    ASSERT_TRUE(memcmp(a3[k].out, a3[0].out, np * sizeof(float)) == 0);
}

static void *abort_main(void *p) {
  tr_group *g = p;
  tr_model_config m = {.layers = 1, .dims = {4, 3}};
  wds__err err;
  tr_rank *r;
  if (tr_backend_cpu.rank_create(g, 0, &m, 1, &r, &err) != 0)
    return NULL;
  /* Rank 1 never comes: only the abort lets this return. */
  int rc = tr_backend_cpu.allreduce(r, &err);
  tr_backend_cpu.rank_destroy(r);
  return rc == WDS_ERR_CANCELLED ? p : NULL;
}

TEST(cpu_group_abort_wakes_waiting_rank) {
  tr_group *g;
  wds__err err;
  tr_group_config gc = tr_group_config_local(2, 15);
  ASSERT_EQ_INT(tr_backend_cpu.group_create(&gc, &g, &err), 0);
  pthread_t t;
  pthread_create(&t, NULL, abort_main, g);
  usleep(20000);
  tr_backend_cpu.group_abort(g);
  void *ret;
  pthread_join(t, &ret);
  tr_backend_cpu.group_destroy(g);
  ASSERT_TRUE(ret == g);
}

/* gather_u64 gives every rank all values in rank order; take_loss sums the
 * steps since the last call and resets. */
typedef struct gather_arg {
  tr_group *g;
  int rank, rc;
  uint64_t all[3];
  double loss, count, loss2, count2;
} gather_arg;

static void *gather_main(void *p) {
  gather_arg *a = p;
  const tr_backend *be = &tr_backend_cpu;
  tr_model_config m = {.layers = 2, .dims = {4, 6, 3}, .seed = 1};
  wds__err err;
  tr_rank *r;
  a->rc = be->rank_create(a->g, a->rank, &m, 1, &r, &err);
  if (a->rc)
    return NULL;
  a->rc |= be->gather_u64(r, 1000 + (uint64_t)a->rank, a->all, &err);
  for (int it = 0; it < 2; it++) {
    tr_batch_view v = {g_img, g_lab, g_valid, 3, (size_t)a->rank, 1, 0};
    a->rc |= be->forward_backward(r, &v, &err);
    a->rc |= be->allreduce(r, &err);
  }
  a->rc |= be->take_loss(r, &a->loss, &a->count, &err);
  a->rc |= be->take_loss(r, &a->loss2, &a->count2, &err);
  be->rank_destroy(r);
  return NULL;
}

TEST(cpu_gather_and_take_loss) {
  tr_group *g;
  wds__err err;
  tr_model_config m = {.layers = 2, .dims = {4, 6, 3}};
  tr_group_config gc = tr_group_config_local(3, tr_model_param_count(&m));
  ASSERT_EQ_INT(tr_backend_cpu.group_create(&gc, &g, &err), 0);
  gather_arg a[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].g = g;
    a[i].rank = i;
    pthread_create(&t[i], NULL, gather_main, &a[i]);
  }
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  tr_backend_cpu.group_destroy(g);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ_INT(a[i].rc, 0);
    for (int k = 0; k < 3; k++)
      ASSERT_EQ_U64(a[i].all[k], 1000 + (uint64_t)k);
    /* Rows 0 and 1 valid, row 2 not: 2 valid rows per step, 2 steps. */
    ASSERT_TRUE(a[i].count == 4.0);
    ASSERT_TRUE(a[i].loss > 0.0 && a[i].loss == a[0].loss);
    ASSERT_TRUE(a[i].count2 == 0.0 && a[i].loss2 == 0.0);
  }
}

TEST(cpu_group_of_processes_needs_a_process_group) {
  tr_group *g = NULL;
  wds__err err = {""};
  tr_group_config gc = tr_group_config_local(2, 15);
  gc.procs = 2;
  gc.world = 4;
  ASSERT_EQ_INT(tr_backend_cpu.group_create(&gc, &g, &err), WDS_ERR_INVALID);
  ASSERT_TRUE(g == NULL);
  ASSERT_CONTAINS(err.msg, "several processes need a process group");
}

/* The fingerprint's text as it was formatted before (one buffer, here one
 * large enough), hashed: what tr_config_fingerprint must give for specs of
 * any length (so checkpoints of earlier runs with specs under 4 KB still
 * resume, and longer specs count whole). */
static uint64_t reference_fingerprint(const tr_options *o,
                                      const tr_model_config *m) {
  size_t cap = 1 << 16;
  char *buf = malloc(cap);
  int n = snprintf(
      buf, cap,
      "train=%s|index=%s|seed=%" PRIu64 "|mode=%d|spe=%" PRIu64
      "|batch=%zu|ranks=%d|procs=%d|workers=%d|img=%d|ch=%d|crop=%d"
      "|sbuf=%zu|last=%d|lr=%.17g|mom=%.17g|wd=%.17g|warmup=%" PRIu64
      "|backend=%s|layers=%d",
      o->loader.spec ? o->loader.spec : "",
      o->loader.index_path ? o->loader.index_path : "", o->loader.seed,
      (int)o->loader.mode, o->loader.samples_per_epoch, o->loader.batch_size,
      o->ranks, o->procs, o->loader.workers, o->loader.image_size, o->channels,
      (int)o->loader.crop, o->loader.shuffle_buffer, (int)o->loader.last_batch,
      o->lr, o->momentum, o->weight_decay, o->warmup_steps, o->backend->name,
      m->layers);
  uint64_t h = tr_fnv1a(TR_FNV_INIT, buf, (size_t)n);
  h = tr_fnv1a(h, m->dims, sizeof m->dims);
  for (size_t i = 0; i < o->loader.source_count; i++) {
    const wds_source_config *sc = &o->loader.sources[i];
    n = snprintf(buf, cap, "|source=%s|index=%s|w=%.17g|p=%.17g|r=%.17g",
                 sc->spec, sc->index_path ? sc->index_path : "", sc->weight,
                 sc->proportion, sc->repeat);
    h = tr_fnv1a(h, buf, (size_t)n);
  }
  free(buf);
  return h;
}

/* "train-000.tar::" repeated to about len bytes, then tail. */
static char *long_spec(size_t len, const char *tail) {
  char *s = malloc(len + 64);
  size_t n = 0;
  while (n < len)
    n += (size_t)sprintf(s + n, "train-%03zu.tar::", (n / 15) % 1000);
  strcpy(s + n, tail);
  return s;
}

TEST(fingerprint_counts_long_specs_whole) {
  /* A --train spec of about 6.8 KB ran past the 4 KB buffer the text was
   * formatted into (ASan: stack-buffer-overflow), and two specs that
   * differ only after 4 KB could fingerprint alike. */
  tr_options o;
  tr_options_init(&o);
  tr_model_config m = {.layers = 3, .dims = {768, 256, 128, 10}};
  o.loader.spec = "train-{000..003}.tar";
  uint64_t short_fp = tr_config_fingerprint(&o, &m);
  ASSERT_EQ_U64(short_fp, reference_fingerprint(&o, &m));
  char *a = long_spec(6800, "x.tar"), *b = long_spec(6800, "y.tar");
  ASSERT_TRUE(strlen(a) > 6800 && strncmp(a, b, 6800) == 0);
  o.loader.spec = a;
  uint64_t fa = tr_config_fingerprint(&o, &m);
  ASSERT_EQ_U64(fa, reference_fingerprint(&o, &m));
  o.loader.spec = b;
  uint64_t fb = tr_config_fingerprint(&o, &m);
  ASSERT_EQ_U64(fb, reference_fingerprint(&o, &m));
  ASSERT_TRUE(fa != fb);
  o.loader.spec = a;
  ASSERT_EQ_U64(tr_config_fingerprint(&o, &m), fa); /* stable */
  /* A --source spec, and its index path, count whole too. */
  wds_source_config src[2] = {{.spec = a, .weight = 2},
                              {.spec = "x-{0..3}.tar", .index_path = a}};
  o.loader.spec = NULL;
  o.loader.sources = src;
  o.loader.source_count = 2;
  uint64_t sa = tr_config_fingerprint(&o, &m);
  ASSERT_EQ_U64(sa, reference_fingerprint(&o, &m));
  src[0].spec = b;
  uint64_t sb = tr_config_fingerprint(&o, &m);
  ASSERT_EQ_U64(sb, reference_fingerprint(&o, &m));
  ASSERT_TRUE(sa != sb);
  src[1].index_path = b;
  ASSERT_TRUE(tr_config_fingerprint(&o, &m) != sb);
  free(a);
  free(b);
}

/* The augmentation options are part of the run: a checkpoint written
 * with other crop parameters or ColorJitter ranges is not resumed (the
 * defaults keep the fingerprints above). */
TEST(fingerprint_covers_augmentation) {
  tr_model_config m = {.layers = 3, .dims = {768, 256, 128, 10}};
  tr_options o;
  tr_options_init(&o);
  o.loader.spec = "train-{000..003}.tar";
  uint64_t base = tr_config_fingerprint(&o, &m);
  const char *const sets[][2] = {
      {"crop_scale", "0.2,1"}, {"crop_ratio", "0.5,2"}, {"flip_prob", "0"},
      {"brightness", "0.4"},   {"contrast", "0.4"},     {"saturation", "0.4"},
      {"hue", "0.1"}};
  for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
    tr_options_init(&o);
    o.loader.spec = "train-{000..003}.tar";
    ASSERT_EQ_INT(wds_loader_config_set(&o.loader, sets[i][0], sets[i][1]),
                  WDS_OK);
    ASSERT_TRUE(tr_config_fingerprint(&o, &m) != base);
  }
}

/* Fingerprints of fixed option sets as wds-train computed them when
 * checkpoints of earlier runs were written: a checkpoint resumes only
 * under the same value, so these never change (a change of how the
 * options are held or hashed must keep them). */
TEST(fingerprint_is_stable_across_versions) {
  tr_model_config m = {.layers = 3, .dims = {768, 256, 128, 10}};
  tr_options o;
  tr_options_init(&o);
  o.loader.spec = "train-{000..003}.tar";
  ASSERT_EQ_U64(tr_config_fingerprint(&o, &m), UINT64_C(12423610651220311040));
  /* Every hashed option away from its default. */
  static const size_t rank_sizes[4] = {24, 8, 16, 16};
  wds_source_config src[2] = {
      {.spec = "a-{0..3}.tar", .weight = 2},
      {.spec = "b-{0..1}.tar", .index_path = "b.json", .repeat = 1.5}};
  tr_options_init(&o);
  o.loader.spec = "https://host/shards-{0000..0099}.tar";
  o.loader.index_path = "idx.json";
  o.loader.seed = 7;
  o.loader.mode = WDS_MODE_RESAMPLED;
  o.loader.samples_per_epoch = 1234;
  o.loader.batch_size = 16;
  o.ranks = 2;
  o.procs = 2;
  o.loader.workers = 3;
  o.loader.image_size = 8;
  o.channels = 1;
  o.loader.crop = WDS_CROP_RANDOM;
  o.loader.shuffle_buffer = 50;
  o.loader.last_batch = WDS_LAST_PAD;
  o.lr = 0.1;
  o.momentum = 0.5;
  o.weight_decay = 1e-4;
  o.warmup_steps = 20;
  tr_model_config m2 = {.layers = 2, .dims = {64, 32, 10}};
  ASSERT_EQ_U64(tr_config_fingerprint(&o, &m2), UINT64_C(5063156486148258910));
  o.loader.rank_batch_sizes = rank_sizes;
  o.loader.rank_batch_size_count = 4;
  o.loader.spec = NULL;
  o.loader.index_path = NULL;
  o.loader.sources = src;
  o.loader.source_count = 2;
  ASSERT_EQ_U64(tr_config_fingerprint(&o, &m2), UINT64_C(17510770101735585511));
}

int main(void) {
  RUN(lr_schedule);
  RUN(fingerprint_counts_long_specs_whole);
  RUN(fingerprint_is_stable_across_versions);
  RUN(fingerprint_covers_augmentation);
  RUN(checkpoint_keeps_the_loader_state);
  RUN(checkpoint_round_trip_and_validation);
  RUN(checkpoint_keeps_rank_sizes);
  RUN(checkpoint_header_is_checked_before_the_rest_is_read);
  RUN(cpu_gradients_match_finite_differences);
  RUN(cpu_allreduce_identical_on_every_rank);
  RUN(cpu_unequal_rank_rows_step_as_one_rank);
  RUN(cpu_group_abort_wakes_waiting_rank);
  RUN(cpu_gather_and_take_loss);
  RUN(cpu_group_of_processes_needs_a_process_group);
  return test_summary();
}
