// The math library (single and double precision), the fast intrinsics, and the IEEE operations with explicit
// rounding modes. One kernel per family; `op` picks the function (kernel_types.h), uniformly for the launch.
#include "kernel_types.h"

using namespace kt;

extern "C" __global__ void math_f32(int op, const float* x, const float* y, const float* z, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i], c = z[i], r;
  switch (op) {
    case kSinf: r = sinf(a); break;
    case kCosf: r = cosf(a); break;
    case kTanf: r = tanf(a); break;
    case kExpf: r = expf(a); break;
    case kExp2f: r = exp2f(a); break;
    case kExp10f: r = exp10f(a); break;
    case kExpm1f: r = expm1f(a); break;
    case kLogf: r = logf(a); break;
    case kLog2f: r = log2f(a); break;
    case kLog10f: r = log10f(a); break;
    case kLog1pf: r = log1pf(a); break;
    case kPowf: r = powf(a, b); break;
    case kSqrtf: r = sqrtf(a); break;
    case kRsqrtf: r = rsqrtf(a); break;
    case kCbrtf: r = cbrtf(a); break;
    case kFmaf: r = fmaf(a, b, c); break;
    case kAtan2f: r = atan2f(a, b); break;
    case kAtanf: r = atanf(a); break;
    case kAsinf: r = asinf(a); break;
    case kAcosf: r = acosf(a); break;
    case kSinhf: r = sinhf(a); break;
    case kCoshf: r = coshf(a); break;
    case kTanhf: r = tanhf(a); break;
    case kErff: r = erff(a); break;
    case kErfcf: r = erfcf(a); break;
    case kHypotf: r = hypotf(a, b); break;
    case kDivf: r = a / b; break;
    case kRcpf: r = 1.0f / a; break;
    case kFmodf: r = fmodf(a, b); break;
    case kFloorf: r = floorf(a); break;
    case kCeilf: r = ceilf(a); break;
    case kTruncf: r = truncf(a); break;
    case kRoundf: r = roundf(a); break;
    case kRintf: r = rintf(a); break;
    case kFminf: r = fminf(a, b); break;
    case kFmaxf: r = fmaxf(a, b); break;
    case kFabsf: r = fabsf(a); break;
    case kCopysignf: r = copysignf(a, b); break;
    case kLdexpf: r = ldexpf(a, (int)b); break;
    default: r = __int_as_float(0x7fc0dead); break;
  }
  out[i] = r;
}

extern "C" __global__ void math_f64(int op, const double* x, const double* y, const double* z, double* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double a = x[i], b = y[i], c = z[i], r;
  switch (op) {
    case kSin: r = sin(a); break;
    case kCos: r = cos(a); break;
    case kTan: r = tan(a); break;
    case kExp: r = exp(a); break;
    case kExp2: r = exp2(a); break;
    case kExp10: r = exp10(a); break;
    case kExpm1: r = expm1(a); break;
    case kLog: r = log(a); break;
    case kLog2: r = log2(a); break;
    case kLog10: r = log10(a); break;
    case kLog1p: r = log1p(a); break;
    case kPow: r = pow(a, b); break;
    case kSqrt: r = sqrt(a); break;
    case kRsqrt: r = rsqrt(a); break;
    case kCbrt: r = cbrt(a); break;
    case kFma: r = fma(a, b, c); break;
    case kAtan2: r = atan2(a, b); break;
    case kAtan: r = atan(a); break;
    case kAsin: r = asin(a); break;
    case kAcos: r = acos(a); break;
    case kSinh: r = sinh(a); break;
    case kCosh: r = cosh(a); break;
    case kTanh: r = tanh(a); break;
    case kErf: r = erf(a); break;
    case kErfc: r = erfc(a); break;
    case kHypot: r = hypot(a, b); break;
    case kDiv: r = a / b; break;
    case kRcp: r = 1.0 / a; break;
    case kFmod: r = fmod(a, b); break;
    case kFloor: r = floor(a); break;
    case kCeil: r = ceil(a); break;
    case kTrunc: r = trunc(a); break;
    case kRound: r = round(a); break;
    case kRint: r = rint(a); break;
    default: r = __longlong_as_double(0x7ff8dead0000dead); break;
  }
  out[i] = r;
}

// The fast hardware approximations (ex2.approx, lg2.approx, sin.approx, ...), with their own documented bounds.
extern "C" __global__ void fast_f32(int op, const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i], r;
  switch (op) {
    case kFastExpf: r = __expf(a); break;
    case kFastExp10f: r = __exp10f(a); break;
    case kFastLogf: r = __logf(a); break;
    case kFastLog2f: r = __log2f(a); break;
    case kFastLog10f: r = __log10f(a); break;
    case kFastSinf: r = __sinf(a); break;
    case kFastCosf: r = __cosf(a); break;
    case kFastFdividef: r = __fdividef(a, b); break;
    case kFastSaturatef: r = __saturatef(a); break;
    default: r = __int_as_float(0x7fc0dead); break;
  }
  out[i] = r;
}

// IEEE operations with an explicit rounding mode: op = RoundOp * kRoundingCount + Rounding.
extern "C" __global__ void round_f32(int op, const float* x, const float* y, const float* z, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i], c = z[i], r;
  switch (op) {
    case kRAdd * 4 + kRn: r = __fadd_rn(a, b); break;
    case kRAdd * 4 + kRz: r = __fadd_rz(a, b); break;
    case kRAdd * 4 + kRd: r = __fadd_rd(a, b); break;
    case kRAdd * 4 + kRu: r = __fadd_ru(a, b); break;
    case kRSub * 4 + kRn: r = __fsub_rn(a, b); break;
    case kRSub * 4 + kRz: r = __fsub_rz(a, b); break;
    case kRSub * 4 + kRd: r = __fsub_rd(a, b); break;
    case kRSub * 4 + kRu: r = __fsub_ru(a, b); break;
    case kRMul * 4 + kRn: r = __fmul_rn(a, b); break;
    case kRMul * 4 + kRz: r = __fmul_rz(a, b); break;
    case kRMul * 4 + kRd: r = __fmul_rd(a, b); break;
    case kRMul * 4 + kRu: r = __fmul_ru(a, b); break;
    case kRDiv * 4 + kRn: r = __fdiv_rn(a, b); break;
    case kRDiv * 4 + kRz: r = __fdiv_rz(a, b); break;
    case kRDiv * 4 + kRd: r = __fdiv_rd(a, b); break;
    case kRDiv * 4 + kRu: r = __fdiv_ru(a, b); break;
    case kRFma * 4 + kRn: r = __fmaf_rn(a, b, c); break;
    case kRFma * 4 + kRz: r = __fmaf_rz(a, b, c); break;
    case kRFma * 4 + kRd: r = __fmaf_rd(a, b, c); break;
    case kRFma * 4 + kRu: r = __fmaf_ru(a, b, c); break;
    case kRSqrt * 4 + kRn: r = __fsqrt_rn(a); break;
    case kRSqrt * 4 + kRz: r = __fsqrt_rz(a); break;
    case kRSqrt * 4 + kRd: r = __fsqrt_rd(a); break;
    case kRSqrt * 4 + kRu: r = __fsqrt_ru(a); break;
    case kRRcp * 4 + kRn: r = __frcp_rn(a); break;
    case kRRcp * 4 + kRz: r = __frcp_rz(a); break;
    case kRRcp * 4 + kRd: r = __frcp_rd(a); break;
    case kRRcp * 4 + kRu: r = __frcp_ru(a); break;
    default: r = __int_as_float(0x7fc0dead); break;
  }
  out[i] = r;
}

extern "C" __global__ void round_f64(int op, const double* x, const double* y, const double* z, double* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double a = x[i], b = y[i], c = z[i], r;
  switch (op) {
    case kRAdd * 4 + kRn: r = __dadd_rn(a, b); break;
    case kRAdd * 4 + kRz: r = __dadd_rz(a, b); break;
    case kRAdd * 4 + kRd: r = __dadd_rd(a, b); break;
    case kRAdd * 4 + kRu: r = __dadd_ru(a, b); break;
    case kRSub * 4 + kRn: r = __dsub_rn(a, b); break;
    case kRSub * 4 + kRz: r = __dsub_rz(a, b); break;
    case kRSub * 4 + kRd: r = __dsub_rd(a, b); break;
    case kRSub * 4 + kRu: r = __dsub_ru(a, b); break;
    case kRMul * 4 + kRn: r = __dmul_rn(a, b); break;
    case kRMul * 4 + kRz: r = __dmul_rz(a, b); break;
    case kRMul * 4 + kRd: r = __dmul_rd(a, b); break;
    case kRMul * 4 + kRu: r = __dmul_ru(a, b); break;
    case kRDiv * 4 + kRn: r = __ddiv_rn(a, b); break;
    case kRDiv * 4 + kRz: r = __ddiv_rz(a, b); break;
    case kRDiv * 4 + kRd: r = __ddiv_rd(a, b); break;
    case kRDiv * 4 + kRu: r = __ddiv_ru(a, b); break;
    case kRFma * 4 + kRn: r = __fma_rn(a, b, c); break;
    case kRFma * 4 + kRz: r = __fma_rz(a, b, c); break;
    case kRFma * 4 + kRd: r = __fma_rd(a, b, c); break;
    case kRFma * 4 + kRu: r = __fma_ru(a, b, c); break;
    case kRSqrt * 4 + kRn: r = __dsqrt_rn(a); break;
    case kRSqrt * 4 + kRz: r = __dsqrt_rz(a); break;
    case kRSqrt * 4 + kRd: r = __dsqrt_rd(a); break;
    case kRSqrt * 4 + kRu: r = __dsqrt_ru(a); break;
    case kRRcp * 4 + kRn: r = __drcp_rn(a); break;
    case kRRcp * 4 + kRz: r = __drcp_rz(a); break;
    case kRRcp * 4 + kRd: r = __drcp_rd(a); break;
    case kRRcp * 4 + kRu: r = __drcp_ru(a); break;
    default: r = __longlong_as_double(0x7ff8dead0000dead); break;
  }
  out[i] = r;
}
