// Prints the attributes programs read to size their work (tiles, occupancy, caches), one "name value" per line, as
// cudaDeviceGetAttribute answers them for device 0: a test compares them with NVIDIA's figures for the capability.
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  struct Attribute {
    const char* name;
    cudaDeviceAttr attr;
  };
  static const Attribute kAttributes[] = {
      {"compute_capability_major", cudaDevAttrComputeCapabilityMajor},
      {"compute_capability_minor", cudaDevAttrComputeCapabilityMinor},
      {"multiprocessor_count", cudaDevAttrMultiProcessorCount},
      {"warp_size", cudaDevAttrWarpSize},
      {"max_threads_per_block", cudaDevAttrMaxThreadsPerBlock},
      {"max_threads_per_multiprocessor", cudaDevAttrMaxThreadsPerMultiProcessor},
      {"max_blocks_per_multiprocessor", cudaDevAttrMaxBlocksPerMultiprocessor},
      {"max_shared_memory_per_block", cudaDevAttrMaxSharedMemoryPerBlock},
      {"max_shared_memory_per_block_optin", cudaDevAttrMaxSharedMemoryPerBlockOptin},
      {"max_shared_memory_per_multiprocessor", cudaDevAttrMaxSharedMemoryPerMultiprocessor},
      {"reserved_shared_memory_per_block", cudaDevAttrReservedSharedMemoryPerBlock},
      {"max_registers_per_block", cudaDevAttrMaxRegistersPerBlock},
      {"max_registers_per_multiprocessor", cudaDevAttrMaxRegistersPerMultiprocessor},
      {"l2_cache_size", cudaDevAttrL2CacheSize},
      {"max_grid_dim_x", cudaDevAttrMaxGridDimX},
      {"max_block_dim_z", cudaDevAttrMaxBlockDimZ},
      {"total_constant_memory", cudaDevAttrTotalConstantMemory},
  };
  int failures = 0;
  for (const Attribute& a : kAttributes) {
    int value = 0;
    cudaError_t e = cudaDeviceGetAttribute(&value, a.attr, 0);
    if (e != cudaSuccess) {
      std::printf("%s error %s\n", a.name, cudaGetErrorName(e));
      ++failures;
    } else {
      std::printf("%s %d\n", a.name, value);
    }
  }
  return failures == 0 ? 0 : 1;
}
