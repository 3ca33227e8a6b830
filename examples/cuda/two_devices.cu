// two_devices: uses every device it is given (run with gp-run -n 2): each computes half of a sum of squares.
#include <cstdio>
#include <vector>

#include "check.h"

constexpr char kExample[] = "two_devices";

__global__ void Squares(const int* in, unsigned long long* sum, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(sum, static_cast<unsigned long long>(in[i]) * in[i]);
}

int main() {
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::fprintf(stderr, "two_devices: needs 2 devices, got %d (run with gp-run -n 2)\n", devices);
    return 1;
  }
  const int n = 100000, half = n / 2;
  std::vector<int> data(n);
  for (int i = 0; i < n; ++i) data[i] = i % 1000;
  unsigned long long total = 0;
  int* in[2];
  unsigned long long* sum[2];
  for (int d = 0; d < 2; ++d) {
    CHECK(cudaSetDevice(d));
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, d));
    std::printf("two_devices: device %d is \"%s\" (%.1f GiB)\n", d, p.name, p.totalGlobalMem / 1073741824.0);
    CHECK(cudaMalloc(&in[d], half * sizeof(int)));
    CHECK(cudaMalloc(&sum[d], sizeof(unsigned long long)));
    CHECK(cudaMemset(sum[d], 0, sizeof(unsigned long long)));
    CHECK(cudaMemcpy(in[d], data.data() + d * half, half * sizeof(int), cudaMemcpyHostToDevice));
    Squares<<<(half + 255) / 256, 256>>>(in[d], sum[d], half);
    CHECK(cudaGetLastError());
  }
  for (int d = 0; d < 2; ++d) {
    CHECK(cudaSetDevice(d));
    unsigned long long part = 0;
    CHECK(cudaMemcpy(&part, sum[d], sizeof(part), cudaMemcpyDeviceToHost));
    total += part;
    CHECK(cudaFree(in[d]));
    CHECK(cudaFree(sum[d]));
  }
  unsigned long long want = 0;
  for (int v : data) want += static_cast<unsigned long long>(v) * v;
  std::printf("two_devices: sum %llu, want %llu: %s\n", total, want, total == want ? "PASSED" : "FAILED");
  return total == want ? 0 : 1;
}
