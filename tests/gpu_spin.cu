/* gpu_spin.cu — a kernel that keeps a stream busy for a while, for GPU
 * tests that need a copy queued behind long work (test_loader_gpu). */
#include <cuda_runtime_api.h>

__global__ static void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

extern "C" int wds_test_spin(cudaStream_t stream, long long cycles) {
  spin<<<1, 1, 0, stream>>>(cycles);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
