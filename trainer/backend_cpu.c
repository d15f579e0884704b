/* backend_cpu.c — the CPU backend: the model's CPU reference (model.c) on
 * rank threads, the process group's host collectives (procgroup.c) between
 * them: in one process, or across several over MPI (pg_mpi.c).
 *
 * Determinism: a rank's gradient is a pure function of its weights and rows
 * (model.c); the all-reduce sums every element over ranks 0..N-1 in that
 * order and gives every rank the same bits, whatever the thread timing, so
 * the same SGD step keeps the weights bit-identical on every rank.
 *
 * Loss and gradients: the flat gradient buffer's last two entries carry the
 * loss sum and the valid count through the same all-reduce, and sgd_step
 * divides by the global count: the mean over the valid rows of all ranks.
 * A rank's gradient buffer is written only by itself outside an all-reduce
 * (procgroup.c explains the one inside). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend.h"

struct tr_group {
  tr_pg *pg;
  int owns_pg;
  int first_rank; /* global rank of local rank 0 (messages) */
};

struct tr_rank {
  tr_group *g;
  int rank;
  tr_model_config m;
  size_t param_count;
  float *w, *v, *grad; /* weights, momentum, gradient (+2) */
  tr_model_work work;
  double loss_acc, count_acc; /* take_loss */
};

static int cpu_group_create(const tr_group_config *c, tr_group **out,
                            wds__err *e) {
  *out = NULL;
  if (c->world != c->local_ranks * c->procs || (c->procs != 1 && !c->pg))
    return wds__fail(e, WDS_ERR_INVALID,
                     "CPU backend: %d processes of %d ranks for %d ranks in "
                     "all%s",
                     c->procs, c->local_ranks, c->world,
                     c->pg ? "" : " (several processes need a process group)");
  tr_group *g = calloc(1, sizeof *g);
  if (!g)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory (CPU group of %d ranks)",
                     c->local_ranks);
  g->pg = c->pg;
  g->first_rank = c->first_rank;
  if (!g->pg) {
    int rc = tr_pg_create_local(c->local_ranks, &g->pg, e);
    if (rc != WDS_OK) {
      free(g);
      return rc;
    }
    g->owns_pg = 1;
  }
  *out = g;
  return WDS_OK;
}

static void cpu_group_abort(tr_group *g) { tr_pg_abort(g->pg, NULL); }

static void cpu_group_destroy(tr_group *g) {
  if (!g)
    return;
  if (g->owns_pg)
    tr_pg_destroy(g->pg);
  free(g);
}

static void cpu_rank_destroy(tr_rank *r) {
  if (!r)
    return;
  free(r->w);
  free(r->v);
  free(r->grad);
  tr_model_work_free(&r->work);
  free(r);
}

static int cpu_rank_create(tr_group *g, int rank, const tr_model_config *m,
                           size_t batch_rows, tr_rank **out, wds__err *e) {
  tr_rank *r = calloc(1, sizeof *r);
  *out = NULL;
  if (!r)
    goto nomem;
  r->g = g;
  r->rank = rank;
  r->m = *m;
  r->param_count = tr_model_param_count(m);
  r->w = malloc(r->param_count * sizeof(float));
  r->v = calloc(r->param_count, sizeof(float));
  r->grad = calloc(r->param_count + 2, sizeof(float));
  if (!r->w || !r->v || !r->grad ||
      tr_model_work_init(&r->work, m, batch_rows) != WDS_OK)
    goto nomem_free;
  tr_model_init(m, r->w);
  *out = r;
  return WDS_OK;
nomem_free:
  cpu_rank_destroy(r);
nomem:
  return wds__fail(e, WDS_ERR_NOMEM,
                   "rank %d: out of memory (model of %zu parameters)", rank,
                   tr_model_param_count(m));
}

static int cpu_forward_backward(tr_rank *r, const tr_batch_view *b,
                                wds__err *e) {
  return tr_model_forward_backward(&r->work, r->w, b, r->grad, r->rank, e);
}

/* A collective left because the group was aborted (by another rank, or
 * another process: the group says which and why). */
static int aborted_err(const tr_rank *r, const char *what, wds__err *e) {
  char why[192];
  tr_pg_why(r->g->pg, why, sizeof why);
  return wds__fail(e, WDS_ERR_CANCELLED, "rank %d: %s aborted (%s)",
                   r->g->first_rank + r->rank, what,
                   why[0] ? why : "another rank failed");
}

static int cpu_allreduce(tr_rank *r, wds__err *e) {
  if (tr_pg_allreduce_f32(r->g->pg, r->rank, r->grad, r->param_count + 2) !=
      WDS_OK)
    return aborted_err(r, "all-reduce", e);
  r->loss_acc += r->grad[r->param_count];
  r->count_acc += r->grad[r->param_count + 1];
  return WDS_OK;
}

static int cpu_take_loss(tr_rank *r, double *loss_sum, double *count,
                         wds__err *e) {
  (void)e;
  *loss_sum = r->loss_acc;
  *count = r->count_acc;
  r->loss_acc = r->count_acc = 0;
  return WDS_OK;
}

static int cpu_sgd_step(tr_rank *r, float lr, wds__err *e) {
  (void)e;
  tr_model_sgd(&r->m, r->param_count, r->w, r->v, r->grad, lr);
  return WDS_OK;
}

static int cpu_evaluate(tr_rank *r, const tr_batch_view *b, double *loss_sum,
                        uint64_t *correct, uint64_t *count, wds__err *e) {
  return tr_model_evaluate(&r->work, r->w, b, loss_sum, correct, count, r->rank,
                           e);
}

static int cpu_allreduce_small(tr_rank *r, double *values, int n, wds__err *e) {
  int rc = tr_pg_sum_f64(r->g->pg, r->rank, values, n, e);
  return rc == WDS_ERR_CANCELLED ? aborted_err(r, "all-reduce", e) : rc;
}

static int cpu_gather_u64(tr_rank *r, uint64_t mine, uint64_t *all,
                          wds__err *e) {
  if (tr_pg_gather_u64(r->g->pg, r->rank, mine, all) != WDS_OK)
    return aborted_err(r, "gather", e);
  return WDS_OK;
}

static int cpu_barrier(tr_rank *r) { return tr_pg_barrier(r->g->pg); }

static int cpu_get_state(tr_rank *r, float *weights, float *momentum,
                         wds__err *e) {
  (void)e;
  if (weights)
    memcpy(weights, r->w, r->param_count * sizeof(float));
  if (momentum)
    memcpy(momentum, r->v, r->param_count * sizeof(float));
  return WDS_OK;
}

static int cpu_set_state(tr_rank *r, const float *weights,
                         const float *momentum, wds__err *e) {
  (void)e;
  if (weights)
    memcpy(r->w, weights, r->param_count * sizeof(float));
  if (momentum)
    memcpy(r->v, momentum, r->param_count * sizeof(float));
  return WDS_OK;
}

static int cpu_get_grad(tr_rank *r, float *grad, wds__err *e) {
  (void)e;
  memcpy(grad, r->grad, (r->param_count + 2) * sizeof(float));
  return WDS_OK;
}

const tr_backend tr_backend_cpu = {
    .name = "cpu",
    .host_collectives = 1,
    .group_create = cpu_group_create,
    .group_abort = cpu_group_abort,
    .group_destroy = cpu_group_destroy,
    .rank_create = cpu_rank_create,
    .rank_destroy = cpu_rank_destroy,
    .forward_backward = cpu_forward_backward,
    .allreduce = cpu_allreduce,
    .take_loss = cpu_take_loss,
    .sgd_step = cpu_sgd_step,
    .evaluate = cpu_evaluate,
    .allreduce_small = cpu_allreduce_small,
    .gather_u64 = cpu_gather_u64,
    .barrier = cpu_barrier,
    .get_state = cpu_get_state,
    .set_state = cpu_set_state,
    .get_grad = cpu_get_grad,
};
