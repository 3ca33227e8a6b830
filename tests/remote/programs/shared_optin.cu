// shared_optin: a kernel that needs more than the default 48 KiB of dynamic shared memory. As on a GPU, its launch
// fails until the program opts in with cudaFuncSetAttribute, then runs; the occupancy calls cuBLAS and cuDNN make
// (available dynamic shared memory, active blocks, potential block size) answer consistently with that opt-in.
#include <cstdio>
#include <vector>

#define PROGRAM_NAME "shared_optin"
#include "program_checks.h"

extern __shared__ float staged[];

// Stages n floats through shared memory and writes them back reversed.
__global__ void Reverse(float* out, const float* in, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) staged[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = staged[n - 1 - i];
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t optin = prop.sharedMemPerBlockOptin;
  if (optin <= 48 * 1024) {
    std::printf("shared_optin: the device allows no more than 48 KiB per block (%zu): nothing to check\n", optin);
    return 1;
  }
  const size_t bytes = optin < 96 * 1024 ? optin : 96 * 1024;
  const int n = static_cast<int>(bytes / sizeof(float));
  std::vector<float> host(n), back(n, -1.0f);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  float *in, *out;
  CHECK(cudaMalloc(&in, bytes));
  CHECK(cudaMalloc(&out, bytes));
  CHECK(cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice));

  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, Reverse));
  EXPECT(fa.maxDynamicSharedSizeBytes == static_cast<int>(48 * 1024 - fa.sharedSizeBytes), "the default limit");

  Reverse<<<1, 256, bytes>>>(out, in, n);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue, "a launch above the default limit fails");

  EXPECT(cudaFuncSetAttribute(Reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(optin) + 1) ==
             cudaErrorInvalidValue,
         "an opt-in above the device's limit is refused");
  cudaGetLastError();
  CHECK(cudaFuncSetAttribute(Reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  CHECK(cudaFuncGetAttributes(&fa, Reverse));
  EXPECT(fa.maxDynamicSharedSizeBytes == static_cast<int>(bytes), "the opt-in is reported");

  Reverse<<<1, 256, bytes>>>(out, in, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(back.data(), out, bytes, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += back[i] != host[n - 1 - i];
  EXPECT(wrong == 0, "the kernel ran with the opted-in shared memory");

  // One block per SM may use the whole opt-in; four share the SM's shared memory (at most 64 KiB each on any GPU
  // with an opt-in above 48 KiB, so less than the opt-in of 96 KiB; an SM with 64 KiB gives 16 KiB each).
  size_t one = 0, four = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&one, Reverse, 1, 256));
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&four, Reverse, 4, 256));
  EXPECT(one >= bytes, "one block per SM may use the whole opt-in");
  EXPECT(four > 0 && four < one, "four blocks per SM share it");
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Reverse, 256, bytes));
  EXPECT(blocks >= 1, "a block with the opted-in shared memory fits on an SM");
  int min_grid = 0, block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, Reverse, 0, 0));
  EXPECT(block > 0 && block <= prop.maxThreadsPerBlock && min_grid >= prop.multiProcessorCount,
         "a potential block size");
  std::printf("shared_optin: %zu bytes of dynamic shared memory; available for 1/4 blocks per SM: %zu/%zu; "
              "%d failure(s): %s\n", bytes, one, four, failures, failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
