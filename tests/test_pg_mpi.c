/* test_pg_mpi.c — the process group over MPI (trainer/pg_mpi.c), run by
 * ctest under mpirun -np 2 and -np 4: every process is one process of the
 * group, with 2 local rank threads.
 *
 *   * the topology from MPI (rank, size, local rank, node);
 *   * the blob (the NCCL id's path) from process 0 to every process;
 *   * the all-reduce: the sum in global rank order, element by element
 *     (values whose float sum depends on the order), the same bits on every
 *     rank, for sizes that do not divide by the process count (0, 1, 5,
 *     1001, 100003 elements) and more than once with one buffer;
 *   * the f64 sums and the u64 gather (step counts, checksums, fingerprints)
 *     in global rank order.
 * Each process prints its own `N passed, N failed`; the run fails when one
 * of them fails (the exit status of mpirun). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trainer/pg_mpi.h"
#include "trainer/procgroup.h"

#define LOCAL 2
#define MAX_N 100003

static tr_mpi_topology topo;
static tr_pg *pg;

static float value(int grank, size_t i) {
  /* large and small magnitudes: float addition order shows */
  return (grank % 2 ? 1e7f : 1.0f) *
             (float)((i * 7 + (size_t)grank * 13) % 17) +
         0.1f * (float)grank + 1e-3f * (float)(i % 5);
}

typedef struct rank_arg {
  int local, rc;
  float *buf;
  double sums[3];
  uint64_t all[64 * LOCAL];
} rank_arg;

static const size_t sizes[] = {0, 1, 5, 1001, MAX_N, 1001};
#define NSIZES (sizeof sizes / sizeof sizes[0])
static float *results[LOCAL][NSIZES];

static void *rank_main(void *p) {
  rank_arg *a = p;
  int grank = topo.rank * LOCAL + a->local;
  wds__err e;
  for (size_t s = 0; s < NSIZES && a->rc == WDS_OK; s++) {
    for (size_t i = 0; i < sizes[s]; i++)
      a->buf[i] = value(grank, i);
    a->rc = tr_pg_allreduce_f32(pg, a->local, a->buf, sizes[s]);
    memcpy(results[a->local][s], a->buf, sizes[s] * sizeof(float));
  }
  a->sums[0] = grank;
  a->sums[1] = 0.1 * grank;
  a->sums[2] = grank % 2 ? 1e17 : 1.0;
  if (a->rc == WDS_OK)
    a->rc = tr_pg_sum_f64(pg, a->local, a->sums, 3, &e);
  if (a->rc == WDS_OK)
    a->rc = tr_pg_gather_u64(pg, a->local, 1000 + (uint64_t)grank, a->all);
  return NULL;
}

TEST(topology_from_mpi) {
  printf("  process %d of %d, local %d of %d, node %d of %d\n", topo.rank,
         topo.size, topo.local_rank, topo.local_size, topo.node, topo.nodes);
  ASSERT_TRUE(topo.size >= 2 && topo.size <= 64);
  ASSERT_TRUE(topo.rank >= 0 && topo.rank < topo.size);
  /* One machine: one node, the local rank is the rank. */
  ASSERT_EQ_INT(topo.nodes, 1);
  ASSERT_EQ_INT(topo.node, 0);
  ASSERT_EQ_INT(topo.local_size, topo.size);
  ASSERT_EQ_INT(topo.local_rank, topo.rank);
}

TEST(bcast_from_process_0) {
  unsigned char blob[128];
  for (int i = 0; i < 128; i++)
    blob[i] = topo.rank == 0 ? (unsigned char)(i * 3 + 1) : 0;
  wds__err e;
  ASSERT_EQ_INT(tr_pg_bcast(pg, blob, sizeof blob, &e), WDS_OK);
  for (int i = 0; i < 128; i++)
    ASSERT_EQ_INT(blob[i], (unsigned char)(i * 3 + 1));
}

TEST(collectives_in_global_rank_order) {
  rank_arg a[LOCAL];
  pthread_t t[LOCAL];
  for (int k = 0; k < LOCAL; k++) {
    memset(&a[k], 0, sizeof a[k]);
    a[k].local = k;
    a[k].buf = malloc(MAX_N * sizeof(float));
    for (size_t s = 0; s < NSIZES; s++)
      results[k][s] = malloc((sizes[s] + 1) * sizeof(float));
    pthread_create(&t[k], NULL, rank_main, &a[k]);
  }
  for (int k = 0; k < LOCAL; k++)
    pthread_join(t[k], NULL);
  int ranks = topo.size * LOCAL;
  float *want = malloc(MAX_N * sizeof(float));
  for (size_t s = 0; s < NSIZES; s++) {
    for (size_t i = 0; i < sizes[s]; i++) {
      float sum = value(0, i);
      for (int g = 1; g < ranks; g++)
        sum += value(g, i);
      want[i] = sum;
    }
    for (int k = 0; k < LOCAL; k++)
      ASSERT_TRUE(memcmp(results[k][s], want, sizes[s] * sizeof(float)) == 0);
  }
  /* Another order would give other bits: the test can tell. */
  float rev = value(ranks - 1, 3);
  for (int g = ranks - 2; g >= 0; g--)
    rev += value(g, 3);
  float fwd = value(0, 3);
  for (int g = 1; g < ranks; g++)
    fwd += value(g, 3);
  printf("  element 3: in rank order %.9g, reversed %.9g\n", (double)fwd,
         (double)rev);
  double s0 = 0, s1 = 0, s2 = 0;
  for (int g = 0; g < ranks; g++) {
    s0 += g;
    s1 += 0.1 * g;
    s2 += g % 2 ? 1e17 : 1.0;
  }
  for (int k = 0; k < LOCAL; k++) {
    ASSERT_EQ_INT(a[k].rc, WDS_OK);
    ASSERT_TRUE(a[k].sums[0] == s0 && a[k].sums[1] == s1 && a[k].sums[2] == s2);
    for (int g = 0; g < ranks; g++)
      ASSERT_EQ_U64(a[k].all[g], 1000 + (uint64_t)g);
    free(a[k].buf);
    for (size_t s = 0; s < NSIZES; s++)
      free(results[k][s]);
  }
  free(want);
}

int main(void) {
  wds__err e;
  if (!tr_mpi_launched()) {
    printf("not under mpirun: skipped\n");
    return 77;
  }
  if (tr_mpi_init(&topo, &e) != WDS_OK) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  tr_pg_config c = {.local_ranks = LOCAL,
                    .procs = topo.size,
                    .proc_rank = topo.rank,
                    .host_collectives = 1,
                    .collective_timeout_ms = 60000,
                    .mpi = 1};
  if (tr_pg_create(&c, &pg, &e) != WDS_OK || tr_pg_start(pg, &e) != WDS_OK) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  RUN(topology_from_mpi);
  RUN(bcast_from_process_0);
  RUN(collectives_in_global_rank_order);
  tr_pg_destroy(pg);
  int rc = test_summary();
  tr_mpi_finalize();
  return rc;
}
