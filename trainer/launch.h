/* launch.h — how this wds-train process joins its job, outside an MPI
 * launch (internal; under mpirun or srun the topology is MPI's, pg_mpi.h).
 *
 * Two forms are left once wds-train's own TCP rendezvous is gone:
 *   single process  no launcher variables: every local GPU or CPU rank in
 *                   this one process;
 *   torchrun        RANK, WORLD_SIZE, LOCAL_RANK (LOCAL_WORLD_SIZE): one
 *                   process per GPU. The processes meet through NCCL alone:
 *                   every process derives the same ncclUniqueId from
 *                   NCCL_COMM_ID=host:port (ncclGetUniqueId parses it, and
 *                   rank 0's ncclCommInitRank starts NCCL's bootstrap root
 *                   there). When NCCL_COMM_ID is unset it is MASTER_ADDR and
 *                   MASTER_PORT + 1 (torchrun's own store listens on
 *                   MASTER_PORT, default 29500), which main.c sets in the
 *                   environment before NCCL starts.
 * Everything else that names this process a rank of several (mpirun or srun
 * variables without an MPI launch, NNODES/NODE_RANK of the retired
 * one-process-per-node form) is refused naming the variables and the fix,
 * never a duplicate job. So are CPU ranks across processes without MPI
 * (tr_launch_check_backend): the CPU gradients go through MPI only.
 *
 * Pure functions of a variable lookup (tests pass their own). */
#ifndef WDS_TRAINER_LAUNCH_H
#define WDS_TRAINER_LAUNCH_H

#include "base/err.h"
#include "base/topology.h"

#define TR_LAUNCH_DEFAULT_PORT 29500

typedef struct tr_launch {
  int per_process; /* 1: one process per GPU (torchrun variables) */
  int procs, proc_rank;
  int local_rank;  /* per_process: the GPU of this process; else -1 */
  char source[48]; /* where the topology came from, for logs */
  /* per_process with procs > 1: NCCL's bootstrap address (host:port), and
   * where it came from ("NCCL_COMM_ID" or "MASTER_ADDR, MASTER_PORT + 1");
   * "" otherwise. */
  char nccl_comm_id[300];
  const char *nccl_comm_id_from;
} tr_launch;

/* Reads the launch through get (NULL: getenv). WDS_OK, or WDS_ERR_INVALID
 * with a message naming the variables and their values. */
int tr_launch_resolve(tr_launch *c, wds__getenv_fn get, void *ctx, wds__err *e);

/* Exports c's NCCL bootstrap address as NCCL_COMM_ID when the variable is
 * unset or "" (which counts as unset: c's address was then derived from
 * MASTER_ADDR), for NCCL to read at ncclGetUniqueId and ncclCommInitRank;
 * before any NCCL call, while no other thread reads the environment.
 * Nothing when c has no address. WDS_OK, or WDS_ERR_IO (setenv failed). */
int tr_launch_export_comm_id(const tr_launch *c, wds__err *e);

/* How the backend's NCCL communicator gets its id. */
enum {
  TR_NCCL_ID_LOCAL = 0, /* one process: made here, shared in memory */
  TR_NCCL_ID_MPI = 1,   /* process 0 makes it, MPI_Bcast carries it */
  TR_NCCL_ID_ENV = 2    /* every process derives it from NCCL_COMM_ID */
};

/* The id's way for a job of procs processes (mpi: launched by MPI);
 * nccl_comm_id is the variable's value (NULL: unset). -1 with the message
 * in e when there is none (several processes, no MPI, no NCCL_COMM_ID). */
int tr_launch_nccl_id_mode(int procs, int mpi, const char *nccl_comm_id,
                           wds__err *e);

/* Several processes without MPI need a backend whose collectives are
 * NCCL's (a device backend): host_collectives (the CPU backend) is refused
 * naming the fix, and so is a device backend with no NCCL_COMM_ID. */
int tr_launch_check_backend(const tr_launch *c, int mpi, int host_collectives,
                            wds__err *e);

#endif
