// managed_bench: a loop that alternates host and device work on managed memory, against the same loop with
// explicit copies (the baseline), measured in the same run (bench/managed_bench.sh runs it on a private agent).
//
// Each step: the host writes every STRIDE-th int of an N-MiB array, a kernel reads and writes all of it, the host
// reads all of it back (a checksum). Explicit: a host array, cudaMemcpy to the device and back around the kernel.
// Managed: one cudaMallocManaged array, touched in place. Both loops must give the same checksums.
//
//   managed_bench MIB STEPS STRIDE
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                               \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "managed_bench: %s: %s\n", #call, cudaGetErrorString(e_));             \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

__global__ void Touch(int* a, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a[i] = a[i] * 3 + 1;
}

static void HostWrites(int* a, size_t n, size_t stride, int step) {
  for (size_t i = 0; i < n; i += stride) a[i] = static_cast<int>(i) ^ step;
}

static uint64_t HostReads(const int* a, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum = sum * 31 + static_cast<uint32_t>(a[i]);
  return sum;
}

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 16;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  const size_t stride = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  const size_t n = mib * (1 << 20) / sizeof(int);
  if (n == 0 || steps <= 0 || stride == 0) {
    std::fprintf(stderr, "usage: managed_bench MIB STEPS STRIDE\n");
    return 2;
  }
  std::vector<uint64_t> explicit_sums, managed_sums;

  // Explicit copies. Step 0 warms up (module load, first allocation touches) and is not timed.
  std::vector<int> host(n, 0);
  int* device = nullptr;
  CHECK(cudaMalloc(&device, n * sizeof(int)));
  CHECK(cudaMemset(device, 0, n * sizeof(int)));
  double explicit_s = 0;
  for (int step = 0; step <= steps; ++step) {
    auto start = Clock::now();
    HostWrites(host.data(), n, stride, step);
    CHECK(cudaMemcpy(device, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    Touch<<<64, 256>>>(device, n);
    CHECK(cudaMemcpy(host.data(), device, n * sizeof(int), cudaMemcpyDeviceToHost));
    explicit_sums.push_back(HostReads(host.data(), n));
    if (step > 0) explicit_s += std::chrono::duration<double>(Clock::now() - start).count();
  }
  CHECK(cudaFree(device));

  int* managed = nullptr;
  CHECK(cudaMallocManaged(&managed, n * sizeof(int)));
  double managed_s = 0;
  for (int step = 0; step <= steps; ++step) {
    auto start = Clock::now();
    HostWrites(managed, n, stride, step);
    Touch<<<64, 256>>>(managed, n);
    CHECK(cudaDeviceSynchronize());
    managed_sums.push_back(HostReads(managed, n));
    if (step > 0) managed_s += std::chrono::duration<double>(Clock::now() - start).count();
  }
  CHECK(cudaFree(managed));

  if (explicit_sums != managed_sums) {
    std::fprintf(stderr, "managed_bench: the managed loop's checksums differ from the explicit loop's\n");
    return 1;
  }
  const double dirtied = static_cast<double>((n + stride - 1) / stride) * sizeof(int);
  std::printf("array %zu MiB, %d steps, host writes every %zu-th int (%.0f bytes dirtied per step)\n", mib, steps,
              stride, dirtied);
  std::printf("explicit copies: %.1f ms per step\n", 1e3 * explicit_s / steps);
  std::printf("managed memory:  %.1f ms per step\n", 1e3 * managed_s / steps);
  std::printf("ratio managed / explicit: %.2f (goal: <= 1.30)\n", managed_s / explicit_s);
  std::printf("steps counted by gpupool: %d\n", steps + 1);
  std::printf("dirtied bytes per step: %.0f\n", dirtied);
  // The pages those writes land on: what a page-granular tracker has to move at the least.
  size_t pages = 0, last_page = SIZE_MAX;
  for (size_t i = 0; i < n; i += stride) {
    const size_t page = i * sizeof(int) / 4096;
    if (page != last_page) ++pages;
    last_page = page;
  }
  std::printf("dirtied pages per step: %zu\n", pages);
  return 0;
}
