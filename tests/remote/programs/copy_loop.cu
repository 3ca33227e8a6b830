// copy_loop: copies 32 MiB to the device and back, over and over, until a copy fails; then prints the error and
// exits 1. For tests that cut the network under a program in the middle of a copy.
#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  const size_t bytes = 32u << 20;
  std::vector<unsigned char> host(bytes, 7), back(bytes);
  void* dev = nullptr;
  if (cudaMalloc(&dev, bytes) != cudaSuccess) return 2;
  for (long round = 0;; ++round) {
    cudaError_t e = cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(back.data(), dev, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      std::printf("copy_loop: %s after %ld rounds\n", cudaGetErrorName(e), round);
      return 1;
    }
    if (std::memcmp(host.data(), back.data(), bytes) != 0) {
      std::printf("copy_loop: data corrupted in round %ld\n", round);
      return 3;
    }
    if (round == 0) {
      std::printf("copy_loop: running\n");
      std::fflush(stdout);
    }
  }
}
