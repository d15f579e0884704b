/* test_loader_gpu.c — batch slots are pinned host memory when a GPU is
 * present, and batches copied with wds/cuda.h arrive intact although the
 * copies run late (label gpu). Without a GPU it exits 77, which ctest reports
 * as skipped, visibly. Built only with CUDA (WDS_WITH_CUDA). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shards/tarw.h"
#include "test.h"
#include "wds/cuda.h"
#include "wds/loader.h"

int wds_test_spin(cudaStream_t stream, long long cycles); /* gpu_spin.cu */

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

/* A shard of N samples whose cls is its number, for the copy test. */
enum { GPU_SAMPLES = 200, GPU_BATCH = 8, GPU_EPOCHS = 3 };
static char path2[256];

static int open_loader(wds_loader **l) {
  static wds_field_spec fs[1] = {{"cls", WDS_DECODE_INT, 0, 0, 0}};
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  c.spec = path2;
  c.rank = 0;
  c.world_size = 1;
  c.workers = 2;
  c.fields = fs;
  c.field_count = 1;
  c.batch_size = GPU_BATCH;
  c.prefetch_batches = 3;
  c.shuffle_buffer = 50;
  c.seed = 7;
  return wds_loader_open(&c, l);
}

/* Every batch of GPU_EPOCHS epochs copied to the device with a long kernel
 * queued before each copy; early: wds_loader_release() right after the
 * copy (the race), else wds_cuda_batch_copy (the fence). Returns the
 * batches that differ from the host's rows at next(); -1 on a failure. */
static int copy_late(int early, size_t *batches) {
  wds_loader *l;
  if (open_loader(&l) != WDS_OK)
    return -1;
  cudaStream_t st;
  int64_t *dev = NULL;
  size_t cap = (size_t)GPU_EPOCHS * (GPU_SAMPLES / GPU_BATCH + 1);
  int64_t *want = calloc(cap * GPU_BATCH, sizeof *want);
  int64_t *got = calloc(cap * GPU_BATCH, sizeof *got);
  if (cudaStreamCreate(&st) != cudaSuccess ||
      cudaMalloc((void **)&dev, cap * GPU_BATCH * sizeof *dev) != cudaSuccess)
    return -1;
  size_t k = 0;
  for (int e = 0; e < GPU_EPOCHS; e++) {
    const wds_batch *b;
    while (wds_loader_next(l, &b) == WDS_OK && k < cap) {
      memcpy(want + k * GPU_BATCH, b->fields[0].data, b->fields[0].size_bytes);
      if (wds_test_spin(st, 2000000) != 0) /* about 1 ms */
        return -1;
      void *d[1] = {dev + k * GPU_BATCH};
      if (early) {
        cudaMemcpyAsync(d[0], b->fields[0].data, b->fields[0].size_bytes,
                        cudaMemcpyHostToDevice, st);
        wds_loader_release(l, b);
      } else if (wds_cuda_batch_copy(l, b, d, st) != WDS_OK) {
        return -1;
      }
      k++;
    }
  }
  if (cudaStreamSynchronize(st) != cudaSuccess ||
      cudaMemcpy(got, dev, k * GPU_BATCH * sizeof *got,
                 cudaMemcpyDeviceToHost) != cudaSuccess)
    return -1;
  wds_loader_close(l);
  int differ = 0;
  for (size_t i = 0; i < k; i++)
    differ += memcmp(want + i * GPU_BATCH, got + i * GPU_BATCH,
                     GPU_BATCH * sizeof *got) != 0;
  cudaFree(dev);
  cudaStreamDestroy(st);
  free(want);
  free(got);
  *batches = k;
  return differ;
}

TEST(copies_behind_long_kernels_arrive_intact) {
  wds__tarw_options o = WDS__TARW_OPTIONS_INIT;
  wds__tarw *w;
  wds__err e;
  ASSERT_EQ_INT(wds__tarw_open_path(path2, &o, &w, &e), WDS_OK);
  for (int i = 0; i < GPU_SAMPLES; i++) {
    char name[32], val[16];
    snprintf(name, sizeof name, "k%04d.cls", i);
    snprintf(val, sizeof val, "%d", i);
    wds__tarw_add(w, name, val, strlen(val), &e);
  }
  ASSERT_EQ_INT(wds__tarw_finish(w, &e), WDS_OK);
  wds__tarw_close(w);
  size_t n = 0;
  int differ = copy_late(0, &n);
  printf("  with the fence: %d of %zu batches differ\n", differ, n);
  ASSERT_EQ_INT(differ, 0);
  ASSERT_TRUE(n >= (size_t)GPU_EPOCHS * (GPU_SAMPLES / GPU_BATCH));
  /* The control: released at once, the late copies read refilled slots. */
  differ = copy_late(1, &n);
  printf("  released at once: %d of %zu batches differ\n", differ, n);
  ASSERT_TRUE(differ > 0);
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("SKIP: no GPU (cudaGetDeviceCount: %d devices)\n", n);
    return 77;
  }
  snprintf(path, sizeof path, "/tmp/wds-test-gpu-%d.tar", (int)getpid());
  snprintf(path2, sizeof path2, "/tmp/wds-test-gpu2-%d.tar", (int)getpid());
  RUN(slots_are_pinned_and_copyable);
  RUN(copies_behind_long_kernels_arrive_intact);
  unlink(path);
  unlink(path2);
  return test_summary();
}
