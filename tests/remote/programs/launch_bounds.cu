// launch_bounds: cudaFuncGetAttributes' maxThreadsPerBlock is the largest block a kernel may launch with, as on a
// GPU, not the device's limit: a __launch_bounds__ kernel reports its bound, and a kernel whose per-thread
// resources (here a large local array) keep the device from holding a block of the device's maximum reports the
// block it can hold. A launch at the bound runs; one beyond it is refused at launch with
// cudaErrorLaunchOutOfResources; the occupancy calculator's block size stays within it.
#include <cstdio>
#include <vector>

#define PROGRAM_NAME "launch_bounds"
#include "program_checks.h"

__global__ void __launch_bounds__(256) Bounded(int* out) { out[threadIdx.x] = static_cast<int>(threadIdx.x) + 1; }

// 320 KiB of local memory per thread: a GPU holds it (at most 512 KiB), the emulator holds fewer than 1024 such
// threads in one block. `at` is a runtime index, so the array stays in local memory.
__global__ void Heavy(int* out, int at) {
  volatile char scratch[320 * 1024];
  scratch[at] = static_cast<char>(threadIdx.x & 0x7f);
  scratch[at + 4096] = 1;
  out[threadIdx.x] = scratch[at] + scratch[at + 4096];
}

// Launches `kernel` with one block of `threads` and returns the launch's own error (the next synchronising call's
// error is checked separately, so a launch refused late is not taken for one refused at once).
template <typename... Args>
cudaError_t LaunchOne(void (*kernel)(Args...), int threads, Args... args) {
  kernel<<<1, threads>>>(args...);
  return cudaGetLastError();
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int* out;
  CHECK(cudaMalloc(&out, 1024 * sizeof(int)));
  std::vector<int> back(1024);

  cudaFuncAttributes bounded;
  CHECK(cudaFuncGetAttributes(&bounded, Bounded));
  EXPECT(bounded.maxThreadsPerBlock == 256, "__launch_bounds__(256) is the kernel's maxThreadsPerBlock");
  CHECK(LaunchOne(Bounded, 256, out));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(back.data(), out, 256 * sizeof(int), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < 256; ++i) wrong += back[i] != i + 1;
  EXPECT(wrong == 0, "a block at the launch bound runs");
  EXPECT(LaunchOne(Bounded, 512, out) == cudaErrorLaunchOutOfResources, "a block beyond the launch bound is refused");
  CHECK(cudaDeviceSynchronize());

  cudaFuncAttributes heavy;
  CHECK(cudaFuncGetAttributes(&heavy, Heavy));
  const int most = heavy.maxThreadsPerBlock;
  EXPECT(most > 0 && most <= prop.maxThreadsPerBlock, "maxThreadsPerBlock within the device's limit");
  CHECK(LaunchOne(Heavy, most, out, 100));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(back.data(), out, most * sizeof(int), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < most; ++i) wrong += back[i] != (i & 0x7f) + 1;
  EXPECT(wrong == 0, "a block of maxThreadsPerBlock threads runs");
  if (most < prop.maxThreadsPerBlock) {
    EXPECT(LaunchOne(Heavy, most + 1, out, 100) == cudaErrorLaunchOutOfResources,
           "a block of one thread more than maxThreadsPerBlock is refused");
    EXPECT(LaunchOne(Heavy, prop.maxThreadsPerBlock, out, 100) == cudaErrorLaunchOutOfResources,
           "a block of the device's limit is refused");
    CHECK(cudaDeviceSynchronize());
  }
  int min_grid = 0, block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, Heavy, 0, 0));
  EXPECT(block > 0 && block <= most, "the potential block size is one the kernel may launch with");
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, Bounded, 0, 0));
  EXPECT(block > 0 && block <= 256, "the potential block size of the bounded kernel");
  CHECK(cudaFree(out));
  std::printf("launch_bounds: bounded %d, heavy %d of the device's %d threads per block; %d failure(s): %s\n",
              bounded.maxThreadsPerBlock, most, prop.maxThreadsPerBlock, failures, failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
