// Kernels for session_guard_test: built into a fatbin (PTX only) that the test loads through raw sessions.
#include <cuda_runtime.h>

extern "C" __global__ void add_one(int* data, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

// Static shared memory: a launch's dynamic shared bytes add to it (the sum must not wrap).
extern "C" __global__ void with_shared(int* out) {
  __shared__ int tile[64];
  tile[threadIdx.x % 64] = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = tile[1];
}

__device__ int guard_counter;

// Keeps its device busy for a while: each thread counts to `iterations` (the sum is written only in a case that never
// happens, so that the loop is not dead code).
extern "C" __global__ void spin(unsigned long long iterations, int* out) {
  unsigned long long sum = 0;
  for (unsigned long long i = 0; i < iterations; ++i) sum += i ^ threadIdx.x;
  if (sum == 42) out[0] = 1;
}

// One texel of a texture object the host names: a forged handle must fail the launch, not the worker.
extern "C" __global__ void fetch1d(cudaTextureObject_t t, float x, float4* out) { out[0] = tex1D<float4>(t, x); }
