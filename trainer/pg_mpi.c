/* pg_mpi.c — see pg_mpi.h.
 *
 * State: MPI's own, the topology, the scratch of the all-reduce (used by
 * local rank 0's thread alone), and the watchdog's: the time the current
 * collective began (0: none), atomic, written by the collective's caller
 * and read by the watchdog thread every 100 ms. */
#include "trainer/pg_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int active;
static int world_rank, world_size;
static float *xsend, *xrecv;
static size_t xsend_cap, xrecv_cap;
static int *counts; /* 4 x world_size: send, send displs, recv, recv displs */
static int star;    /* WDS_TRAIN_MPI_SUM=star: the reference sum */

static int64_t coll_since_ms; /* __atomic; 0: no collective waits */
static int watch_started, watch_stop, watch_rank, watch_timeout_ms;
static const int *watch_aborted;
static pthread_t watch_thread;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tr_mpi_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                     "PMI_RANK", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && v[0])
      return 1;
  }
  return 0;
}

/* An MPI error code as text. */
static int mpi_fail(wds__err *e, int code, const char *what) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
    snprintf(s, sizeof s, "error %d", code);
  return wds__fail(e, WDS_ERR_IO, "MPI: %s: %.*s", what, len, s);
}

int tr_mpi_init(tr_mpi_topology *t, wds__err *e) {
  int provided = 0, rc;
  memset(t, 0, sizeof *t);
  const char *sum = getenv("WDS_TRAIN_MPI_SUM");
  if (sum && sum[0] && strcmp(sum, "star") != 0 && strcmp(sum, "slices") != 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "WDS_TRAIN_MPI_SUM='%.40s': slices (the default) or star",
                     sum);
  star = sum && strcmp(sum, "star") == 0;
  if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided)) !=
      MPI_SUCCESS)
    return wds__fail(e, WDS_ERR_IO, "MPI_Init_thread failed (error %d)", rc);
  active = 1;
  /* Errors come back as codes (with a message) instead of ending the
   * process without one. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  /* MPI_THREAD_MULTIPLE is asked for because the watchdog thread may call
   * MPI_Abort while the main thread waits in a collective, which MPI
   * defines only at that level. A library that gives MPI_THREAD_SERIALIZED
   * still runs (every other call comes from one thread at a time); the
   * watchdog's abort then relies on the implementation (Open MPI's and
   * MPICH's MPI_Abort work from any thread; docs/wds-train.md says so).
   * Less than that is refused. */
  if (provided < MPI_THREAD_SERIALIZED)
    return wds__fail(e, WDS_ERR_INVALID,
                     "MPI: the library gives thread level %d; wds-train "
                     "needs MPI_THREAD_SERIALIZED or better (one rank "
                     "thread calls MPI, not the main one)",
                     provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &t->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t->size);
  world_rank = t->rank;
  world_size = t->size;
  MPI_Comm local, leaders;
  if ((rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t->rank,
                                MPI_INFO_NULL, &local)) != MPI_SUCCESS)
    return mpi_fail(e, rc, "MPI_Comm_split_type");
  MPI_Comm_rank(local, &t->local_rank);
  MPI_Comm_size(local, &t->local_size);
  /* Nodes: numbered by their local rank 0s, in world rank order. */
  if ((rc = MPI_Comm_split(MPI_COMM_WORLD, t->local_rank == 0 ? 0 : 1, t->rank,
                           &leaders)) != MPI_SUCCESS) {
    MPI_Comm_free(&local);
    return mpi_fail(e, rc, "MPI_Comm_split");
  }
  if (t->local_rank == 0) {
    MPI_Comm_rank(leaders, &t->node);
    MPI_Comm_size(leaders, &t->nodes);
  }
  int nn[2] = {t->node, t->nodes};
  rc = MPI_Bcast(nn, 2, MPI_INT, 0, local);
  t->node = nn[0];
  t->nodes = nn[1];
  MPI_Comm_free(&leaders);
  MPI_Comm_free(&local);
  if (rc != MPI_SUCCESS)
    return mpi_fail(e, rc, "MPI_Bcast");
  return WDS_OK;
}

int tr_mpi_active(void) { return active; }

void tr_mpi_unwatch(void) {
  if (watch_started) {
    __atomic_store_n(&watch_stop, 1, __ATOMIC_RELEASE);
    pthread_join(watch_thread, NULL);
    watch_started = 0;
    watch_aborted = NULL;
  }
}

void tr_mpi_finalize(void) {
  if (!active)
    return;
  tr_mpi_unwatch();
  MPI_Finalize();
  active = 0;
  free(xsend);
  free(xrecv);
  free(counts);
  xsend = xrecv = NULL;
  counts = NULL;
  xsend_cap = xrecv_cap = 0;
}

void tr_mpi_abort(int code) {
  fflush(stdout);
  fflush(stderr);
  /* The launcher forwards output asynchronously (MPICH's Hydra lost the
   * message of a process that aborted at once, about one run in two): a
   * moment for the last lines to leave before the job is torn down. */
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  MPI_Abort(MPI_COMM_WORLD, code);
}

static void *watch_main(void *arg) {
  (void)arg;
  int64_t aborted_since = 0;
  while (!__atomic_load_n(&watch_stop, __ATOMIC_ACQUIRE)) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int64_t now = now_ms(),
            since = __atomic_load_n(&coll_since_ms, __ATOMIC_ACQUIRE);
    if (since && now - since > watch_timeout_ms) {
      fprintf(stderr,
              "wds-train: process %d of %d: a collective waited %d s "
              "(--collective-timeout): another process hangs (stopped or "
              "deadlocked) or the network is down; ending the job "
              "(MPI_Abort)\n",
              watch_rank, world_size, watch_timeout_ms / 1000);
      tr_mpi_abort(1);
    }
    /* The group was aborted (this process failed): it ends by itself,
     * telling the job, unless a collective it waits in never returns. */
    if (watch_aborted && __atomic_load_n(watch_aborted, __ATOMIC_ACQUIRE)) {
      if (!aborted_since)
        aborted_since = now;
      else if (now - aborted_since > 10000) {
        fprintf(stderr,
                "wds-train: process %d of %d failed; ending the job "
                "(MPI_Abort)\n",
                watch_rank, world_size);
        tr_mpi_abort(1);
      }
    }
  }
  return NULL;
}

int tr_mpi_watch(int proc_rank, int timeout_ms, const int *aborted,
                 wds__err *e) {
  if (watch_started)
    return WDS_OK;
  watch_rank = proc_rank;
  watch_timeout_ms = timeout_ms;
  watch_aborted = aborted;
  watch_stop = 0;
  if (pthread_create(&watch_thread, NULL, watch_main, NULL) != 0)
    return wds__fail(e, WDS_ERR_NOMEM,
                     "MPI: cannot start the collective watchdog thread");
  watch_started = 1;
  return WDS_OK;
}

static void coll_begin(void) {
  __atomic_store_n(&coll_since_ms, now_ms(), __ATOMIC_RELEASE);
}
static void coll_end(void) {
  __atomic_store_n(&coll_since_ms, 0, __ATOMIC_RELEASE);
}

int tr_mpi_bcast(void *blob, size_t size, wds__err *e) {
  if (size > INT_MAX)
    return wds__fail(e, WDS_ERR_LIMIT, "MPI_Bcast: %zu bytes", size);
  coll_begin();
  int rc = MPI_Bcast(blob, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
  coll_end();
  return rc == MPI_SUCCESS ? WDS_OK : mpi_fail(e, rc, "MPI_Bcast");
}

int tr_mpi_allgather(const void *mine, size_t bytes, void *all, wds__err *e) {
  if (bytes > INT_MAX)
    return wds__fail(e, WDS_ERR_LIMIT, "MPI_Allgather: %zu bytes", bytes);
  coll_begin();
  int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE,
                         MPI_COMM_WORLD);
  coll_end();
  return rc == MPI_SUCCESS ? WDS_OK : mpi_fail(e, rc, "MPI_Allgather");
}

/* *p holds at least n floats. */
static int fit(float **p, size_t *cap, size_t n) {
  if (n <= *cap)
    return 0;
  float *q = realloc(*p, n * sizeof *q);
  if (!q)
    return -1;
  *p = q;
  *cap = n;
  return 0;
}

/* The reference (WDS_TRAIN_MPI_SUM=star): every rank's buffer gathered at
 * process 0, summed there in global rank order, broadcast back: (P-1) x n
 * floats through process 0 each way, as wds-train's retired star sum over
 * its own sockets moved them. Tests compare the slices' bits with it;
 * scripts/bench-allreduce.sh times both. */
static int allreduce_star(const float *const *parts, int L, float *res,
                          size_t n, wds__err *e) {
  int P = world_size, me = world_rank;
  size_t per = n * (size_t)L;
  if (per * (size_t)P > INT_MAX)
    return wds__fail(e, WDS_ERR_LIMIT,
                     "MPI all-reduce (star): %zu values x %d ranks x %d "
                     "processes: more than MPI's int counts hold",
                     n, L, P);
  if (fit(&xsend, &xsend_cap, per) != 0 ||
      (me == 0 && fit(&xrecv, &xrecv_cap, per * (size_t)P) != 0))
    return wds__fail(e, WDS_ERR_NOMEM,
                     "MPI all-reduce: out of memory (%zu values)", n);
  for (int k = 0; k < L; k++)
    memcpy(xsend + (size_t)k * n, parts[k], n * sizeof(float));
  coll_begin();
  int rc = MPI_Gather(xsend, (int)per, MPI_FLOAT, xrecv, (int)per, MPI_FLOAT, 0,
                      MPI_COMM_WORLD);
  coll_end();
  if (rc != MPI_SUCCESS)
    return mpi_fail(e, rc, "MPI_Gather");
  if (me == 0) /* rank p L + k's buffer at (p L + k) n */
    for (size_t i = 0; i < n; i++) {
      float s = xrecv[i];
      for (int r = 1; r < P * L; r++)
        s += xrecv[(size_t)r * n + i];
      res[i] = s;
    }
  coll_begin();
  rc = MPI_Bcast(res, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  coll_end();
  return rc == MPI_SUCCESS ? WDS_OK : mpi_fail(e, rc, "MPI_Bcast");
}

int tr_mpi_allreduce_f32(const float *const *parts, int L, float *res, size_t n,
                         wds__err *e) {
  if (star)
    return allreduce_star(parts, L, res, n, e);
  int P = world_size, me = world_rank;
  /* Process q owns elements [n q / P, n (q + 1) / P). */
#define LO(q) (n * (size_t)(q) / (size_t)P)
  size_t mine = LO(me + 1) - LO(me);
  if (n * (size_t)L > INT_MAX || mine * (size_t)L * (size_t)P > INT_MAX)
    return wds__fail(e, WDS_ERR_LIMIT,
                     "MPI all-reduce: %zu values x %d ranks: more than MPI's "
                     "int counts hold",
                     n, L);
  if (!counts && !(counts = malloc(4 * (size_t)P * sizeof *counts)))
    return wds__fail(e, WDS_ERR_NOMEM, "MPI all-reduce: out of memory");
  if (fit(&xsend, &xsend_cap, n * (size_t)L) != 0 ||
      fit(&xrecv, &xrecv_cap, mine * (size_t)L * (size_t)P) != 0)
    return wds__fail(e, WDS_ERR_NOMEM,
                     "MPI all-reduce: out of memory (%zu values)", n);
  int *sc = counts, *sd = counts + P, *rcv = counts + 2 * P,
      *rd = counts + 3 * P;
  /* To process q: every local rank's slice q, local rank by local rank. */
  size_t off = 0;
  for (int q = 0; q < P; q++) {
    size_t lo = LO(q), len = LO(q + 1) - lo;
    sc[q] = (int)(len * (size_t)L);
    sd[q] = (int)off;
    for (int k = 0; k < L; k++, off += len)
      memcpy(xsend + off, parts[k] + lo, len * sizeof(float));
    rcv[q] = (int)(mine * (size_t)L);
    rd[q] = (int)(mine * (size_t)L * (size_t)q);
  }
  coll_begin();
  int rc = MPI_Alltoallv(xsend, sc, sd, MPI_FLOAT, xrecv, rcv, rd, MPI_FLOAT,
                         MPI_COMM_WORLD);
  coll_end();
  if (rc != MPI_SUCCESS)
    return mpi_fail(e, rc, "MPI_Alltoallv");
  /* This process's slice: ranks 0, 1, ..., in order (process p's local
   * rank k at (p L + k) x mine). */
  float *out = res + LO(me);
  int ranks = P * L;
  for (size_t i = 0; i < mine; i++) {
    float s = xrecv[i];
    for (int r = 1; r < ranks; r++)
      s += xrecv[(size_t)r * mine + i];
    out[i] = s;
  }
  for (int q = 0; q < P; q++) {
    rcv[q] = (int)(LO(q + 1) - LO(q));
    rd[q] = (int)LO(q);
  }
  coll_begin();
  rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, res, rcv, rd,
                      MPI_FLOAT, MPI_COMM_WORLD);
  coll_end();
#undef LO
  return rc == MPI_SUCCESS ? WDS_OK : mpi_fail(e, rc, "MPI_Allgatherv");
}
