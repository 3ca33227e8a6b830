// Host reference of the PTX conformance suite: IEEE binary formats (f16, bf16, f32, f64) decoded to exact values and
// rounded back in each of the ISA's rounding modes, written from the PTX ISA and IEEE 754, sharing no code with the
// emulator (lib/emu). Exact values are binary128 (__float128): every f16/bf16/f32 value and integer up to 64 bits is
// exact there, and so are the sums and products the suite forms of f16/bf16 values and integer conversions.
#ifndef GPUPOOL_TESTS_EMU_CONFORMANCE_REFERENCE_H_
#define GPUPOOL_TESTS_EMU_CONFORMANCE_REFERENCE_H_

#include <cmath>
#include <cstdint>

namespace gpupool::emu::test::conformance {

using Quad = __float128;

// A binary interchange format: stored mantissa bits, exponent range of normal numbers, total bits.
struct Format {
  int mantissa;
  int emin, emax;
  int bits;
};
inline constexpr Format kHalf{10, -14, 15, 16};
inline constexpr Format kBFloat{7, -126, 127, 16};
inline constexpr Format kSingle{23, -126, 127, 32};
inline constexpr Format kDouble{52, -1022, 1023, 64};

// The ISA's rounding modifiers: .rn (nearest, ties to even), .rna (nearest, ties away), .rz, .rm, .rp.
enum class Rounding { kNearestEven, kNearestAway, kTowardZero, kDown, kUp };

// An exact value: NaN, +-infinity, or +-magnitude (zero included, with its sign).
struct Exact {
  bool nan = false, inf = false, negative = false;
  Quad magnitude = 0;
};

inline Quad Pow2(int k) {
  Quad r = 1;
  while (k > 500) {
    r *= static_cast<Quad>(0x1p500);
    k -= 500;
  }
  while (k < -500) {
    r *= static_cast<Quad>(0x1p-500);
    k += 500;
  }
  return r * static_cast<Quad>(std::ldexp(1.0, k));
}

inline Exact Decode(uint64_t bits, Format f) {
  Exact x;
  const int exponent_bits = f.bits - 1 - f.mantissa;
  const uint64_t mantissa = bits & ((uint64_t{1} << f.mantissa) - 1);
  const uint64_t biased = (bits >> f.mantissa) & ((uint64_t{1} << exponent_bits) - 1);
  x.negative = (bits >> (f.bits - 1)) & 1;
  if (biased == (uint64_t{1} << exponent_bits) - 1) {
    x.nan = mantissa != 0;
    x.inf = mantissa == 0;
    return x;
  }
  if (biased == 0) {
    x.magnitude = static_cast<Quad>(mantissa) * Pow2(f.emin - f.mantissa);
  } else {
    x.magnitude = static_cast<Quad>(mantissa | (uint64_t{1} << f.mantissa)) *
                  Pow2(static_cast<int>(biased) - f.emax - f.mantissa);
  }
  return x;
}

inline uint64_t QuietNanBits(Format f) {
  const int exponent_bits = f.bits - 1 - f.mantissa;
  return (((uint64_t{1} << exponent_bits) - 1) << f.mantissa) | (uint64_t{1} << (f.mantissa - 1));
}
inline uint64_t InfinityBits(Format f, bool negative) {
  const int exponent_bits = f.bits - 1 - f.mantissa;
  return (static_cast<uint64_t>(negative) << (f.bits - 1)) | (((uint64_t{1} << exponent_bits) - 1) << f.mantissa);
}
inline uint64_t MaxFiniteBits(Format f, bool negative) { return InfinityBits(f, negative) - 1; }

// The floor of log2(m) for m > 0.
inline int Log2Floor(Quad m) {
  int e = 0;
  const double approx = static_cast<double>(m);
  if (approx > 0 && std::isfinite(approx)) e = std::ilogb(approx);
  Quad p = Pow2(e);
  while (p > m) p = Pow2(--e);
  while (Pow2(e + 1) <= m) ++e;
  return e;
}

// Whether rounding the magnitude whole + fraction (0 <= fraction < 1) of a number of sign `negative` in mode `r`
// takes the next integer away from zero, as the ISA's rounding modifiers define it.
inline bool RoundsAway(Rounding r, bool negative, unsigned __int128 whole, Quad fraction) {
  switch (r) {
    case Rounding::kNearestEven:
      return fraction > static_cast<Quad>(0.5) || (fraction == static_cast<Quad>(0.5) && (whole & 1));
    case Rounding::kNearestAway: return fraction >= static_cast<Quad>(0.5);
    case Rounding::kTowardZero: return false;
    case Rounding::kDown: return negative && fraction > 0;
    case Rounding::kUp: return !negative && fraction > 0;
  }
  return false;
}

// Rounds `x` to format `f` in mode `r` (IEEE 754: overflow gives infinity or the largest finite value by the
// mode's direction; subnormals are kept).
inline uint64_t Encode(const Exact& x, Format f, Rounding r) {
  const uint64_t sign = static_cast<uint64_t>(x.negative) << (f.bits - 1);
  if (x.nan) return QuietNanBits(f);
  if (x.inf) return InfinityBits(f, x.negative);
  if (x.magnitude == 0) return sign;
  int exponent = Log2Floor(x.magnitude);
  if (exponent < f.emin) exponent = f.emin;
  const int quantum = exponent - f.mantissa;
  const Quad scaled = x.magnitude * Pow2(-quantum);  // < 2^(mantissa + 1): exact in 113 bits.
  unsigned __int128 whole = static_cast<unsigned __int128>(scaled);
  const Quad fraction = scaled - static_cast<Quad>(whole);
  if (RoundsAway(r, x.negative, whole, fraction)) ++whole;
  if (whole >> (f.mantissa + 1)) {
    whole >>= 1;
    ++exponent;
  }
  if (exponent > f.emax) {
    const bool to_infinity = r == Rounding::kNearestEven || r == Rounding::kNearestAway ||
                             (r == Rounding::kDown && x.negative) || (r == Rounding::kUp && !x.negative);
    return to_infinity ? InfinityBits(f, x.negative) : MaxFiniteBits(f, x.negative);
  }
  const uint64_t mantissa = static_cast<uint64_t>(whole);
  if (!(mantissa >> f.mantissa)) return sign | mantissa;  // Subnormal (exponent == emin).
  const uint64_t biased = static_cast<uint64_t>(exponent + f.emax);
  return sign | (biased << f.mantissa) | (mantissa & ((uint64_t{1} << f.mantissa) - 1));
}

// Rounds to an integral value in mode `r` (cvt's .rni/.rzi/.rmi/.rpi), exactly.
inline Exact RoundIntegral(Exact x, Rounding r) {
  if (x.nan || x.inf || x.magnitude == 0) return x;
  if (x.magnitude >= Pow2(112)) return x;  // Already integral.
  unsigned __int128 whole = static_cast<unsigned __int128>(x.magnitude);
  const Quad fraction = x.magnitude - static_cast<Quad>(whole);
  if (RoundsAway(r, x.negative, whole, fraction)) ++whole;
  x.magnitude = static_cast<Quad>(whole);
  return x;
}

inline Exact FromInteger(int64_t v) {
  Exact x;
  x.negative = v < 0;
  x.magnitude =
      v < 0 ? static_cast<Quad>(-static_cast<unsigned __int128>(static_cast<__int128>(v))) : static_cast<Quad>(v);
  return x;
}
inline Exact FromUnsigned(uint64_t v) {
  Exact x;
  x.magnitude = static_cast<Quad>(v);
  return x;
}

// a + b and a * b of exact values, exact (as long as the result fits in 113 bits, true of f16/bf16 operands).
inline Exact Add(const Exact& a, const Exact& b, Rounding r) {
  Exact out;
  if (a.nan || b.nan || (a.inf && b.inf && a.negative != b.negative)) {
    out.nan = true;
    return out;
  }
  if (a.inf || b.inf) return a.inf ? a : b;
  const Quad sa = a.negative ? -a.magnitude : a.magnitude, sb = b.negative ? -b.magnitude : b.magnitude;
  const Quad s = sa + sb;
  if (s == 0) {
    // IEEE 754 6.3: an exact zero sum is +0 (-0 when rounding down), but x + x keeps the sign of a zero x.
    const bool both_zero = a.magnitude == 0 && b.magnitude == 0;
    if (both_zero && a.negative == b.negative)
      out.negative = a.negative;
    else
      out.negative = r == Rounding::kDown;
    return out;
  }
  out.negative = s < 0;
  out.magnitude = s < 0 ? -s : s;
  return out;
}
inline Exact Multiply(const Exact& a, const Exact& b) {
  Exact out;
  out.negative = a.negative != b.negative;
  if (a.nan || b.nan || (a.inf && b.magnitude == 0 && !b.inf) || (b.inf && a.magnitude == 0 && !a.inf)) {
    out.nan = true;
    out.negative = false;
    return out;
  }
  if (a.inf || b.inf) {
    out.inf = true;
    return out;
  }
  out.magnitude = a.magnitude * b.magnitude;
  return out;
}
inline Exact Negate(Exact a) {
  a.negative = !a.negative;
  return a;
}

}  // namespace gpupool::emu::test::conformance

#endif  // GPUPOOL_TESTS_EMU_CONFORMANCE_REFERENCE_H_
