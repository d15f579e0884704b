/* launch.c — see launch.h. */
#include "trainer/launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WDS_TRAINER_MPI
#define BUILT_WITH_MPI ""
#else
#define BUILT_WITH_MPI " (this wds-train is built without MPI)"
#endif

/* NCCL's forms: <ipv4>:<port>, [<ipv6>]:<port>, <hostname>:<port>, and
 * the limits of its parser (ncclSocketGetAddrFromString, src/misc/socket.cc):
 * an unbracketed host goes through struct netIf's 64-byte prefix (63 bytes
 * kept; a longer one is cut and ncclGetUniqueId fails, "Invalid
 * NCCL_COMM_ID"); a bracketed one through a buffer of NI_MAXHOST (1025,
 * beyond any value tr_launch holds), its interface after '%' through 16
 * bytes (IF_NAMESIZE: at most 15 and its NUL). */
#define NCCL_HOST_MAX 63
#define NCCL_IFNAME_MAX 15

static int check_comm_id(const char *v, wds__err *e) {
  const char *colon = strrchr(v, ':');
  int ok = colon && colon > v;
  if (ok && v[0] == '[')
    ok = colon > v + 2 && colon[-1] == ']';
  else if (ok)
    ok = memchr(v, ':', (size_t)(colon - v)) == NULL; /* v6: brackets */
  int port = 0;
  wds__err pe;
  if (ok)
    ok = wds__topology_int("port", colon + 1, 1, 65535, &port, &pe) == WDS_OK;
  if (!ok)
    return wds__fail(e, WDS_ERR_INVALID,
                     "NCCL_COMM_ID='%.200s': not host:port (NCCL's forms: "
                     "<ipv4>:<port>, [<ipv6>]:<port>, <hostname>:<port>)",
                     v);
  size_t host = (size_t)(colon - v);
  if (v[0] != '[' && host > NCCL_HOST_MAX)
    return wds__fail(e, WDS_ERR_INVALID,
                     "NCCL_COMM_ID='%.200s': the host is %zu bytes, but NCCL "
                     "reads at most %d of a host name (its parser cuts the "
                     "rest); give the address: NCCL_COMM_ID=<ip>:<port>",
                     v, host, NCCL_HOST_MAX);
  const char *pct = v[0] == '[' ? memchr(v, '%', host) : NULL;
  if (pct && (size_t)(colon - 1 - pct - 1) > NCCL_IFNAME_MAX)
    return wds__fail(e, WDS_ERR_INVALID,
                     "NCCL_COMM_ID='%.200s': the interface after '%%' is %zu "
                     "bytes, but NCCL reads at most %d (an interface name)",
                     v, (size_t)(colon - 1 - pct - 1), NCCL_IFNAME_MAX);
  return WDS_OK;
}

/* NCCL's bootstrap address for a torchrun job: NCCL_COMM_ID, else
 * MASTER_ADDR and MASTER_PORT + 1. */
static int comm_id(tr_launch *c, wds__getenv_fn get, void *ctx, wds__err *e) {
  const char *v = wds__topology_var(get, ctx, "NCCL_COMM_ID");
  if (v) {
    if (strlen(v) >= sizeof c->nccl_comm_id)
      return wds__fail(e, WDS_ERR_INVALID, "NCCL_COMM_ID='%.64s...': too long",
                       v);
    int rc = check_comm_id(v, e);
    if (rc != WDS_OK)
      return rc;
    snprintf(c->nccl_comm_id, sizeof c->nccl_comm_id, "%s", v);
    c->nccl_comm_id_from = "NCCL_COMM_ID";
    return WDS_OK;
  }
  const char *addr = wds__topology_var(get, ctx, "MASTER_ADDR");
  if (!addr)
    return wds__fail(e, WDS_ERR_INVALID,
                     "%d processes (torchrun variables) but neither "
                     "NCCL_COMM_ID nor MASTER_ADDR is set: the processes meet "
                     "through NCCL at MASTER_ADDR:MASTER_PORT+1 (torchrun sets "
                     "both), or at NCCL_COMM_ID=host:port",
                     c->procs);
  int port = TR_LAUNCH_DEFAULT_PORT, rc;
  const char *p = wds__topology_var(get, ctx, "MASTER_PORT");
  if (p && (rc = wds__topology_int("MASTER_PORT", p, 1, 65535, &port, e)))
    return rc;
  if (port == 65535)
    return wds__fail(e, WDS_ERR_INVALID,
                     "MASTER_PORT=65535: NCCL's bootstrap would listen on "
                     "MASTER_PORT + 1 (torchrun's store holds MASTER_PORT); "
                     "set NCCL_COMM_ID=host:port");
  /* A numeric IPv6 address goes in brackets. */
  int v6 = strchr(addr, ':') != NULL && addr[0] != '[';
  int n = snprintf(c->nccl_comm_id, sizeof c->nccl_comm_id, "%s%s%s:%d",
                   v6 ? "[" : "", addr, v6 ? "]" : "", port + 1);
  if (n < 0 || (size_t)n >= sizeof c->nccl_comm_id)
    return wds__fail(e, WDS_ERR_INVALID, "MASTER_ADDR='%.64s...': too long",
                     addr);
  c->nccl_comm_id_from = "MASTER_ADDR, MASTER_PORT + 1";
  if ((rc = check_comm_id(c->nccl_comm_id, e)) != WDS_OK)
    wds__err_prefix(e, "MASTER_ADDR='%.64s' and MASTER_PORT + 1", addr);
  return rc;
}

int tr_launch_resolve(tr_launch *c, wds__getenv_fn get, void *ctx,
                      wds__err *e) {
  memset(c, 0, sizeof *c);
  c->procs = 1;
  c->local_rank = -1;
  c->nccl_comm_id_from = "";
  wds__topology t;
  int rc = wds__topology_from_env(&t, get, ctx, e);
  if (rc != WDS_OK)
    return rc;
  if (t.launcher == WDS__LAUNCHER_TORCHRUN) {
    if (t.local_rank < 0)
      return wds__fail(e, WDS_ERR_INVALID,
                       "LOCAL_RANK is not set, but RANK='%s' is (one process "
                       "per GPU needs RANK, WORLD_SIZE and LOCAL_RANK, as "
                       "torchrun sets them)",
                       wds__topology_var(get, ctx, "RANK"));
    c->per_process = 1;
    c->procs = t.world_size;
    c->proc_rank = t.rank;
    c->local_rank = t.local_rank;
    snprintf(c->source, sizeof c->source, "torchrun (RANK, WORLD_SIZE)");
    return c->procs > 1 ? comm_id(c, get, ctx, e) : WDS_OK;
  }
  if (t.launcher != WDS__LAUNCHER_NONE && t.world_size > 1)
    return wds__fail(
        e, WDS_ERR_INVALID,
        "%s=%d and %s=%d make this process rank %d of %d, but it was not "
        "launched by MPI: each process would run a job of its own, a "
        "duplicate. Launch with mpirun or srun --mpi=pmix (wds-train built "
        "with WDS_WITH_MPI%s), or one process per GPU with torchrun "
        "--no-python wds-train",
        t.rank_var, t.rank, t.size_var, t.world_size, t.rank, t.world_size,
#ifdef WDS_TRAINER_MPI
        ""
#else
        "; this one was built without"
#endif
    );
  /* The retired form of one process per node (wds-train's own rendezvous):
   * run alone, each would be a job of its own. */
  static const char *const retired[] = {"NNODES", "NODE_RANK"};
  static const int most[] = {1, 0}; /* one node, node 0: harmless */
  for (size_t i = 0; i < 2; i++) {
    const char *v = wds__topology_var(get, ctx, retired[i]);
    int x = 0;
    wds__err pe;
    if (v && (wds__topology_int(retired[i], v, 0, 1 << 20, &x, &pe) != WDS_OK ||
              x > most[i]))
      return wds__fail(
          e, WDS_ERR_INVALID,
          "%s=%s: one wds-train process per node meeting through its own "
          "rendezvous is gone (run alone, each process would be a job of "
          "its own). Launch with mpirun -np N wds-train ... or srun "
          "--mpi=pmix (built with WDS_WITH_MPI)%s, or torchrun --no-python "
          "wds-train (GPUs); unset %s",
          retired[i], v, BUILT_WITH_MPI, retired[i]);
  }
  snprintf(c->source, sizeof c->source, "single process");
  return WDS_OK;
}

int tr_launch_export_comm_id(const tr_launch *c, wds__err *e) {
  /* "" counts as unset, as everywhere (base/topology.h): comm_id derived
   * the address in its place. */
  if (!c->nccl_comm_id[0] || wds__topology_var(NULL, NULL, "NCCL_COMM_ID"))
    return WDS_OK;
  if (setenv("NCCL_COMM_ID", c->nccl_comm_id, 1) != 0)
    return wds__fail(e, WDS_ERR_IO, "setenv NCCL_COMM_ID: %s", strerror(errno));
  return WDS_OK;
}

int tr_launch_nccl_id_mode(int procs, int mpi, const char *nccl_comm_id,
                           wds__err *e) {
  if (procs <= 1)
    return TR_NCCL_ID_LOCAL;
  if (mpi)
    return TR_NCCL_ID_MPI;
  if (nccl_comm_id && nccl_comm_id[0])
    return TR_NCCL_ID_ENV;
  wds__fail(e, WDS_ERR_INVALID,
            "%d processes without MPI, and NCCL_COMM_ID is not set: the "
            "processes cannot meet (under torchrun wds-train sets it from "
            "MASTER_ADDR and MASTER_PORT + 1)",
            procs);
  return -1;
}

int tr_launch_check_backend(const tr_launch *c, int mpi, int host_collectives,
                            wds__err *e) {
  if (mpi || c->procs <= 1)
    return WDS_OK;
  if (host_collectives)
    return wds__fail(e, WDS_ERR_INVALID,
                     "CPU ranks across processes (%s: process %d of %d) need "
                     "an MPI launch: build with WDS_WITH_MPI and run mpirun "
                     "-np N wds-train ... (or srun --mpi=pmix)%s; or run "
                     "every CPU rank in one process: wds-train --ranks N",
                     c->source, c->proc_rank, c->procs, BUILT_WITH_MPI);
  return tr_launch_nccl_id_mode(c->procs, 0, c->nccl_comm_id, e) < 0
             ? WDS_ERR_INVALID
             : WDS_OK;
}
