// Integer arithmetic of mixed widths, as CuPy and NumPy-style code does it: an int64 array minus, plus and times an
// int32 array, and 16- and 8-bit signed elements widened to 64 bits. nvcc loads the narrow signed operand straight
// into a 64-bit register (ld.global.s32 %rd, [...]), which must sign-extend: issue 45, where
// cp.asarray(i64) - cp.asarray(i32) gave -4294967296 where 0 was expected.
#define PROGRAM_NAME "mixed_width"
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "program_checks.h"

__global__ void Mixed(const long long* a, const int* b, const short* c, const signed char* d, long long* diff,
                      long long* sum, long long* product, long long* widened, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  diff[i] = a[i] - b[i];
  sum[i] = a[i] + b[i];
  product[i] = a[i] * b[i];
  widened[i] = static_cast<long long>(c[i]) + static_cast<long long>(d[i]);
}

int main() {
  const int n = 1000;
  std::vector<long long> a(n);
  std::vector<int> b(n);
  std::vector<short> c(n);
  std::vector<signed char> d(n);
  const int edges[] = {-3, -1, 0, 1, INT_MIN, INT_MAX, INT_MIN + 1, -65536};
  for (int i = 0; i < n; ++i) {
    b[i] = i < 8 ? edges[i] : (i % 2 ? -1 : 1) * (i * 7919 % 1000003);
    // |a| < 2^32 and |b| <= 2^31: the products fit in 64 bits.
    a[i] = i % 3 == 0 ? static_cast<long long>(b[i]) : static_cast<long long>(i) * 1000003LL - 2500000000LL;
    c[i] = static_cast<short>(-(i * 37 % 32768));
    d[i] = static_cast<signed char>(-(i % 128));
  }
  long long *da, *ddiff, *dsum, *dproduct, *dwidened;
  int* db;
  short* dc;
  signed char* dd;
  CHECK(cudaMalloc(&da, n * sizeof(long long)));
  CHECK(cudaMalloc(&db, n * sizeof(int)));
  CHECK(cudaMalloc(&dc, n * sizeof(short)));
  CHECK(cudaMalloc(&dd, n * sizeof(signed char)));
  CHECK(cudaMalloc(&ddiff, n * sizeof(long long)));
  CHECK(cudaMalloc(&dsum, n * sizeof(long long)));
  CHECK(cudaMalloc(&dproduct, n * sizeof(long long)));
  CHECK(cudaMalloc(&dwidened, n * sizeof(long long)));
  CHECK(cudaMemcpy(da, a.data(), n * sizeof(long long), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), n * sizeof(short), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dd, d.data(), n * sizeof(signed char), cudaMemcpyHostToDevice));
  Mixed<<<(n + 127) / 128, 128>>>(da, db, dc, dd, ddiff, dsum, dproduct, dwidened, n);
  CHECK(cudaGetLastError());
  std::vector<long long> diff(n), sum(n), product(n), widened(n);
  CHECK(cudaMemcpy(diff.data(), ddiff, n * sizeof(long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sum.data(), dsum, n * sizeof(long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(product.data(), dproduct, n * sizeof(long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(widened.data(), dwidened, n * sizeof(long long), cudaMemcpyDeviceToHost));
  int wrong[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; ++i) {
    const long long want[4] = {a[i] - b[i], a[i] + b[i], a[i] * b[i], static_cast<long long>(c[i]) + d[i]};
    const long long got[4] = {diff[i], sum[i], product[i], widened[i]};
    for (int k = 0; k < 4; ++k) {
      if (got[k] == want[k]) continue;
      if (wrong[k]++ < 3) std::printf(PROGRAM_NAME ": [%d] op %d: expected %lld, got %lld\n", i, k, want[k], got[k]);
    }
  }
  EXPECT(diff[0] == 0, "int64(-3) - int32(-3) is 0");
  EXPECT(wrong[0] == 0, "int64 - int32");
  EXPECT(wrong[1] == 0, "int64 + int32");
  EXPECT(wrong[2] == 0, "int64 * int32");
  EXPECT(wrong[3] == 0, "int16 + int8 widened to int64");
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cudaFree(dd);
  cudaFree(ddiff);
  cudaFree(dsum);
  cudaFree(dproduct);
  cudaFree(dwidened);
  std::printf(PROGRAM_NAME ": %d failure(s): %s\n", failures, failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
