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
 * result and may be reused.
 *
 * Across processes (host_links): between the first two barriers local rank
 * 0 alone uses the data links: a process other than 0 sends its ranks'
 * inputs to process 0 and reads the result; process 0 reads every
 * process's inputs (in process order), combines them in global rank order
 * and sends the result to each. The inputs are copied into the group's
 * memory first (a rank that leaves an aborted collective may free its own
 * buffer while local rank 0 still sends), and every local rank copies the
 * result out of the group's between the second and a third barrier. Every
 * message is framed (u32 'WDSX', u32 bytes) so that a peer started with other
 * options is an error, not a hang. An abort shuts the data links down, which
 * wakes a local rank 0 blocked on one. */
#include "trainer/procgroup.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "trainer/barrier.h"
#ifdef WDS_TRAINER_MPI
#include "trainer/pg_mpi.h"
#endif
#include "trainer/rdv_net.h"
#include "trainer/rendezvous.h"

#define X_MAGIC 0x57445358u /* "WDSX" */

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
  /* host_links: the data links (process 0: one per other process; the
   * others: one to process 0), local rank 0's scratch on process 0, the
   * combined results, and the local ranks' inputs as byte pointers. */
  int host_links, coll_timeout_ms, mpi;
  int *dfds;
  int n_dfds;
  unsigned char *xbuf;
  size_t xcap;
  double xsum[TR_PG_SUM_MAX];
  uint64_t *u64_all; /* procs x local_ranks */
  const void **parts;
  /* tr_pg_allreduce_f32 across processes: each local rank's input copied
   * into memory of the group (a rank that leaves an aborted collective may
   * free its buffer while local rank 0 still sends), and the sums. */
  float **stage;
  size_t *stage_cap;
  float *xres;
  size_t xres_cap;
};

static void set_why(tr_pg *g, const char *why) {
  pthread_mutex_lock(&g->why_mu);
  if (!g->why[0])
    snprintf(g->why, sizeof g->why, "%s", why);
  pthread_mutex_unlock(&g->why_mu);
}

/* Wakes a local rank 0 blocked on a data link (the descriptors stay open
 * until tr_pg_destroy). */
static void shut_data_links(tr_pg *g) {
  for (int i = 0; g->dfds && i < g->n_dfds; i++)
    if (g->dfds[i] >= 0)
      shutdown(g->dfds[i], SHUT_RDWR);
}

/* The links' thread: another process failed or was lost. */
static void on_link_abort(void *ctx, const char *why) {
  tr_pg *g = ctx;
  set_why(g, why);
  __atomic_store_n(&g->aborted, 1, __ATOMIC_RELEASE);
  tr_barrier_abort(&g->barrier);
  shut_data_links(g);
}

static void close_list(int **fds, int *n) {
  for (int i = 0; *fds && i < *n; i++)
    if ((*fds)[i] >= 0)
      close((*fds)[i]);
  free(*fds);
  *fds = NULL;
  *n = 0;
}

static void close_fds(tr_pg *g) { close_list(&g->fds, &g->n_fds); }

void tr_pg_destroy(tr_pg *g) {
  if (!g)
    return;
#ifdef WDS_TRAINER_MPI
  if (g->mpi)
    tr_mpi_unwatch(); /* it reads g->aborted */
#endif
  tr_rdv_link_finish(g->link, !tr_pg_aborted(g));
  close_fds(g);
  close_list(&g->dfds, &g->n_dfds);
  tr_barrier_destroy(&g->barrier);
  pthread_mutex_destroy(&g->why_mu);
  free(g->bufs);
  free(g->sums);
  free(g->u64);
  free(g->u64_all);
  free(g->parts);
  for (int k = 0; g->stage && k < g->local_ranks; k++)
    free(g->stage[k]);
  free(g->stage);
  free(g->stage_cap);
  free(g->xres);
  free(g->xbuf);
  free(g);
}

/* The sockets to the other processes: process 0 serves, the others join. */
static int rendezvous(tr_pg *g, wds__err *e) {
  int rc;
  if (g->proc_rank == 0) {
    g->fds = calloc((size_t)g->procs - 1, sizeof *g->fds);
    if (!g->fds)
      return wds__fail(e, WDS_ERR_NOMEM, "rendezvous: out of memory");
    if (g->host_links &&
        !(g->dfds = calloc((size_t)g->procs - 1, sizeof *g->dfds)))
      return wds__fail(e, WDS_ERR_NOMEM, "rendezvous: out of memory");
    tr_rdv_listener l;
    rc = tr_rdv_listen(NULL, g->master_port, &l, e);
    if (rc == WDS_OK) {
      rc = tr_rdv_serve_keep(&l, NULL, 0, g->procs - 1, g->rdv_timeout_ms,
                             g->fds, e);
      if (rc == WDS_OK)
        g->n_fds = g->procs - 1;
      /* The data links: a second round on the same listener. */
      if (rc == WDS_OK && g->host_links &&
          (rc = tr_rdv_serve_keep(&l, NULL, 0, g->procs - 1, g->rdv_timeout_ms,
                                  g->dfds, e)) == WDS_OK)
        g->n_dfds = g->procs - 1;
      tr_rdv_close(&l);
    }
    if (rc != WDS_OK)
      wds__err_prefix(e, "rendezvous (serving the other processes)");
    return rc;
  }
  g->fds = malloc(sizeof *g->fds);
  if (!g->fds || (g->host_links && !(g->dfds = malloc(sizeof *g->dfds))))
    return wds__fail(e, WDS_ERR_NOMEM, "rendezvous: out of memory");
  size_t got = 0;
  rc = tr_rdv_fetch_keep(g->master_addr, g->master_port, g->proc_rank, g->procs,
                         NULL, 0, &got, g->rdv_timeout_ms, g->fds, e);
  if (rc == WDS_OK)
    g->n_fds = 1;
  if (rc == WDS_OK && g->host_links &&
      (rc = tr_rdv_fetch_keep(g->master_addr, g->master_port, g->proc_rank,
                              g->procs, NULL, 0, &got, g->rdv_timeout_ms,
                              g->dfds, e)) == WDS_OK)
    g->n_dfds = 1;
  if (rc != WDS_OK)
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
  g->host_links = c->host_links && c->procs > 1;
  g->mpi = c->mpi && c->procs > 1;
#ifndef WDS_TRAINER_MPI
  if (g->mpi) {
    free(g);
    return wds__fail(e, WDS_ERR_INVALID,
                     "process group: MPI asked for, but wds-train was built "
                     "without MPI");
  }
#endif
  g->coll_timeout_ms =
      c->collective_timeout_ms > 0 ? c->collective_timeout_ms : 600000;
  pthread_mutex_init(&g->why_mu, NULL);
  g->bufs = calloc((size_t)n, sizeof *g->bufs);
  g->sums = calloc((size_t)n, sizeof *g->sums);
  g->u64 = calloc((size_t)n, sizeof *g->u64);
  g->u64_all = calloc((size_t)n * (size_t)c->procs, sizeof *g->u64_all);
  g->parts = calloc((size_t)n, sizeof *g->parts);
  g->stage = calloc((size_t)n, sizeof *g->stage);
  g->stage_cap = calloc((size_t)n, sizeof *g->stage_cap);
  if (!g->bufs || !g->sums || !g->u64 || !g->u64_all || !g->parts ||
      !g->stage || !g->stage_cap || tr_barrier_init(&g->barrier, n) != WDS_OK) {
    free(g->bufs);
    free(g->sums);
    free(g->u64);
    free(g->u64_all);
    free(g->parts);
    free(g->stage);
    free(g->stage_cap);
    pthread_mutex_destroy(&g->why_mu);
    free(g);
    return wds__fail(e, WDS_ERR_NOMEM,
                     "out of memory (process group of %d ranks)", n);
  }
  if (g->procs > 1 && !g->mpi) {
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
#ifdef WDS_TRAINER_MPI
  if (g->mpi)
    return tr_mpi_bcast(blob, size, e);
#endif
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
#ifdef WDS_TRAINER_MPI
  if (g->mpi)
    return tr_mpi_watch(g->proc_rank, g->coll_timeout_ms, &g->aborted, e);
#endif
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
  shut_data_links(g);         /* after the link's word: it says why */
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

/* ---- across processes (host_links; local rank 0 only) -------------------- */

/* A data link to process `peer` failed (r: a TR_RDV_IO_* result): unless
 * the group is aborted already, or the links' thread says why within a
 * second (a peer's failure or loss arrives on both), the group is aborted
 * naming the peer. WDS_ERR_CANCELLED. */
static int x_fail(tr_pg *g, int peer, int r) {
  char why[160];
  if (r == TR_RDV_IO_TIMEOUT)
    snprintf(why, sizeof why,
             "process %d: no data for %d s (--collective-timeout): it hangs "
             "or the network is down",
             peer, g->coll_timeout_ms / 1000);
  else
    snprintf(why, sizeof why,
             "process %d exited or lost its connection (data link: %s)", peer,
             r == TR_RDV_IO_EOF ? "closed" : strerror(errno));
  for (int i = 0; r != TR_RDV_IO_TIMEOUT && i < 100 && !tr_pg_aborted(g); i++)
    tr_rdv_sleep_ms(10);
  if (!tr_pg_aborted(g))
    tr_pg_abort(g, why);
  return WDS_ERR_CANCELLED;
}

/* A framed message of `bytes` to / from data link i (process peer). */
static int x_send(tr_pg *g, int i, int peer, const void *const *parts,
                  int count, size_t part_bytes, int64_t deadline) {
  unsigned char head[8];
  tr_rdv_put_u32(head, X_MAGIC);
  tr_rdv_put_u32(head + 4, (uint32_t)(part_bytes * (size_t)count));
  int r = tr_rdv_write_full(g->dfds[i], head, sizeof head, deadline);
  for (int k = 0; r == TR_RDV_IO_OK && k < count; k++)
    r = tr_rdv_write_full(g->dfds[i], parts[k], part_bytes, deadline);
  return r == TR_RDV_IO_OK ? WDS_OK : x_fail(g, peer, r);
}

static int x_recv(tr_pg *g, int i, int peer, void *dst, size_t bytes,
                  int64_t deadline) {
  unsigned char head[8];
  size_t got;
  int r = tr_rdv_read_full(g->dfds[i], head, sizeof head, &got, deadline);
  if (r == TR_RDV_IO_OK &&
      (tr_rdv_get_u32(head) != X_MAGIC || tr_rdv_get_u32(head + 4) != bytes)) {
    char why[160];
    snprintf(why, sizeof why,
             "process %d sent %u bytes for a collective of %zu: started with "
             "other options (--ranks?) or another wds version",
             peer, (unsigned)tr_rdv_get_u32(head + 4), bytes);
    tr_pg_abort(g, why);
    return WDS_ERR_CANCELLED;
  }
  if (r == TR_RDV_IO_OK)
    r = tr_rdv_read_full(g->dfds[i], dst, bytes, &got, deadline);
  return r == TR_RDV_IO_OK ? WDS_OK : x_fail(g, peer, r);
}

/* Local rank 0: the local ranks' parts (g->parts, part_bytes each) reach
 * process 0, which finds every other process's in g->xbuf (process p's
 * local rank k at ((p - 1) * local_ranks + k) * part_bytes); then combine
 * (process 0 only) writes the result, and it is sent to every process,
 * arriving in res[0..res_bytes). */
static int x_exchange(tr_pg *g, size_t part_bytes, void *res, size_t res_bytes,
                      void (*combine)(tr_pg *g, void *ctx), void *ctx,
                      int (*over_mpi)(tr_pg *g, void *ctx, wds__err *e)) {
  if (g->mpi) {
    wds__err e;
    if (over_mpi(g, ctx, &e) != WDS_OK) {
      tr_pg_abort(g, e.msg);
      return WDS_ERR_CANCELLED;
    }
    return WDS_OK;
  }
  int64_t deadline = tr_rdv_now_ms() + g->coll_timeout_ms;
  size_t proc_bytes = part_bytes * (size_t)g->local_ranks;
  int rc;
  if (g->proc_rank != 0) {
    if ((rc = x_send(g, 0, 0, g->parts, g->local_ranks, part_bytes,
                     deadline)) != WDS_OK)
      return rc;
    return x_recv(g, 0, 0, res, res_bytes, deadline);
  }
  size_t need = proc_bytes * (size_t)(g->procs - 1);
  if (need > g->xcap) {
    unsigned char *p = realloc(g->xbuf, need);
    if (!p) {
      tr_pg_abort(g, "out of memory (the collective's buffer)");
      return WDS_ERR_CANCELLED;
    }
    g->xbuf = p;
    g->xcap = need;
  }
  for (int p = 1; p < g->procs; p++)
    if ((rc = x_recv(g, p - 1, p, g->xbuf + proc_bytes * (size_t)(p - 1),
                     proc_bytes, deadline)) != WDS_OK)
      return rc;
  combine(g, ctx);
  const void *out[1] = {res};
  for (int p = 1; p < g->procs; p++)
    if ((rc = x_send(g, p - 1, p, out, 1, res_bytes, deadline)) != WDS_OK)
      return rc;
  return WDS_OK;
}

/* Runs x_exchange on local rank 0 between two barriers, then a third one
 * after the other local ranks have copied the result (copy). */
static int x_collective(tr_pg *g, int local, size_t part_bytes, void *res,
                        size_t res_bytes, void (*combine)(tr_pg *g, void *ctx),
                        void *ctx,
                        int (*over_mpi)(tr_pg *g, void *ctx, wds__err *e)) {
  if (tr_pg_barrier(g) != WDS_OK)
    return WDS_ERR_CANCELLED;
  if (local == 0 && x_exchange(g, part_bytes, res, res_bytes, combine, ctx,
                               over_mpi) != WDS_OK)
    return WDS_ERR_CANCELLED; /* aborted: the others leave the barrier */
  return tr_pg_barrier(g);
}

typedef struct {
  size_t n;
} f32_ctx;

/* Element i: local ranks' then each other process's, in global rank order. */
static void combine_f32(tr_pg *g, void *ctx) {
  size_t n = ((f32_ctx *)ctx)->n;
  int L = g->local_ranks, others = (g->procs - 1) * L;
  const float *x = (const float *)g->xbuf;
  for (size_t i = 0; i < n; i++) {
    float s = g->stage[0][i];
    for (int k = 1; k < L; k++)
      s += g->stage[k][i];
    for (int k = 0; k < others; k++)
      s += x[(size_t)k * n + i];
    g->xres[i] = s;
  }
}

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

static void combine_f64(tr_pg *g, void *ctx) {
  int n = *(int *)ctx, L = g->local_ranks, others = (g->procs - 1) * L;
  const double *x = (const double *)g->xbuf;
  for (int i = 0; i < n; i++) {
    double s = g->sums[0][i];
    for (int k = 1; k < L; k++)
      s += g->sums[k][i];
    for (int k = 0; k < others; k++)
      s += x[(size_t)k * (size_t)n + (size_t)i];
    g->xsum[i] = s;
  }
}

static void combine_u64(tr_pg *g, void *ctx) {
  (void)ctx;
  size_t L = (size_t)g->local_ranks;
  memcpy(g->u64_all, g->u64, L * sizeof *g->u64_all);
  memcpy(g->u64_all + L, g->xbuf,
         L * (size_t)(g->procs - 1) * sizeof *g->u64_all);
}

/* The same three over MPI (pg_mpi.h; local rank 0, between the barriers). */
#ifdef WDS_TRAINER_MPI
static int mpi_f32(tr_pg *g, void *ctx, wds__err *e) {
  return tr_mpi_allreduce_f32((const float *const *)g->stage, g->local_ranks,
                              g->xres, ((f32_ctx *)ctx)->n, e);
}

/* Every rank's n values (process by process, local rank by local rank),
 * then summed in global rank order as combine_f64 sums them. */
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
#define mpi_f32 NULL
#define mpi_f64 NULL
#define mpi_u64 NULL
#endif

int tr_pg_allreduce_f32(tr_pg *g, int local, float *buf, size_t n) {
  int ranks = g->local_ranks;
  /* Nothing to sum: every rank of the job calls with the same n, so all
   * skip the collective alike. */
  if (n == 0)
    return tr_pg_aborted(g) ? WDS_ERR_CANCELLED : WDS_OK;
  if (g->host_links) {
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
    g->parts[local] = g->stage[local];
    f32_ctx c = {n};
    if (x_collective(g, local, n * sizeof(float), local == 0 ? g->xres : NULL,
                     n * sizeof(float), combine_f32, &c, mpi_f32) != WDS_OK)
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
  if (g->host_links) {
    g->parts[local] = g->sums[local];
    if (x_collective(g, local, (size_t)n * sizeof(double), g->xsum,
                     (size_t)n * sizeof(double), combine_f64, &n,
                     mpi_f64) != WDS_OK)
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
  if (g->host_links) {
    size_t world = (size_t)g->local_ranks * (size_t)g->procs;
    g->parts[local] = &g->u64[local];
    if (x_collective(g, local, sizeof(uint64_t), g->u64_all,
                     world * sizeof(uint64_t), combine_u64, NULL,
                     mpi_u64) != WDS_OK)
      return WDS_ERR_CANCELLED;
    memcpy(all, g->u64_all, world * sizeof *all);
    return tr_pg_barrier(g); /* before u64_all is reused */
  }
  if (tr_pg_barrier(g) != WDS_OK)
    return WDS_ERR_CANCELLED;
  memcpy(all, g->u64, (size_t)g->local_ranks * sizeof *all);
  return tr_pg_barrier(g); /* before u64[] is reused */
}
