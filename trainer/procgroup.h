/* procgroup.h — the process group of a wds-train job (internal): who takes
 * part, and what the local rank threads share (an abortable barrier, the
 * abort flag and its reason, and the host-memory collectives). It needs no
 * GPU: backends are built on it.
 *
 * A job is `procs` processes of `local_ranks` rank threads each. Between
 * processes, wds-train has no network code of its own: with `mpi` (a
 * launch by mpirun or srun, pg_mpi.h) tr_pg_bcast is MPI_Bcast, the host
 * collectives span the processes through MPI collectives that keep the
 * global rank order of the sums, and tr_pg_start starts a watchdog that
 * ends the job (MPI_Abort) when a collective waits past the collective
 * timeout, or the group was aborted and the process does not end. Without
 * MPI (torchrun, GPUs) the group spans this process's ranks only: the
 * backend's own collectives (NCCL) join the processes, and asking for host
 * collectives across processes (the CPU backend) is an error naming the fix.
 *
 *   tr_pg_create  ->  [tr_pg_bcast]  ->  tr_pg_start  ->  ... ->
 *   tr_pg_destroy
 *
 * The host collectives (tr_pg_allreduce_f32, tr_pg_sum_f64, tr_pg_gather_u64)
 * span the local ranks (and, under MPI, the processes): every local rank
 * calls them in the same order, from its own thread; under MPI local rank 0
 * alone calls MPI, between two barriers of the local ranks. Everything
 * returns WDS_OK or a negative status with the message in e; a collective
 * left because the group was aborted returns WDS_ERR_CANCELLED. */
#ifndef WDS_TRAINER_PROCGROUP_H
#define WDS_TRAINER_PROCGROUP_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tr_pg_sum_f64 sums at most this many values. */
#define TR_PG_SUM_MAX 8

typedef struct tr_pg_config {
  int local_ranks;           /* rank threads in this process */
  int procs, proc_rank;      /* processes of the job; this one's rank */
  int host_collectives;      /* the host collectives must span the processes
                                (the CPU backend): needs mpi when procs > 1 */
  int collective_timeout_ms; /* MPI: the watchdog's (0 = 600 s) */
  int mpi; /* the processes meet through MPI (pg_mpi.h: tr_mpi_init done):
              the blob and host collectives over MPI */
} tr_pg_config;

typedef struct tr_pg tr_pg;

/* A group of one process with `local_ranks` ranks. */
int tr_pg_create_local(int local_ranks, tr_pg **out, wds__err *e);

/* Makes the group. procs > 1 with host_collectives and no mpi is
 * WDS_ERR_INVALID naming the fix (an MPI launch). On failure *out is NULL. */
int tr_pg_create(const tr_pg_config *c, tr_pg **out, wds__err *e);

/* Under MPI: process 0's blob[0..size) to every process (MPI_Bcast; every
 * process passes the same size). One thread per process calls it, before
 * tr_pg_start(); a one-process group returns at once. Several processes
 * without MPI: WDS_ERR_INVALID (they share nothing but the backend's
 * collectives). */
int tr_pg_bcast(tr_pg *g, void *blob, size_t size, wds__err *e);

/* Under MPI, starts the watchdog (pg_mpi.h); else a no-op. */
int tr_pg_start(tr_pg *g, wds__err *e);

/* Ends every current and later barrier and collective of the local ranks
 * with WDS_ERR_CANCELLED. why (NULL: another local rank failed) is kept for
 * messages. Thread-safe; the first reason stays. The other processes learn
 * it from this one's exit (the launcher ends the job) or their collective
 * timeout; under MPI the watchdog ends the job if this process does not end
 * by itself. */
void tr_pg_abort(tr_pg *g, const char *why);

/* Non-zero once aborted (by tr_pg_abort or another process). */
int tr_pg_aborted(const tr_pg *g);

/* Why the group was aborted ("" if it was not, or no reason was given). */
void tr_pg_why(tr_pg *g, char *dst, size_t cap);

/* Stops the watchdog, frees. NULL is a no-op. */
void tr_pg_destroy(tr_pg *g);

int tr_pg_procs(const tr_pg *g);
int tr_pg_proc_rank(const tr_pg *g);
int tr_pg_local_ranks(const tr_pg *g);
/* Non-zero when the processes meet through MPI. */
int tr_pg_mpi(const tr_pg *g);

/* Blocks until every local rank arrived: WDS_OK, or WDS_ERR_CANCELLED once
 * aborted. */
int tr_pg_barrier(tr_pg *g);

/* buf[0..n) summed over the ranks, in place: element i is
 * buf_0[i] + buf_1[i] + ... in global rank order, so every rank gets the
 * same bits. In one process each rank owns a slice of the elements and
 * writes its sums into every rank's buffer (a reduce-scatter and
 * all-gather in one pass); two barriers. Across processes (MPI) every
 * process sums its slice of every rank's input in that order
 * (tr_mpi_allreduce_f32). */
int tr_pg_allreduce_f32(tr_pg *g, int local, float *buf, size_t n);

/* values[0..n) summed over the ranks (global rank order), n <=
 * TR_PG_SUM_MAX (WDS_ERR_LIMIT beyond, with the message in e). */
int tr_pg_sum_f64(tr_pg *g, int local, double *values, int n, wds__err *e);

/* all[0..local_ranks x procs) = every rank's value, in global rank order
 * (procs counts 1 without MPI). */
int tr_pg_gather_u64(tr_pg *g, int local, uint64_t mine, uint64_t *all);

#ifdef __cplusplus
}
#endif

#endif
