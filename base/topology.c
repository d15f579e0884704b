/* topology.c — see topology.h. A pure function of the variable lookup. */
#include "base/topology.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct getter {
  wds__getenv_fn get;
  void *ctx;
} getter;

const char *wds__topology_var(wds__getenv_fn get, void *ctx, const char *name) {
  const char *v = get ? get(name, ctx) : getenv(name);
  return v && v[0] ? v : NULL;
}

static const char *var(const getter *g, const char *name) {
  return wds__topology_var(g->get, g->ctx, name);
}

int wds__topology_int(const char *name, const char *v, long lo, long hi,
                      int *out, wds__err *e) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return wds__fail(e, WDS_ERR_INVALID, "%s='%s': not an integer in %ld..%ld",
                     name, v, lo, hi);
  *out = (int)x;
  return WDS_OK;
}

#define MAX_WORLD (1L << 20)

/* torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, then the one that
 * marks a process torchrun started without giving a rank. */
static const char *const torchrun_names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK",
                                             "TORCHELASTIC_RUN_ID"};

static int torchrun(const getter *g, wds__topology *t, wds__err *e) {
  const char *const *names = torchrun_names;
  const char *vals[4], *lworld_s = var(g, "LOCAL_WORLD_SIZE");
  int rc;
  for (int i = 0; i < 4; i++)
    vals[i] = var(g, names[i]);
  int set = vals[0] ? 0 : vals[1] ? 1 : vals[2] ? 2 : 3;
  for (int i = 0; i < 2; i++)
    if (!vals[i])
      return wds__fail(e, WDS_ERR_INVALID,
                       "%s is not set, but %s='%s' is (torchrun sets RANK, "
                       "WORLD_SIZE and LOCAL_RANK together)",
                       names[i], names[set], vals[set]);
  if ((rc = wds__topology_int("WORLD_SIZE", vals[1], 1, MAX_WORLD,
                              &t->world_size, e)) ||
      (rc = wds__topology_int("RANK", vals[0], 0, t->world_size - 1, &t->rank,
                              e)))
    return rc;
  if (lworld_s &&
      (rc = wds__topology_int("LOCAL_WORLD_SIZE", lworld_s, 1, t->world_size,
                              &t->local_world_size, e)))
    return rc;
  if (!vals[2])
    return WDS_OK;
  if (!lworld_s)
    t->local_world_size = t->world_size;
  int lworld = t->local_world_size;
  if ((rc = wds__topology_int("LOCAL_RANK", vals[2], 0, lworld - 1,
                              &t->local_rank, e)))
    return rc;
  if (t->world_size % lworld != 0)
    return wds__fail(e, WDS_ERR_INVALID,
                     "WORLD_SIZE=%d is not a multiple of LOCAL_WORLD_SIZE=%d "
                     "(every node must run the same number of processes)",
                     t->world_size, lworld);
  if (t->rank % lworld != t->local_rank)
    return wds__fail(e, WDS_ERR_INVALID,
                     "RANK=%d and LOCAL_RANK=%d disagree with "
                     "LOCAL_WORLD_SIZE=%d (expected LOCAL_RANK=%d: ranks are "
                     "numbered node by node)",
                     t->rank, t->local_rank, lworld, t->rank % lworld);
  return WDS_OK;
}

/* SLURM and Open MPI: rank, size, and optional local rank and size. */
static int pair(const getter *g, const char *const names[4], wds__topology *t,
                wds__err *e) {
  const char *lrank_s = names[2] ? var(g, names[2]) : NULL;
  const char *lsize_s = names[3] ? var(g, names[3]) : NULL;
  int rc;
  if ((rc = wds__topology_int(names[1], var(g, names[1]), 1, MAX_WORLD,
                              &t->world_size, e)) ||
      (rc = wds__topology_int(names[0], var(g, names[0]), 0, t->world_size - 1,
                              &t->rank, e)))
    return rc;
  if (lsize_s && (rc = wds__topology_int(names[3], lsize_s, 1, t->world_size,
                                         &t->local_world_size, e)))
    return rc;
  if (lrank_s &&
      (rc = wds__topology_int(
           names[2], lrank_s, 0,
           (t->local_world_size > 0 ? t->local_world_size : t->world_size) - 1,
           &t->local_rank, e)))
    return rc;
  return WDS_OK;
}

int wds__topology_from_env(wds__topology *t, wds__getenv_fn get, void *ctx,
                           wds__err *e) {
  static const char *const slurm[4] = {"SLURM_PROCID", "SLURM_NTASKS",
                                       "SLURM_LOCALID", NULL};
  static const char *const ompi[4] = {
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
      "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
  static const char *const pmi[4] = {"PMI_RANK", "PMI_SIZE", NULL, NULL};
  static const struct {
    wds__launcher launcher;
    const char *const *names;
  } pairs[] = {{WDS__LAUNCHER_SLURM, slurm},
               {WDS__LAUNCHER_OMPI, ompi},
               {WDS__LAUNCHER_PMI, pmi}};
  getter g = {get, ctx};
  int rc = WDS_OK;
  wds__topology none = {WDS__LAUNCHER_NONE, 0, 1, -1, -1, NULL, NULL};
  *t = none;
  /* torchrun first: under mpirun or srun, torchrun's children inherit the
   * launcher's variables, which then name torchrun's agent, not them. */
  if (var(&g, torchrun_names[0]) || var(&g, torchrun_names[1]) ||
      var(&g, torchrun_names[2]) || var(&g, torchrun_names[3])) {
    t->launcher = WDS__LAUNCHER_TORCHRUN;
    t->rank_var = "RANK";
    t->size_var = "WORLD_SIZE";
    rc = torchrun(&g, t, e);
    goto out;
  }
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    const char *const *n = pairs[i].names;
    if (var(&g, n[0]) && var(&g, n[1])) {
      t->launcher = pairs[i].launcher;
      t->rank_var = n[0];
      t->size_var = n[1];
      rc = pair(&g, n, t, e);
      goto out;
    }
  }
  /* A rank without the size of its job, or a size without the rank
   * (SLURM_PROCID or SLURM_NTASKS alone is a batch script's, not a
   * rank's). */
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    const char *const *n = pairs[i].names;
    if (pairs[i].launcher == WDS__LAUNCHER_SLURM)
      continue;
    if (var(&g, n[0])) {
      rc = wds__fail(e, WDS_ERR_INVALID,
                     "%s='%s' is set but %s is not: a rank of a job of "
                     "unknown size",
                     n[0], var(&g, n[0]), n[1]);
      goto out;
    }
    if (var(&g, n[1])) {
      rc = wds__fail(e, WDS_ERR_INVALID,
                     "%s='%s' is set but %s is not: the size of a job "
                     "without this process's rank in it (every process "
                     "would run the whole job)",
                     n[1], var(&g, n[1]), n[0]);
      goto out;
    }
  }
  const char *pmix = var(&g, "PMIX_RANK");
  if (pmix && strcmp(pmix, "0") != 0)
    rc = wds__fail(e, WDS_ERR_INVALID,
                   "PMIX_RANK='%s' names a process of a PMIx launch, but no "
                   "launcher variable gives the job's size (SLURM_NTASKS, "
                   "OMPI_COMM_WORLD_SIZE, PMI_SIZE)",
                   pmix);
out:
  if (rc != WDS_OK)
    *t = none;
  return rc;
}
