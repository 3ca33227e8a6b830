// quota: reports the memory the device claims, then proves the slice is enforced: allocating past it fails.
#include <cstdio>

int main() {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 2;
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return 2;
  std::printf("quota: totalGlobalMem %zu memGetInfo total %zu free %zu\n", p.totalGlobalMem, total, free_bytes);
  void* a = nullptr;
  // Most of the slice works...
  if (cudaMalloc(&a, total / 2) != cudaSuccess) {
    std::printf("quota: half of the slice could not be allocated\n");
    return 1;
  }
  // ...but not more than is left of it.
  void* b = nullptr;
  cudaError_t err = cudaMalloc(&b, total);
  std::printf("quota: allocating the whole slice again: %s\n", cudaGetErrorName(err));
  cudaFree(a);
  return err == cudaErrorMemoryAllocation ? 0 : 1;
}
