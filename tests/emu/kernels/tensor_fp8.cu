// Instructions of newer GPUs than tensor.cu's sm_80, built for sm_90: fp8 mma.sync (sm_89+), as cuBLASLt's fp8
// GEMMs use it, and programmatic dependent launch's griddepcontrol (sm_90+). Same calling convention as tensor.cu's
// mma kernels (mma_kernel.h).

#include "mma_kernel.h"

#define GP_MMA_FP8(a, b) \
  GP_MMA_A4B2C4D4(mma_m16n8k32_f32_##a##_##b##_f32, "mma.sync.aligned.m16n8k32.row.col.f32." #a "." #b ".f32")

GP_MMA_FP8(e4m3, e4m3)
GP_MMA_FP8(e4m3, e5m2)
GP_MMA_FP8(e5m2, e4m3)
GP_MMA_FP8(e5m2, e5m2)

// out[i] = in[i] + 1 between the two griddepcontrol instructions a dependent kernel of cuBLASLt's executes.
extern "C" __global__ void griddepcontrol_increment(const unsigned* in, unsigned* out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  out[i] = in[i] + 1;
  asm volatile("griddepcontrol.launch_dependents;");
}

// The conversions around fp8 mma: pairs of f32 to e4m3x2 / e5m2x2 (in[2i] to the upper byte of out[i], in[2i+1]
// to the lower), and e4m3x2 / e5m2x2 back to f16x2 (exact).
#define GP_CVT_TO_FP8(name, form)                                                                   \
  extern "C" __global__ void name(const float* in, unsigned* out) {                                  \
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;                                        \
    unsigned short d;                                                                                \
    asm volatile("cvt.rn.satfinite" form ".f32 %0, %1, %2;" : "=h"(d) : "f"(in[2 * i]), "f"(in[2 * i + 1])); \
    out[i] = d;                                                                                      \
  }
GP_CVT_TO_FP8(cvt_e4m3x2_f32, ".e4m3x2")
GP_CVT_TO_FP8(cvt_e5m2x2_f32, ".e5m2x2")
GP_CVT_TO_FP8(cvt_relu_e4m3x2_f32, ".relu.e4m3x2")

#define GP_CVT_FROM_FP8(name, form)                                                  \
  extern "C" __global__ void name(const unsigned* in, unsigned* out) {                \
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;                         \
    unsigned short a = static_cast<unsigned short>(in[i]);                            \
    unsigned d;                                                                       \
    asm volatile("cvt.rn.f16x2" form " %0, %1;" : "=r"(d) : "h"(a));                \
    out[i] = d;                                                                       \
  }
GP_CVT_FROM_FP8(cvt_f16x2_e4m3x2, ".e4m3x2")
GP_CVT_FROM_FP8(cvt_f16x2_e5m2x2, ".e5m2x2")
