// cooperative: cooperative launches (cudaLaunchCooperativeKernel -> cuLaunchCooperativeKernel, and
// cuLaunchKernelEx with the cooperative attribute) whose blocks meet at grid-wide barriers (cooperative_groups'
// grid.sync()): a multi-pass computation where every pass reads what all blocks wrote in the pass before. A grid
// larger than the slice holds at once is refused with cudaErrorCooperativeLaunchTooLarge.
#define PROGRAM_NAME "cooperative"
#include <cooperative_groups.h>
#include <cuda.h>

#include <cstdio>
#include <vector>

#include "program_checks.h"

namespace cg = cooperative_groups;

// Each pass: out[i] = in[i] + in[(i + 1) % n], ping-ponging between a and b; grid.sync() between passes.
__global__ void Passes(int* a, int* b, int n, int passes) {
  cg::grid_group grid = cg::this_grid();
  for (int p = 0; p < passes; ++p) {
    const int* in = p % 2 == 0 ? a : b;
    int* out = p % 2 == 0 ? b : a;
    for (int i = grid.thread_rank(); i < n; i += grid.size()) out[i] = in[i] + in[(i + 1) % n];
    grid.sync();
  }
}

// A grid-wide sum: each block adds its part, grid.sync(), then block 0 reads every partial.
__global__ void GridSum(const int* v, int n, int* partials, int* total) {
  cg::grid_group grid = cg::this_grid();
  __shared__ int part;
  if (threadIdx.x == 0) part = 0;
  __syncthreads();
  for (int i = grid.thread_rank(); i < n; i += grid.size()) atomicAdd(&part, v[i]);
  __syncthreads();
  if (threadIdx.x == 0) partials[blockIdx.x] = part;
  grid.sync();
  if (grid.thread_rank() == 0) {
    int s = 0;
    for (unsigned int j = 0; j < gridDim.x; ++j) s += partials[j];
    *total = s;
  }
}

int main() {
  int dev = 0, supported = 0, sms = 0, per_sm = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  EXPECT(supported == 1, "the slice supports cooperative launches");
  const int threads = 128;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Passes, threads, 0));
  // Not more blocks than needed: the emulated device runs each resident block on a host thread of its own.
  int blocks = std::min(per_sm * sms, 8);
  std::printf("cooperative: %d SMs x %d blocks of %d threads resident; launching %d blocks\n", sms, per_sm,
              threads, blocks);

  const int n = 3000, passes = 6;
  std::vector<int> host(n);
  for (int i = 0; i < n; ++i) host[i] = i % 7;
  int *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, n * sizeof(int)));
  CHECK(cudaMalloc(&b, n * sizeof(int)));
  CHECK(cudaMemcpy(a, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  int n_arg = n, passes_arg = passes;
  void* args[] = {&a, &b, &n_arg, &passes_arg};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(Passes), blocks, threads, args, 0, nullptr));
  CHECK(cudaDeviceSynchronize());
  std::vector<int> expect = host, next(n);
  for (int p = 0; p < passes; ++p) {
    for (int i = 0; i < n; ++i) next[i] = expect[i] + expect[(i + 1) % n];
    expect.swap(next);
  }
  std::vector<int> got(n);
  CHECK(cudaMemcpy(got.data(), passes % 2 == 0 ? a : b, n * sizeof(int), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += got[i] != expect[i];
  EXPECT(wrong == 0, "every pass saw all of the previous one");

  // The same through cudaLaunchKernelEx with the cooperative attribute (cuLaunchKernelEx).
  int *partials = nullptr, *total = nullptr;
  CHECK(cudaMalloc(&partials, blocks * sizeof(int)));
  CHECK(cudaMalloc(&total, sizeof(int)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, GridSum, static_cast<const int*>(a), n, partials, total));
  int sum = 0;
  CHECK(cudaMemcpy(&sum, total, sizeof(int), cudaMemcpyDeviceToHost));
  long long expect_sum = 0;
  for (int v : got) expect_sum += v;
  EXPECT(sum == static_cast<int>(expect_sum), "the grid-wide sum");

  // Larger than the slice holds at once: refused, and nothing breaks.
  cudaError_t too_large = cudaLaunchCooperativeKernel(reinterpret_cast<void*>(Passes), per_sm * sms + 1, threads,
                                                      args, 0, nullptr);
  std::printf("cooperative: a grid of %d blocks: %s\n", per_sm * sms + 1, cudaGetErrorName(too_large));
  EXPECT(too_large == cudaErrorCooperativeLaunchTooLarge, "an oversized cooperative grid is refused");
  cudaGetLastError();
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(partials));
  CHECK(cudaFree(total));
  std::printf("cooperative: %d wrong, %d failure(s): %s\n", wrong, failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
