/* procgroup.c — the job's process group (procgroup.h).
 *
 * State: the abort flag is atomic (rank threads poll it in their waits);
 * the reason is under why_mu; the barrier has its own lock. The links'
 * thread (rdv_link.c) reports a failed or lost process through on_link_abort,
 * which aborts the group like a local failure, without telling the others
 * again (node 0 relays it itself).
 *
 * Host collectives: every local rank registers its buffer in a per-rank
 * slot, then two barriers. After the first, every rank's input is complete;
 * each rank then sums its own slice of the elements over the ranks in rank
 * order and writes the sums into every rank's buffer (slices are disjoint,
 * so no element has two writers); after the second, every buffer holds the
 * result and may be reused. */
#include "trainer/procgroup.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer/barrier.h"
#include "trainer/rendezvous.h"

struct tr_pg {
  int local_ranks, procs, proc_rank;
  char master_addr[256];
  int master_port, rdv_timeout_ms;
  tr_barrier barrier;
  int aborted; /* __atomic */
  pthread_mutex_t why_mu;
  char why[192];
  int *fds; /* the rendezvous sockets until tr_pg_start (n_fds) */
  int n_fds;
  tr_rdv_link *link;
  float **bufs;                  /* per local rank: tr_pg_allreduce_f32 */
  double (*sums)[TR_PG_SUM_MAX]; /* per local rank: tr_pg_sum_f64 */
  uint64_t *u64;                 /* per local rank: tr_pg_gather_u64 */
};

static void set_why(tr_pg *g, const char *why) {
  pthread_mutex_lock(&g->why_mu);
  if (!g->why[0])
    snprintf(g->why, sizeof g->why, "%s", why);
  pthread_mutex_unlock(&g->why_mu);
}

/* The links' thread: another process failed or was lost. */
static void on_link_abort(void *ctx, const char *why) {
  tr_pg *g = ctx;
  set_why(g, why);
  __atomic_store_n(&g->aborted, 1, __ATOMIC_RELEASE);
  tr_barrier_abort(&g->barrier);
}

static void close_fds(tr_pg *g) {
  for (int i = 0; g->fds && i < g->n_fds; i++)
    if (g->fds[i] >= 0)
      close(g->fds[i]);
  free(g->fds);
  g->fds = NULL;
  g->n_fds = 0;
}

void tr_pg_destroy(tr_pg *g) {
  if (!g)
    return;
  tr_rdv_link_finish(g->link, !tr_pg_aborted(g));
  close_fds(g);
  tr_barrier_destroy(&g->barrier);
  pthread_mutex_destroy(&g->why_mu);
  free(g->bufs);
  free(g->sums);
  free(g->u64);
  free(g);
}

/* The sockets to the other processes: process 0 serves, the others join. */
static int rendezvous(tr_pg *g, wds__err *e) {
  int rc;
  if (g->proc_rank == 0) {
    g->fds = calloc((size_t)g->procs - 1, sizeof *g->fds);
    if (!g->fds)
      return wds__fail(e, WDS_ERR_NOMEM, "rendezvous: out of memory");
    tr_rdv_listener l;
    rc = tr_rdv_listen(NULL, g->master_port, &l, e);
    if (rc == WDS_OK) {
      rc = tr_rdv_serve_keep(&l, NULL, 0, g->procs - 1, g->rdv_timeout_ms,
                             g->fds, e);
      tr_rdv_close(&l);
    }
    if (rc == WDS_OK)
      g->n_fds = g->procs - 1;
    else
      wds__err_prefix(e, "rendezvous (serving the other processes)");
    return rc;
  }
  g->fds = malloc(sizeof *g->fds);
  if (!g->fds)
    return wds__fail(e, WDS_ERR_NOMEM, "rendezvous: out of memory");
  size_t got = 0;
  rc = tr_rdv_fetch_keep(g->master_addr, g->master_port, g->proc_rank, g->procs,
                         NULL, 0, &got, g->rdv_timeout_ms, g->fds, e);
  if (rc == WDS_OK)
    g->n_fds = 1;
  else
    wds__err_prefix(e, "rendezvous (joining process 0)");
  return rc;
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
  snprintf(g->master_addr, sizeof g->master_addr, "%s",
           c->master_addr ? c->master_addr : "");
  g->master_port = c->master_port;
  g->rdv_timeout_ms = c->rdv_timeout_ms;
  pthread_mutex_init(&g->why_mu, NULL);
  g->bufs = calloc((size_t)n, sizeof *g->bufs);
  g->sums = calloc((size_t)n, sizeof *g->sums);
  g->u64 = calloc((size_t)n, sizeof *g->u64);
  if (!g->bufs || !g->sums || !g->u64 ||
      tr_barrier_init(&g->barrier, n) != WDS_OK) {
    free(g->bufs);
    free(g->sums);
    free(g->u64);
    pthread_mutex_destroy(&g->why_mu);
    free(g);
    return wds__fail(e, WDS_ERR_NOMEM,
                     "out of memory (process group of %d ranks)", n);
  }
  if (g->procs > 1) {
    int rc = rendezvous(g, e);
    if (rc != WDS_OK) {
      tr_pg_destroy(g);
      return rc;
    }
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
  if (g->link || !g->fds)
    return wds__fail(e, WDS_ERR_INVALID,
                     "process group: a broadcast after the links started");
  if (g->proc_rank == 0)
    return tr_rdv_blob_send(g->fds, g->n_fds, 1, blob, size, g->rdv_timeout_ms,
                            e);
  size_t got = 0;
  int rc = tr_rdv_blob_recv(g->fds[0], blob, size, &got, g->rdv_timeout_ms, e);
  if (rc == WDS_OK && got != size)
    rc = wds__fail(e, WDS_ERR_IO,
                   "rendezvous: %s:%d sent %zu bytes, %zu expected: another "
                   "program on that port, or another wds version?",
                   g->master_addr, g->master_port, got, size);
  return rc;
}

int tr_pg_start(tr_pg *g, wds__err *e) {
  if (g->procs == 1 || g->link)
    return WDS_OK;
  /* The links own the sockets from here, closed on failure too. */
  int rc = tr_rdv_link_start(g->fds, g->n_fds, g->proc_rank == 0,
                             g->proc_rank == 0 ? 1 : 0, on_link_abort, g,
                             &g->link, e);
  free(g->fds);
  g->fds = NULL;
  g->n_fds = 0;
  if (rc != WDS_OK)
    wds__err_prefix(e, "rendezvous");
  return rc;
}

void tr_pg_abort(tr_pg *g, const char *why) {
  if (why)
    set_why(g, why);
  __atomic_store_n(&g->aborted, 1, __ATOMIC_RELEASE);
  tr_barrier_abort(&g->barrier);
  tr_rdv_link_abort(g->link); /* tell the other processes */
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

int tr_pg_barrier(tr_pg *g) { return tr_barrier_wait(&g->barrier); }

int tr_pg_allreduce_f32(tr_pg *g, int local, float *buf, size_t n) {
  int ranks = g->local_ranks;
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
  if (tr_pg_barrier(g) != WDS_OK)
    return WDS_ERR_CANCELLED;
  memcpy(all, g->u64, (size_t)g->local_ranks * sizeof *all);
  return tr_pg_barrier(g); /* before u64[] is reused */
}
