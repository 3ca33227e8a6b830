// NVIDIA's libraries on a slice, checked against references that do not run on the slice:
//  - cuRAND's host API generators (XORWOW, Philox4_32_10, MRG32k3a, Sobol32): the device generator's numbers are
//    those of the same generator run on the host (curandCreateGeneratorHost), bit for bit, as cuRAND specifies;
//  - cuRAND's device API from this program's own kernel: curand4() of Philox4_32_10 against Philox4x32-10 written
//    here from its definition (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC11);
//  - cuSPARSE SpMV and SpMM on a CSR matrix against the products computed on the host.
// Their kernels ship as PTX for compute_120/121 only: the device must report compute capability 12.x.
// Prints "nvidia_libraries: N failure(s): PASSED|FAILED".
#include <cuda_runtime.h>
#include <curand.h>
#include <curand_kernel.h>
#include <cusparse.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#define PROGRAM_NAME "nvidia_libraries"
#include "program_checks.h"

// Host generator against device generator, `n` 32-bit outputs and `n` uniform floats.
static void CompareGenerator(curandRngType_t type, const char* name) {
  const size_t n = 1 << 15;
  unsigned* d_bits = nullptr;
  float* d_uniform = nullptr;
  cudaMalloc(&d_bits, n * sizeof(unsigned));
  cudaMalloc(&d_uniform, n * sizeof(float));
  curandGenerator_t device_gen, host_gen;
  curandStatus_t s = curandCreateGenerator(&device_gen, type);
  EXPECTF(s == CURAND_STATUS_SUCCESS, "%s: curandCreateGenerator %d", name, s);
  if (s != CURAND_STATUS_SUCCESS) return;
  curandCreateGeneratorHost(&host_gen, type);
  if (type != CURAND_RNG_QUASI_SOBOL32) {
    curandSetPseudoRandomGeneratorSeed(device_gen, 20261126ull);
    curandSetPseudoRandomGeneratorSeed(host_gen, 20261126ull);
  }
  std::vector<unsigned> bits(n), host_bits(n);
  std::vector<float> uniform(n), host_uniform(n);
  s = curandGenerate(device_gen, d_bits, n);
  EXPECTF(s == CURAND_STATUS_SUCCESS, "%s: curandGenerate %d", name, s);
  s = curandGenerateUniform(device_gen, d_uniform, n);
  EXPECTF(s == CURAND_STATUS_SUCCESS, "%s: curandGenerateUniform %d", name, s);
  curandGenerate(host_gen, host_bits.data(), n);
  curandGenerateUniform(host_gen, host_uniform.data(), n);
  cudaMemcpy(bits.data(), d_bits, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
  cudaMemcpy(uniform.data(), d_uniform, n * sizeof(float), cudaMemcpyDeviceToHost);
  size_t wrong_bits = 0, wrong_uniform = 0;
  for (size_t i = 0; i < n; ++i) {
    wrong_bits += bits[i] != host_bits[i];
    wrong_uniform += std::memcmp(&uniform[i], &host_uniform[i], sizeof(float)) != 0;
  }
  EXPECTF(wrong_bits == 0 && wrong_uniform == 0, "%s: %zu of %zu numbers and %zu uniforms differ from the host's",
        name, wrong_bits, n, wrong_uniform);
  std::printf("curand %s: %zu numbers, %zu uniforms as the host generator's\n", name, n - wrong_bits,
              n - wrong_uniform);
  curandDestroyGenerator(device_gen);
  curandDestroyGenerator(host_gen);
  cudaFree(d_bits);
  cudaFree(d_uniform);
}

__global__ void PhiloxKernel(unsigned long long seed, uint4* out) {
  const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  curandStatePhilox4_32_10_t state;
  curand_init(seed, tid, 0, &state);  // Subsequence `tid`, offset 0.
  out[2 * tid] = curand4(&state);
  out[2 * tid + 1] = curand4(&state);
}

// Philox4x32-10: ten rounds over the counter, bumping the key between rounds.
static void Philox(uint32_t ctr[4], uint32_t k0, uint32_t k1, uint32_t out[4]) {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, n3 = static_cast<uint32_t>(p0);
    c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}

static void PhiloxDeviceApi() {
  const int threads = 256;
  const unsigned long long seed = 0x123456789abcdefull;
  uint4* d_out = nullptr;
  cudaMalloc(&d_out, 2 * threads * sizeof(uint4));
  PhiloxKernel<<<4, threads / 4>>>(seed, d_out);
  cudaError_t e = cudaDeviceSynchronize();
  EXPECTF(e == cudaSuccess, "philox kernel: %s", cudaGetErrorString(e));
  std::vector<uint4> got(2 * threads);
  cudaMemcpy(got.data(), d_out, got.size() * sizeof(uint4), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int t = 0; t < threads; ++t) {
    for (uint32_t n = 0; n < 2; ++n) {
      // Counter: (draw, 0, subsequence low, subsequence high); key: the seed's two halves.
      uint32_t ctr[4] = {n, 0, static_cast<uint32_t>(t), 0}, want[4];
      Philox(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), want);
      const uint4& g = got[2 * t + n];
      wrong += g.x != want[0] || g.y != want[1] || g.z != want[2] || g.w != want[3];
    }
  }
  EXPECTF(wrong == 0, "curand device API: %d of %d Philox draws differ from Philox4x32-10", wrong, 2 * threads);
  std::printf("curand device API: %d Philox4x32-10 draws as defined\n", 2 * threads - wrong);
  cudaFree(d_out);
}

static void Sparse() {
  // A 6x5 CSR matrix with an empty row, and x / B from small integers: the products are exact in float.
  const int rows = 6, cols = 5, nnz = 9;
  std::vector<int> row_ptr = {0, 2, 3, 3, 6, 8, 9}, col_idx = {0, 3, 1, 0, 2, 4, 1, 3, 4};
  std::vector<float> values = {1, 2, 3, 4, 5, 6, -7, 8, 9}, x = {1, -2, 3, 4, 5};
  const int k = 3;  // B: cols x k, column-major.
  std::vector<float> b(cols * k);
  for (int i = 0; i < cols * k; ++i) b[i] = static_cast<float>(i % 7 - 3);
  std::vector<float> want_y(rows, 0), want_c(rows * k, 0);
  for (int r = 0; r < rows; ++r) {
    for (int i = row_ptr[r]; i < row_ptr[r + 1]; ++i) {
      want_y[r] += values[i] * x[col_idx[i]];
      for (int j = 0; j < k; ++j) want_c[r + j * rows] += values[i] * b[col_idx[i] + j * cols];
    }
  }
  int *d_rows, *d_cols;
  float *d_vals, *d_x, *d_y, *d_b, *d_c;
  cudaMalloc(&d_rows, row_ptr.size() * sizeof(int));
  cudaMalloc(&d_cols, nnz * sizeof(int));
  cudaMalloc(&d_vals, nnz * sizeof(float));
  cudaMalloc(&d_x, cols * sizeof(float));
  cudaMalloc(&d_y, rows * sizeof(float));
  cudaMalloc(&d_b, b.size() * sizeof(float));
  cudaMalloc(&d_c, want_c.size() * sizeof(float));
  cudaMemcpy(d_rows, row_ptr.data(), row_ptr.size() * sizeof(int), cudaMemcpyHostToDevice);
  cudaMemcpy(d_cols, col_idx.data(), nnz * sizeof(int), cudaMemcpyHostToDevice);
  cudaMemcpy(d_vals, values.data(), nnz * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(d_x, x.data(), cols * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(d_b, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice);
  cusparseHandle_t handle;
  cusparseStatus_t s = cusparseCreate(&handle);
  EXPECTF(s == CUSPARSE_STATUS_SUCCESS, "cusparseCreate %d", s);
  if (s != CUSPARSE_STATUS_SUCCESS) return;
  cusparseSpMatDescr_t a;
  cusparseDnVecDescr_t vx, vy;
  cusparseDnMatDescr_t mb, mc;
  cusparseCreateCsr(&a, rows, cols, nnz, d_rows, d_cols, d_vals, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                    CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F);
  cusparseCreateDnVec(&vx, cols, d_x, CUDA_R_32F);
  cusparseCreateDnVec(&vy, rows, d_y, CUDA_R_32F);
  cusparseCreateDnMat(&mb, cols, k, cols, d_b, CUDA_R_32F, CUSPARSE_ORDER_COL);
  cusparseCreateDnMat(&mc, rows, k, rows, d_c, CUDA_R_32F, CUSPARSE_ORDER_COL);
  const float one = 1, zero = 0;
  size_t spmv_bytes = 0, spmm_bytes = 0;
  cusparseSpMV_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, vx, &zero, vy, CUDA_R_32F,
                          CUSPARSE_SPMV_ALG_DEFAULT, &spmv_bytes);
  cusparseSpMM_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, mb,
                          &zero, mc, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &spmm_bytes);
  void* work = nullptr;
  cudaMalloc(&work, (spmv_bytes > spmm_bytes ? spmv_bytes : spmm_bytes) + 256);
  s = cusparseSpMV(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, vx, &zero, vy, CUDA_R_32F,
                   CUSPARSE_SPMV_ALG_DEFAULT, work);
  EXPECTF(s == CUSPARSE_STATUS_SUCCESS, "cusparseSpMV %d", s);
  s = cusparseSpMM(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, mb, &zero, mc,
                   CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, work);
  EXPECTF(s == CUSPARSE_STATUS_SUCCESS, "cusparseSpMM %d", s);
  std::vector<float> y(rows), c(rows * k);
  cudaMemcpy(y.data(), d_y, rows * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(c.data(), d_c, c.size() * sizeof(float), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int r = 0; r < rows; ++r) wrong += y[r] != want_y[r];
  EXPECTF(wrong == 0, "cusparseSpMV: %d of %d elements wrong (y[0] = %g, want %g)", wrong, rows, y[0], want_y[0]);
  int wrong_c = 0;
  for (size_t i = 0; i < c.size(); ++i) wrong_c += c[i] != want_c[i];
  EXPECTF(wrong_c == 0, "cusparseSpMM: %d of %zu elements wrong", wrong_c, c.size());
  std::printf("cusparse: SpMV %d of %d and SpMM %zu of %zu elements right\n", rows - wrong, rows,
              c.size() - wrong_c, c.size());
  cusparseDestroySpMat(a);
  cusparseDestroyDnVec(vx);
  cusparseDestroyDnVec(vy);
  cusparseDestroyDnMat(mb);
  cusparseDestroyDnMat(mc);
  cusparseDestroy(handle);
  cudaFree(work);
}

int main() {
  cudaDeviceProp props;
  cudaGetDeviceProperties(&props, 0);
  std::printf("nvidia_libraries: %s, compute capability %d.%d\n", props.name, props.major, props.minor);
  CompareGenerator(CURAND_RNG_PSEUDO_XORWOW, "XORWOW");
  CompareGenerator(CURAND_RNG_PSEUDO_PHILOX4_32_10, "Philox4_32_10");
  CompareGenerator(CURAND_RNG_PSEUDO_MRG32K3A, "MRG32k3a");
  CompareGenerator(CURAND_RNG_QUASI_SOBOL32, "Sobol32");
  PhiloxDeviceApi();
  Sparse();
  std::printf("nvidia_libraries: %d failure(s): %s\n", failures, failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
