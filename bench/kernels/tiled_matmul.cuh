// The plain CUDA matrix multiplication both benchmarks measure: C = A B, row-major n x n, 16 x 16 shared-memory
// tiles, launched with kTile x kTile blocks. emu_bench looks it up by its unmangled name in the PTX; gemm_bench
// measures cuBLAS against it.
#ifndef GPUPOOL_BENCH_KERNELS_TILED_MATMUL_CUH_
#define GPUPOOL_BENCH_KERNELS_TILED_MATMUL_CUH_

constexpr int kTile = 16;
extern "C" __global__ void matmul(const float* a, const float* b, float* c, int n) {
  __shared__ float ta[kTile][kTile], tb[kTile][kTile];
  int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0;
  for (int t = 0; t < n; t += kTile) {
    ta[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < n) ? a[row * n + t + threadIdx.x] : 0.0f;
    tb[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < n) ? b[(t + threadIdx.y) * n + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < kTile; ++k) acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = acc;
}

#endif  // GPUPOOL_BENCH_KERNELS_TILED_MATMUL_CUH_
