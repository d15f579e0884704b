/* pool.c — where batch slot memory comes from.
 *
 * Pinned host memory lets cudaMemcpyAsync run as a true DMA, overlapping the
 * copy with compute; pageable memory would be staged by the driver. Pinning
 * is only possible with the CUDA runtime and a device, so the choice is made
 * at run time: one build serves machines with and without GPUs. */
#include "loader/pool.h"

#include <pthread.h>
#include <stdlib.h>

#ifdef WDS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static void *host_alloc(void *ctx, size_t size_bytes) {
  (void)ctx;
  void *p = NULL;
  if (posix_memalign(&p, 4096, size_bytes ? size_bytes : 1) != 0)
    return NULL;
  return p;
}

static void host_free(void *ctx, void *ptr, size_t size_bytes) {
  (void)ctx;
  (void)size_bytes;
  free(ptr);
}

wds_allocator wds__host_allocator(void) {
  wds_allocator a = {host_alloc, host_free, NULL, "host"};
  return a;
}

#ifdef WDS_HAVE_CUDA
static void *pinned_alloc(void *ctx, size_t size_bytes) {
  (void)ctx;
  void *p = NULL;
  if (cudaHostAlloc(&p, size_bytes ? size_bytes : 1, cudaHostAllocPortable) !=
      cudaSuccess)
    return NULL;
  return p;
}

static void pinned_free(void *ctx, void *ptr, size_t size_bytes) {
  (void)ctx;
  (void)size_bytes;
  if (ptr)
    cudaFreeHost(ptr);
}
#endif

#ifdef WDS_HAVE_CUDA
static pthread_once_t choice_once = PTHREAD_ONCE_INIT;
static int use_pinned;

static void choose(void) {
  int n = 0;
  use_pinned = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#endif

wds_allocator wds__default_allocator(void) {
#ifdef WDS_HAVE_CUDA
  pthread_once(&choice_once, choose);
  if (use_pinned) {
    wds_allocator a = {pinned_alloc, pinned_free, NULL, "cuda-pinned"};
    return a;
  }
#endif
  return wds__host_allocator();
}
