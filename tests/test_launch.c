/* test_launch.c — how a wds-train process joins its job outside MPI
 * (trainer/launch.h): torchrun's variables and NCCL's bootstrap address,
 * the refusal of every environment that would make a duplicate job (the
 * launchers' variables without an MPI launch, the retired NNODES/NODE_RANK),
 * CPU ranks across processes without MPI; and the process group of one
 * process (trainer/procgroup.h). No GPU, no network. */
#include "trainer/launch.h"
#include "trainer/procgroup.h"

#include <pthread.h>
#include <stdint.h>

#include "tests/test.h"
#include "wds/loader.h"

static int resolve(tr_launch *c, wds__err *e, const char *const *vars) {
  e->msg[0] = '\0';
  return tr_launch_resolve(c, test_env_lookup, (void *)vars, e);
}

TEST(single_process_default) {
  tr_launch c;
  wds__err e;
  /* SLURM_NNODES/SLURM_NODEID alone (a batch script) and NNODES=1 are one
   * process; MASTER_ADDR is not needed. */
  const char *vars[] = {"SLURM_NNODES=2", "SLURM_NODEID=0", "NNODES=1",
                        "NODE_RANK=0", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, vars), WDS_OK);
  ASSERT_EQ_INT(c.procs, 1);
  ASSERT_EQ_INT(c.proc_rank, 0);
  ASSERT_EQ_INT(c.per_process, 0);
  ASSERT_EQ_INT(c.local_rank, -1);
  ASSERT_STREQ(c.nccl_comm_id, "");
  ASSERT_STREQ(c.source, "single process");
  const char *none[] = {NULL};
  ASSERT_EQ_INT(resolve(&c, &e, none), WDS_OK);
  ASSERT_EQ_INT(c.procs, 1);
}

TEST(torchrun_nccl_comm_id_from_master) {
  tr_launch c;
  wds__err e;
  const char *vars[] = {
      "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29400",  "RANK=5",    "WORLD_SIZE=8",
      "LOCAL_RANK=1",         "LOCAL_WORLD_SIZE=4", "NNODES=99", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, vars), WDS_OK);
  ASSERT_EQ_INT(c.per_process, 1);
  ASSERT_EQ_INT(c.procs, 8);
  ASSERT_EQ_INT(c.proc_rank, 5);
  ASSERT_EQ_INT(c.local_rank, 1);
  /* torchrun's store has 29400: NCCL's root listens next to it. */
  ASSERT_STREQ(c.nccl_comm_id, "10.0.0.1:29401");
  ASSERT_STREQ(c.nccl_comm_id_from, "MASTER_ADDR, MASTER_PORT + 1");

  /* MASTER_PORT missing: 29500 + 1; a numeric IPv6 address in brackets. */
  const char *v6[] = {"MASTER_ADDR=fd00::1", "RANK=0", "WORLD_SIZE=2",
                      "LOCAL_RANK=0", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, v6), WDS_OK);
  ASSERT_STREQ(c.nccl_comm_id, "[fd00::1]:29501");
  const char *host[] = {"MASTER_ADDR=node001", "MASTER_PORT=1234", "RANK=1",
                        "WORLD_SIZE=2",        "LOCAL_RANK=1",     NULL};
  ASSERT_EQ_INT(resolve(&c, &e, host), WDS_OK);
  ASSERT_STREQ(c.nccl_comm_id, "node001:1235");

  /* NCCL_COMM_ID given: used as it is, MASTER_* not needed. */
  const char *given[] = {"NCCL_COMM_ID=[::1]:7000", "RANK=1", "WORLD_SIZE=2",
                         "LOCAL_RANK=1", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, given), WDS_OK);
  ASSERT_STREQ(c.nccl_comm_id, "[::1]:7000");
  ASSERT_STREQ(c.nccl_comm_id_from, "NCCL_COMM_ID");

  /* One process of one: no address needed, none made. */
  const char *one[] = {"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, one), WDS_OK);
  ASSERT_EQ_INT(c.procs, 1);
  ASSERT_STREQ(c.nccl_comm_id, "");
}

typedef struct bad_case {
  const char *vars[8];
  const char *want[2];
} bad_case;

static void expect_refused(const bad_case *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    tr_launch c;
    wds__err e;
    int rc = resolve(&c, &e, cases[i].vars);
    printf("  case %zu: %s\n", i, e.msg);
    ASSERT_EQ_INT(rc, WDS_ERR_INVALID);
    ASSERT_CONTAINS(e.msg, cases[i].want[0]);
    ASSERT_CONTAINS(e.msg, cases[i].want[1]);
  }
}

TEST(errors_name_variable_and_value) {
  static const bad_case cases[] = {
      {{"RANK=0", "WORLD_SIZE=2", NULL}, {"LOCAL_RANK is not set", "RANK='0'"}},
      {{"LOCAL_RANK=0", NULL}, {"RANK is not set", "LOCAL_RANK='0'"}},
      {{"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL}, {"RANK='2'", "0..1"}},
      {{"RANK=0", "WORLD_SIZE=6", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=4", NULL},
       {"WORLD_SIZE=6 is not a multiple of LOCAL_WORLD_SIZE=4", ""}},
      {{"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=4",
        "MASTER_ADDR=h", NULL},
       {"RANK=5 and LOCAL_RANK=0", "expected LOCAL_RANK=1"}},
      /* Several processes and nowhere to meet. */
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", NULL},
       {"neither NCCL_COMM_ID nor MASTER_ADDR", "2 processes"}},
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h",
        "MASTER_PORT=70000", NULL},
       {"MASTER_PORT='70000'", "1..65535"}},
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h",
        "MASTER_PORT=12ab", NULL},
       {"MASTER_PORT='12ab'", ""}},
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h",
        "MASTER_PORT=65535", NULL},
       {"MASTER_PORT=65535", "NCCL_COMM_ID"}},
      /* NCCL_COMM_ID not in NCCL's forms: said at start, not by NCCL. */
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "NCCL_COMM_ID=host", NULL},
       {"NCCL_COMM_ID='host'", "host:port"}},
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "NCCL_COMM_ID=h:0", NULL},
       {"NCCL_COMM_ID='h:0'", "<hostname>:<port>"}},
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "NCCL_COMM_ID=::1:80", NULL},
       {"NCCL_COMM_ID='::1:80'", "[<ipv6>]:<port>"}},
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "NCCL_COMM_ID=:80", NULL},
       {"NCCL_COMM_ID=':80'", ""}},
      {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "NCCL_COMM_ID=[]:80", NULL},
       {"NCCL_COMM_ID='[]:80'", ""}},
  };
  expect_refused(cases, sizeof cases / sizeof cases[0]);
}

/* An environment that names this process a rank of several that wds-train
 * cannot join without MPI is refused, naming the variables (issue 36:
 * before, each process ran the whole job alone); so is the retired form of
 * one process per node, which without its rendezvous would be the same
 * duplicate. */
TEST(refuses_duplicate_jobs) {
  static const bad_case cases[] = {
      {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
        "OMPI_COMM_WORLD_LOCAL_RANK=1", NULL},
       {"OMPI_COMM_WORLD_RANK=1 and OMPI_COMM_WORLD_SIZE=2", "mpirun"}},
      /* Rank 0 too: it would train alone on a share of the data. */
      {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", NULL},
       {"rank 0 of 2", "duplicate"}},
      {{"SLURM_PROCID=1", "SLURM_NTASKS=2", NULL},
       {"SLURM_PROCID=1 and SLURM_NTASKS=2", "srun --mpi=pmix"}},
      {{"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_NNODES=2", "SLURM_NODEID=1",
        "MASTER_ADDR=h", NULL},
       {"rank 1 of 2", "not launched by MPI"}},
      {{"PMI_RANK=1", "PMI_SIZE=2", NULL},
       {"PMI_RANK=1 and PMI_SIZE=2", "torchrun"}},
      {{"PMI_RANK=1", NULL}, {"PMI_RANK='1'", "PMI_SIZE is not"}},
      {{"PMIX_RANK=1", NULL}, {"PMIX_RANK='1'", "size"}},
      /* The retired one-process-per-node form. */
      {{"NNODES=2", "NODE_RANK=1", "MASTER_ADDR=h", NULL},
       {"NNODES=2", "mpirun -np N"}},
      {{"NODE_RANK=1", NULL}, {"NODE_RANK=1", "torchrun"}},
      {{"NNODES=two", NULL}, {"NNODES=two", "unset NNODES"}},
  };
  expect_refused(cases, sizeof cases / sizeof cases[0]);
  /* A launcher of one process is one job; so is torchrun under srun
   * (torchrun's variables win: SLURM_PROCID is then the node's agent). */
  tr_launch c;
  wds__err e;
  const char *one[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1",
                       NULL};
  ASSERT_EQ_INT(resolve(&c, &e, one), WDS_OK);
  ASSERT_EQ_INT(c.procs, 1);
  const char *tr[] = {
      "RANK=3",         "WORLD_SIZE=4",   "LOCAL_RANK=1",  "LOCAL_WORLD_SIZE=2",
      "SLURM_PROCID=1", "SLURM_NTASKS=2", "MASTER_ADDR=h", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, tr), WDS_OK);
  ASSERT_EQ_INT(c.proc_rank, 3);
  ASSERT_STREQ(c.nccl_comm_id, "h:29501");
}

/* The public wds_env_topology() and the trainer agree: what the loader
 * reads as rank r of w, the trainer joins as process r of w (torchrun). */
TEST(getenv_and_the_public_rule_agree) {
  /* Single-threaded here: setenv is safe. */
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  unsetenv("MASTER_PORT");
  unsetenv("NCCL_COMM_ID");
  tr_launch c;
  wds__err e;
  int rc = tr_launch_resolve(&c, NULL, NULL, &e);
  int rank = -1, world = -1;
  int prc = wds_env_topology(&rank, &world);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_RANK");
  unsetenv("MASTER_ADDR");
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_EQ_INT(prc, WDS_OK);
  ASSERT_EQ_INT(c.proc_rank, rank);
  ASSERT_EQ_INT(c.procs, world);
  ASSERT_STREQ(c.nccl_comm_id, "127.0.0.1:29501");
}

/* torchrun inside an mpirun or srun task: its children inherit the task's
 * MPI variables (the agent's); torchrun's win in the trainer and in the
 * public wds_env_topology() alike. */
TEST(torchrun_inside_an_mpi_task_agrees_with_the_public_rule) {
  static const char *const vars[][2] = {{"RANK", "1"},
                                        {"WORLD_SIZE", "2"},
                                        {"LOCAL_RANK", "1"},
                                        {"TORCHELASTIC_RUN_ID", "job"},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"OMPI_COMM_WORLD_RANK", "0"},
                                        {"OMPI_COMM_WORLD_SIZE", "1"},
                                        {"PMI_RANK", "0"},
                                        {"PMI_SIZE", "1"},
                                        {"PMIX_RANK", "0"},
                                        {"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "1"}};
  size_t n = sizeof vars / sizeof vars[0];
  for (size_t i = 0; i < n; i++)
    setenv(vars[i][0], vars[i][1], 1);
  unsetenv("NCCL_COMM_ID");
  tr_launch c;
  wds__err e;
  int rc = tr_launch_resolve(&c, NULL, NULL, &e);
  int rank = -1, world = -1;
  int prc = wds_env_topology(&rank, &world);
  for (size_t i = 0; i < n; i++)
    unsetenv(vars[i][0]);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_EQ_INT(prc, WDS_OK);
  ASSERT_EQ_INT(c.per_process, 1);
  ASSERT_EQ_INT(c.proc_rank, 1);
  ASSERT_EQ_INT(c.procs, 2);
  ASSERT_EQ_INT(rank, 1);
  ASSERT_EQ_INT(world, 2);
}

/* NCCL's parser keeps 63 bytes of an unbracketed host (struct netIf's
 * 64-byte prefix; ncclGetUniqueId then fails, "Invalid NCCL_COMM_ID") and
 * 15 of a bracketed address's interface (IF_NAMESIZE): longer ones are
 * refused at the start, naming the limit and the fix. */
TEST(nccl_comm_id_within_nccls_limits) {
  tr_launch c;
  wds__err e;
  const char *h63[] = {
      "NCCL_COMM_ID="
      "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh:7000",
      "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, h63), WDS_OK);
  ASSERT_STREQ(
      c.nccl_comm_id,
      "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh:7000");
  const char *m63[] = {
      "MASTER_ADDR="
      "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh",
      "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, m63), WDS_OK);
  ASSERT_STREQ(
      c.nccl_comm_id,
      "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh:29501");
  const char *scope[] = {"NCCL_COMM_ID=[fe80::1%eeeeeeeeeeeeeee]:7000",
                         "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, scope), WDS_OK);
  static const bad_case cases[] = {
      {{"NCCL_COMM_ID="
        "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh:7000",
        "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", NULL},
       {"the host is 64 bytes, but NCCL reads at most 63",
        "NCCL_COMM_ID=<ip>:<port>"}},
      {{"MASTER_ADDR="
        "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh",
        "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", NULL},
       {"MASTER_ADDR='"
        "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh' and "
        "MASTER_PORT + 1: "
        "NCCL_COMM_ID='"
        "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh:"
        "29501'",
        "at most 63"}},
      {{"NCCL_COMM_ID=[fe80::1%eeeeeeeeeeeeeeee]:7000", "RANK=1",
        "WORLD_SIZE=2", "LOCAL_RANK=1", NULL},
       {"the interface after '%' is 16 bytes", "at most 15"}},
  };
  expect_refused(cases, sizeof cases / sizeof cases[0]);
}

/* NCCL_COMM_ID="" counts as unset: the address derived from MASTER_ADDR is
 * exported in its place (main.c's step before NCCL starts), so the id's
 * way is NCCL_COMM_ID's. */
TEST(empty_nccl_comm_id_is_unset) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  setenv("NCCL_COMM_ID", "", 1);
  tr_launch c;
  wds__err e;
  int rc = tr_launch_resolve(&c, NULL, NULL, &e);
  int xrc = rc == WDS_OK ? tr_launch_export_comm_id(&c, &e) : rc;
  char got[64];
  snprintf(got, sizeof got, "%s", getenv("NCCL_COMM_ID"));
  int mode = tr_launch_nccl_id_mode(c.procs, 0, getenv("NCCL_COMM_ID"), &e);
  /* Given: kept as it is. */
  setenv("NCCL_COMM_ID", "10.1.1.1:5000", 1);
  int krc = tr_launch_export_comm_id(&c, &e);
  char kept[64];
  snprintf(kept, sizeof kept, "%s", getenv("NCCL_COMM_ID"));
  static const char *const names[] = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "NCCL_COMM_ID"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    unsetenv(names[i]);
  ASSERT_EQ_INT(rc, WDS_OK);
  ASSERT_STREQ(c.nccl_comm_id, "127.0.0.1:29501");
  ASSERT_EQ_INT(xrc, WDS_OK);
  ASSERT_STREQ(got, "127.0.0.1:29501");
  ASSERT_EQ_INT(mode, TR_NCCL_ID_ENV);
  ASSERT_EQ_INT(krc, WDS_OK);
  ASSERT_STREQ(kept, "10.1.1.1:5000");
}

/* Without MPI, several processes meet through NCCL only: the CPU backend
 * (host collectives) is refused naming the fix, a device backend needs the
 * NCCL address; the id's way follows (the CUDA backend's seam). */
TEST(cpu_ranks_across_processes_need_mpi) {
  tr_launch c;
  wds__err e;
  const char *vars[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1",
                        "MASTER_ADDR=127.0.0.1", NULL};
  ASSERT_EQ_INT(resolve(&c, &e, vars), WDS_OK);
  ASSERT_EQ_INT(tr_launch_check_backend(&c, 0, 1, &e), WDS_ERR_INVALID);
  printf("  %s\n", e.msg);
  ASSERT_CONTAINS(e.msg, "CPU ranks across processes");
  ASSERT_CONTAINS(e.msg, "need an MPI launch");
  ASSERT_CONTAINS(e.msg, "WDS_WITH_MPI and run mpirun -np N wds-train");
  ASSERT_CONTAINS(e.msg, "process 1 of 2");
  ASSERT_EQ_INT(tr_launch_check_backend(&c, 1, 1, &e), WDS_OK); /* MPI */
  ASSERT_EQ_INT(tr_launch_check_backend(&c, 0, 0, &e), WDS_OK); /* NCCL */
  c.nccl_comm_id[0] = '\0';
  ASSERT_EQ_INT(tr_launch_check_backend(&c, 0, 0, &e), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "NCCL_COMM_ID is not set");
  /* One process: anything goes. */
  const char *none[] = {NULL};
  ASSERT_EQ_INT(resolve(&c, &e, none), WDS_OK);
  ASSERT_EQ_INT(tr_launch_check_backend(&c, 0, 1, &e), WDS_OK);

  ASSERT_EQ_INT(tr_launch_nccl_id_mode(1, 0, NULL, &e), TR_NCCL_ID_LOCAL);
  ASSERT_EQ_INT(tr_launch_nccl_id_mode(1, 0, "h:1", &e), TR_NCCL_ID_LOCAL);
  ASSERT_EQ_INT(tr_launch_nccl_id_mode(4, 1, NULL, &e), TR_NCCL_ID_MPI);
  ASSERT_EQ_INT(tr_launch_nccl_id_mode(4, 1, "h:1", &e), TR_NCCL_ID_MPI);
  ASSERT_EQ_INT(tr_launch_nccl_id_mode(4, 0, "h:1", &e), TR_NCCL_ID_ENV);
  ASSERT_EQ_INT(tr_launch_nccl_id_mode(4, 0, "", &e), -1);
  ASSERT_CONTAINS(e.msg, "4 processes without MPI");

  /* The process group says the same, whoever builds it. */
  tr_pg_config pc = {
      .local_ranks = 2, .procs = 2, .proc_rank = 1, .host_collectives = 1};
  tr_pg *g = (tr_pg *)1;
  ASSERT_EQ_INT(tr_pg_create(&pc, &g, &e), WDS_ERR_INVALID);
  ASSERT_TRUE(g == NULL);
  ASSERT_CONTAINS(e.msg, "need an MPI launch");
  /* Device ranks: a group of this process's ranks, no broadcast. */
  pc.host_collectives = 0;
  ASSERT_EQ_INT(tr_pg_create(&pc, &g, &e), WDS_OK);
  ASSERT_EQ_INT(tr_pg_mpi(g), 0);
  ASSERT_EQ_INT(tr_pg_procs(g), 2);
  unsigned char blob[8] = {0};
  ASSERT_EQ_INT(tr_pg_bcast(g, blob, sizeof blob, &e), WDS_ERR_INVALID);
  ASSERT_CONTAINS(e.msg, "without MPI");
  ASSERT_EQ_INT(tr_pg_start(g, &e), WDS_OK);
  tr_pg_destroy(g);
}

/* ---- the process group of one process ------------------------------------ */

#define L_RANKS 4
#define L_N 1001

typedef struct lrank {
  tr_pg *g;
  int local;
  float buf[L_N], res[L_N];
  double sums[2];
  uint64_t all[L_RANKS];
  int rc, rc_abort;
} lrank;

static float l_value(int rank, int i) {
  /* Sums whose order changes the bits. */
  return (float)((i * 7 + rank * 13) % 17) * 0.37f + (rank == 2 ? 1e7f : 0.f);
}

static void *l_main(void *p) {
  lrank *r = p;
  wds__err e;
  for (int i = 0; i < L_N; i++)
    r->buf[i] = l_value(r->local, i);
  r->sums[0] = r->local + 1;
  r->sums[1] = 0.5;
  r->rc = tr_pg_allreduce_f32(r->g, r->local, r->buf, L_N);
  memcpy(r->res, r->buf, sizeof r->res);
  if (r->rc == WDS_OK)
    r->rc = tr_pg_sum_f64(r->g, r->local, r->sums, 2, &e);
  if (r->rc == WDS_OK)
    r->rc = tr_pg_gather_u64(r->g, r->local, 100 + (uint64_t)r->local, r->all);
  /* Rank 1 fails: the others leave their next collective. */
  if (r->local == 1)
    tr_pg_abort(r->g, "rank 1 failed on purpose");
  r->rc_abort = tr_pg_allreduce_f32(r->g, r->local, r->buf, L_N);
  return NULL;
}

TEST(process_group_of_one_process) {
  tr_pg *g;
  wds__err e;
  ASSERT_EQ_INT(tr_pg_create_local(L_RANKS, &g, &e), WDS_OK);
  ASSERT_EQ_INT(tr_pg_mpi(g), 0);
  unsigned char blob[4] = {1, 2, 3, 4};
  ASSERT_EQ_INT(tr_pg_bcast(g, blob, sizeof blob, &e), WDS_OK); /* no-op */
  ASSERT_EQ_INT(tr_pg_start(g, &e), WDS_OK);
  static lrank r[L_RANKS];
  pthread_t t[L_RANKS];
  for (int k = 0; k < L_RANKS; k++) {
    memset(&r[k], 0, sizeof r[k]);
    r[k].g = g;
    r[k].local = k;
    pthread_create(&t[k], NULL, l_main, &r[k]);
  }
  for (int k = 0; k < L_RANKS; k++)
    pthread_join(t[k], NULL);
  static float want[L_N];
  for (int i = 0; i < L_N; i++) {
    float s = l_value(0, i);
    for (int k = 1; k < L_RANKS; k++)
      s += l_value(k, i);
    want[i] = s;
  }
  for (int k = 0; k < L_RANKS; k++) {
    ASSERT_EQ_INT(r[k].rc, WDS_OK);
    ASSERT_EQ_INT(r[k].rc_abort, WDS_ERR_CANCELLED);
    ASSERT_TRUE(memcmp(r[k].res, want, sizeof want) == 0);
    ASSERT_TRUE(r[k].sums[0] == 10.0 && r[k].sums[1] == 2.0);
    for (int j = 0; j < L_RANKS; j++)
      ASSERT_EQ_U64(r[k].all[j], 100 + (uint64_t)j);
  }
  char why[192];
  tr_pg_why(g, why, sizeof why);
  ASSERT_STREQ(why, "rank 1 failed on purpose");
  ASSERT_TRUE(tr_pg_aborted(g));
  tr_pg_destroy(g);
}

int main(void) {
  RUN(single_process_default);
  RUN(torchrun_nccl_comm_id_from_master);
  RUN(errors_name_variable_and_value);
  RUN(refuses_duplicate_jobs);
  RUN(getenv_and_the_public_rule_agree);
  RUN(torchrun_inside_an_mpi_task_agrees_with_the_public_rule);
  RUN(nccl_comm_id_within_nccls_limits);
  RUN(empty_nccl_comm_id_is_unset);
  RUN(cpu_ranks_across_processes_need_mpi);
  RUN(process_group_of_one_process);
  return test_summary();
}
