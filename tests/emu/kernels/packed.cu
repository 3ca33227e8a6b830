// Packed half-precision arithmetic (f16x2, bf16x2), half comparisons, packed conversions and bmsk. Built for
// sm_80 here and for sm_90 by packed_sm90.cu, whose headers use the sm_90 forms (add/sub/mul.bf16x2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T>
__device__ unsigned Bits(T v) {
  return *reinterpret_cast<unsigned*>(&v);
}

// Records per element (kPackedRecords words): add, sub, mul, fma, max, min, neg, abs, fma_relu, lt (1.0 per
// half), lt mask (0xffff per half), max_nan.
template <typename T2>
__device__ void PackedOps(const T2* a, const T2* b, const T2* c, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T2 x = a[i], y = b[i], z = c[i];
  unsigned* r = out + 12 * i;
  r[0] = Bits(__hadd2(x, y));
  r[1] = Bits(__hsub2(x, y));
  r[2] = Bits(__hmul2(x, y));
  r[3] = Bits(__hfma2(x, y, z));
  r[4] = Bits(__hmax2(x, y));
  r[5] = Bits(__hmin2(x, y));
  r[6] = Bits(__hneg2(x));
  r[7] = Bits(__habs2(x));
  r[8] = Bits(__hfma2_relu(x, y, z));
  r[9] = Bits(__hlt2(x, y));
  r[10] = __hlt2_mask(x, y);
  r[11] = Bits(__hmax2_nan(x, y));
}

extern "C" __global__ void half2_ops(const __half2* a, const __half2* b, const __half2* c, unsigned* out, int n) {
  PackedOps(a, b, c, out, n);
}

extern "C" __global__ void bfloat162_ops(const __nv_bfloat162* a, const __nv_bfloat162* b, const __nv_bfloat162* c,
                                         unsigned* out, int n) {
  PackedOps(a, b, c, out, n);
}

// Records per element: f16x2 and bf16x2 from two floats (x to the low half, y to the high half), f16x2 add.sat,
// bmsk.clamp and bmsk.wrap of (a, b).
extern "C" __global__ void pack_and_masks(const float* x, const float* y, const __half2* h, const unsigned* a,
                                          const unsigned* b, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned* r = out + 5 * i;
  r[0] = Bits(__floats2half2_rn(x[i], y[i]));
  r[1] = Bits(__floats2bfloat162_rn(x[i], y[i]));
  r[2] = Bits(__hadd2_sat(h[i], h[i]));
  unsigned clamp, wrap;
  asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(clamp) : "r"(a[i]), "r"(b[i]));
  asm("bmsk.wrap.b32 %0, %1, %2;" : "=r"(wrap) : "r"(a[i]), "r"(b[i]));
  r[3] = clamp;
  r[4] = wrap;
}

// Function pointers and virtual calls: indirect calls through a .callprototype.
struct Shape {
  __device__ virtual float Area() const = 0;
  __device__ virtual ~Shape() {}
};
struct Square : Shape {
  float side;
  __device__ explicit Square(float s) : side(s) {}
  __device__ float Area() const override { return side * side; }
};
struct Triangle : Shape {
  float base, height;
  __device__ Triangle(float b, float h) : base(b), height(h) {}
  __device__ float Area() const override { return 0.5f * base * height; }
};
__device__ __noinline__ int Twice(int v) { return 2 * v; }
__device__ __noinline__ int Negate(int v) { return -v; }
__device__ __noinline__ int Square32(int v) { return v * v; }
__device__ int (*const kTable[3])(int) = {Twice, Negate, Square32};

extern "C" __global__ void indirect_calls(const int* in, int* out, float* areas, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = kTable[i % 3](in[i]);
  Shape* s = (i & 1) ? static_cast<Shape*>(new Square(static_cast<float>(i)))
                     : static_cast<Shape*>(new Triangle(static_cast<float>(i), 3.0f));
  areas[i] = s->Area();
  delete s;
}

// %clock64 is time: wait `cycles` and report the cycles seen and %globaltimer's nanoseconds meanwhile.
extern "C" __global__ void spin_cycles(long long cycles, long long* seen) {
  long long start = clock64();
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (clock64() - start < cycles) {
  }
  unsigned long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  seen[0] = clock64() - start;
  seen[1] = static_cast<long long>(t1 - t0);
}

// Calls a device-side CUDA runtime function the binary declares but does not define.
extern "C" __global__ void graph_set_conditional(cudaGraphConditionalHandle handle, int* out) {
  out[threadIdx.x] = 1;
  if (threadIdx.x == 0) cudaGraphSetConditional(handle, 1);
}

// cp.async (sm_80): the pipeline primitives, cooperative groups' memcpy_async, and the zero-filling form with a
// source size. Each block stages 256 float4 of `in` through shared memory and writes them back reversed; then
// 16-byte copies whose first in[i] % 17 bytes come from `bytes`, the rest zeros.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cuda_pipeline.h>

extern "C" __global__ void async_copies(const float4* in, float4* reversed, const int* ints, int* ints_reversed,
                                        const unsigned char* bytes, const int* sizes, uint4* partial) {
  __shared__ float4 staged[256];
  __shared__ int staged_ints[256];
  __shared__ uint4 staged_partial[256];
  const int base = blockIdx.x * 256, t = threadIdx.x;
  __pipeline_memcpy_async(&staged[t], &in[base + t], sizeof(float4));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  reversed[base + t] = staged[255 - t];

  namespace cg = cooperative_groups;
  cg::thread_block block = cg::this_thread_block();
  cg::memcpy_async(block, staged_ints, ints + base, sizeof(int) * 256);
  cg::wait(block);
  ints_reversed[base + t] = staged_ints[255 - t];

  unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&staged_partial[t]));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(bytes + 16 * (base + t)),
               "r"(sizes[base + t]));
  asm volatile("cp.async.wait_all;\n" ::);
  partial[base + t] = staged_partial[t];
}

// mbarrier through cuda::barrier: sm_80 builds stage with cp.async and arrive with cp.async.mbarrier.arrive,
// sm_90 builds with cp.async.bulk completing transactions on the barrier (expect_tx, try_wait). Each block stages
// 256 int4 and writes them back reversed, twice (two phases of the same barrier).
#include <cuda/barrier>
#pragma nv_diag_suppress static_var_with_dynamic_init

extern "C" __global__ void barrier_copies(const int4* in, int4* out, int extra_arrivals) {
  __shared__ alignas(128) int4 staged[256];
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  const int t = threadIdx.x;
  if (t == 0) init(&bar, blockDim.x + extra_arrivals);
  __syncthreads();
  for (int round = 0; round < 2; ++round) {
    const int4* from = in + (2 * blockIdx.x + round) * 256;
    if (t == 0) cuda::memcpy_async(staged, from, cuda::aligned_size_t<16>(sizeof(staged)), bar);
    bar.arrive_and_wait();
    out[(2 * blockIdx.x + round) * 256 + t] = staged[255 - t];
    __syncthreads();
  }
}
