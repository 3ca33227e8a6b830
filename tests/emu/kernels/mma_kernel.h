// mma.sync test kernels' calling convention, shared by tensor.cu (sm_80) and tensor_fp8.cu (sm_90): in holds the
// A, B and C registers of every thread one after another (kIn words a thread), out the D registers (kOut words a
// thread). GP_MMA_BEGIN(name, kIn, kOut) opens a kernel with x[] loaded, GP_MMA_END(kOut) stores y[]; between them
// an asm statement reads R(i) (x[i]) and writes D(i) (y[i]).
#pragma once

#define GP_MMA_BEGIN(name, kIn, kOut)                                  \
  extern "C" __global__ void name(const unsigned* in, unsigned* out) { \
    const unsigned thread = blockIdx.x * blockDim.x + threadIdx.x;     \
    unsigned x[kIn], y[kOut];                                           \
    for (int i = 0; i < kIn; ++i) x[i] = in[thread * kIn + i];
#define GP_MMA_END(kOut)                                          \
    for (int i = 0; i < kOut; ++i) out[thread * kOut + i] = y[i]; \
  }

#define R(i) "r"(x[i])
#define D(i) "=r"(y[i])
