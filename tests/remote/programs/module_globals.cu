// Module variables (__device__, __constant__) reached from the host the ways programs reach them: symbol copies,
// the symbol's address used as an ordinary device pointer (copies, memset, pointer attributes), and kernels that
// read and write them. On a GPU the driver places module variables where it likes, outside the slice's window:
// their addresses must still route to the slice.
#define PROGRAM_NAME "module_globals"
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "program_checks.h"

constexpr int kCount = 256;
__device__ int table[kCount];
__constant__ float scale[4];
__device__ unsigned long long total;

__global__ void Scale(float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kCount) return;
  out[i] = table[i] * scale[i % 4];
  atomicAdd(&total, static_cast<unsigned long long>(table[i]));
  table[i] = -table[i];
}

int main() {
  std::vector<int> host(kCount);
  for (int i = 0; i < kCount; ++i) host[i] = i + 1;
  const float factors[4] = {0.5f, 1.0f, 2.0f, 4.0f};
  CHECK(cudaMemcpyToSymbol(table, host.data(), sizeof(int) * kCount));
  CHECK(cudaMemcpyToSymbol(scale, factors, sizeof(factors)));
  unsigned long long zero = 0;
  CHECK(cudaMemcpyToSymbolAsync(total, &zero, sizeof(zero), 0, cudaMemcpyHostToDevice, 0));

  float* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(float) * kCount));
  Scale<<<(kCount + 127) / 128, 128>>>(out);
  CHECK(cudaGetLastError());
  std::vector<float> result(kCount);
  CHECK(cudaMemcpy(result.data(), out, sizeof(float) * kCount, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += result[i] != (i + 1) * factors[i % 4];
  EXPECT(wrong == 0, "kernel read __device__ and __constant__ variables");

  unsigned long long sum = 0;
  CHECK(cudaMemcpyFromSymbol(&sum, total, sizeof(sum)));
  EXPECT(sum == kCount * (kCount + 1ull) / 2, "kernel's atomics on a __device__ variable");

  // The symbol's address as a device pointer: copies, memset, attributes, a device-to-device copy.
  int* table_ptr = nullptr;
  size_t table_bytes = 0;
  CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&table_ptr), table));
  CHECK(cudaGetSymbolSize(&table_bytes, table));
  EXPECT(table_bytes == sizeof(int) * kCount, "cudaGetSymbolSize");
  std::vector<int> back(kCount);
  CHECK(cudaMemcpy(back.data(), table_ptr, table_bytes, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += back[i] != -(i + 1);
  EXPECT(wrong == 0, "the kernel's writes read back through the symbol's address");
  cudaPointerAttributes attributes{};
  CHECK(cudaPointerGetAttributes(&attributes, table_ptr + 7));
  EXPECT(attributes.type == cudaMemoryTypeDevice && attributes.device == 0, "pointer attributes of a symbol");
  CHECK(cudaMemset(table_ptr, 0, table_bytes));
  int* copy = nullptr;
  CHECK(cudaMalloc(&copy, table_bytes));
  CHECK(cudaMemcpy(copy, table_ptr, table_bytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(back.data(), copy, table_bytes, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += back[i] != 0;
  EXPECT(wrong == 0, "memset of a symbol, copied device to device");

  CHECK(cudaFree(copy));
  CHECK(cudaFree(out));
  std::printf("module_globals: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
