/* rdv_topology.c — the job's topology from command-line flags and the
 * environment (NNODES/NODE_RANK, SLURM_*, torchrun's RANK/WORLD_SIZE/
 * LOCAL_RANK, MASTER_ADDR/MASTER_PORT): who serves the rendezvous, how many
 * take part, and where. Pure functions of the flags and a variable lookup
 * (tests pass their own). See rendezvous.h. */
#include <stdio.h>
#include <string.h>

#include "base/topology.h"
#include "trainer/rendezvous.h"

typedef struct getter {
  wds__getenv_fn get;
  void *ctx;
} getter;

static const char *var(const getter *g, const char *name) {
  return wds__topology_var(g->get, g->ctx, name);
}

/* An explicit value, else the first variable of names[] that is set.
 * *from is the flag or variable that gave the value (NULL: none). */
static int pick_int(const getter *g, int explicit_value, const char *flag,
                    const char *const *names, long lo, long hi, int *out,
                    const char **from, wds__err *e) {
  if (explicit_value != -1) {
    if (explicit_value < lo || explicit_value > hi)
      return wds__fail(e, WDS_ERR_INVALID, "%s %d: not in %ld..%ld", flag,
                       explicit_value, lo, hi);
    *out = explicit_value;
    *from = flag;
    return WDS_OK;
  }
  for (; *names; names++) {
    const char *v = var(g, *names);
    if (v) {
      *from = *names;
      return wds__topology_int(*names, v, lo, hi, out, e);
    }
  }
  *from = NULL;
  return WDS_OK;
}

int tr_rdv_resolve(tr_rdv_config *c,
                   const char *(*get)(const char *name, void *ctx), void *ctx,
                   wds__err *e) {
  getter g = {get, ctx};
  int rc;
  c->per_process = 0;
  c->rank = c->world_size = c->local_rank = c->local_world_size = -1;

  /* Address and port. */
  if (!c->master_addr[0]) {
    const char *a = var(&g, "MASTER_ADDR");
    if (a) {
      if (strlen(a) >= sizeof c->master_addr)
        return wds__fail(e, WDS_ERR_INVALID, "MASTER_ADDR='%.64s...': too long",
                         a);
      snprintf(c->master_addr, sizeof c->master_addr, "%s", a);
    }
  }
  const char *port_from;
  int port = TR_RDV_DEFAULT_PORT;
  static const char *const port_vars[] = {"MASTER_PORT", NULL};
  rc = pick_int(&g, c->master_port, "--master-port", port_vars, 1, 65535, &port,
                &port_from, e);
  if (rc)
    return rc;

  /* One process per GPU (torchrun): the job topology of base/topology.h,
   * which must then give the local rank too. */
  const char *nodes_from = NULL, *rank_from = NULL;
  int nodes = 1, node_rank = 0;
  wds__topology t;
  if ((rc = wds__topology_from_env(&t, get, ctx, e)) != WDS_OK)
    return rc;
  if (t.launcher == WDS__LAUNCHER_TORCHRUN) {
    if (t.local_rank < 0)
      return wds__fail(e, WDS_ERR_INVALID,
                       "LOCAL_RANK is not set, but RANK='%s' is (one process "
                       "per GPU needs RANK, WORLD_SIZE and LOCAL_RANK, as "
                       "torchrun sets them)",
                       var(&g, "RANK"));
    int world = t.world_size, rank = t.rank, lrank = t.local_rank,
        lworld = t.local_world_size;
    nodes = world / lworld;
    node_rank = rank / lworld;
    if (c->nodes != -1 && c->nodes != nodes)
      return wds__fail(e, WDS_ERR_INVALID,
                       "--nodes %d disagrees with WORLD_SIZE=%d / "
                       "LOCAL_WORLD_SIZE=%d = %d nodes",
                       c->nodes, world, lworld, nodes);
    if (c->node_rank != -1 && c->node_rank != node_rank)
      return wds__fail(e, WDS_ERR_INVALID,
                       "--node-rank %d disagrees with RANK=%d / "
                       "LOCAL_WORLD_SIZE=%d = node %d",
                       c->node_rank, rank, lworld, node_rank);
    /* torchrun's own store listens on MASTER_PORT on the first node. */
    if (c->master_port == -1) {
      if (port == 65535)
        return wds__fail(e, WDS_ERR_INVALID,
                         "MASTER_PORT=65535: one process per GPU uses "
                         "MASTER_PORT + 1 (torchrun's store holds "
                         "MASTER_PORT); set the port explicitly");
      port++;
    }
    c->per_process = 1;
    c->rank = rank;
    c->world_size = world;
    c->local_rank = lrank;
    c->local_world_size = lworld;
    c->rdv_rank = rank;
    c->rdv_size = world;
    snprintf(c->source, sizeof c->source, "torchrun (RANK, WORLD_SIZE)");
  } else {
    static const char *const nodes_vars[] = {"NNODES", "SLURM_NNODES", NULL};
    static const char *const rank_vars[] = {"NODE_RANK", "SLURM_NODEID", NULL};
    if ((rc = pick_int(&g, c->nodes, "--nodes", nodes_vars, 1, 1 << 16, &nodes,
                       &nodes_from, e)))
      return rc;
    if ((rc = pick_int(&g, c->node_rank, "--node-rank", rank_vars, 0,
                       (1 << 16) - 1, &node_rank, &rank_from, e)))
      return rc;
    if (!nodes_from)
      nodes = 1;
    if (!rank_from) {
      if (nodes > 1)
        return wds__fail(e, WDS_ERR_INVALID,
                         "%s=%d but no node rank: set NODE_RANK (0..%d) or "
                         "--node-rank",
                         nodes_from, nodes, nodes - 1);
      node_rank = 0;
    }
    if (node_rank >= nodes && !nodes_from)
      return wds__fail(e, WDS_ERR_INVALID,
                       "%s=%d but no node count: set NNODES or --nodes",
                       rank_from, node_rank);
    if (node_rank >= nodes)
      return wds__fail(e, WDS_ERR_INVALID,
                       "%s=%d is out of range for %s=%d (0..%d)", rank_from,
                       node_rank, nodes_from, nodes, nodes - 1);
    /* A launcher that names this process a rank of several (mpirun, srun
     * with tasks per node, ...) must agree with the nodes: else every
     * process would run a job of its own, a duplicate of the others. */
    if (t.launcher != WDS__LAUNCHER_NONE && t.world_size > 1 &&
        (t.world_size != nodes || t.rank != node_rank))
      return wds__fail(
          e, WDS_ERR_INVALID,
          "%s=%d and %s=%d make this process rank %d of %d, but wds-train "
          "would run it as node %d of %d (%s): each process would run a job "
          "of its own, a duplicate. Launch with mpirun or srun --mpi=pmix "
          "(wds-train built with MPI%s), one process per GPU with "
          "torchrun, or one process per node with NNODES and NODE_RANK (or "
          "--nodes and --node-rank) that agree with %s and %s",
          t.rank_var, t.rank, t.size_var, t.world_size, t.rank, t.world_size,
          node_rank, nodes,
          nodes_from ? (rank_from ? rank_from : nodes_from) : "single node",
#ifdef WDS_TRAINER_MPI
          "",
#else
          ": this one was built without",
#endif
          t.rank_var, t.size_var);
    c->rdv_rank = node_rank;
    c->rdv_size = nodes;
    if (!nodes_from)
      snprintf(c->source, sizeof c->source, "single node");
    else
      snprintf(c->source, sizeof c->source, "%s, %s", nodes_from,
               rank_from ? rank_from : "-");
  }
  c->nodes = nodes;
  c->node_rank = node_rank;
  c->master_port = port;
  if (!c->master_addr[0]) {
    if (c->rdv_size > 1)
      return wds__fail(
          e, WDS_ERR_INVALID,
          "%d %s (%s) but MASTER_ADDR is not set: export MASTER_ADDR=<address "
          "of node 0> (under SLURM: $(scontrol show hostnames "
          "\"$SLURM_JOB_NODELIST\" | head -n1)) or pass --master-addr",
          c->rdv_size, c->per_process ? "processes" : "nodes", c->source);
    snprintf(c->master_addr, sizeof c->master_addr, "127.0.0.1");
  }
  return WDS_OK;
}

int tr_rdv_env(tr_rdv_config *c, wds__err *e) {
  return tr_rdv_resolve(c, NULL, NULL, e);
}
