/* nccl_id.c — see nccl_id.h. */
#include "trainer/nccl_id.h"

#include <stdlib.h>
#include <string.h>

#include "trainer/launch.h"

int tr_nccl_id(tr_pg *pg, int procs, int proc_rank, ncclUniqueId *id,
               wds__err *e) {
  /* "" counts as unset (base/topology.h). */
  const char *env = wds__topology_var(NULL, NULL, "NCCL_COMM_ID");
  int mode = tr_launch_nccl_id_mode(procs, tr_pg_mpi(pg), env, e);
  if (mode < 0)
    return WDS_ERR_INVALID;
  memset(id, 0, sizeof *id);
  if (mode == TR_NCCL_ID_ENV || proc_rank == 0) {
    ncclResult_t res = ncclGetUniqueId(id);
    if (res != ncclSuccess)
      return wds__fail(e, WDS_ERR_IO, "ncclGetUniqueId%s%s%s: %s: %s",
                       mode == TR_NCCL_ID_ENV ? " (NCCL_COMM_ID=" : "",
                       mode == TR_NCCL_ID_ENV ? env : "",
                       mode == TR_NCCL_ID_ENV ? ")" : "",
                       ncclGetErrorString(res), ncclGetLastError(NULL));
  }
  if (mode != TR_NCCL_ID_MPI)
    return WDS_OK;
  int rc = tr_pg_bcast(pg, id, sizeof *id, e);
  if (rc != WDS_OK)
    wds__err_prefix(e, "%s",
                    proc_rank == 0 ? "sending the NCCL id"
                                   : "receiving the NCCL id");
  return rc;
}
