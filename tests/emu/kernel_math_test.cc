// Floating-point behaviour of the emulated device on nvcc-compiled math (math.cu, convert.cu):
//  - the CUDA math library against the host's libm (computed in higher precision), within the maximum ulp errors
//    of the CUDA C++ Programming Guide (appendix "Mathematical Functions", tables of maximum ulp error for single
//    and double precision, compute capability >= 5.2, default flags: -prec-div=true -prec-sqrt=true -ftz=false);
//  - the fast intrinsics (__expf, __sinf, ...) within their own documented absolute/ulp bounds;
//  - IEEE operations with explicit rounding modes (__fadd_rd, __fmaf_rz, ...) bit for bit against the host FPU
//    under fesetround();
//  - conversions: every rounding mode, saturation of float-to-integer conversions (NaN -> 0, out of range ->
//    the nearest limit), half precision.
//
// A maximum error of N ulp in the Guide is measured against the correctly rounded result, so against the exact
// value the allowance is N + 0.5 ulp; the references here are computed in double (for float) or long double (for
// double), whose own error is far below that half ulp.
#include <cfenv>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernel_check.h"
#include "kernel_harness.h"
#include "kernel_types.h"

namespace gpupool::emu::test {
namespace {

using namespace kt;

constexpr uint32_t kBlock = 128;
constexpr uint32_t Blocks(uint64_t n) { return static_cast<uint32_t>((n + kBlock - 1) / kBlock); }

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Error of `got` in float ulps of the exact result `exact` (given in double). Infinity counts as 2^128, one ulp
// past the largest binade, so overflowing to infinity next to FLT_MAX is a small error, not an infinite one.
double UlpErrorF(float got, double exact) {
  if (std::isnan(exact)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isnan(got)) return INFINITY;
  if (std::isinf(exact)) return got == exact ? 0 : INFINITY;
  if (std::isinf(got) && float(exact) == got) return 0;  // Exact result beyond the float range: overflow is right.
  double g = std::isinf(got) ? std::copysign(0x1p128, got) : double(got);
  double a = std::fabs(exact);
  double ulp = 0x1p-149;
  if (a >= 0x1p128) {
    ulp = 0x1p104;
  } else if (a > 0) {
    int e;
    std::frexp(a, &e);
    ulp = std::ldexp(1.0, std::max(e - 24, -149));
  }
  return std::fabs(g - exact) / ulp;
}

long double UlpErrorD(double got, long double exact) {
  if (std::isnan(exact)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isnan(got)) return INFINITY;
  if (std::isinf(exact)) return got == exact ? 0 : INFINITY;
  if (std::isinf(got) && double(exact) == got) return 0;
  long double g = std::isinf(got) ? std::copysign(0x1p1024L, (long double)got) : (long double)got;
  long double a = std::fabs(exact);
  long double ulp = 0x1p-1074L;
  if (a >= 0x1p1024L) {
    ulp = 0x1p971L;
  } else if (a > 0) {
    int e;
    std::frexp(a, &e);
    ulp = std::ldexp(1.0L, std::max(e - 53, -1074));
  }
  return std::fabs(g - exact) / ulp;
}

bool SameOrBothNan(float a, float b) { return (std::isnan(a) && std::isnan(b)) || SameBits(a, b); }
bool SameOrBothNan(double a, double b) { return (std::isnan(a) && std::isnan(b)) || SameBits(a, b); }

// ---- Input generators ----

class MathTest : public KernelTest {
 public:
  // Any finite float with a uniformly random exponent in [lo, hi] (powers of two), random sign if `sign`.
  float WideFloat(int lo, int hi, bool sign = true) {
    float m = Float(1.0f, 2.0f);
    float v = std::ldexp(m, Int(lo, hi));
    return sign && Int(0, 1) ? -v : v;
  }
  float RandomBitsFloat() { return BitsToFloat(U32()); }

  // Edge values every function sees besides its own domain.
  static std::vector<float> EdgesF() {
    const float inf = std::numeric_limits<float>::infinity();
    return {0.0f,
            -0.0f,
            inf,
            -inf,
            std::numeric_limits<float>::quiet_NaN(),
            1.0f,
            -1.0f,
            0x1p-149f,
            -0x1p-149f,
            0x1p-126f,
            0x1.fffffcp-127f,
            std::numeric_limits<float>::max(),
            -std::numeric_limits<float>::max(),
            0.5f,
            2.0f,
            1e-30f,
            -1e-30f,
            100.0f,
            -100.0f};
  }

  // Function `op` of the family kernel `f` (math_f32 or math_f64) on x[i], y[i], z[i]: out[i].
  template <typename T>
  std::vector<T> Run(Function* f, int op, const std::vector<T>& x, const std::vector<T>& y, const std::vector<T>& z) {
    const int n = static_cast<int>(x.size());
    uint64_t out = Output<T>(n);
    Launch(f, {Blocks(n)}, {kBlock}, 0, op, Upload(x), Upload(y), Upload(z), out, n);
    return Download<T>(out, n);
  }
};

struct F32Case {
  int op;
  const char* name;
  double max_ulp;  // From the Programming Guide; 0: IEEE correctly rounded, compared bit for bit.
  int arity;
  std::function<float(MathTest*)> gen_x, gen_y;
  std::function<double(double, double, double)> exact;          // For max_ulp > 0.
  std::function<float(float, float, float)> correctly_rounded;  // For max_ulp == 0.
};

TEST_P(MathTest, SinglePrecisionLibraryWithinDocumentedUlp) {
  TRACE_SEED();
  Function* f = Kernel("math", "math_f32");
  using M = MathTest;
  auto uni = [](float lo, float hi) { return [lo, hi](M* t) { return t->Float(lo, hi); }; };
  auto wide = [](int lo, int hi, bool sign) { return [=](M* t) { return t->WideFloat(lo, hi, sign); }; };
  auto mix = [](std::function<float(M*)> a, std::function<float(M*)> b) {
    return [a, b](M* t) { return t->Int(0, 1) ? a(t) : b(t); };
  };
  auto trig = mix(uni(-3.5f, 3.5f), mix(uni(-1e4f, 1e4f), wide(-20, 127, true)));
  auto positive = mix(wide(-149, 127, false), uni(0.25f, 4.0f));
  const std::vector<F32Case> cases = {
      {kSinf, "sinf", 2, 1, trig, nullptr, [](double a, double, double) { return std::sin(a); }, nullptr},
      {kCosf, "cosf", 2, 1, trig, nullptr, [](double a, double, double) { return std::cos(a); }, nullptr},
      {kTanf, "tanf", 4, 1, trig, nullptr, [](double a, double, double) { return std::tan(a); }, nullptr},
      {kExpf, "expf", 2, 1, uni(-104, 89), nullptr, [](double a, double, double) { return std::exp(a); }, nullptr},
      {kExp2f, "exp2f", 2, 1, uni(-151, 129), nullptr, [](double a, double, double) { return std::exp2(a); }, nullptr},
      {kExp10f, "exp10f", 2, 1, uni(-46, 39), nullptr, [](double a, double, double) { return std::pow(10.0, a); },
       nullptr},
      {kExpm1f, "expm1f", 1, 1, mix(uni(-1, 1), uni(-20, 89)), nullptr,
       [](double a, double, double) { return std::expm1(a); }, nullptr},
      {kLogf, "logf", 1, 1, positive, nullptr, [](double a, double, double) { return std::log(a); }, nullptr},
      {kLog2f, "log2f", 1, 1, positive, nullptr, [](double a, double, double) { return std::log2(a); }, nullptr},
      {kLog10f, "log10f", 2, 1, positive, nullptr, [](double a, double, double) { return std::log10(a); }, nullptr},
      {kLog1pf, "log1pf", 1, 1, mix(uni(-0.999f, 1), wide(-30, 127, false)), nullptr,
       [](double a, double, double) { return std::log1p(a); }, nullptr},
      {kPowf, "powf", 4, 2, uni(0.01f, 10), uni(-30, 30), [](double a, double b, double) { return std::pow(a, b); },
       nullptr},
      {kSqrtf, "sqrtf", 0, 1, positive, nullptr, nullptr, [](float a, float, float) { return std::sqrt(a); }},
      {kRsqrtf, "rsqrtf", 2, 1, positive, nullptr, [](double a, double, double) { return 1.0 / std::sqrt(a); },
       nullptr},
      {kCbrtf, "cbrtf", 1, 1, wide(-149, 127, true), nullptr, [](double a, double, double) { return std::cbrt(a); },
       nullptr},
      {kFmaf, "fmaf", 0, 3, wide(-60, 60, true), wide(-60, 60, true), nullptr,
       [](float a, float b, float c) { return std::fma(a, b, c); }},
      {kAtan2f, "atan2f", 3, 2, mix(uni(-10, 10), wide(-149, 127, true)), mix(uni(-10, 10), wide(-149, 127, true)),
       [](double a, double b, double) { return std::atan2(a, b); }, nullptr},
      {kAtanf, "atanf", 2, 1, mix(uni(-4, 4), wide(-149, 127, true)), nullptr,
       [](double a, double, double) { return std::atan(a); }, nullptr},
      {kAsinf, "asinf", 2, 1, uni(-1, 1), nullptr, [](double a, double, double) { return std::asin(a); }, nullptr},
      {kAcosf, "acosf", 2, 1, uni(-1, 1), nullptr, [](double a, double, double) { return std::acos(a); }, nullptr},
      {kSinhf, "sinhf", 3, 1, uni(-90, 90), nullptr, [](double a, double, double) { return std::sinh(a); }, nullptr},
      {kCoshf, "coshf", 2, 1, uni(-90, 90), nullptr, [](double a, double, double) { return std::cosh(a); }, nullptr},
      {kTanhf, "tanhf", 2, 1, mix(uni(-1, 1), uni(-12, 12)), nullptr,
       [](double a, double, double) { return std::tanh(a); }, nullptr},
      {kErff, "erff", 2, 1, uni(-5, 5), nullptr, [](double a, double, double) { return std::erf(a); }, nullptr},
      {kErfcf, "erfcf", 4, 1, uni(-4, 9), nullptr, [](double a, double, double) { return std::erfc(a); }, nullptr},
      {kHypotf, "hypotf", 3, 2, wide(-60, 60, true), wide(-60, 60, true),
       [](double a, double b, double) { return std::hypot(a, b); }, nullptr},
      {kDivf, "x / y", 0, 2, wide(-126, 127, true), wide(-126, 127, true), nullptr,
       [](float a, float b, float) { return a / b; }},
      {kRcpf, "1 / x", 0, 1, wide(-149, 127, true), nullptr, nullptr, [](float a, float, float) { return 1.0f / a; }},
      {kFmodf, "fmodf", 0, 2, wide(-20, 40, true), wide(-20, 20, true), nullptr,
       [](float a, float b, float) { return std::fmod(a, b); }},
      {kFloorf, "floorf", 0, 1, uni(-1e4, 1e4), nullptr, nullptr, [](float a, float, float) { return std::floor(a); }},
      {kCeilf, "ceilf", 0, 1, uni(-1e4, 1e4), nullptr, nullptr, [](float a, float, float) { return std::ceil(a); }},
      {kTruncf, "truncf", 0, 1, uni(-1e4, 1e4), nullptr, nullptr, [](float a, float, float) { return std::trunc(a); }},
      {kRoundf, "roundf", 0, 1, mix(uni(-1e4, 1e4), [](M* t) { return t->Int(-100, 100) + 0.5f; }), nullptr, nullptr,
       [](float a, float, float) { return std::round(a); }},
      {kRintf, "rintf", 0, 1, mix(uni(-1e4, 1e4), [](M* t) { return t->Int(-100, 100) + 0.5f; }), nullptr, nullptr,
       [](float a, float, float) { return std::rint(a); }},
      {kFminf, "fminf", 0, 2, uni(-10, 10), uni(-10, 10), nullptr,
       [](float a, float b, float) { return std::fmin(a, b); }},
      {kFmaxf, "fmaxf", 0, 2, uni(-10, 10), uni(-10, 10), nullptr,
       [](float a, float b, float) { return std::fmax(a, b); }},
      {kFabsf, "fabsf", 0, 1, wide(-149, 127, true), nullptr, nullptr,
       [](float a, float, float) { return std::fabs(a); }},
      {kCopysignf, "copysignf", 0, 2, wide(-149, 127, true), uni(-1, 1), nullptr,
       [](float a, float b, float) { return std::copysign(a, b); }},
      {kLdexpf, "ldexpf", 0, 2, wide(-40, 40, true), [](M* t) { return float(t->Int(-160, 160)); }, nullptr,
       [](float a, float b, float) {
         // (int)b on the device is cvt.rzi.s32.f32: saturating, NaN -> 0.
         double t = std::trunc(double(b));
         int e = std::isnan(b) ? 0 : t >= 2147483647.0 ? INT_MAX : t <= -2147483648.0 ? INT_MIN : int(t);
         return std::ldexp(a, e);
       }},
  };
  ASSERT_EQ(cases.size(), size_t(kMathF32Count));
  const std::vector<float> edges = EdgesF();
  for (const F32Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> x, y, z;
    // Edge values in every position, then random inputs from the function's domain.
    for (float e : edges) {
      for (int pos = 0; pos < c.arity; ++pos) {
        x.push_back(pos == 0 ? e : c.gen_x(this));
        y.push_back(pos == 1 ? e : (c.gen_y ? c.gen_y(this) : 0.0f));
        z.push_back(pos == 2 ? e : WideFloat(-60, 60));
      }
    }
    while (x.size() < 16384) {
      x.push_back(c.gen_x(this));
      y.push_back(c.gen_y ? c.gen_y(this) : 0.0f);
      z.push_back(WideFloat(-60, 60));
    }
    if (c.op == kExpf) {
      // A dense sweep over expf's whole range, through its fma.rm-based range reduction, plus the thresholds of
      // overflow, of denormal results and of underflow to zero and their neighbours.
      for (int i = 0; i < 65536; ++i) x.push_back(-104.0f + 193.0f * i / 65536.0f);
      for (float t : {88.72283935546875f, 88.7228317f, -87.3365479f, -103.278931f, -103.972084f, -87.0f, 0.0f}) {
        float v = t;
        for (int k = 0; k < 16; ++k) {
          x.push_back(v);
          x.push_back(-v);
          v = std::nextafter(v, INFINITY);
        }
      }
      for (int i = 0; i < 256; ++i) x.push_back(BitsToFloat(U32() & 0x807fffffu));  // Denormal inputs.
      y.resize(x.size(), 0.0f);
      z.resize(x.size(), 0.0f);
    }
    std::vector<float> got = Run(f, c.op, x, y, z);
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      bool ok;
      double err = 0;
      float want = 0;
      if (c.max_ulp == 0) {
        want = c.correctly_rounded(x[i], y[i], z[i]);
        ok = (c.op == kFminf || c.op == kFmaxf) ? UlpErrorF(got[i], want) == 0 : SameOrBothNan(got[i], want);
      } else {
        double exact = c.exact(x[i], y[i], z[i]);
        err = UlpErrorF(got[i], exact);
        want = float(exact);
        worst = std::max(worst, err);
        ok = err <= c.max_ulp + 0.5;
      }
      if (!ok && ++bad <= 10) {
        ADD_FAILURE() << c.name << "(" << Show(x[i]) << (c.arity > 1 ? ", " + Show(y[i]) : "")
                      << (c.arity > 2 ? ", " + Show(z[i]) : "") << ") = " << Show(got[i]) << ", want " << Show(want)
                      << " (error " << err << " ulp, allowed " << c.max_ulp << ")";
      }
    }
    if (bad > 10) ADD_FAILURE() << c.name << ": " << bad << " failures in all";
    RecordProperty(std::string("max_ulp_") + c.name, std::to_string(worst));
  }
}

struct F64Case {
  int op;
  const char* name;
  double max_ulp;
  int arity;
  std::function<double(MathTest*)> gen_x, gen_y;
  std::function<long double(long double, long double, long double)> exact;
  std::function<double(double, double, double)> correctly_rounded;
};

TEST_P(MathTest, DoublePrecisionLibraryWithinDocumentedUlp) {
  TRACE_SEED();
  Function* f = Kernel("math", "math_f64");
  using M = MathTest;
  auto uni = [](double lo, double hi) { return [lo, hi](M* t) { return t->Double(lo, hi); }; };
  auto wide = [](int lo, int hi, bool sign) {
    return [=](M* t) {
      double v = std::ldexp(t->Double(1, 2), t->Int(lo, hi));
      return sign && t->Int(0, 1) ? -v : v;
    };
  };
  auto mix = [](std::function<double(M*)> a, std::function<double(M*)> b) {
    return [a, b](M* t) { return t->Int(0, 1) ? a(t) : b(t); };
  };
  auto trig = mix(uni(-4, 4), mix(uni(-1e5, 1e5), wide(-30, 1023, true)));
  auto positive = mix(wide(-1074, 1023, false), uni(0.25, 4));
  using LD = long double;
  const std::vector<F64Case> cases = {
      {kSin, "sin", 2, 1, trig, nullptr, [](LD a, LD, LD) { return sinl(a); }, nullptr},
      {kCos, "cos", 2, 1, trig, nullptr, [](LD a, LD, LD) { return cosl(a); }, nullptr},
      {kTan, "tan", 2, 1, trig, nullptr, [](LD a, LD, LD) { return tanl(a); }, nullptr},
      {kExp, "exp", 1, 1, uni(-746, 710), nullptr, [](LD a, LD, LD) { return expl(a); }, nullptr},
      {kExp2, "exp2", 1, 1, uni(-1076, 1025), nullptr, [](LD a, LD, LD) { return exp2l(a); }, nullptr},
      {kExp10, "exp10", 1, 1, uni(-324, 309), nullptr, [](LD a, LD, LD) { return powl(10.0L, a); }, nullptr},
      {kExpm1, "expm1", 1, 1, mix(uni(-1, 1), uni(-40, 709)), nullptr, [](LD a, LD, LD) { return expm1l(a); }, nullptr},
      {kLog, "log", 1, 1, positive, nullptr, [](LD a, LD, LD) { return logl(a); }, nullptr},
      {kLog2, "log2", 1, 1, positive, nullptr, [](LD a, LD, LD) { return log2l(a); }, nullptr},
      {kLog10, "log10", 1, 1, positive, nullptr, [](LD a, LD, LD) { return log10l(a); }, nullptr},
      {kLog1p, "log1p", 1, 1, mix(uni(-0.999, 1), wide(-60, 1023, false)), nullptr,
       [](LD a, LD, LD) { return log1pl(a); }, nullptr},
      {kPow, "pow", 2, 2, uni(0.01, 10), uni(-200, 200), [](LD a, LD b, LD) { return powl(a, b); }, nullptr},
      {kSqrt, "sqrt", 0, 1, positive, nullptr, nullptr, [](double a, double, double) { return std::sqrt(a); }},
      {kRsqrt, "rsqrt", 1, 1, positive, nullptr, [](LD a, LD, LD) { return 1.0L / sqrtl(a); }, nullptr},
      {kCbrt, "cbrt", 1, 1, wide(-1074, 1023, true), nullptr, [](LD a, LD, LD) { return cbrtl(a); }, nullptr},
      {kFma, "fma", 0, 3, wide(-300, 300, true), wide(-300, 300, true), nullptr,
       [](double a, double b, double c) { return std::fma(a, b, c); }},
      {kAtan2, "atan2", 2, 2, mix(uni(-10, 10), wide(-1074, 1023, true)), mix(uni(-10, 10), wide(-1074, 1023, true)),
       [](LD a, LD b, LD) { return atan2l(a, b); }, nullptr},
      {kAtan, "atan", 2, 1, mix(uni(-4, 4), wide(-1074, 1023, true)), nullptr, [](LD a, LD, LD) { return atanl(a); },
       nullptr},
      {kAsin, "asin", 2, 1, uni(-1, 1), nullptr, [](LD a, LD, LD) { return asinl(a); }, nullptr},
      {kAcos, "acos", 2, 1, uni(-1, 1), nullptr, [](LD a, LD, LD) { return acosl(a); }, nullptr},
      {kSinh, "sinh", 2, 1, uni(-710, 710), nullptr, [](LD a, LD, LD) { return sinhl(a); }, nullptr},
      {kCosh, "cosh", 1, 1, uni(-710, 710), nullptr, [](LD a, LD, LD) { return coshl(a); }, nullptr},
      {kTanh, "tanh", 1, 1, mix(uni(-1, 1), uni(-25, 25)), nullptr, [](LD a, LD, LD) { return tanhl(a); }, nullptr},
      {kErf, "erf", 2, 1, uni(-6, 6), nullptr, [](LD a, LD, LD) { return erfl(a); }, nullptr},
      {kErfc, "erfc", 5, 1, uni(-5, 26), nullptr, [](LD a, LD, LD) { return erfcl(a); }, nullptr},
      {kHypot, "hypot", 2, 2, wide(-500, 500, true), wide(-500, 500, true), [](LD a, LD b, LD) { return hypotl(a, b); },
       nullptr},
      {kDiv, "x / y", 0, 2, wide(-1022, 1023, true), wide(-1022, 1023, true), nullptr,
       [](double a, double b, double) { return a / b; }},
      {kRcp, "1 / x", 0, 1, wide(-1074, 1023, true), nullptr, nullptr,
       [](double a, double, double) { return 1.0 / a; }},
      {kFmod, "fmod", 0, 2, wide(-40, 80, true), wide(-40, 40, true), nullptr,
       [](double a, double b, double) { return std::fmod(a, b); }},
      {kFloor, "floor", 0, 1, uni(-1e15, 1e15), nullptr, nullptr,
       [](double a, double, double) { return std::floor(a); }},
      {kCeil, "ceil", 0, 1, uni(-1e6, 1e6), nullptr, nullptr, [](double a, double, double) { return std::ceil(a); }},
      {kTrunc, "trunc", 0, 1, uni(-1e6, 1e6), nullptr, nullptr, [](double a, double, double) { return std::trunc(a); }},
      {kRound, "round", 0, 1, mix(uni(-1e6, 1e6), [](M* t) { return t->Int(-100, 100) + 0.5; }), nullptr, nullptr,
       [](double a, double, double) { return std::round(a); }},
      {kRint, "rint", 0, 1, mix(uni(-1e6, 1e6), [](M* t) { return t->Int(-100, 100) + 0.5; }), nullptr, nullptr,
       [](double a, double, double) { return std::rint(a); }},
  };
  ASSERT_EQ(cases.size(), size_t(kMathF64Count));
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> edges = {0.0, -0.0, inf,       -inf,      std::numeric_limits<double>::quiet_NaN(),
                                     1.0, -1.0, 0x1p-1074, 0x1p-1022, std::numeric_limits<double>::max(),
                                     0.5, 2.0,  1e-300};
  for (const F64Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<double> x, y, z;
    for (double e : edges) {
      for (int pos = 0; pos < c.arity; ++pos) {
        x.push_back(pos == 0 ? e : c.gen_x(this));
        y.push_back(pos == 1 ? e : (c.gen_y ? c.gen_y(this) : 0.0));
        z.push_back(pos == 2 ? e : Double(-1e10, 1e10));
      }
    }
    while (x.size() < 8192) {
      x.push_back(c.gen_x(this));
      y.push_back(c.gen_y ? c.gen_y(this) : 0.0);
      z.push_back(std::ldexp(Double(-2, 2), Int(-300, 300)));
    }
    std::vector<double> got = Run(f, c.op, x, y, z);
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      bool ok;
      long double err = 0;
      double want;
      if (c.max_ulp == 0) {
        want = c.correctly_rounded(x[i], y[i], z[i]);
        ok = SameOrBothNan(got[i], want);
      } else {
        long double exact = c.exact(x[i], y[i], z[i]);
        err = UlpErrorD(got[i], exact);
        want = double(exact);
        ok = err <= c.max_ulp + 0.5L;
      }
      if (!ok && ++bad <= 10) {
        ADD_FAILURE() << c.name << "(" << Show(x[i]) << (c.arity > 1 ? ", " + Show(y[i]) : "")
                      << (c.arity > 2 ? ", " + Show(z[i]) : "") << ") = " << Show(got[i]) << ", want " << Show(want)
                      << " (error " << double(err) << " ulp, allowed " << c.max_ulp << ")";
      }
    }
    if (bad > 10) ADD_FAILURE() << c.name << ": " << bad << " failures in all";
  }
}

// The intrinsics trade accuracy for speed; the Guide ("Intrinsic Functions", single precision) bounds them so:
//   __expf: 2 + floor(|1.173 x|) ulp; __exp10f: 2 + floor(|2.97 x|) ulp;
//   __logf: for x in [0.5, 2] absolute error 2^-21.41, otherwise 3 ulp;
//   __log2f: for x in [0.5, 2] absolute error 2^-22, otherwise 2 ulp;
//   __log10f: for x in [0.5, 2] absolute error 2^-24, otherwise 3 ulp;
//   __sinf: for x in [-pi, pi] absolute error 2^-21.41; __cosf: for x in [-pi, pi] absolute error 2^-21.19;
//   __fdividef: for 2^-126 <= |y| <= 2^126, 2 ulp; __saturatef: exact, NaN -> 0.
TEST_P(MathTest, FastIntrinsicsWithinDocumentedBounds) {
  TRACE_SEED();
  Function* f = Kernel("math", "fast_f32");
  const int n = 4096;
  struct Case {
    int op;
    const char* name;
    std::function<void(float*, float*)> gen;
    // Returns the allowed error given x, y and the exact result; `absolute` says whether it is absolute or ulp.
    std::function<double(float, float, bool*)> bound;
    std::function<double(double, double)> exact;
  };
  const std::vector<Case> cases = {
      {kFastExpf, "__expf", [&](float* x, float*) { *x = Float(-87, 88); },
       [](float x, float, bool* abs) {
         *abs = false;
         return 2 + std::floor(std::fabs(1.173 * x));
       },
       [](double x, double) { return std::exp(x); }},
      {kFastExp10f, "__exp10f", [&](float* x, float*) { *x = Float(-37, 38); },
       [](float x, float, bool* abs) {
         *abs = false;
         return 2 + std::floor(std::fabs(2.97 * x));
       },
       [](double x, double) { return std::pow(10.0, x); }},
      {kFastLogf, "__logf", [&](float* x, float*) { *x = Int(0, 1) ? Float(0.5f, 2.0f) : WideFloat(-126, 127, false); },
       [](float x, float, bool* abs) {
         *abs = x >= 0.5f && x <= 2.0f;
         return *abs ? std::exp2(-21.41) : 3.0;
       },
       [](double x, double) { return std::log(x); }},
      {kFastLog2f, "__log2f",
       [&](float* x, float*) { *x = Int(0, 1) ? Float(0.5f, 2.0f) : WideFloat(-126, 127, false); },
       [](float x, float, bool* abs) {
         *abs = x >= 0.5f && x <= 2.0f;
         return *abs ? std::exp2(-22.0) : 2.0;
       },
       [](double x, double) { return std::log2(x); }},
      {kFastLog10f, "__log10f",
       [&](float* x, float*) { *x = Int(0, 1) ? Float(0.5f, 2.0f) : WideFloat(-126, 127, false); },
       [](float x, float, bool* abs) {
         *abs = x >= 0.5f && x <= 2.0f;
         return *abs ? std::exp2(-24.0) : 3.0;
       },
       [](double x, double) { return std::log10(x); }},
      {kFastSinf, "__sinf", [&](float* x, float*) { *x = Float(-3.14159f, 3.14159f); },
       [](float, float, bool* abs) {
         *abs = true;
         return std::exp2(-21.41);
       },
       [](double x, double) { return std::sin(x); }},
      {kFastCosf, "__cosf", [&](float* x, float*) { *x = Float(-3.14159f, 3.14159f); },
       [](float, float, bool* abs) {
         *abs = true;
         return std::exp2(-21.19);
       },
       [](double x, double) { return std::cos(x); }},
      {kFastFdividef, "__fdividef",
       [&](float* x, float* y) {
         *x = WideFloat(-60, 60);
         *y = WideFloat(-60, 60);
       },
       [](float, float, bool* abs) {
         *abs = false;
         return 2.0;
       },
       [](double x, double y) { return x / y; }},
      {kFastSaturatef, "__saturatef", [&](float* x, float*) { *x = Float(-0.5f, 1.5f); },
       [](float, float, bool* abs) {
         *abs = true;
         return 0.0;
       },
       [](double x, double) { return std::isnan(x) ? 0.0 : std::min(1.0, std::max(0.0, x)); }},
  };
  ASSERT_EQ(cases.size(), size_t(kFastF32Count));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> x(n), y(n, 1.0f);
    for (int i = 0; i < n; ++i) c.gen(&x[i], &y[i]);
    if (c.op == kFastSaturatef) x[0] = std::numeric_limits<float>::quiet_NaN();
    uint64_t out = Output<float>(n);
    Launch(f, {Blocks(n)}, {kBlock}, 0, c.op, Upload(x), Upload(y), out, n);
    std::vector<float> got = Download<float>(out, n);
    int bad = 0;
    for (int i = 0; i < n; ++i) {
      bool absolute = false;
      double allowed = c.bound(x[i], y[i], &absolute);
      double exact = c.exact(x[i], y[i]);
      double err = absolute ? std::fabs(double(got[i]) - exact) : UlpErrorF(got[i], exact);
      if (std::isnan(got[i])) err = INFINITY;
      bool ok = absolute ? err <= allowed : err <= allowed + 0.5;
      if (!ok && ++bad <= 10) {
        ADD_FAILURE() << c.name << "(" << Show(x[i]) << (c.op == kFastFdividef ? ", " + Show(y[i]) : "")
                      << ") = " << Show(got[i]) << ", exact " << exact << ": error " << err
                      << (absolute ? " absolute" : " ulp") << ", allowed " << allowed;
      }
    }
  }
}

// ---- Rounding modes, bit for bit against the host FPU. ----

const int kFeModes[kRoundingCount] = {FE_TONEAREST, FE_TOWARDZERO, FE_DOWNWARD, FE_UPWARD};
const char* const kModeNames[kRoundingCount] = {"_rn", "_rz", "_rd", "_ru"};

// The result goes through a volatile before the mode is restored: the compiler does not model the FPU mode as
// a dependency and would otherwise be free to compute `f` after the second fesetround().
template <typename F>
auto InRoundingMode(int mode, F f) {
  using R = decltype(f());
  const int saved = std::fegetround();
  std::fesetround(kFeModes[mode]);
  volatile R r = f();
  std::fesetround(saved);
  return R(r);
}

// Operands go through volatile so the compiler cannot fold or hoist the operation out of the rounding mode.
template <typename T>
T HostRounded(int op, int mode, T a, T b, T c) {
  return InRoundingMode(mode, [&]() -> T {
    volatile T va = a, vb = b, vc = c;
    switch (op) {
      case kRAdd: return va + vb;
      case kRSub: return va - vb;
      case kRMul: return va * vb;
      case kRDiv: return va / vb;
      case kRFma: return std::fma(T(va), T(vb), T(vc));
      case kRSqrt: return std::sqrt(T(va));
      case kRRcp: return T(1) / va;
    }
    return T(0);
  });
}

template <typename T>
void CheckRounding(MathTest* t, Function* f, bool is_double) {
  const char* const kOps[] = {"add", "sub", "mul", "div", "fma", "sqrt", "rcp"};
  const int n = 2048;
  std::vector<T> x(n), y(n), z(n);
  for (int i = 0; i < n; ++i) {
    // Mostly operands whose results are inexact; some cancel exactly (x - x, x + -x: the sign of zero depends on
    // the mode), some produce denormals, some overflow (directed modes give infinity or the largest finite).
    auto one = [&]() -> T {
      int kind = t->Int(0, 9);
      if (kind == 0)
        return is_double ? T(std::ldexp(t->Double(1, 2), t->Int(-1074, -1000))) : T(t->WideFloat(-149, -120));
      if (kind == 1) return is_double ? T(std::ldexp(t->Double(1, 2), t->Int(1000, 1023))) : T(t->WideFloat(120, 127));
      return is_double ? T(std::ldexp(t->Double(-2, 2), t->Int(-60, 60))) : T(t->WideFloat(-30, 30));
    };
    x[i] = one();
    y[i] = one();
    z[i] = one();
    if (i % 16 == 0) y[i] = x[i];
    if (i % 16 == 1) y[i] = -x[i];
    if (i % 16 == 2) x[i] = std::fabs(x[i]);  // sqrt of positives too.
  }
  for (int op = 0; op < kRoundOpCount; ++op) {
    for (int mode = 0; mode < kRoundingCount; ++mode) {
      SCOPED_TRACE(std::string(kOps[op]) + kModeNames[mode]);
      uint64_t out = t->Output<T>(n);
      int code = op * kRoundingCount + mode;
      t->Launch(f, {Blocks(n)}, {kBlock}, 0, code, t->Upload(x), t->Upload(y), t->Upload(z), out, n);
      std::vector<T> got = t->Download<T>(out, n);
      int bad = 0;
      for (int i = 0; i < n; ++i) {
        T want = HostRounded<T>(op, mode, x[i], y[i], z[i]);
        if (!SameOrBothNan(got[i], want) && ++bad <= 10) {
          ADD_FAILURE() << kOps[op] << kModeNames[mode] << "(" << Show(x[i]) << ", " << Show(y[i]) << ", " << Show(z[i])
                        << ") = " << Show(got[i]) << ", want " << Show(want);
        }
      }
    }
  }
}

TEST_P(MathTest, RoundingModeIntrinsicsSingle) {
  TRACE_SEED();
  CheckRounding<float>(this, Kernel("math", "round_f32"), false);
}

TEST_P(MathTest, RoundingModeIntrinsicsDouble) {
  TRACE_SEED();
  CheckRounding<double>(this, Kernel("math", "round_f64"), true);
}

// ---- Conversions ----

double RoundToInteger(double v, int mode) {
  switch (mode) {
    case kRn: return std::nearbyint(v);  // The default mode: ties to even.
    case kRz: return std::trunc(v);
    case kRd: return std::floor(v);
    default: return std::ceil(v);
  }
}

// PTX cvt from floating point to integer saturates: NaN -> 0, below range -> minimum, above -> maximum.
template <typename I>
I Saturate(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

// IEEE binary16 from float with the given rounding mode, including denormals, overflow and NaN (any NaN: the
// payload is not compared).
uint16_t HostFloatToHalf(float f, int mode) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = (bits >> 16) & 0x8000;
  if (std::isnan(f)) return sign | 0x7e00;
  if (std::isinf(f)) return sign | 0x7c00;
  const bool negative = sign != 0;
  double a = std::fabs(double(f));
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): a half's quantum at a is 2^(e - 11), never below 2^-24.
  double q = std::ldexp(1.0, std::max(e - 11, -24));
  double units = a / q;  // Exact: a scaling by a power of two.
  double r;
  switch (mode) {
    case kRn: r = std::nearbyint(units); break;
    case kRz: r = std::trunc(units); break;
    case kRd: r = negative ? std::ceil(units) : std::floor(units); break;
    default: r = negative ? std::floor(units) : std::ceil(units); break;
  }
  double v = r * q;
  if (v > 65504.0) {
    bool to_infinity = mode == kRn || (mode == kRu && !negative) || (mode == kRd && negative);
    return sign | (to_infinity ? 0x7c00 : 0x7bff);
  }
  if (v < 0x1p-14) return sign | static_cast<uint16_t>(v / 0x1p-24);  // Denormal (1024 units = min normal).
  std::frexp(v, &e);
  int exponent = e - 1;
  uint16_t mantissa = static_cast<uint16_t>(v / std::ldexp(1.0, exponent - 10) - 1024);
  return sign | static_cast<uint16_t>((exponent + 15) << 10) | mantissa;
}

float HostHalfToFloat(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(float(mantissa), -24);
  if (exponent == 31) return mantissa ? std::numeric_limits<float>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(float(1024 + mantissa), exponent - 25);
}

bool IsHalfNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(HostReference, HalfConversionMatchesCompiler) {
  // Sanity check of the host reference itself against the compiler's _Float16 (round to nearest).
  std::mt19937 rng(12345);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x807fffffu) | ((100 + rng() % 60) << 23);  // Mostly the half range.
    float f = BitsToFloat(bits);
    _Float16 h = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    uint16_t got = HostFloatToHalf(f, kRn);
    if (IsHalfNan(want)) {
      ASSERT_TRUE(IsHalfNan(got));
      continue;
    }
    ASSERT_EQ(got, want) << Show(f);
    ASSERT_TRUE(SameOrBothNan(HostHalfToFloat(want), static_cast<float>(h)));
  }
}

TEST_P(MathTest, ConversionsRoundingAndSaturation) {
  TRACE_SEED();
  const float inf = INFINITY, nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> fx = {0.0f,
                           -0.0f,
                           0.5f,
                           -0.5f,
                           1.5f,
                           -1.5f,
                           2.5f,
                           -2.5f,
                           0.49999997f,
                           -0.7f,
                           nan,
                           -nan,
                           inf,
                           -inf,
                           3e9f,
                           -3e9f,
                           2147483520.0f,
                           2147483648.0f,
                           -2147483648.0f,
                           -2147483904.0f,
                           4294967040.0f,
                           4294967296.0f,
                           9.2233715e18f,
                           9.223372e18f,
                           -9.223372e18f,
                           1.8446743e19f,
                           1.8446744e19f,
                           1e30f,
                           -1e30f,
                           65504.0f,
                           65519.996f,
                           65520.0f,
                           -65520.0f,
                           0x1p-24f,
                           0x1p-25f,
                           0x1.000002p-25f,
                           0x1p-14f,
                           0x1.ffcp-15f,
                           6.1e-5f,
                           1e-8f,
                           0x1p-149f};
  while (fx.size() < 8192) {
    switch (Int(0, 3)) {
      case 0: fx.push_back(Int(-100000, 100000) * 0.5f + (Int(0, 1) ? 0.25f : 0.0f)); break;
      case 1: fx.push_back(WideFloat(-30, 70)); break;
      case 2: fx.push_back(WideFloat(-26, 16)); break;  // The half range.
      default: fx.push_back(RandomBitsFloat()); break;
    }
  }
  const int n = static_cast<int>(fx.size());
  std::vector<double> dx(n);
  std::vector<int> ix(n);
  std::vector<unsigned> ux(n);
  std::vector<long long> llx(n);
  std::vector<unsigned short> hx(n);
  for (int i = 0; i < n; ++i) {
    switch (Int(0, 3)) {
      case 0: dx[i] = std::ldexp(Double(-2, 2), Int(-160, 140)); break;  // Beyond float range both ways.
      case 1: dx[i] = double(WideFloat(-149, 127)) * (1 + Int(-3, 3) * 0x1p-30); break;  // Near float values.
      case 2: dx[i] = double(WideFloat(-149, 127)) + std::ldexp(double(WideFloat(-149, 127)), -24) / 2; break;
      default: dx[i] = Double(-1e6, 1e6); break;
    }
    ix[i] = static_cast<int>(U32());
    ux[i] = U32();
    llx[i] = static_cast<long long>(U64() >> Int(0, 40));
    if (Int(0, 1)) llx[i] = -llx[i];
    hx[i] = static_cast<unsigned short>(U32());
  }
  dx[0] = std::numeric_limits<double>::quiet_NaN();
  dx[1] = 1e300;
  dx[2] = -1e300;
  dx[3] = 3.4028235677973366e38;  // Just above FLT_MAX: FLT_MAX or infinity depending on the mode.
  ix[0] = INT_MIN;
  ix[1] = INT_MAX;
  ix[2] = 16777217;
  ux[0] = UINT_MAX;
  llx[0] = LLONG_MIN;
  llx[1] = LLONG_MAX;
  llx[2] = (1ll << 53) + 1;
  hx[0] = 0x7c00;
  hx[1] = 0xfc00;
  hx[2] = 0x7e00;
  hx[3] = 0x0001;
  hx[4] = 0x03ff;
  hx[5] = 0x8000;

  uint64_t out = Output<ConvertOut>(n);
  Launch(Kernel("convert", "convert_kernel"), {Blocks(n)}, {kBlock}, 0, Upload(fx), Upload(dx), Upload(ix), Upload(ux),
         Upload(llx), Upload(hx), out, n);
  std::vector<ConvertOut> got = Download<ConvertOut>(out, n);

  int bad = 0;
  auto fail = [&](const std::string& what, int i, const std::string& g, const std::string& w) {
    if (++bad <= 20) ADD_FAILURE() << what << " (input " << i << ") = " << g << ", want " << w;
  };
  for (int i = 0; i < n; ++i) {
    const ConvertOut& o = got[i];
    const float f = fx[i];
    const double d3 = double(f) * 3.0;
    for (int m = 0; m < kRoundingCount; ++m) {
      const std::string mode = kModeNames[m];
      double r = RoundToInteger(f, m), r3 = RoundToInteger(d3, m);
      if (o.f2i[m] != Saturate<int>(r))
        fail("__float2int" + mode + "(" + Show(f) + ")", i, Show(o.f2i[m]), Show(Saturate<int>(r)));
      if (o.f2u[m] != Saturate<unsigned>(r))
        fail("__float2uint" + mode + "(" + Show(f) + ")", i, Show(o.f2u[m]), Show(Saturate<unsigned>(r)));
      if (o.f2ll[m] != Saturate<long long>(r))
        fail("__float2ll" + mode + "(" + Show(f) + ")", i, Show(o.f2ll[m]), Show(Saturate<long long>(r)));
      if (o.f2ull[m] != Saturate<unsigned long long>(r))
        fail("__float2ull" + mode + "(" + Show(f) + ")", i, Show(o.f2ull[m]), Show(Saturate<unsigned long long>(r)));
      if (o.d2i[m] != Saturate<int>(r3))
        fail("__double2int" + mode + "(" + Show(d3) + ")", i, Show(o.d2i[m]), Show(Saturate<int>(r3)));
      if (o.d2ll[m] != Saturate<long long>(r3))
        fail("__double2ll" + mode + "(" + Show(d3) + ")", i, Show(o.d2ll[m]), Show(Saturate<long long>(r3)));
      float d2f = InRoundingMode(m, [&] {
        volatile double v = dx[i];
        return static_cast<float>(v);
      });
      if (!SameOrBothNan(o.d2f[m], d2f))
        fail("__double2float" + mode + "(" + Show(dx[i]) + ")", i, Show(o.d2f[m]), Show(d2f));
      float i2f = InRoundingMode(m, [&] {
        volatile int v = ix[i];
        return static_cast<float>(v);
      });
      if (!SameBits(o.i2f[m], i2f))
        fail("__int2float" + mode + "(" + std::to_string(ix[i]) + ")", i, Show(o.i2f[m]), Show(i2f));
      float u2f = InRoundingMode(m, [&] {
        volatile unsigned v = ux[i];
        return static_cast<float>(v);
      });
      if (!SameBits(o.u2f[m], u2f))
        fail("__uint2float" + mode + "(" + std::to_string(ux[i]) + ")", i, Show(o.u2f[m]), Show(u2f));
      float ll2f = InRoundingMode(m, [&] {
        volatile long long v = llx[i];
        return static_cast<float>(v);
      });
      if (!SameBits(o.ll2f[m], ll2f))
        fail("__ll2float" + mode + "(" + std::to_string(llx[i]) + ")", i, Show(o.ll2f[m]), Show(ll2f));
      double ll2d = InRoundingMode(m, [&] {
        volatile long long v = llx[i];
        return static_cast<double>(v);
      });
      if (!SameBits(o.ll2d[m], ll2d))
        fail("__ll2double" + mode + "(" + std::to_string(llx[i]) + ")", i, Show(o.ll2d[m]), Show(ll2d));
      uint16_t h = HostFloatToHalf(f, m);
      bool half_ok = IsHalfNan(h) ? IsHalfNan(o.f2h[m]) : o.f2h[m] == h;
      if (!half_ok) fail("__float2half" + mode + "(" + Show(f) + ")", i, Show(o.f2h[m]), Show(h));
    }
    if (o.cast_i != Saturate<int>(std::trunc(f)))
      fail("(int)" + Show(f), i, Show(o.cast_i), Show(Saturate<int>(std::trunc(f))));
    if (o.cast_u != Saturate<unsigned>(std::trunc(f)))
      fail("(unsigned)" + Show(f), i, Show(o.cast_u), Show(Saturate<unsigned>(std::trunc(f))));
    if (o.cast_ll != Saturate<long long>(std::trunc(f)))
      fail("(long long)" + Show(f), i, Show(o.cast_ll), Show(Saturate<long long>(std::trunc(f))));
    float h2f = HostHalfToFloat(HostFloatToHalf(f, kRn));
    if (!SameOrBothNan(o.h2f, h2f)) fail("__half2float(__float2half_rn(" + Show(f) + "))", i, Show(o.h2f), Show(h2f));
    float hv = HostHalfToFloat(hx[i]);
    if (!SameOrBothNan(o.h_value, hv)) fail("__half2float(" + Show(hx[i]) + ")", i, Show(o.h_value), Show(hv));
    bool round_trip_ok = IsHalfNan(hx[i]) ? IsHalfNan(o.h_roundtrip) : o.h_roundtrip == hx[i];
    if (!round_trip_ok) fail("half -> float -> half of " + Show(hx[i]), i, Show(o.h_roundtrip), Show(hx[i]));
  }
  if (bad > 20) ADD_FAILURE() << bad << " conversion failures in all";
}

GPUPOOL_INSTANTIATE_VARIANTS(MathTest);

}  // namespace
}  // namespace gpupool::emu::test
