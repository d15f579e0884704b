/* procgroup.h — the process group of a wds-train job (internal): who takes
 * part, the links between the processes, and what the local rank threads
 * share (an abortable barrier, the abort flag and its reason, and the
 * host-memory collectives). It needs no GPU: backends are built on it.
 *
 * A job is `procs` processes of `local_ranks` rank threads each. With more
 * than one process, tr_pg_create() runs the TCP rendezvous (rendezvous.h):
 * process 0 listens on master_port, the others connect to
 * master_addr:master_port; the connections stay open. tr_pg_bcast() then
 * sends one small blob from process 0 to every other process over them (the
 * CUDA backend's NCCL id), and tr_pg_start() hands them to the job's links:
 * from then on a process that fails or is lost aborts every other one.
 *
 *   tr_pg_create  ->  [tr_pg_bcast]  ->  tr_pg_start  ->  ... ->
 *   tr_pg_destroy
 *
 * The host collectives (tr_pg_allreduce_f32, tr_pg_sum_f64, tr_pg_gather_u64)
 * span the local ranks: every local rank calls them in the same order, from
 * its own thread. With host_links (the CPU backend) they span the job's
 * processes too: the rendezvous makes a second socket between process 0
 * and each other process (the data links), local rank 0 of every process
 * sends its ranks' inputs to process 0, which combines them in global rank
 * order (the bits of one process with all the ranks) and sends the result
 * back. A data link that fails names the process at its other end. With
 * `mpi` (a launch by mpirun or srun, pg_mpi.h) there is no rendezvous and
 * no link: the blob goes by MPI_Bcast, the host collectives by MPI
 * collectives that keep the global rank order of the sums, and a watchdog
 * ends the job (MPI_Abort) when one waits past the collective timeout or
 * the group was aborted and the process does not end. Everything
 * returns WDS_OK or a negative status with the message in e; a collective left
 * because the group was aborted returns WDS_ERR_CANCELLED. */
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
  int local_ranks;         /* rank threads in this process */
  int procs, proc_rank;    /* processes of the job; this one's rank */
  const char *master_addr; /* process 0's address, as the others reach it */
  int master_port;
  int rdv_timeout_ms;        /* the rendezvous and tr_pg_bcast */
  int host_links;            /* the host collectives span the processes */
  int collective_timeout_ms; /* host_links: the longest wait for a peer's
                                data (0 = 600 s); MPI: the watchdog's */
  int mpi; /* the processes meet through MPI (pg_mpi.h: tr_mpi_init done):
              no rendezvous, the blob and host collectives over MPI */
} tr_pg_config;

typedef struct tr_pg tr_pg;

/* A group of one process with `local_ranks` ranks (no sockets). */
int tr_pg_create_local(int local_ranks, tr_pg **out, wds__err *e);

/* Makes the group; with procs > 1 runs the rendezvous (every process of the
 * job must call it). On failure *out is NULL and nothing stays open. */
int tr_pg_create(const tr_pg_config *c, tr_pg **out, wds__err *e);

/* Process 0 sends blob[0..size) to every other process; the others read it
 * into blob (size bytes exactly: another size is an error). One thread per
 * process calls it, before tr_pg_start(); a one-process group returns at
 * once. */
int tr_pg_bcast(tr_pg *g, void *blob, size_t size, wds__err *e);

/* Starts watching the other processes (no-op with one process). */
int tr_pg_start(tr_pg *g, wds__err *e);

/* Ends every current and later barrier and collective of the local ranks
 * with WDS_ERR_CANCELLED, and tells the other processes this one failed.
 * why (NULL: another local rank failed) is kept for messages. Thread-safe;
 * the first reason stays. */
void tr_pg_abort(tr_pg *g, const char *why);

/* Non-zero once aborted (by tr_pg_abort or another process). */
int tr_pg_aborted(const tr_pg *g);

/* Why the group was aborted ("" if it was not, or no reason was given). */
void tr_pg_why(tr_pg *g, char *dst, size_t cap);

/* Says goodbye to the other processes unless aborted, closes the links,
 * frees. NULL is a no-op. */
void tr_pg_destroy(tr_pg *g);

int tr_pg_procs(const tr_pg *g);
int tr_pg_proc_rank(const tr_pg *g);
int tr_pg_local_ranks(const tr_pg *g);

/* Blocks until every local rank arrived: WDS_OK, or WDS_ERR_CANCELLED once
 * aborted. */
int tr_pg_barrier(tr_pg *g);

/* buf[0..n) summed over the ranks, in place: element i is
 * buf_0[i] + buf_1[i] + ... in global rank order, so every rank gets the
 * same bits. In one process each rank owns a slice of the elements and
 * writes its sums into every rank's buffer (a reduce-scatter and
 * all-gather in one pass); two barriers. Across processes (host_links)
 * process 0 sums all and sends the sums back. */
int tr_pg_allreduce_f32(tr_pg *g, int local, float *buf, size_t n);

/* values[0..n) summed over the ranks (global rank order), n <=
 * TR_PG_SUM_MAX (WDS_ERR_LIMIT beyond, with the message in e). */
int tr_pg_sum_f64(tr_pg *g, int local, double *values, int n, wds__err *e);

/* all[0..local_ranks x procs) = every rank's value, in global rank order
 * (procs is 1 without host_links). */
int tr_pg_gather_u64(tr_pg *g, int local, uint64_t mine, uint64_t *all);

#ifdef __cplusplus
}
#endif

#endif
