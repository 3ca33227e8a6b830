// cuBLAS and cuBLASLt matrix products on a slice, checked against products computed here on the host:
//  - inputs of small integers, whose products and sums every precision involved (FP16, BF16, TF32, FP32, FP64)
//    holds exactly, so the device's result must equal the host's bit for bit whatever order it sums in;
//  - random inputs in [-1, 1), whose error must stay within the bound of a K-term dot product,
//    |c - c_ref| <= K * eps * sum_k |a_ik * b_kj| (eps of the compute type), the accuracy cuBLAS documents
//    by referring to IEEE arithmetic.
// A case names itself and how many elements are wrong. Prints "nvidia_gemm: N failure(s): PASSED|FAILED".
// `nvidia_gemm solver` also runs cuSOLVER's LU (getrf/getrs) and Cholesky (potrf/potrs) solves.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#define PROGRAM_NAME "nvidia_gemm"
#include "program_checks.h"

// Column-major m x n matrix with leading dimension m, as cuBLAS stores it.
struct Matrix {
  int rows, cols;
  std::vector<double> v;
  Matrix(int r, int c) : rows(r), cols(c), v(static_cast<size_t>(r) * c) {}
  double& at(int r, int c) { return v[static_cast<size_t>(c) * rows + r]; }
  double at(int r, int c) const { return v[static_cast<size_t>(c) * rows + r]; }
};

enum class Fill { kIntegers, kRandom };

Matrix Make(int rows, int cols, Fill fill, unsigned seed) {
  Matrix m(rows, cols);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> small(-3, 3);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (double& x : m.v) x = fill == Fill::kIntegers ? small(gen) : unit(gen);
  return m;
}

// op(X) as stored: X is k x m for a transposed operand.
double Op(const Matrix& x, bool transposed, int r, int c) { return transposed ? x.at(c, r) : x.at(r, c); }

// Compares C = op(A) op(B) (m x n) computed on the device with the host's, exactly or within the dot-product
// bound for `eps`, and prints one line.
void Compare(const char* name, const Matrix& a, bool ta, const Matrix& b, bool tb, const std::vector<double>& c,
             int m, int n, int k, double eps, bool exact) {
  int wrong = 0;
  double worst = 0;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double ref = 0, magnitude = 0;
      for (int p = 0; p < k; ++p) {
        double t = Op(a, ta, i, p) * Op(b, tb, p, j);
        ref += t;
        magnitude += std::fabs(t);
      }
      double got = c[static_cast<size_t>(j) * m + i];
      double err = std::fabs(got - ref);
      double bound = exact ? 0 : k * eps * magnitude;
      if (!(err <= bound)) {
        if (wrong == 0) std::printf("%s: C(%d,%d) = %.17g, want %.17g\n", name, i, j, got, ref);
        ++wrong;
      }
      if (magnitude > 0) worst = std::fmax(worst, err / (k * eps * magnitude));
    }
  }
  EXPECTF(wrong == 0, "%s: %d of %d elements outside %s", name, wrong, m * n, exact ? "exactness" : "the bound");
  std::printf("%s: %d x %d x %d, %d of %d elements %s (worst error %.3g of the bound)\n", name, m, n, k,
              m * n - wrong, m * n, exact ? "exact" : "within the bound", worst);
}

// Device copies of a host matrix in element type T.
template <typename T>
T* Upload(const Matrix& x) {
  std::vector<T> host(x.v.size());
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<T>(static_cast<float>(x.v[i]));
  T* d = nullptr;
  cudaMalloc(&d, host.size() * sizeof(T));
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <>
double* Upload<double>(const Matrix& x) {
  double* d = nullptr;
  cudaMalloc(&d, x.v.size() * sizeof(double));
  cudaMemcpy(d, x.v.data(), x.v.size() * sizeof(double), cudaMemcpyHostToDevice);
  return d;
}

template <typename T>
std::vector<double> Download(const T* d, size_t count) {
  std::vector<T> host(count);
  cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost);
  std::vector<double> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<double>(static_cast<float>(host[i]));
  return out;
}
template <>
std::vector<double> Download<double>(const double* d, size_t count) {
  std::vector<double> out(count);
  cudaMemcpy(out.data(), d, count * sizeof(double), cudaMemcpyDeviceToHost);
  return out;
}

// A and B as stored for op(A) m x k and op(B) k x n.
struct Operands {
  Matrix a, b;
  Operands(int m, int n, int k, bool ta, bool tb, Fill fill, unsigned seed)
      : a(ta ? Make(k, m, fill, seed) : Make(m, k, fill, seed)),
        b(tb ? Make(n, k, fill, seed + 1) : Make(k, n, fill, seed + 1)) {}
};

cublasOperation_t OpOf(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The end of the cuBLAS GEMM checks: frees the three device matrices, then checks `name`'s status and, when it
// succeeded, the m x n C against op(A) op(B) on the host within `tolerance` (Compare).
template <typename In, typename Out>
void CheckGemm(const char* name, cublasStatus_t s, const Operands& o, bool ta, bool tb, In* a, In* b, Out* c, int m,
               int n, int k, double tolerance, bool integers) {
  const std::vector<double> got = Download(c, static_cast<size_t>(m) * n);  // Unread when the GEMM failed.
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  EXPECTF(s == CUBLAS_STATUS_SUCCESS, "%s: status %d", name, s);
  if (s == CUBLAS_STATUS_SUCCESS) Compare(name, o.a, ta, o.b, tb, got, m, n, k, tolerance, integers);
}

// C = op(A) op(B) through cublasSgemm or cublasDgemm (`gemm`, named `label`), on `fill` operands seeded from `seed`
// and the sizes, checked against the host within `tolerance` (exact for integers).
template <typename T>
using RealGemmFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const T*,
                                      const T*, int, const T*, int, const T*, T*, int);
template <typename T>
void RealGemm(RealGemmFn<T> gemm, const char* label, int seed, double tolerance, cublasHandle_t h, int m, int n,
              int k, bool ta, bool tb, Fill fill) {
  Operands o(m, n, k, ta, tb, fill, seed + m + n + k);
  T *a = Upload<T>(o.a), *b = Upload<T>(o.b), *c = nullptr;
  cudaMalloc(&c, sizeof(T) * m * n);
  const T one = 1, zero = 0;
  cublasStatus_t s = gemm(h, OpOf(ta), OpOf(tb), m, n, k, &one, a, o.a.rows, b, o.b.rows, &zero, c, m);
  char name[96];
  std::snprintf(name, sizeof(name), "%s %s%s %s", label, ta ? "T" : "N", tb ? "T" : "N",
                fill == Fill::kIntegers ? "integers" : "random");
  CheckGemm(name, s, o, ta, tb, a, b, c, m, n, k, tolerance, fill == Fill::kIntegers);
}

void Sgemm(cublasHandle_t h, int m, int n, int k, bool ta, bool tb, Fill fill) {
  RealGemm<float>(cublasSgemm, "cublasSgemm", 1000, 0x1p-23, h, m, n, k, ta, tb, fill);
}

// The host sums in double too: a different order still errs by no more than the bound for both.
void Dgemm(cublasHandle_t h, int m, int n, int k, bool ta, bool tb, Fill fill) {
  RealGemm<double>(cublasDgemm, "cublasDgemm", 2000, 2 * 0x1p-52, h, m, n, k, ta, tb, fill);
}

// FP16 in and out, FP16 compute: integers whose every partial sum FP16 holds exactly (|sum| <= 2048).
void Hgemm(cublasHandle_t h, int m, int n, int k) {
  Operands o(m, n, k, false, false, Fill::kIntegers, 3000);
  __half *a = Upload<__half>(o.a), *b = Upload<__half>(o.b), *c = nullptr;
  cudaMalloc(&c, sizeof(__half) * m * n);
  const __half one = 1.0f, zero = 0.0f;
  cublasStatus_t s = cublasHgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k, &zero, c, m);
  CheckGemm("cublasHgemm NN integers", s, o, false, false, a, b, c, m, n, k, 0, true);
}

// cublasGemmEx with FP32 output: `type` of A and B, `compute` (TF32 or FP32 on BF16 inputs).
template <typename In>
void GemmEx(cublasHandle_t h, const char* name, cudaDataType type, cublasComputeType_t compute, int m, int n, int k,
            Fill fill, double eps) {
  Operands o(m, n, k, false, true, fill, 4000 + compute);
  // The host multiplies what the device holds: the inputs rounded to the input type.
  if (type != CUDA_R_32F) {
    for (Matrix* x : {&o.a, &o.b}) {
      for (double& v : x->v) v = static_cast<float>(static_cast<In>(static_cast<float>(v)));
    }
  }
  In *a = Upload<In>(o.a), *b = Upload<In>(o.b);
  float* c = nullptr;
  cudaMalloc(&c, sizeof(float) * m * n);
  const float one = 1, zero = 0;
  cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &one, a, type, m, b, type, n, &zero, c,
                                  CUDA_R_32F, m, compute, CUBLAS_GEMM_DEFAULT);
  CheckGemm(name, s, o, false, true, a, b, c, m, n, k, eps, fill == Fill::kIntegers);
}

void SgemmStridedBatched(cublasHandle_t h, int m, int n, int k, int batch) {
  std::vector<Operands> ops;
  for (int i = 0; i < batch; ++i) ops.emplace_back(m, n, k, false, false, Fill::kIntegers, 5000 + i);
  const long long sa = static_cast<long long>(m) * k, sb = static_cast<long long>(k) * n,
                  sc = static_cast<long long>(m) * n;
  std::vector<float> ha(sa * batch), hb(sb * batch);
  for (int i = 0; i < batch; ++i) {
    for (long long j = 0; j < sa; ++j) ha[i * sa + j] = static_cast<float>(ops[i].a.v[j]);
    for (long long j = 0; j < sb; ++j) hb[i * sb + j] = static_cast<float>(ops[i].b.v[j]);
  }
  float *a, *b, *c;
  cudaMalloc(&a, ha.size() * sizeof(float));
  cudaMalloc(&b, hb.size() * sizeof(float));
  cudaMalloc(&c, sc * batch * sizeof(float));
  cudaMemcpy(a, ha.data(), ha.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(b, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice);
  const float one = 1, zero = 0;
  cublasStatus_t s = cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, sa, b, k, sb,
                                               &zero, c, m, sc, batch);
  EXPECTF(s == CUBLAS_STATUS_SUCCESS, "cublasSgemmStridedBatched: status %d", s);
  if (s == CUBLAS_STATUS_SUCCESS) {
    std::vector<double> all = Download(c, sc * batch);
    for (int i = 0; i < batch; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "cublasSgemmStridedBatched [%d]", i);
      std::vector<double> c(all.begin() + i * sc, all.begin() + (i + 1) * sc);
      Compare(name, ops[i].a, false, ops[i].b, false, c, m, n, k, 0, true);
    }
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

// D = A^T B through cublasLtMatmul with FP32 compute and FP32 D, A and B of `in_type` (uploaded as T), the first
// algorithm the heuristic offers, checked against the host as Compare does (`tolerance` ulps of FP32, or exact).
template <typename T>
void LtMatmulOf(const char* label, cudaDataType in_type, const Operands& o, int m, int n, int k, double tolerance,
                bool exact) {
  T *a = Upload<T>(o.a), *b = Upload<T>(o.b);
  float* d = nullptr;
  cudaMalloc(&d, sizeof(float) * m * n);
  cublasLtHandle_t lt;
  cublasStatus_t s = cublasLtCreate(&lt);
  EXPECTF(s == CUBLAS_STATUS_SUCCESS, "%s: cublasLtCreate: status %d", label, s);
  if (s != CUBLAS_STATUS_SUCCESS) return;
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t trans = CUBLAS_OP_T;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans));
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, in_type, k, m, k);
  cublasLtMatrixLayoutCreate(&lb, in_type, k, n, k);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  size_t workspace_bytes = 1 << 22;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                       sizeof(workspace_bytes));
  void* workspace = nullptr;
  cudaMalloc(&workspace, workspace_bytes);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  s = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &result, &found);
  EXPECTF(s == CUBLAS_STATUS_SUCCESS && found > 0, "%s: cublasLtMatmulAlgoGetHeuristic: status %d, %d algorithms",
          label, s, found);
  if (s == CUBLAS_STATUS_SUCCESS && found > 0) {
    const float one = 1, zero = 0;
    s = cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, &result.algo, workspace, workspace_bytes,
                       nullptr);
    EXPECTF(s == CUBLAS_STATUS_SUCCESS, "%s: cublasLtMatmul: status %d", label, s);
    if (s == CUBLAS_STATUS_SUCCESS) {
      Compare(label, o.a, true, o.b, false, Download(d, static_cast<size_t>(m) * n), m, n, k, tolerance, exact);
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
  cudaFree(workspace);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
}

void LtMatmul(int m, int n, int k) {
  Operands o(m, n, k, true, false, Fill::kRandom, 6000);
  LtMatmulOf<float>("cublasLtMatmul TN random", CUDA_R_32F, o, m, n, k, 0x1p-23, false);
}

// fp8 (e4m3) A and B: small integers and halves, which e4m3 holds exactly, so the result is exact.
void LtMatmulFp8(int m, int n, int k) {
  Operands o(m, n, k, true, false, Fill::kIntegers, 6500);
  for (double& x : o.b.v) x /= 2;
  LtMatmulOf<__nv_fp8_e4m3>("cublasLtMatmul e4m3 TN integers", CUDA_R_8F_E4M3, o, m, n, k, 0, true);
}

// Solves A x = b for a well-conditioned A (diagonally dominant; for Cholesky also symmetric) and checks the
// residual |A x - b| / (|A| |x|) against n * eps.
void Solve(cusolverDnHandle_t h, bool cholesky, int n) {
  std::mt19937 gen(7000 + cholesky);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<double> a(static_cast<size_t>(n) * n), rhs(n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) a[static_cast<size_t>(j) * n + i] = unit(gen);
  }
  if (cholesky) {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < j; ++i) a[static_cast<size_t>(j) * n + i] = a[static_cast<size_t>(i) * n + j];
    }
  }
  for (int i = 0; i < n; ++i) a[static_cast<size_t>(i) * n + i] += n;
  for (double& x : rhs) x = unit(gen);
  double *da, *db, *work;
  int *info, *pivots = nullptr;
  cudaMalloc(&da, a.size() * sizeof(double));
  cudaMalloc(&db, n * sizeof(double));
  cudaMalloc(&info, sizeof(int));
  cudaMemcpy(da, a.data(), a.size() * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(db, rhs.data(), n * sizeof(double), cudaMemcpyHostToDevice);
  int lwork = 0;
  cusolverStatus_t s;
  const char* name = cholesky ? "cusolverDnDpotrf/potrs" : "cusolverDnDgetrf/getrs";
  if (cholesky) {
    s = cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, da, n, &lwork);
  } else {
    s = cusolverDnDgetrf_bufferSize(h, n, n, da, n, &lwork);
    cudaMalloc(&pivots, n * sizeof(int));
  }
  cudaMalloc(&work, (lwork + 1) * sizeof(double));
  if (s == CUSOLVER_STATUS_SUCCESS) {
    s = cholesky ? cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, da, n, work, lwork, info)
                 : cusolverDnDgetrf(h, n, n, da, n, work, pivots, info);
  }
  if (s == CUSOLVER_STATUS_SUCCESS) {
    s = cholesky ? cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, n, 1, da, n, db, n, info)
                 : cusolverDnDgetrs(h, CUBLAS_OP_N, n, 1, da, n, pivots, db, n, info);
  }
  int host_info = -1;
  cudaMemcpy(&host_info, info, sizeof(int), cudaMemcpyDeviceToHost);
  EXPECTF(s == CUSOLVER_STATUS_SUCCESS && host_info == 0, "%s: status %d, info %d", name, s, host_info);
  if (s == CUSOLVER_STATUS_SUCCESS && host_info == 0) {
    std::vector<double> x(n);
    cudaMemcpy(x.data(), db, n * sizeof(double), cudaMemcpyDeviceToHost);
    double residual = 0, norm_a = 0, norm_x = 0;
    for (int i = 0; i < n; ++i) {
      double r = -rhs[i], row = 0;
      for (int j = 0; j < n; ++j) {
        r += a[static_cast<size_t>(j) * n + i] * x[j];
        row += std::fabs(a[static_cast<size_t>(j) * n + i]);
      }
      residual = std::fmax(residual, std::fabs(r));
      norm_a = std::fmax(norm_a, row);
      norm_x = std::fmax(norm_x, std::fabs(x[i]));
    }
    double relative = residual / (norm_a * norm_x);
    EXPECTF(relative <= n * 0x1p-52, "%s: relative residual %.3g above n * eps", name, relative);
    std::printf("%s: %d x %d, relative residual %.3g (bound %.3g)\n", name, n, n, relative, n * 0x1p-52);
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(work);
  cudaFree(info);
  cudaFree(pivots);
}

__global__ void Probe(float* x) { x[threadIdx.x] = 0; }

int main(int argc, char** argv) {
  const bool solver = argc > 1 && std::strcmp(argv[1], "solver") == 0;
  cudaDeviceProp props;
  cudaGetDeviceProperties(&props, 0);
  std::printf("nvidia_gemm: %s, compute capability %d.%d\n", props.name, props.major, props.minor);
  // CUB and cuSOLVER size their grids by occupancy; a failed query leaves their kernels unlaunched.
  int blocks = 0;
  cudaError_t occupancy = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Probe, 256, 0);
  EXPECTF(occupancy == cudaSuccess && blocks > 0, "cudaOccupancyMaxActiveBlocksPerMultiprocessor: %s, %d blocks",
        cudaGetErrorString(occupancy), blocks);
  std::printf("occupancy: %d blocks of 256 threads per multiprocessor\n", blocks);
  cublasHandle_t h;
  cublasStatus_t s = cublasCreate(&h);
  EXPECTF(s == CUBLAS_STATUS_SUCCESS, "cublasCreate: status %d", s);
  if (s == CUBLAS_STATUS_SUCCESS) {
    Sgemm(h, 64, 64, 64, false, false, Fill::kIntegers);
    Sgemm(h, 100, 37, 150, true, false, Fill::kIntegers);
    Sgemm(h, 33, 70, 65, false, true, Fill::kRandom);
    Sgemm(h, 96, 80, 129, true, true, Fill::kRandom);
    Dgemm(h, 64, 64, 64, false, false, Fill::kIntegers);
    Dgemm(h, 45, 71, 90, true, false, Fill::kRandom);
    Hgemm(h, 64, 48, 64);
    // TF32 keeps 10 bits of mantissa: eps 2^-11 on the rounded inputs' products is what the documentation allows.
    GemmEx<float>(h, "cublasGemmEx TF32 integers", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 64, 64, 64,
                  Fill::kIntegers, 0);
    GemmEx<float>(h, "cublasGemmEx TF32 random", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 64, 40, 96,
                  Fill::kRandom, 0x1p-10);
    GemmEx<__nv_bfloat16>(h, "cublasGemmEx BF16 in, FP32 compute, integers", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 64,
                          64, 64, Fill::kIntegers, 0);
    GemmEx<__nv_bfloat16>(h, "cublasGemmEx BF16 in, FP32 compute, random", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 72, 40,
                          80, Fill::kRandom, 0x1p-23);
    SgemmStridedBatched(h, 32, 24, 40, 5);
    // On a stream of the program's and on the per-thread default stream: cuBLAS asks the driver for each stream's
    // own object (Download's cudaMemcpy on the legacy stream waits for both).
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cublasSetStream(h, stream);
    Sgemm(h, 48, 40, 56, false, false, Fill::kIntegers);
    cudaStreamSynchronize(stream);
    cublasSetStream(h, cudaStreamPerThread);
    Sgemm(h, 40, 48, 24, true, false, Fill::kIntegers);
    cudaStreamSynchronize(cudaStreamPerThread);
    cublasDestroy(h);
    cudaStreamDestroy(stream);
  }
  LtMatmul(64, 48, 80);
  LtMatmulFp8(64, 64, 64);
  if (solver) {
    cusolverDnHandle_t sh;
    cusolverStatus_t ss = cusolverDnCreate(&sh);
    EXPECTF(ss == CUSOLVER_STATUS_SUCCESS, "cusolverDnCreate: status %d", ss);
    if (ss == CUSOLVER_STATUS_SUCCESS) {
      Solve(sh, false, 64);
      Solve(sh, true, 64);
      cusolverDnDestroy(sh);
    }
  }
  std::printf("nvidia_gemm: %d failure(s): %s\n", failures, failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
