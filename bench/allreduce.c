/* allreduce.c — wds_bench_allreduce: the CPU backend's gradient sum across
 * processes, timed (scripts/bench-allreduce.sh runs it; docs/performance.md
 * has the figures). One rank thread per process, MB megabytes of floats.
 *
 *   under mpirun:   wds_bench_allreduce MB REPEAT
 *                   (MPI: alltoall of slices, ordered sums, allgather;
 *                   with WDS_TRAIN_MPI_SUM=star the reference: every
 *                   buffer gathered at process 0, summed, broadcast back,
 *                   as the retired rendezvous' star sum moved it)
 *
 * Process 0 prints one line: the method, processes, megabytes, the median
 * seconds per all-reduce (and the buffer's GB/s at it) and the checksum of
 * the result (the same for both methods: the bits of the sum in rank
 * order). A build without MPI says so and exits 2. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/procgroup.h"
#ifdef WDS_TRAINER_MPI
#include "trainer/pg_mpi.h"
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: mpirun -np N wds_bench_allreduce MB REPEAT\n");
    return 2;
  }
  size_t mb = strtoul(argv[1], NULL, 10);
  int repeat = atoi(argv[2]);
  tr_pg_config c = {.local_ranks = 1,
                    .procs = 1,
                    .host_collectives = 1,
                    .collective_timeout_ms = 600000};
  const char *how = getenv("WDS_TRAIN_MPI_SUM");
  const char *method = how && strcmp(how, "star") == 0
                           ? "star (MPI_Gather to 0, MPI_Bcast)"
                           : "MPI (alltoall, ordered sums, allgather)";
  wds__err e;
#ifdef WDS_TRAINER_MPI
  tr_mpi_topology topo;
  if (tr_mpi_init(&topo, &e) != WDS_OK) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  c.procs = topo.size;
  c.proc_rank = topo.rank;
  c.mpi = 1;
#else
  fprintf(stderr, "built without MPI: nothing to measure\n");
  return 2;
#endif
  tr_pg *g;
  if (tr_pg_create(&c, &g, &e) != WDS_OK || tr_pg_start(g, &e) != WDS_OK) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  size_t n = mb * 1000 * 1000 / sizeof(float);
  float *buf = malloc(n * sizeof(float));
  double *t = calloc((size_t)repeat, sizeof *t);
  uint64_t sum = 0;
  for (int k = 0; k < repeat; k++) {
    for (size_t i = 0; i < n; i++)
      buf[i] = (float)((i * 7 + (size_t)c.proc_rank * 13) % 17) * 0.37f;
    double t0 = now_s();
    if (tr_pg_allreduce_f32(g, 0, buf, n) != WDS_OK) {
      fprintf(stderr, "all-reduce failed\n");
      return 1;
    }
    t[k] = now_s() - t0;
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, &buf[i], 4);
    sum = sum * 31 + b;
  }
  qsort(t, (size_t)repeat, sizeof *t, cmp_double);
  if (c.proc_rank == 0)
    printf("%-40s procs %d  %zu MB  median %.3f s  %.2f GB/s of buffer  "
           "sum %016llx\n",
           method, c.procs, mb, t[repeat / 2],
           (double)(n * sizeof(float)) / t[repeat / 2] / 1e9,
           (unsigned long long)sum);
  tr_pg_destroy(g);
  free(buf);
  free(t);
#ifdef WDS_TRAINER_MPI
  tr_mpi_finalize();
#endif
  return 0;
}
