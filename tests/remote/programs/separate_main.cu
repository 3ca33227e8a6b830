// Separate compilation (nvcc -rdc=true, with separate_lib.cu), built for sm_80: kernels call device functions and
// use variables defined in the other translation unit, each unit has a private function of the same name, and
// bf16x2 arithmetic (sm_80 PTX) runs too. Prints "N failure(s): PASSED" or "... FAILED".
#include <cuda_bf16.h>

#include <cstdio>

#define PROGRAM_NAME "separate_compilation"
#include "program_checks.h"

__device__ int LibraryTransform(int x);   // separate_lib.cu
extern __device__ int library_calls;      // separate_lib.cu
extern __constant__ int library_offset;   // separate_lib.cu

// The library has a function of this name too; each unit must call its own.
static __device__ __noinline__ int Local(int x) { return x + 1; }

__global__ void Transform(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = Local(LibraryTransform(in[i])) + library_offset;
  atomicAdd(&library_calls, 1);
}

__global__ void Bf16Fma(const __nv_bfloat162* a, __nv_bfloat162* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __hfma2(a[i], a[i], a[i]);
}

int main() {
  const int n = 1000;
  int host[n], got[n];
  for (int i = 0; i < n; ++i) host[i] = i - 500;
  int *in, *out;
  CHECK(cudaMalloc(&in, sizeof host));
  CHECK(cudaMalloc(&out, sizeof host));
  CHECK(cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice));
  Transform<<<(n + 127) / 128, 128>>>(in, out, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost));
  int bad = 0;
  // LibraryTransform(x) = Local_lib(3x) = 3x - 7; then Local_main(+1) and the library's offset (40).
  for (int i = 0; i < n; ++i) bad += got[i] != 3 * host[i] - 7 + 1 + 40;
  EXPECT(bad == 0, "each unit calls its own Local and the other's LibraryTransform");
  int calls = 0;
  CHECK(cudaMemcpyFromSymbol(&calls, library_calls, sizeof calls));
  EXPECT(calls == n, "a variable defined in the other unit counts every call");

  __nv_bfloat162 a[n], r[n];
  for (int i = 0; i < n; ++i) a[i] = __floats2bfloat162_rn(0.25f * (i % 8), -0.5f * (i % 8));
  __nv_bfloat162 *da, *dr;
  CHECK(cudaMalloc(&da, sizeof a));
  CHECK(cudaMalloc(&dr, sizeof r));
  CHECK(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));
  Bf16Fma<<<(n + 127) / 128, 128>>>(da, dr, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(r, dr, sizeof r, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < n; ++i) {
    float x = 0.25f * (i % 8), y = -0.5f * (i % 8);  // Every x * x + x here fits bf16's 8 significant bits.
    bad += __low2float(r[i]) != x * x + x || __high2float(r[i]) != y * y + y;
  }
  EXPECT(bad == 0, "bf16x2 fma");
  std::printf("%d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
