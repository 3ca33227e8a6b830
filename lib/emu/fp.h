// Floating-point helpers with PTX semantics: directed rounding done exactly (the host FPU in the requested mode),
// flush-to-zero, saturation, conversions with CUDA's saturating float->int rules, and half/bf16 conversions.
// Internal to lib/emu; compiled with -frounding-math so rounding-mode switches are not optimised away.
#ifndef GPUPOOL_EMU_FP_H_
#define GPUPOOL_EMU_FP_H_

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "emu/program.h"

namespace gpupool::emu::internal {

// Boilerplate by nature: the same bit cast for each width.
inline float F32(uint64_t v) {
  uint32_t b = static_cast<uint32_t>(v);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline double F64(uint64_t v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
inline uint64_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline uint64_t Bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

inline float Ftz(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }

// Runs `f` with the host rounding mode set to `r` (rn/rz/rm/rp and their integer forms); restores it after.
class RoundingScope {
 public:
  explicit RoundingScope(Round r) {
    int mode = FE_TONEAREST;
    switch (r) {
      case Round::kRz: case Round::kRzi: mode = FE_TOWARDZERO; break;
      case Round::kRm: case Round::kRmi: mode = FE_DOWNWARD; break;
      case Round::kRp: case Round::kRpi: mode = FE_UPWARD; break;
      default: break;
    }
    changed_ = mode != FE_TONEAREST;
    if (changed_) std::fesetround(mode);
  }
  ~RoundingScope() {
    if (changed_) std::fesetround(FE_TONEAREST);
  }

 private:
  bool changed_;
};

// The host's binary16 type. Clang before 15 has no _Float16 on x86-64; its __fp16 (a storage format on every
// target, converted by compiler-rt: link with -rtlib=compiler-rt) converts the same values, rounding to nearest
// even whatever the rounding mode says. Only tests/fuzz/run.sh builds with such a compiler.
#if defined(__clang__) && __clang_major__ < 15 && defined(__x86_64__)
using HostHalf = __fp16;
#else
using HostHalf = _Float16;
#endif

// Half precision (IEEE binary16) and bfloat16, rounding to nearest even unless told otherwise. Converting from
// double directly avoids a second rounding through float.
template <typename F>
inline uint16_t ToHalf(F value, Round r) {
  HostHalf h;
  {
    RoundingScope scope(r);
    volatile F v = value;
    h = static_cast<HostHalf>(v);
  }
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
inline uint16_t FloatToHalf(float f, Round r = Round::kRn) { return ToHalf(f, r); }
inline uint16_t DoubleToHalf(double d, Round r = Round::kRn) { return ToHalf(d, r); }
inline float HalfToFloat(uint16_t b) {
  HostHalf h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
inline float Bf16ToFloat(uint16_t b) { return F32(static_cast<uint64_t>(b) << 16); }
inline uint16_t FloatToBf16(float f, Round r = Round::kRn) {
  uint32_t u = static_cast<uint32_t>(Bits(f));
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t lower = u & 0xffff;
  uint32_t upper = u >> 16;
  bool neg = (u >> 31) != 0;
  switch (r) {
    case Round::kRz: break;
    case Round::kRm: if (neg && lower) ++upper; break;
    case Round::kRp: if (!neg && lower) ++upper; break;
    default:
      if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) ++upper;
  }
  return static_cast<uint16_t>(upper);
}

// Double -> bfloat16 with one rounding: to float rounding toward zero with a sticky last bit ("round to odd"),
// which keeps every bit bfloat16's rounding looks at (float has 16 more), then to bfloat16.
inline uint16_t DoubleToBf16(double d, Round r = Round::kRn) {
  if (std::isnan(d)) return FloatToBf16(static_cast<float>(d), r);
  float f;
  {
    RoundingScope scope(Round::kRz);
    volatile double v = d;
    f = static_cast<float>(v);
  }
  if (static_cast<double>(f) != d && !std::isinf(f)) {
    uint32_t u = static_cast<uint32_t>(Bits(f)) | 1u;
    std::memcpy(&f, &u, 4);
  }
  return FloatToBf16(f, r);
}

// Float -> integer the way cvt.rXi.sN/uN.fM does it: round, then saturate; NaN becomes 0.
template <typename I>
inline I SaturatingFromFloating(double v, Round r) {
  if (std::isnan(v)) return 0;
  double rounded;
  switch (r) {
    case Round::kRzi: case Round::kRz: rounded = std::trunc(v); break;
    case Round::kRmi: case Round::kRm: rounded = std::floor(v); break;
    case Round::kRpi: case Round::kRp: rounded = std::ceil(v); break;
    default: rounded = std::nearbyint(v); break;  // Host mode is nearest-even.
  }
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (rounded <= lo) return std::numeric_limits<I>::min();
  if (rounded >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(rounded);
}

}  // namespace gpupool::emu::internal

#endif  // GPUPOOL_EMU_FP_H_
