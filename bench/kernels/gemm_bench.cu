// GEMM on a slice: cublasSgemm against the same n x n x n product as a plain CUDA kernel (tiled_matmul.cuh, the
// matmul emu_bench measures too), measured in the same run on the same device; prints GFLOP/s (2 n^3 flops per
// product), per core of the emulated device's host, and the ratio cuBLAS / plain kernel. Each result is checked
// against the host's (small integers: exact). Run it under gp-run; bench/gemm_bench.sh starts an emulated device of
// the default capability, on which cuBLAS runs its PTX.
//
//   gemm_bench [N] [REPEATS] [CORES]     (default 256, 3, the host's cores: what the emulated device runs on)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "tiled_matmul.cuh"

static void Die(const char* what, int code) {
  std::fprintf(stderr, "gemm_bench: %s failed (%d)\n", what, code);
  std::exit(1);
}

// The fastest of `repeats` runs of `run` (each synchronised), in seconds; one run first loads the kernels.
template <typename F>
double Best(int repeats, F run) {
  run();
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) Die("warm-up", e);
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    run();
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) Die("a run", e);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  const int cores = argc > 3 ? std::atoi(argv[3]) : static_cast<int>(std::thread::hardware_concurrency());
  if (n < 16 || n > 4096 || repeats < 1 || cores < 1) {
    std::fprintf(stderr, "usage: gemm_bench [N 16..4096] [REPEATS >= 1] [CORES >= 1]\n");
    return 2;
  }
  const size_t count = static_cast<size_t>(n) * n;
  std::vector<float> a(count), b(count), want(count, 0), got(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<float>(static_cast<int>(i * 7 % 5) - 2);
    b[i] = static_cast<float>(static_cast<int>(i * 3 % 7) - 3);
  }
  // Row-major C = A B; cuBLAS is column-major, so it computes C^T = B^T A^T from the same buffers.
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      const float x = a[static_cast<size_t>(i) * n + k];
      for (int j = 0; j < n; ++j) want[static_cast<size_t>(i) * n + j] += x * b[static_cast<size_t>(k) * n + j];
    }
  }
  float *da, *db, *dc;
  cudaMalloc(&da, count * sizeof(float));
  cudaMalloc(&db, count * sizeof(float));
  cudaMalloc(&dc, count * sizeof(float));
  cudaMemcpy(da, a.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  cublasHandle_t handle;
  if (cublasStatus_t s = cublasCreate(&handle); s != CUBLAS_STATUS_SUCCESS) Die("cublasCreate", s);
  const float one = 1, zero = 0;
  auto cublas = [&] {
    cublasStatus_t s = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, db, n, da, n, &zero, dc, n);
    if (s != CUBLAS_STATUS_SUCCESS) Die("cublasSgemm", s);
  };
  auto plain = [&] {
    dim3 block(kTile, kTile), grid((n + kTile - 1) / kTile, (n + kTile - 1) / kTile);
    matmul<<<grid, block>>>(da, db, dc, n);
  };
  struct Result {
    const char* name;
    double seconds;
  } results[2];
  int index = 0;
  for (auto [name, run] : {std::pair<const char*, std::function<void()>>{"cublasSgemm", cublas},
                           std::pair<const char*, std::function<void()>>{"plain kernel", plain}}) {
    cudaMemset(dc, 0, count * sizeof(float));  // A run that writes nothing is then caught.
    double seconds = Best(repeats, run);
    cudaMemcpy(got.data(), dc, count * sizeof(float), cudaMemcpyDeviceToHost);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += got[i] != want[i];
    if (wrong != 0) {
      std::fprintf(stderr, "gemm_bench: %s: %zu of %zu elements differ from the host's\n", name, wrong, count);
      return 1;
    }
    results[index++] = {name, seconds};
  }
  const double flops = 2.0 * n * n * static_cast<double>(n);
  for (const Result& r : results) {
    const double gflops = flops / r.seconds / 1e9;
    std::printf("gemm_bench: %s, %d x %d x %d: %.3f s, %.4f GFLOP/s, %.4f GFLOP/s per core (%d cores), exact\n",
                r.name, n, n, n, r.seconds, gflops, gflops / cores, cores);
  }
  std::printf("gemm_bench: cuBLAS / plain kernel = %.2f\n", results[1].seconds / results[0].seconds);
  cublasDestroy(handle);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return 0;
}
