// spin: a kernel that runs for a long time (so a test can kill the program mid-kernel), after allocating memory.
#include <cstdio>

__global__ void Spin(unsigned long long* out, long long iterations) {
  unsigned long long x = threadIdx.x;
  for (long long i = 0; i < iterations; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  out[threadIdx.x] = x;
}

int main() {
  unsigned long long* out = nullptr;
  if (cudaMalloc(&out, 64ull << 20) != cudaSuccess) return 2;  // 64 MiB the agent must give back.
  std::printf("spin: running\n");
  std::fflush(stdout);
  Spin<<<64, 128>>>(out, 1ll << 40);
  // Only an error ends the wait: the session was ended under the program (its worker killed, its lease revoked).
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("spin: %s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
