/* test_nccl_id.c — the CUDA backend's ncclUniqueId without MPI
 * (trainer/nccl_id.h), on the CPU: NCCL makes an id without a GPU. Under
 * torchrun every process must derive the same id from NCCL_COMM_ID, which
 * wds-train sets from MASTER_ADDR and MASTER_PORT + 1 (trainer/launch.h);
 * what launch.h accepts as NCCL_COMM_ID, NCCL accepts. Built in CUDA
 * builds (NCCL found); needs no GPU, so it is no `gpu` test. */
#include "trainer/launch.h"
#include "trainer/nccl_id.h"

#include <sys/wait.h>
#include <unistd.h>

#include "tests/test.h"

/* Process `rank` of 2 as torchrun starts it: the launch from its
 * variables, NCCL_COMM_ID exported as main.c does, its id into *id. */
static int id_of_process(int rank, const char *port, ncclUniqueId *id,
                         wds__err *e) {
  char r[16], p[32];
  snprintf(r, sizeof r, "RANK=%d", rank);
  snprintf(p, sizeof p, "MASTER_PORT=%s", port);
  const char *vars[] = {
      r, "WORLD_SIZE=2",          rank ? "LOCAL_RANK=1" : "LOCAL_RANK=0",
      p, "MASTER_ADDR=127.0.0.1", NULL};
  tr_launch l;
  unsetenv("NCCL_COMM_ID"); /* as torchrun starts it: not set */
  int rc = tr_launch_resolve(&l, test_env_lookup, (void *)vars, e);
  if (rc != WDS_OK)
    return rc;
  if ((rc = tr_launch_check_backend(&l, 0, 0, e)) != WDS_OK)
    return rc;
  if ((rc = tr_launch_export_comm_id(&l, e)) != WDS_OK) /* as main.c */
    return rc;
  tr_pg_config pc = {
      .local_ranks = 1, .procs = l.procs, .proc_rank = l.proc_rank};
  tr_pg *g;
  if ((rc = tr_pg_create(&pc, &g, e)) != WDS_OK)
    return rc;
  rc = tr_nccl_id(g, l.procs, l.proc_rank, id, e);
  tr_pg_destroy(g);
  return rc;
}

/* The id process `rank` derives, computed in a child process of its own
 * (no NCCL state shared with this one). */
static int id_in_child(int rank, const char *port, ncclUniqueId *id) {
  int fds[2];
  if (pipe(fds) != 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    wds__err e;
    ncclUniqueId mine;
    int rc = id_of_process(rank, port, &mine, &e);
    if (rc != WDS_OK)
      fprintf(stderr, "process %d: %s\n", rank, e.msg);
    ssize_t w = rc == WDS_OK ? write(fds[1], &mine, sizeof mine) : 0;
    _exit(w == (ssize_t)sizeof mine ? 0 : 1);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], id, sizeof *id);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return got == (ssize_t)sizeof *id && WIFEXITED(status) &&
                 WEXITSTATUS(status) == 0
             ? 0
             : -1;
}

/* The property the torchrun path rests on: both processes hold the same
 * id, made from the address alone; another port gives another id. */
TEST(every_process_derives_the_same_id) {
  ncclUniqueId a, b, c;
  ASSERT_EQ_INT(id_in_child(0, "29400", &a), 0);
  ASSERT_EQ_INT(id_in_child(1, "29400", &b), 0);
  ASSERT_EQ_INT(id_in_child(1, "29402", &c), 0);
  ASSERT_TRUE(memcmp(&a, &b, sizeof a) == 0);
  ASSERT_TRUE(memcmp(&a, &c, sizeof a) != 0);
}

/* One process: a fresh id (NCCL's random one) each time. */
TEST(one_process_makes_its_own) {
  unsetenv("NCCL_COMM_ID");
  tr_pg *g;
  wds__err e;
  ASSERT_EQ_INT(tr_pg_create_local(2, &g, &e), WDS_OK);
  ncclUniqueId a, b;
  ASSERT_EQ_INT(tr_nccl_id(g, 1, 0, &a, &e), WDS_OK);
  ASSERT_EQ_INT(tr_nccl_id(g, 1, 0, &b, &e), WDS_OK);
  ASSERT_TRUE(memcmp(&a, &b, sizeof a) != 0);
  tr_pg_destroy(g);
}

/* Several processes, no MPI and no address: an error, not a hang. */
TEST(no_address_no_id) {
  unsetenv("NCCL_COMM_ID");
  tr_pg_config pc = {.local_ranks = 1, .procs = 2, .proc_rank = 1};
  tr_pg *g;
  wds__err e;
  ASSERT_EQ_INT(tr_pg_create(&pc, &g, &e), WDS_OK);
  ncclUniqueId id;
  ASSERT_EQ_INT(tr_nccl_id(g, 2, 1, &id, &e), WDS_ERR_INVALID);
  printf("  %s\n", e.msg);
  ASSERT_CONTAINS(e.msg, "NCCL_COMM_ID is not set");
  tr_pg_destroy(g);
}

/* launch.h's check of NCCL_COMM_ID against NCCL's own parse: what passes
 * the start reaches NCCL as an address it takes, and what NCCL refuses is
 * said at start. Stricter on purpose: no port or port 0 (NCCL's root would
 * listen on a port the other processes cannot know). */
typedef struct form {
  const char *v;
  int ours, nccls; /* taken */
} form;

TEST(launch_and_nccl_agree_on_the_forms) {
  static const form forms[] = {{"127.0.0.1:7000", 1, 1}, {"[::1]:7000", 1, 1},
                               {"localhost:7000", 1, 1}, {"host", 0, 0},
                               {"::1:7000", 0, 0},       {":7000", 0, 0},
                               {"127.0.0.1:", 0, 1},     {"127.0.0.1:0", 0, 1}};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    char v[64];
    snprintf(v, sizeof v, "NCCL_COMM_ID=%s", forms[i].v);
    const char *vars[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", v, NULL};
    tr_launch l;
    wds__err e;
    int ours =
        tr_launch_resolve(&l, test_env_lookup, (void *)vars, &e) == WDS_OK;
    setenv("NCCL_COMM_ID", forms[i].v, 1);
    ncclUniqueId id;
    int nccls = ncclGetUniqueId(&id) == ncclSuccess;
    printf("  %-16s launch %s, NCCL %s\n", forms[i].v,
           ours ? "takes" : "refuses", nccls ? "takes" : "refuses");
    ASSERT_EQ_INT(ours, forms[i].ours);
    ASSERT_EQ_INT(nccls, forms[i].nccls);
  }
  unsetenv("NCCL_COMM_ID");
}

int main(void) {
  /* First: the children fork before this process has started NCCL. */
  RUN(every_process_derives_the_same_id);
  RUN(one_process_makes_its_own);
  RUN(no_address_no_id);
  RUN(launch_and_nccl_agree_on_the_forms);
  return test_summary();
}
