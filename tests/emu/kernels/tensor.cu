// Tensor-core instructions: nvcuda::wmma for every type, shape and layout (wmma.load/mma/store), and inline PTX
// for mma.sync, ldmatrix and movmatrix. Built for sm_80 (tests/emu/kernels.cmake).
//
// The mma/ldmatrix/movmatrix kernels move registers in and out unchanged: lane l of a warp reads its input
// registers from in[(global thread) * count ...] and writes its results likewise, so the host builds and reads the
// per-lane fragments from the PTX ISA's layouts and checks them against a reference of its own.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

// ---- wmma: D = scale * (A * B + C) for one tile per warp. ----

template <typename Precision>
struct Storage {
  using type = Precision;
};
template <>
struct Storage<wmma::precision::tf32> {
  using type = float;
};

// c_mode: 0 fills C with c[0] (fill_fragment), 1 loads it row-major, 2 column-major. d_col: store D column-major.
// Every element of the accumulator is scaled through frag.x[i] (half accumulators are left as they are, keeping
// the kernel free of packed half arithmetic), so element-wise access must see the same elements the store writes.
template <typename In, typename Acc, int M, int N, int K, typename LayoutA, typename LayoutB>
__device__ void WmmaTile(const typename Storage<In>::type* a, const typename Storage<In>::type* b, const Acc* c,
                         Acc* d, int lda, int ldb, int ldc, int ldd, int c_mode, int d_col, Acc scale) {
  wmma::fragment<wmma::matrix_a, M, N, K, In, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, In, LayoutB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, Acc> fc;
  if (c_mode == 0) {
    wmma::fill_fragment(fc, c[0]);
  } else {
    wmma::load_matrix_sync(fc, c, ldc, c_mode == 1 ? wmma::mem_row_major : wmma::mem_col_major);
  }
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  if constexpr (std::is_same_v<In, wmma::precision::tf32>) {
    // tf32 fragments hold floats that the program must round to tf32 itself, as CUDA's documentation asks.
    for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
  }
  wmma::mma_sync(fc, fa, fb, fc);
  if constexpr (!std::is_same_v<Acc, half>) {
    for (int i = 0; i < fc.num_elements; ++i) fc.x[i] = fc.x[i] * scale;
  }
  wmma::store_matrix_sync(d, fc, ldd, d_col ? wmma::mem_col_major : wmma::mem_row_major);
}

#define GP_WMMA(name, In, Acc, M, N, K, LA, LB)                                                                   \
  extern "C" __global__ void name(const Storage<In>::type* a, const Storage<In>::type* b, const Acc* c, Acc* d,    \
                                  int lda, int ldb, int ldc, int ldd, int c_mode, int d_col, Acc scale) {          \
    WmmaTile<In, Acc, M, N, K, wmma::LA, wmma::LB>(a, b, c, d, lda, ldb, ldc, ldd, c_mode, d_col, scale);          \
  }
#define GP_WMMA_LAYOUTS(prefix, In, Acc, M, N, K)            \
  GP_WMMA(prefix##_rr, In, Acc, M, N, K, row_major, row_major) \
  GP_WMMA(prefix##_rc, In, Acc, M, N, K, row_major, col_major) \
  GP_WMMA(prefix##_cr, In, Acc, M, N, K, col_major, row_major) \
  GP_WMMA(prefix##_cc, In, Acc, M, N, K, col_major, col_major)
#define GP_WMMA_SHAPES(prefix, In, Acc)                    \
  GP_WMMA_LAYOUTS(prefix##_m16n16k16, In, Acc, 16, 16, 16) \
  GP_WMMA_LAYOUTS(prefix##_m32n8k16, In, Acc, 32, 8, 16)   \
  GP_WMMA_LAYOUTS(prefix##_m8n32k16, In, Acc, 8, 32, 16)

GP_WMMA_SHAPES(wmma_f16_f32, half, float)
GP_WMMA_SHAPES(wmma_f16_f16, half, half)
GP_WMMA_SHAPES(wmma_bf16_f32, __nv_bfloat16, float)
GP_WMMA_SHAPES(wmma_s8_s32, signed char, int)
GP_WMMA_SHAPES(wmma_u8_s32, unsigned char, int)
GP_WMMA_LAYOUTS(wmma_tf32_f32_m16n16k8, wmma::precision::tf32, float, 16, 16, 8)
GP_WMMA_LAYOUTS(wmma_f64_f64_m8n8k4, double, double, 8, 8, 4)

// A half accumulator in, a float accumulator out (wmma.mma's dtype and ctype differ).
extern "C" __global__ void wmma_f16_mixed_m16n16k16(const half* a, const half* b, const half* c, float* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, half> fc;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fd;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::mma_sync(fd, fa, fb, fc);
  wmma::store_matrix_sync(d, fd, 16, wmma::mem_row_major);
}

// A tiled GEMM through shared memory, as real code writes it: C (m x n, row-major) = A (m x k, row-major) *
// B (k x n, row-major), m, n, k multiples of 16, one warp per 16x16 tile of C, four warps per block.
extern "C" __global__ void wmma_gemm_f16(const half* a, const half* b, float* c, int m, int n, int k) {
  __shared__ half tile_a[4][16 * 16];
  __shared__ half tile_b[4][16 * 16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles_n = n / 16;
  const int tile = blockIdx.x * 4 + warp;
  if (tile >= (m / 16) * tiles_n) return;
  const int row0 = tile / tiles_n * 16, col0 = tile % tiles_n * 16;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int kk = 0; kk < k; kk += 16) {
    for (int i = lane; i < 256; i += 32) {
      tile_a[warp][i] = a[(row0 + i / 16) * k + kk + i % 16];
      tile_b[warp][i] = b[(kk + i / 16) * n + col0 + i % 16];
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, tile_a[warp], 16);
    wmma::load_matrix_sync(fb, tile_b[warp], 16);
    wmma::mma_sync(acc, fa, fb, acc);
    __syncwarp();
  }
  wmma::store_matrix_sync(c + row0 * n + col0, acc, n, wmma::mem_row_major);
}

// ---- mma.sync: registers in, registers out. ----

#include "mma_kernel.h"

// f16 and bf16 with f32 or f16 accumulators.
GP_MMA_A2B1C4D4(mma_m16n8k8_f32_f16_f16_f32, "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32")
GP_MMA_BEGIN(mma_m16n8k8_f16_f16_f16_f16, 5, 2)
asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%5,%6};"
             : D(0), D(1) : R(0), R(1), R(2), R(3), R(4));
GP_MMA_END(2)
GP_MMA_A4B2C4D4(mma_m16n8k16_f32_f16_f16_f32, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
GP_MMA_BEGIN(mma_m16n8k16_f16_f16_f16_f16, 8, 2)
asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%8,%9};"
             : D(0), D(1) : R(0), R(1), R(2), R(3), R(4), R(5), R(6), R(7));
GP_MMA_END(2)
GP_MMA_A2B1C4D4(mma_m16n8k8_f32_bf16_bf16_f32, "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32")
GP_MMA_A4B2C4D4(mma_m16n8k16_f32_bf16_bf16_f32, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")

// tf32 with f32 registers for the accumulators, as CUTLASS writes it.
extern "C" __global__ void mma_m16n8k4_f32_tf32_tf32_f32(const unsigned* in, unsigned* out) {
  const unsigned thread = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned* x = in + thread * 7;
  float c[4], d[4];
  for (int i = 0; i < 4; ++i) c[i] = __uint_as_float(x[3 + i]);
  asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(x[0]), "r"(x[1]), "r"(x[2]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  for (int i = 0; i < 4; ++i) out[thread * 4 + i] = __float_as_uint(d[i]);
}
GP_MMA_A4B2C4D4(mma_m16n8k8_f32_tf32_tf32_f32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")

// 8-bit integers, signed and unsigned mixed, wrapping and saturating.
GP_MMA_A2B1C4D4(mma_m16n8k16_s32_s8_s8_s32, "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32")
GP_MMA_A2B1C4D4(mma_m16n8k16_s32_u8_s8_s32_satfinite, "mma.sync.aligned.m16n8k16.row.col.satfinite.s32.u8.s8.s32")
GP_MMA_A4B2C4D4(mma_m16n8k32_s32_u8_u8_s32, "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32")
GP_MMA_A4B2C4D4(mma_m16n8k32_s32_s8_u8_s32_satfinite, "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32")
GP_MMA_BEGIN(mma_m8n8k16_s32_s8_s8_s32, 4, 2)
asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%4,%5};"
             : D(0), D(1) : R(0), R(1), R(2), R(3));
GP_MMA_END(2)

// m8n8k4 f16: four independent 8x8x4 products, one per quad pair; every layout of A and B.
#define GP_MMA_884(la, lb)                                                                                       \
  GP_MMA_BEGIN(mma_m8n8k4_##la##_##lb##_f32_f16_f16_f32, 12, 8)                                                 \
  asm volatile("mma.sync.aligned.m8n8k4." #la "." #lb ".f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, "  \
               "{%10,%11}, {%12,%13,%14,%15,%16,%17,%18,%19};"                                                  \
               : D(0), D(1), D(2), D(3), D(4), D(5), D(6), D(7)                                                 \
               : R(0), R(1), R(2), R(3), R(4), R(5), R(6), R(7), R(8), R(9), R(10), R(11));                     \
  GP_MMA_END(8)                                                                                                  \
  GP_MMA_BEGIN(mma_m8n8k4_##la##_##lb##_f16_f16_f16_f16, 8, 4)                                                  \
  asm volatile("mma.sync.aligned.m8n8k4." #la "." #lb ".f16.f16.f16.f16 {%0,%1,%2,%3}, {%4,%5}, {%6,%7}, "      \
               "{%8,%9,%10,%11};"                                                                               \
               : D(0), D(1), D(2), D(3) : R(0), R(1), R(2), R(3), R(4), R(5), R(6), R(7));                      \
  GP_MMA_END(4)
GP_MMA_884(row, row)
GP_MMA_884(row, col)
GP_MMA_884(col, row)
GP_MMA_884(col, col)

// m8n8k4 is the one shape whose C and D types may differ: f16 in, f32 out.
GP_MMA_BEGIN(mma_m8n8k4_row_col_f32_f16_f16_f16, 8, 8)
asm volatile("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
             "{%12,%13,%14,%15};"
             : D(0), D(1), D(2), D(3), D(4), D(5), D(6), D(7)
             : R(0), R(1), R(2), R(3), R(4), R(5), R(6), R(7));
GP_MMA_END(8)

// m8n8k4 f64: one 64-bit register each for A and B, two for C and D.
extern "C" __global__ void mma_m8n8k4_f64(const double* in, double* out) {
  const unsigned thread = blockIdx.x * blockDim.x + threadIdx.x;
  const double* x = in + thread * 4;
  double d0, d1;
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%4,%5};"
               : "=d"(d0), "=d"(d1)
               : "d"(x[0]), "d"(x[1]), "d"(x[2]), "d"(x[3]));
  out[thread * 2] = d0;
  out[thread * 2 + 1] = d1;
}

#undef R
#undef D

// ---- ldmatrix and movmatrix. ----

// Shared memory holds 32 rows of eight 16-bit elements copied from `rows`; lane l hands ldmatrix the address of
// row row_of_lane[l] (lanes whose address the instruction does not use get one far outside shared memory).
#define GP_LDMATRIX(name, shape, count, ...)                                                         \
  extern "C" __global__ void name(const unsigned short* rows, const int* row_of_lane, unsigned* out) { \
    __shared__ __align__(16) unsigned short tile[32 * 8];                                           \
    const unsigned lane = threadIdx.x;                                                              \
    for (int i = lane; i < 32 * 8; i += 32) tile[i] = rows[i];                                      \
    __syncwarp();                                                                                   \
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(tile)) + row_of_lane[lane] * 16; \
    unsigned r[4] = {0, 0, 0, 0};                                                                   \
    asm volatile("ldmatrix.sync.aligned.m8n8." shape ".shared.b16 " __VA_ARGS__);                  \
    for (int i = 0; i < count; ++i) out[lane * count + i] = r[i];                                   \
  }
GP_LDMATRIX(ldmatrix_x1, "x1", 1, "{%0}, [%1];" : "=r"(r[0]) : "r"(address))
GP_LDMATRIX(ldmatrix_x2, "x2", 2, "{%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(address))
GP_LDMATRIX(ldmatrix_x4, "x4", 4, "{%0,%1,%2,%3}, [%4];"
            : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address))
GP_LDMATRIX(ldmatrix_x1_trans, "x1.trans", 1, "{%0}, [%1];" : "=r"(r[0]) : "r"(address))
GP_LDMATRIX(ldmatrix_x2_trans, "x2.trans", 2, "{%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(address))
GP_LDMATRIX(ldmatrix_x4_trans, "x4.trans", 4, "{%0,%1,%2,%3}, [%4];"
            : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address))

// __float_to_tf32 (cvt.rna.tf32.f32) on every input.
extern "C" __global__ void float_to_tf32(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = wmma::__float_to_tf32(in[i]);
}

extern "C" __global__ void movmatrix_trans(const unsigned* in, unsigned* out) {
  const unsigned thread = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(in[thread]));
  out[thread] = d;
}

// The way hand-written and CUTLASS kernels feed mma: A (16x16, row-major) through ldmatrix.x4, B (16x8, row-major,
// k x n) through ldmatrix.x2.trans, one m16n8k16 with f32 accumulators, D written out from its fragment layout.
// Nothing here but the PTX ISA's layouts: right only if ldmatrix and mma agree on them.
extern "C" __global__ void ldmatrix_mma_m16n8k16(const half* a, const half* b, float* d) {
  __shared__ __align__(16) half tile_a[16 * 16];
  __shared__ __align__(16) half tile_b[16 * 8];
  const unsigned lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) tile_a[i] = a[i];
  for (int i = lane; i < 128; i += 32) tile_b[i] = b[i];
  __syncwarp();
  unsigned ra[4], rb[2];
  // Matrices of the x4: rows 0-7 / cols 0-7, rows 8-15 / cols 0-7, rows 0-7 / cols 8-15, rows 8-15 / cols 8-15.
  const unsigned a_address =
      static_cast<unsigned>(__cvta_generic_to_shared(&tile_a[(lane % 16) * 16 + (lane / 16) * 8]));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(ra[0]), "=r"(ra[1]), "=r"(ra[2]), "=r"(ra[3]) : "r"(a_address));
  const unsigned b_address = static_cast<unsigned>(__cvta_generic_to_shared(&tile_b[(lane % 16) * 8]));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(rb[0]), "=r"(rb[1]) : "r"(b_address));
  float c[4] = {0, 0, 0, 0};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
  const int group = lane / 4, quad = lane % 4;
  d[group * 8 + quad * 2] = c[0];
  d[group * 8 + quad * 2 + 1] = c[1];
  d[(group + 8) * 8 + quad * 2] = c[2];
  d[(group + 8) * 8 + quad * 2 + 1] = c[3];
}
