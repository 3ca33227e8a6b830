// Types shared by the test kernels (compiled by nvcc) and the host side of tests/emu/kernel_test.cc (compiled by
// the host compiler). nvcc lays out a struct exactly as the host compiler does, so both sides agree on offsets.
#ifndef GPUPOOL_TESTS_EMU_KERNELS_KERNEL_TYPES_H_
#define GPUPOOL_TESTS_EMU_KERNELS_KERNEL_TYPES_H_

#include <stdint.h>

namespace kt {

// ---- Kernel parameters passed by value (params.cu). ----

// Mixed field sizes and alignments: char/short padding before a double, an odd-sized array, a trailing float[3].
struct Mixed {
  char c;
  double d;
  float f;
  int i;
  short s;
  unsigned char tag[3];
  long long ll;
  float v[3];
};

struct Vec2 {
  float x, y;
};

// A 2D sampling grid: element (x, y) sits at origin + (x, y) * step.
struct Grid2D {
  int width, height;
  Vec2 origin, step;
};

// A pointer inside a struct passed by value.
struct Span {
  float* data;
  int n;
};

// A parameter larger than 64 bytes: a polynomial of degree <= 15, evaluated by Horner's rule.
struct Poly {
  int degree;
  float c[16];
};

// ---- Atomics (atomics.cu). ----

constexpr int kAtomicWords = 64;

// One cell per atomic function; the host initialises it, every thread updates it, the host checks the result.
struct AtomicSlots {
  int add_i;
  unsigned ticket;  // atomicAdd(1u): the returned old values are a permutation of 0..n-1.
  float add_f;
  float fticket;  // atomicAdd(1.0f) with the result used.
  double add_d;
  unsigned long long add_ull;
  int sub_i;
  unsigned sub_u;
  int exch_i;
  float exch_f;
  unsigned long long exch_ull;
  int min_i, max_i;
  unsigned min_u, max_u;
  long long min_ll, max_ll;
  unsigned long long min_ull, max_ull;
  unsigned inc, dec;
  unsigned cas_ticket;         // atomicCAS loop adding 1, returned values a permutation.
  int cas_sum;                 // atomicCAS loop adding v.
  unsigned long long cas_ull;  // 64-bit atomicCAS loop adding w (wrapping).
  double cas_d;                // double add built from 64-bit atomicCAS.
  int add_block, add_system;   // atomicAdd_block / atomicAdd_system.
  int generic_add;             // atomicAdd through a generic pointer in a non-inlined function.
  unsigned and32[kAtomicWords], or32[kAtomicWords], xor32[kAtomicWords];
  unsigned long long and64[kAtomicWords], or64[kAtomicWords], xor64[kAtomicWords];
};

struct AtomicInput {
  int v;                 // Small signed value.
  unsigned u;            // Any 32-bit value.
  unsigned long long w;  // Any 64-bit value.
  unsigned and32, or32, xor32;
  unsigned long long and64, or64, xor64;
};

// What each thread got back from the atomics whose return value is checked.
struct AtomicOld {
  unsigned ticket;
  float fticket;
  int exch_i;
  unsigned inc, dec;
  unsigned cas_ticket;
};

// Per-block results of atomics on shared memory.
struct SharedAtomicResult {
  int sum;
  int min, max;
  unsigned or_bits, and_bits, xor_bits;
  unsigned ticket_total;  // Sum of the tickets handed out by a shared atomicInc.
  unsigned cas_count;     // Final value of a shared counter bumped with atomicCAS loops.
  int exch_last;          // Final value after every thread exchanged its id in.
  int generic_add;        // atomicAdd through a generic pointer into shared memory.
};

// ---- Math (math.cu): operation codes of math_f32 / math_f64 / fast_f32 / round_f32 / round_f64. ----

enum MathF32 : int {
  kSinf,
  kCosf,
  kTanf,
  kExpf,
  kExp2f,
  kExp10f,
  kExpm1f,
  kLogf,
  kLog2f,
  kLog10f,
  kLog1pf,
  kPowf,
  kSqrtf,
  kRsqrtf,
  kCbrtf,
  kFmaf,
  kAtan2f,
  kAtanf,
  kAsinf,
  kAcosf,
  kSinhf,
  kCoshf,
  kTanhf,
  kErff,
  kErfcf,
  kHypotf,
  kDivf,
  kRcpf,
  kFmodf,
  kFloorf,
  kCeilf,
  kTruncf,
  kRoundf,
  kRintf,
  kFminf,
  kFmaxf,
  kFabsf,
  kCopysignf,
  kLdexpf,
  kMathF32Count
};

enum MathF64 : int {
  kSin,
  kCos,
  kTan,
  kExp,
  kExp2,
  kExp10,
  kExpm1,
  kLog,
  kLog2,
  kLog10,
  kLog1p,
  kPow,
  kSqrt,
  kRsqrt,
  kCbrt,
  kFma,
  kAtan2,
  kAtan,
  kAsin,
  kAcos,
  kSinh,
  kCosh,
  kTanh,
  kErf,
  kErfc,
  kHypot,
  kDiv,
  kRcp,
  kFmod,
  kFloor,
  kCeil,
  kTrunc,
  kRound,
  kRint,
  kMathF64Count
};

enum FastF32 : int {
  kFastExpf,
  kFastExp10f,
  kFastLogf,
  kFastLog2f,
  kFastLog10f,
  kFastSinf,
  kFastCosf,
  kFastFdividef,
  kFastSaturatef,
  kFastF32Count
};

// Rounding modes in the order CUDA names them: _rn, _rz, _rd, _ru.
enum Rounding : int { kRn, kRz, kRd, kRu, kRoundingCount };

// round_f32 / round_f64: operation x rounding mode, op * kRoundingCount + mode.
enum RoundOp : int { kRAdd, kRSub, kRMul, kRDiv, kRFma, kRSqrt, kRRcp, kRoundOpCount };

// ---- Conversions (convert.cu): one record per input. ----
struct ConvertOut {
  int f2i[kRoundingCount];                   // __float2int_rn/rz/rd/ru
  unsigned f2u[kRoundingCount];              // __float2uint_*
  long long f2ll[kRoundingCount];            // __float2ll_*
  unsigned long long f2ull[kRoundingCount];  // __float2ull_*
  int cast_i;                                // (int)x
  unsigned cast_u;                           // (unsigned)x
  long long cast_ll;                         // (long long)x
  int d2i[kRoundingCount];                   // __double2int_* of (double)x * 3
  long long d2ll[kRoundingCount];            // __double2ll_*
  float d2f[kRoundingCount];                 // __double2float_* of the double input
  float i2f[kRoundingCount];                 // __int2float_* of the int input
  float u2f[kRoundingCount];                 // __uint2float_*
  float ll2f[kRoundingCount];                // __ll2float_*
  double ll2d[kRoundingCount];               // __ll2double_*
  unsigned short f2h[kRoundingCount];        // __float2half_rn/rz/rd/ru as raw bits
  float h2f;                                 // __half2float(__float2half_rn(x))
  unsigned short h_roundtrip;                // __float2half_rn(__half2float(h)) for the raw half input
  float h_value;                             // __half2float of the raw half input
};

}  // namespace kt

#endif  // GPUPOOL_TESTS_EMU_KERNELS_KERNEL_TYPES_H_
