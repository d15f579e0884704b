/* pg_mpi.h — MPI under wds-train's process group (internal; built with
 * WDS_TRAINER_MPI, when CMake finds an MPI library).
 *
 * A job started by mpirun, mpiexec or srun (--mpi=pmix / pmi2) is one
 * process per GPU, or per group of CPU rank threads: rank, size, local
 * rank (MPI_Comm_split_type MPI_COMM_TYPE_SHARED) and node come from MPI.
 * The process group (procgroup.c) carries its cross-process work over MPI:
 * the NCCL id by MPI_Bcast, the CPU backend's all-reduce by MPI_Alltoallv
 * of slices, a sum of each slice in global rank order, and MPI_Allgatherv
 * (bandwidth per process about 2(P-1)/P of the buffer, as a ring; the bits
 * of one process holding every rank, which no MPI_Allreduce promises), the
 * small sums and gathers (step counts, checksums, fingerprints) by
 * MPI_Allgather and an ordered local sum.
 *
 * Only local rank 0's thread calls the collectives (the local ranks meet
 * at the group's barrier first); the thread level asked for is
 * MPI_THREAD_MULTIPLE, since the watchdog may call MPI_Abort while a
 * collective waits. Nothing waits forever: the watchdog ends the job with
 * MPI_Abort when a collective has waited longer than the collective
 * timeout (a stopped or deadlocked process), or when the process group was
 * aborted and the process has not ended by itself within 10 seconds (a
 * local rank failed while local rank 0 waits in a collective that its
 * peers will never complete). A process that dies is the launcher's to
 * notice: mpirun and srun end the job. */
#ifndef WDS_TRAINER_PG_MPI_H
#define WDS_TRAINER_PG_MPI_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_mpi_topology {
  int rank, size;             /* MPI_COMM_WORLD */
  int local_rank, local_size; /* on this node (shared memory) */
  int node, nodes;            /* this node's index, the job's nodes */
} tr_mpi_topology;

/* Non-zero when the environment shows a launch by an MPI launcher
 * (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMI_RANK, PMIX_RANK): the processes
 * then meet through MPI, unless torchrun's variables are present too
 * (base/topology.h: torchrun started inside an MPI task, whose variables
 * are then its agent's), which main.c checks first. Reads getenv. */
int tr_mpi_launched(void);

/* MPI_Init_thread and the topology. Once per process. */
int tr_mpi_init(tr_mpi_topology *t, wds__err *e);

/* Non-zero after tr_mpi_init (and before tr_mpi_finalize). */
int tr_mpi_active(void);

/* Stops the watchdog, MPI_Finalize. A no-op when not active. */
void tr_mpi_finalize(void);

/* MPI_Abort(MPI_COMM_WORLD, code): ends every process of the job. */
void tr_mpi_abort(int code);

/* Starts the watchdog (once): a collective waiting longer than
 * timeout_ms, or *aborted set for longer than a few seconds, ends the job
 * (a line on stderr naming this process, then MPI_Abort). */
int tr_mpi_watch(int proc_rank, int timeout_ms, const int *aborted,
                 wds__err *e);

/* Stops the watchdog (before what *aborted points into is freed; a no-op
 * when none runs). */
void tr_mpi_unwatch(void);

/* blob[0..size) from process 0 to every process. */
int tr_mpi_bcast(void *blob, size_t size, wds__err *e);

/* res[0..n) = the sum over every process's L parts parts[k][0..n), element
 * by element in global rank order (process p's part k is rank p * L + k):
 * the bits of one process summing every rank in order. With
 * WDS_TRAIN_MPI_SUM=star (read by tr_mpi_init; tests and benchmarks) the
 * same bits by another way, the reference: every buffer gathered at
 * process 0, summed there, broadcast back. */
int tr_mpi_allreduce_f32(const float *const *parts, int L, float *res, size_t n,
                         wds__err *e);

/* all[0..size x bytes) = every process's mine[0..bytes), by process. */
int tr_mpi_allgather(const void *mine, size_t bytes, void *all, wds__err *e);

#ifdef __cplusplus
}
#endif

#endif
