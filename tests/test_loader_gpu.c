/* test_loader_gpu.c — batch slots are pinned host memory when a GPU is
 * present (label gpu). Without a GPU it exits 77, which ctest reports as
 * skipped, visibly. Built only with CUDA (WDS_WITH_CUDA). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shards/tarw.h"
#include "test.h"
#include "wds/loader.h"

static char path[256];

TEST(slots_are_pinned_and_copyable) {
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  ASSERT_EQ_INT(wds__tarw_open_path(path, &o, &w, &e), WDS_OK);
  for (int i = 0; i < 8; i++) {
    char name[32], val[8];
    snprintf(name, sizeof name, "k%d.cls", i);
    snprintf(val, sizeof val, "%d", i);
    wds__tarw_add(w, name, val, strlen(val), &e);
  }
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);
  wds_field_spec fs[1] = {{"cls", WDS_DECODE_INT, 0, 0, 0}};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.spec = path;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 1;
  c.fields = fs;
  c.field_count = 1;
  c.batch_size = 8;
  wds_loader *l = NULL;
  const wds_batch *b = NULL;
  void *dev = NULL;
  int64_t back[8];
  struct cudaPointerAttributes attr;
  CHECK_EQ_INT(wds_loader_open(&c, &l), WDS_OK);
  CHECK(strcmp(wds_loader_allocator_name(l), "cuda-pinned") == 0);
  CHECK_EQ_INT(wds_loader_next(l, &b), WDS_OK);
  CHECK_EQ_INT(cudaPointerGetAttributes(&attr, b->fields[0].data), cudaSuccess);
  CHECK_EQ_INT(attr.type, cudaMemoryTypeHost);
  CHECK_EQ_INT(cudaMalloc(&dev, 64), cudaSuccess);
  CHECK_EQ_INT(cudaMemcpy(dev, b->fields[0].data, 64, cudaMemcpyHostToDevice),
               cudaSuccess);
  CHECK_EQ_INT(cudaMemcpy(back, dev, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 8; i++)
    CHECK_EQ_INT(back[i], i);
done: /* on every path: compute-sanitizer's leak check (scripts/gpu-run.sh) */
  if (dev)
    cudaFree(dev);
  if (b)
    wds_loader_release(l, b);
  if (l)
    wds_loader_close(l);
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("SKIP: no GPU (cudaGetDeviceCount: %d devices)\n", n);
    return 77;
  }
  snprintf(path, sizeof path, "/tmp/wds-test-gpu-%d.tar", (int)getpid());
  RUN(slots_are_pinned_and_copyable);
  unlink(path);
  return test_summary();
}
