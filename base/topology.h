/* topology.h — the job's topology from the environment: which process of
 * how many this is, and on its node. Internal; one reading for the loader
 * (wds_env_rank_world) and the trainer's rendezvous.
 *
 * One rule, launcher by launcher, the first present wins:
 *   torchrun  RANK, WORLD_SIZE (LOCAL_RANK, LOCAL_WORLD_SIZE): present when
 *             any of RANK, WORLD_SIZE, LOCAL_RANK, TORCHELASTIC_RUN_ID is
 *             set; then RANK and WORLD_SIZE must be, and with LOCAL_RANK
 *             the ranks must be numbered node by node (LOCAL_WORLD_SIZE,
 *             default WORLD_SIZE, divides WORLD_SIZE; RANK %
 *             LOCAL_WORLD_SIZE == LOCAL_RANK). First because torchrun
 *             started inside an mpirun or srun task (srun torchrun
 *             --no-python wds-train) passes the task's OMPI_COMM_WORLD_*,
 *             PMI_*, PMIX_RANK and SLURM_* on to its children: those then
 *             describe torchrun's agent, not this process, and the trainer
 *             takes torchrun's path without MPI_Init (each child calling it
 *             under the agent's one MPI identity would hang).
 *   SLURM     SLURM_PROCID, SLURM_NTASKS (SLURM_LOCALID): present when both
 *             are set (a batch script sees some without being many ranks).
 *   Open MPI  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
 *             (OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE):
 *             present when both are set.
 *   PMI       PMI_RANK, PMI_SIZE (MPICH's and Intel MPI's Hydra, srun
 *             --mpi=pmi2): present when both are set.
 * A variable set to "" counts as unset. A present value that is not a
 * decimal integer in range (0 <= rank < world size <= 2^20) is an error
 * naming the variable and its value; so is one of a pair without the other
 * (PMI_RANK without PMI_SIZE: a rank of a job of unknown size; PMI_SIZE or
 * OMPI_COMM_WORLD_SIZE without its rank, which would run one full job in
 * every process; SLURM's are exempt: a batch script sees SLURM_NTASKS
 * alone) and
 * PMIX_RANK above 0 with no launcher that gives the size (every reader of
 * this rule would take itself for rank 0 of 1, a duplicate of the job).
 * None present is rank 0 of 1. */
#ifndef WDS_BASE_TOPOLOGY_H
#define WDS_BASE_TOPOLOGY_H

#include "base/err.h"

typedef enum wds__launcher {
  WDS__LAUNCHER_NONE = 0,
  WDS__LAUNCHER_TORCHRUN,
  WDS__LAUNCHER_SLURM,
  WDS__LAUNCHER_OMPI,
  WDS__LAUNCHER_PMI
} wds__launcher;

typedef struct wds__topology {
  wds__launcher launcher; /* which variables gave the values */
  int rank, world_size;   /* 0 and 1 when no launcher is present */
  int local_rank;         /* on this node; -1 when not given */
  int local_world_size;   /* processes on this node; -1 when not given */
  /* The variables that gave rank and world size (NULL: no launcher), for
   * messages. */
  const char *rank_var, *size_var;
} wds__topology;

/* A getenv-like lookup (tests pass their own). */
typedef const char *(*wds__getenv_fn)(const char *name, void *ctx);

/* The value of variable `name` through get (NULL: getenv); NULL when it is
 * unset or "" (which counts as unset). */
const char *wds__topology_var(wds__getenv_fn get, void *ctx, const char *name);

/* Parses v, the value of variable (or flag) `name`, as a strict decimal
 * integer in [lo, hi] into *out; else WDS_ERR_INVALID naming the variable
 * and its value. */
int wds__topology_int(const char *name, const char *v, long lo, long hi,
                      int *out, wds__err *e);

/* Reads the topology through get (NULL: getenv). WDS_OK, or
 * WDS_ERR_INVALID with a message naming the variable (*t is then rank 0 of
 * 1, no launcher). */
int wds__topology_from_env(wds__topology *t, wds__getenv_fn get, void *ctx,
                           wds__err *e);

#endif
