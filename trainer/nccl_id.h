/* nccl_id.h — the CUDA backend's ncclUniqueId (internal; CUDA builds).
 *
 * One process: made here (the local ranks share it in memory). Under MPI:
 * made by process 0 and broadcast (tr_pg_bcast, MPI_Bcast). Several
 * processes without MPI (torchrun): every process derives the same id from
 * NCCL_COMM_ID=host:port, which NCCL's ncclGetUniqueId parses into the id;
 * rank 0's ncclCommInitRank then starts NCCL's bootstrap root listening
 * there (launch.h says where the address comes from). No GPU is needed to
 * get the id, so tests run this on the CPU (test_nccl_id). */
#ifndef WDS_TRAINER_NCCL_ID_H
#define WDS_TRAINER_NCCL_ID_H

#include <nccl.h>

#include "base/err.h"
#include "trainer/procgroup.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *id for process proc_rank of procs, whose process group is pg. WDS_OK,
 * or WDS_ERR_INVALID (several processes, no MPI, no NCCL_COMM_ID) or
 * WDS_ERR_IO (NCCL refused, naming NCCL_COMM_ID's value when it was
 * used; the broadcast failed) with the message in e. */
int tr_nccl_id(tr_pg *pg, int procs, int proc_rank, ncclUniqueId *id,
               wds__err *e);

#ifdef __cplusplus
}
#endif

#endif
