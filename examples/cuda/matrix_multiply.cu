// matrix_multiply: tiled shared-memory matrix multiply, checked against the host.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

constexpr char kExample[] = "matrix_multiply";

constexpr int kTile = 16;

__global__ void MatMul(const float* a, const float* b, float* c, int n) {
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

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100;  // Not a multiple of the tile on purpose.
  std::vector<float> a(n * n), b(n * n), c(n * n, NAN);
  srand(7);
  for (auto& v : a) v = static_cast<float>(rand() % 100) / 50.0f - 1.0f;
  for (auto& v : b) v = static_cast<float>(rand() % 100) / 50.0f - 1.0f;
  float *da, *db, *dc;
  size_t bytes = n * n * sizeof(float);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  dim3 block(kTile, kTile), grid((n + kTile - 1) / kTile, (n + kTile - 1) / kTile);
  MatMul<<<grid, block>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int k = 0; k < n; ++k) want += static_cast<double>(a[i * n + k]) * b[k * n + j];
      if (std::fabs(c[i * n + j] - want) > 1e-3) ++wrong;
    }
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  std::printf("matrix_multiply: %dx%d, %d wrong: %s\n", n, n, wrong, wrong ? "FAILED" : "PASSED");
  return wrong ? 1 : 0;
}
