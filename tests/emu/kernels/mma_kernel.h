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

// The two shapes most mma.sync forms take, named by the registers of A, B, C and D: a kernel of the one
// instruction `op` (without its operands).
#define GP_MMA_A2B1C4D4(name, op)                                  \
  GP_MMA_BEGIN(name, 7, 4)                                         \
  asm volatile(op " {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};" \
               : D(0), D(1), D(2), D(3)                            \
               : R(0), R(1), R(2), R(3), R(4), R(5), R(6));        \
  GP_MMA_END(4)
#define GP_MMA_A4B2C4D4(name, op)                                              \
  GP_MMA_BEGIN(name, 10, 4)                                                    \
  asm volatile(op " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};" \
               : D(0), D(1), D(2), D(3)                                        \
               : R(0), R(1), R(2), R(3), R(4), R(5), R(6), R(7), R(8), R(9));  \
  GP_MMA_END(4)
