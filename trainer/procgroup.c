/* procgroup.c — the job's process group (procgroup.h).
 *
 * State: the abort flag is atomic (rank threads poll it in their waits);
 * the reason is under why_mu; the barrier has its own lock.
 *
 * Host collectives: every local rank registers its buffer in a per-rank
 * slot, then two barriers. After the first, every rank's input is complete;
 * each rank then sums its own slice of the elements over the ranks in rank
 * order and writes the sums into every rank's buffer (slices are disjoint,
 * so no element has two writers); after the second, every buffer holds the
 * result and may be reused.
 *
 * Across processes (MPI): between the first two barriers local rank 0
 * alone calls MPI (pg_mpi.h) with the local ranks' inputs, copied into the
 * group's memory first (a rank that leaves an aborted collective may free
 * its own buffer while local rank 0 still waits), and every local rank
 * copies the result out of the group's between the second and a third
 * barrier. A failed MPI call aborts the group with MPI's message. */
#include "trainer/procgroup.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/barrier.h"
#ifdef WDS_TRAINER_MPI
#include "trainer/pg_mpi.h"
#endif

struct tr_pg {
  int local_ranks, procs, proc_rank;
  tr_barrier barrier;
  int aborted; /* __atomic */
  pthread_mutex_t why_mu;
  char why[192];
  float **bufs;                  /* per local rank: tr_pg_allreduce_f32 */
  double (*sums)[TR_PG_SUM_MAX]; /* per local rank: tr_pg_sum_f64 */
  uint64_t *u64;                 /* per local rank: tr_pg_gather_u64 */
  /* mpi: the host collectives span the processes; local rank 0's results
   * (sums, gathered values) for the others to copy out. */
  int coll_timeout_ms, mpi;
  double xsum[TR_PG_SUM_MAX];
  uint64_t *u64_all; /* procs x local_ranks */
  /* tr_pg_allreduce_f32 across processes: each local rank's input copied
   * into memory of the group (a rank that leaves an aborted collective may
   * free its buffer while local rank 0 still waits), and the sums. */
  float **stage;
  size_t *stage_cap;
  float *xres;
  size_t xres_cap;
};

static void set_why(tr_pg *g, const char *why) {
  pthread_mutex_lock(&g->why_mu);
  if (!g->why[0])
    snprintf(g->why, sizeof g->why, "%.*s", (int)sizeof g->why - 1,
             why); /* the first reason, cut to the field */
  pthread_mutex_unlock(&g->why_mu);
}

void tr_pg_destroy(tr_pg *g) {
  if (!g)
    return;
#ifdef WDS_TRAINER_MPI
  if (g->mpi)
    tr_mpi_unwatch(); /* it reads g->aborted */
#endif
  tr_barrier_destroy(&g->barrier);
  pthread_mutex_destroy(&g->why_mu);
  free(g->bufs);
  free(g->sums);
  free(g->u64);
  free(g->u64_all);
  for (int k = 0; g->stage && k < g->local_ranks; k++)
    free(g->stage[k]);
  free(g->stage);
  free(g->stage_cap);
  free(g->xres);
  free(g);
}

int tr_pg_create(const tr_pg_config *c, tr_pg **out, wds__err *e) {
  *out = NULL;
  int n = c->local_ranks;
  if (n < 1 || c->procs < 1 || c->proc_rank < 0 || c->proc_rank >= c->procs)
    return wds__fail(e, WDS_ERR_INVALID,
                     "process group: %d local ranks, process %d of %d", n,
                     c->proc_rank, c->procs);
  tr_pg *g = calloc(1, sizeof *g);
  if (!g)
    return wds__fail(e, WDS_ERR_NOMEM, "out of memory (process group)");
  g->local_ranks = n;
  g->procs = c->procs;
  g->proc_rank = c->proc_rank;
  g->mpi = c->mpi && c->procs > 1;
#ifndef WDS_TRAINER_MPI
  if (g->mpi) {
    free(g);
    return wds__fail(e, WDS_ERR_INVALID,
                     "process group: MPI asked for, but wds-train was built "
                     "without MPI");
  }
#endif
  if (c->procs > 1 && c->host_collectives && !g->mpi) {
    free(g);
    return wds__fail(e, WDS_ERR_INVALID,
                     "CPU ranks across processes (process %d of %d) need an "
                     "MPI launch: build with WDS_WITH_MPI and run mpirun -np "
                     "N wds-train ...",
                     c->proc_rank, c->procs);
  }
  g->coll_timeout_ms =
      c->collective_timeout_ms > 0 ? c->collective_timeout_ms : 600000;
  pthread_mutex_init(&g->why_mu, NULL);
  g->bufs = calloc((size_t)n, sizeof *g->bufs);
  g->sums = calloc((size_t)n, sizeof *g->sums);
  g->u64 = calloc((size_t)n, sizeof *g->u64);
  g->u64_all = calloc((size_t)n * (size_t)c->procs, sizeof *g->u64_all);
  g->stage = calloc((size_t)n, sizeof *g->stage);
  g->stage_cap = calloc((size_t)n, sizeof *g->stage_cap);
  if (!g->bufs || !g->sums || !g->u64 || !g->u64_all || !g->stage ||
      !g->stage_cap || tr_barrier_init(&g->barrier, n) != WDS_OK) {
    free(g->bufs);
    free(g->sums);
    free(g->u64);
    free(g->u64_all);
    free(g->stage);
    free(g->stage_cap);
    pthread_mutex_destroy(&g->why_mu);
    free(g);
    return wds__fail(e, WDS_ERR_NOMEM,
                     "out of memory (process group of %d ranks)", n);
  }
  *out = g;
  return WDS_OK;
}

int tr_pg_create_local(int local_ranks, tr_pg **out, wds__err *e) {
  tr_pg_config c;
  memset(&c, 0, sizeof c);
  c.local_ranks = local_ranks;
  c.procs = 1;
  return tr_pg_create(&c, out, e);
}

int tr_pg_bcast(tr_pg *g, void *blob, size_t size, wds__err *e) {
  if (g->procs == 1)
    return WDS_OK;
#ifdef WDS_TRAINER_MPI
  if (g->mpi)
    return tr_mpi_bcast(blob, size, e);
#endif
  (void)blob;
  (void)size;
  return wds__fail(e, WDS_ERR_INVALID,
                   "process group: %d processes without MPI share nothing "
                   "but the backend's collectives (no broadcast)",
                   g->procs);
}

int tr_pg_start(tr_pg *g, wds__err *e) {
#ifdef WDS_TRAINER_MPI
  if (g->mpi)
    return tr_mpi_watch(g->proc_rank, g->coll_timeout_ms, &g->aborted, e);
#endif
  (void)g;
  (void)e;
  return WDS_OK;
}

void tr_pg_abort(tr_pg *g, const char *why) {
  if (why)
    set_why(g, why);
  __atomic_store_n(&g->aborted, 1, __ATOMIC_RELEASE);
  tr_barrier_abort(&g->barrier);
}

int tr_pg_aborted(const tr_pg *g) {
  return __atomic_load_n(&g->aborted, __ATOMIC_ACQUIRE);
}

void tr_pg_why(tr_pg *g, char *dst, size_t cap) {
  pthread_mutex_lock(&g->why_mu);
  snprintf(dst, cap, "%s", g->why);
  pthread_mutex_unlock(&g->why_mu);
}

int tr_pg_procs(const tr_pg *g) { return g->procs; }
int tr_pg_proc_rank(const tr_pg *g) { return g->proc_rank; }
int tr_pg_local_ranks(const tr_pg *g) { return g->local_ranks; }
int tr_pg_mpi(const tr_pg *g) { return g->mpi; }

int tr_pg_barrier(tr_pg *g) { return tr_barrier_wait(&g->barrier); }

/* ---- across processes (MPI; local rank 0 only) ------------------------- */

/* Runs over_mpi on local rank 0 between two barriers (a failure aborts the
 * group with MPI's message); the caller copies the result out before a
 * third. */
static int x_collective(tr_pg *g, int local,
                        int (*over_mpi)(tr_pg *g, void *ctx, wds__err *e),
                        void *ctx) {
  if (tr_pg_barrier(g) != WDS_OK)
    return WDS_ERR_CANCELLED;
  if (local == 0) {
    wds__err e;
    if (over_mpi(g, ctx, &e) != WDS_OK) {
      tr_pg_abort(g, e.msg);
      return WDS_ERR_CANCELLED; /* aborted: the others leave the barrier */
    }
  }
  return tr_pg_barrier(g);
}

typedef struct {
  size_t n;
} f32_ctx;

/* *p holds at least n floats (*cap of them); 0, or -1 out of memory. */
static int fit_f32(float **p, size_t *cap, size_t n) {
  if (n <= *cap)
    return 0;
  float *q = realloc(*p, n * sizeof *q);
  if (!q)
    return -1;
  *p = q;
  *cap = n;
  return 0;
}

/* The three collectives over MPI (pg_mpi.h; local rank 0, between the
 * barriers). */
#ifdef WDS_TRAINER_MPI
static int mpi_f32(tr_pg *g, void *ctx, wds__err *e) {
  return tr_mpi_allreduce_f32((const float *const *)g->stage, g->local_ranks,
                              g->xres, ((f32_ctx *)ctx)->n, e);
}

/* Every rank's n values (process by process, local rank by local rank),
 * then summed in global rank order. */
static int mpi_f64(tr_pg *g, void *ctx, wds__err *e) {
  int n = *(int *)ctx, L = g->local_ranks;
  size_t mine = (size_t)L * (size_t)n * sizeof(double);
  double *all = malloc(mine * (size_t)g->procs), *local = malloc(mine);
  int rc = WDS_ERR_NOMEM;
  if (!all || !local) {
    wds__fail(e, rc, "out of memory (a collective's buffer)");
    goto out;
  }
  for (int k = 0; k < L; k++)
    memcpy(local + (size_t)k * (size_t)n, g->sums[k],
           (size_t)n * sizeof(double));
  if ((rc = tr_mpi_allgather(local, mine, all, e)) != WDS_OK)
    goto out;
  for (int i = 0; i < n; i++) {
    double s = all[i];
    for (int r = 1; r < L * g->procs; r++)
      s += all[(size_t)r * (size_t)n + (size_t)i];
    g->xsum[i] = s;
  }
out:
  free(all);
  free(local);
  return rc;
}

static int mpi_u64(tr_pg *g, void *ctx, wds__err *e) {
  (void)ctx;
  return tr_mpi_allgather(g->u64, (size_t)g->local_ranks * sizeof *g->u64,
                          g->u64_all, e);
}
#else
/* Never called: without MPI a group spans one process. */
static int no_mpi(tr_pg *g, void *ctx, wds__err *e) {
  (void)g;
  (void)ctx;
  return wds__fail(e, WDS_ERR_INVALID, "built without MPI");
}
#define mpi_f32 no_mpi
#define mpi_f64 no_mpi
#define mpi_u64 no_mpi
#endif

int tr_pg_allreduce_f32(tr_pg *g, int local, float *buf, size_t n) {
  int ranks = g->local_ranks;
  /* Nothing to sum: every rank of the job calls with the same n, so all
   * skip the collective alike. */
  if (n == 0)
    return tr_pg_aborted(g) ? WDS_ERR_CANCELLED : WDS_OK;
  if (g->mpi) {
    /* Inputs and result in the group's memory (stage, xres): local rank 0
     * reads no rank's buffer, which its rank may free once aborted. xres
     * is (re)sized by local rank 0 alone, whose pointer the others read
     * after the second barrier only. */
    if (tr_pg_aborted(g))
      return WDS_ERR_CANCELLED;
    if (fit_f32(&g->stage[local], &g->stage_cap[local], n) != 0 ||
        (local == 0 && fit_f32(&g->xres, &g->xres_cap, n) != 0)) {
      tr_pg_abort(g, "out of memory (the all-reduce's buffers)");
      return WDS_ERR_CANCELLED;
    }
    memcpy(g->stage[local], buf, n * sizeof(float));
    f32_ctx c = {n};
    if (x_collective(g, local, mpi_f32, &c) != WDS_OK)
      return WDS_ERR_CANCELLED;
    memcpy(buf, g->xres, n * sizeof(float));
    return tr_pg_barrier(g); /* before xres and stage are reused */
  }
  g->bufs[local] = buf;
  if (tr_pg_barrier(g) != WDS_OK)
    return WDS_ERR_CANCELLED;
  size_t lo = n * (size_t)local / (size_t)ranks;
  size_t hi = n * (size_t)(local + 1) / (size_t)ranks;
  for (size_t i = lo; i < hi; i++) {
    float s = g->bufs[0][i];
    for (int k = 1; k < ranks; k++)
      s += g->bufs[k][i];
    for (int k = 0; k < ranks; k++)
      g->bufs[k][i] = s;
  }
  return tr_pg_barrier(g);
}

int tr_pg_sum_f64(tr_pg *g, int local, double *values, int n, wds__err *e) {
  if (n < 0 || n > TR_PG_SUM_MAX)
    return wds__fail(e, WDS_ERR_LIMIT,
                     "allreduce_small: %d values (at most %d)", n,
                     TR_PG_SUM_MAX);
  memcpy(g->sums[local], values, (size_t)n * sizeof(double));
  if (g->mpi) {
    if (x_collective(g, local, mpi_f64, &n) != WDS_OK)
      return WDS_ERR_CANCELLED;
    memcpy(values, g->xsum, (size_t)n * sizeof(double));
    return tr_pg_barrier(g); /* before xsum is reused */
  }
  if (tr_pg_barrier(g) != WDS_OK)
    return WDS_ERR_CANCELLED;
  for (int i = 0; i < n; i++) {
    double s = g->sums[0][i];
    for (int k = 1; k < g->local_ranks; k++)
      s += g->sums[k][i];
    values[i] = s;
  }
  return tr_pg_barrier(g); /* before sums[] is reused */
}

int tr_pg_gather_u64(tr_pg *g, int local, uint64_t mine, uint64_t *all) {
  g->u64[local] = mine;
  if (g->mpi) {
    size_t world = (size_t)g->local_ranks * (size_t)g->procs;
    if (x_collective(g, local, mpi_u64, NULL) != WDS_OK)
      return WDS_ERR_CANCELLED;
    memcpy(all, g->u64_all, world * sizeof *all);
    return tr_pg_barrier(g); /* before u64_all is reused */
  }
  if (tr_pg_barrier(g) != WDS_OK)
    return WDS_ERR_CANCELLED;
  memcpy(all, g->u64, (size_t)g->local_ranks * sizeof *all);
  return tr_pg_barrier(g); /* before u64[] is reused */
}
