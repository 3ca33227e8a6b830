// nvml_utilization: NVML's utilisation rates of a slice through gpupool's libnvidia-ml.so.1 (loaded as NVML is,
// by name): high while a kernel runs, zero when the slice idles, and memory utilisation while copies run. The
// margins are wide: the figures are shares of wall time on a shared machine.
#define PROGRAM_NAME "nvml_utilization"
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "program_checks.h"

struct Utilization {
  unsigned int gpu, memory;
};
using InitFn = int (*)();
using HandleFn = int (*)(unsigned int, void**);
using UtilizationFn = int (*)(void*, Utilization*);

// Spins for `nanos` of wall time (the %globaltimer clock), so that the kernel's length does not depend on the
// device's speed.
__global__ void SpinFor(unsigned long long nanos, int* out) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  int x = 0;
  do {
    ++x;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanos);
  if (threadIdx.x == 0) *out = x;
}

int main() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) {
    std::printf("nvml_utilization: cannot load libnvidia-ml.so.1: %s\n", dlerror());
    return 1;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto handle_of = reinterpret_cast<HandleFn>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto utilization_of = reinterpret_cast<UtilizationFn>(dlsym(nvml, "nvmlDeviceGetUtilizationRates"));
  EXPECT(init && handle_of && utilization_of && dlsym(nvml, "nvmlGpupoolSlices"), "gpupool's NVML");
  if (failures) return 1;
  EXPECT(init() == 0, "nvmlInit_v2");
  void* device = nullptr;
  EXPECT(handle_of(0, &device) == 0, "nvmlDeviceGetHandleByIndex_v2");
  Utilization u{};
  EXPECT(utilization_of(device, &u) == 0, "the first query starts the window");

  int* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  SpinFor<<<1, 1>>>(800'000'000ull, out);  // 0.8 s (one thread: the emulator runs a warp's threads in turn).
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT(utilization_of(device, &u) == 0, "nvmlDeviceGetUtilizationRates");
  std::printf("nvml_utilization: while a kernel runs: gpu %u%% memory %u%%\n", u.gpu, u.memory);
  EXPECT(u.gpu >= 60, "gpu utilisation while a kernel runs");
  CHECK(cudaDeviceSynchronize());
  utilization_of(device, &u);  // The window starts again.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT(utilization_of(device, &u) == 0, "nvmlDeviceGetUtilizationRates");
  std::printf("nvml_utilization: idle: gpu %u%% memory %u%%\n", u.gpu, u.memory);
  EXPECT(u.gpu == 0 && u.memory == 0, "an idle slice");

  // Copies: the memory figure.
  std::vector<char> host(64 << 20, 1);
  char* buffer = nullptr;
  CHECK(cudaMalloc(&buffer, host.size()));
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
    CHECK(cudaMemcpy(buffer, host.data(), host.size(), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(buffer, 0, host.size()));
  }
  EXPECT(utilization_of(device, &u) == 0, "nvmlDeviceGetUtilizationRates");
  std::printf("nvml_utilization: while copying: gpu %u%% memory %u%%\n", u.gpu, u.memory);
  EXPECT(u.memory > 0 && u.gpu == 0, "memory utilisation while copies run, no kernel");
  CHECK(cudaFree(buffer));
  CHECK(cudaFree(out));
  std::printf("nvml_utilization: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
