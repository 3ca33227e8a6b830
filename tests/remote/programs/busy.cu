// busy: keeps its device busy for a fixed wall time with back-to-back kernels of fixed work, then prints how many
// ran. Two of these on slices of one GPU show how the device's compute is shared.
//   busy SECONDS  ->  "busy: N kernels in S s"
//   busy SECONDS trace  ->  also "busy: at MS N" after each batch (MS: CLOCK_REALTIME milliseconds, N: kernels so
//   far), so that a benchmark can count the work two tenants did while both were running.
//   busy SECONDS trace IDLE  ->  the same, after IDLE seconds with its session open and idle (an idle tenant that
//   then bursts).
//   busy SECONDS trace IDLE SCALE  ->  kernels SCALE times as long (a tenant of long kernels).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

__global__ void Work(unsigned long long* out, int iterations) {
  unsigned long long x = blockIdx.x * blockDim.x + threadIdx.x;
  for (int i = 0; i < iterations; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  bool trace = argc > 2 && std::strcmp(argv[2], "trace") == 0;
  double idle = argc > 3 ? std::atof(argv[3]) : 0.0;
  const int scale = argc > 4 ? std::atoi(argv[4]) : 1;
  if (scale < 1 || scale > 100000) {
    std::printf("busy: SCALE must be 1..100000, not '%s'\n", argv[4]);
    return 2;
  }
  auto now_ms = [] {
    return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  unsigned long long* out = nullptr;
  if (cudaMalloc(&out, 8 * 64 * sizeof(unsigned long long)) != cudaSuccess) return 2;
  Work<<<8, 64>>>(out, 10);  // Loads the module before the clock starts.
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  if (idle > 0) std::this_thread::sleep_for(std::chrono::duration<double>(idle));
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  long kernels = 0;
  if (trace) {
    std::printf("busy: at %.1f 0\n", now_ms());
    std::fflush(stdout);
  }
  while (elapsed < seconds) {
    // Batches keep the device's queue full, as real programs do: a tenant that waits after every kernel leaves
    // the device idle between kernels, and its neighbour gets that time too.
    for (int i = 0; i < 8; ++i) Work<<<8, 64>>>(out, 4000 * scale);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      std::printf("busy: %s\n", cudaGetErrorString(e));
      return 1;
    }
    kernels += 8;
    if (trace) {
      std::printf("busy: at %.1f %ld\n", now_ms(), kernels);
      std::fflush(stdout);
    }
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::printf("busy: %ld kernels in %.3f s\n", kernels, elapsed);
  return 0;
}
