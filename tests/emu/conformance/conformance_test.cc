// The PTX conformance suite (issue 45): a table of the instruction forms the emulator accepts (lib/emu/compile.cc's
// decoder: every instruction x type x modifier below is one it decodes), each run as a generated PTX kernel on the
// edge values of its operand types (zero and -0.0, +-1, the extremes, NaN, +-infinity, subnormals, shift counts
// at and past the width) and checked against a host reference written from the PTX ISA's words (reference.h and
// the lambdas below, sharing no code with lib/emu). A mismatch is reported as
//   <instruction> (<input>): expected <value>, got <value>
// one line per input (the first few of each form), and fails the test of its family.
//
// Where the ISA leaves a result unspecified (integer division by zero, .approx accuracy outside the ranges it
// states), the reference accepts any value or the ISA's error bound, and says so at the form.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cfloat>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "conformance/reference.h"
#include "emu/program.h"
#include "emu/ptx_parser.h"
#include "kernel_harness.h"

namespace gpupool::emu::test::conformance {
namespace {

// ---- Operand types. ----

enum class Ty { kPred, kB16, kB32, kB64, kS8, kS16, kS32, kS64, kU8, kU16, kU32, kU64, kF16, kBF16, kF32, kF64 };

struct TyInfo {
  const char* name;  // In instruction names.
  int bits;          // Of the type.
  int reg_bits;      // Of the register the kernel holds it in (8-bit types live in 16-bit registers).
  bool is_signed, is_float;
};
const TyInfo& Info(Ty t) {
  static const TyInfo kInfo[] = {
      {"pred", 1, 1, false, false},  {"b16", 16, 16, false, false}, {"b32", 32, 32, false, false},
      {"b64", 64, 64, false, false}, {"s8", 8, 16, true, false},    {"s16", 16, 16, true, false},
      {"s32", 32, 32, true, false},  {"s64", 64, 64, true, false},  {"u8", 8, 16, false, false},
      {"u16", 16, 16, false, false}, {"u32", 32, 32, false, false}, {"u64", 64, 64, false, false},
      {"f16", 16, 16, false, true},  {"bf16", 16, 16, false, true}, {"f32", 32, 32, false, true},
      {"f64", 64, 64, false, true}};
  return kInfo[static_cast<int>(t)];
}
std::string Name(Ty t) { return Info(t).name; }
uint64_t Mask(int bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }
int64_t SignExtend(uint64_t v, int bits) {
  if (bits >= 64) return static_cast<int64_t>(v);
  const int shift = 64 - bits;
  return static_cast<int64_t>(v << shift) >> shift;
}
// The value of `v` as type `t`: signed types sign-extended, others zero-extended, from the type's width.
int64_t AsSigned(uint64_t v, Ty t) { return SignExtend(v, Info(t).bits); }
uint64_t AsUnsigned(uint64_t v, Ty t) { return v & Mask(Info(t).bits); }
int64_t IntValue(uint64_t v, Ty t) {
  return Info(t).is_signed ? AsSigned(v, t) : static_cast<int64_t>(AsUnsigned(v, t));
}
// What a register of t's register width holds after an instruction of type t writes `v` into it: the ISA's
// relaxed type-checking rules sign-extend signed types and zero-extend the others.
uint64_t InRegister(uint64_t v, Ty t) {
  const TyInfo& i = Info(t);
  if (i.bits == i.reg_bits || t == Ty::kPred) return v & Mask(i.reg_bits);
  return (i.is_signed ? static_cast<uint64_t>(SignExtend(v, i.bits)) : (v & Mask(i.bits))) & Mask(i.reg_bits);
}

Format FormatOf(Ty t) {
  switch (t) {
    case Ty::kF16: return kHalf;
    case Ty::kBF16: return kBFloat;
    case Ty::kF32: return kSingle;
    default: return kDouble;
  }
}
float F32(uint64_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v)); }
double F64(uint64_t v) { return std::bit_cast<double>(v); }
uint64_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
uint64_t Bits(double d) { return std::bit_cast<uint64_t>(d); }
bool IsNan(uint64_t v, Ty t) { return Info(t).is_float && Decode(v & Mask(Info(t).bits), FormatOf(t)).nan; }

// ---- Edge values of each type (bit patterns). ----

std::vector<uint64_t> Edges(Ty t) {
  switch (t) {
    case Ty::kPred: return {0, 1};
    case Ty::kS8:
    case Ty::kU8: return {0, 1, 0xff, 2, 0xfe, 7, 8, 9, 0x7f, 0x80, 0x81, 0x12};
    case Ty::kB16:
    case Ty::kS16:
    case Ty::kU16: return {0, 1, 0xffff, 2, 0xfffe, 7, 15, 16, 17, 0x7fff, 0x8000, 0x8001, 0x1234, 0xff, 0x80};
    case Ty::kB32:
    case Ty::kS32:
    case Ty::kU32:
      return {0, 1, 0xffffffff, 2, 0xfffffffe, 7, 0xfffffff9, 31, 32, 33, 0x7fffffff, 0x80000000, 0x80000001,
              0x7ffffffe, 0x12345678, 0xedcba988, 0x10000, 0xffff, 0x8000,
              0x01010001 /* just above a bf16 tie, on one in float */};
    case Ty::kB64:
    case Ty::kS64:
    case Ty::kU64:
      return {0,
              1,
              ~uint64_t{0},
              2,
              ~uint64_t{1},
              7,
              63,
              64,
              65,
              0x7fffffffffffffff,
              0x8000000000000000,
              0x8000000000000001,
              0x123456789abcdef0,
              0xffffffff,
              0x100000000,
              0x80000000,
              0xffffffff80000000,
              0x0101000000000001 /* just above a bf16 tie, on one in float */};
    case Ty::kF16:
      return {0x0000, 0x8000, 0x3c00, 0xbc00, 0x3800, 0x3e00, 0x4100, 0xc100, 0x7bff, 0xfbff,
              0x0400, 0x8400, 0x0001, 0x03ff, 0x8001, 0x7c00, 0xfc00, 0x7e00, 0x3555, 0x5640};
    case Ty::kBF16:
      return {0x0000, 0x8000, 0x3f80, 0xbf80, 0x3f00, 0x3fc0, 0x4020, 0xc020, 0x7f7f, 0xff7f,
              0x0080, 0x8080, 0x0001, 0x007f, 0x8001, 0x7f80, 0xff80, 0x7fc0, 0x3eab, 0x4b80};
    case Ty::kF32: {
      std::vector<uint64_t> v;
      for (float f : {0.0f,
                      -0.0f,
                      1.0f,
                      -1.0f,
                      0.5f,
                      -0.5f,
                      1.5f,
                      2.5f,
                      -2.5f,
                      3.0f,
                      0.1f,
                      1.0f / 3,
                      -7.75f,
                      1e10f,
                      -1e10f,
                      2147483648.0f,
                      -2147483648.0f,
                      4294967296.0f,
                      9.2233720e18f,
                      65504.0f,
                      65520.0f,
                      std::numeric_limits<float>::max(),
                      -std::numeric_limits<float>::max(),
                      std::numeric_limits<float>::min(),
                      -std::numeric_limits<float>::min()}) {
        v.push_back(Bits(f));
      }
      for (uint64_t b : {0x00000001ull, 0x807fffffull, 0x00400000ull, 0x7f800000ull, 0xff800000ull, 0x7fc00000ull,
                         0x33800001ull /* just above half an f16 ulp of 1 */}) {
        v.push_back(b);
      }
      return v;
    }
    case Ty::kF64: {
      std::vector<uint64_t> v;
      for (double d : {0.0,
                       -0.0,
                       1.0,
                       -1.0,
                       0.5,
                       -0.5,
                       1.5,
                       2.5,
                       -2.5,
                       3.0,
                       0.1,
                       1.0 / 3,
                       -7.75,
                       1e10,
                       -1e300,
                       2147483648.0,
                       -2147483649.0,
                       4294967296.0,
                       9223372036854775808.0,
                       -9223372036854775808.0,
                       18446744073709551616.0,
                       3.4028235677973366e38,
                       1e-40,
                       std::numeric_limits<double>::max(),
                       std::numeric_limits<double>::min(),
                       1.0000000596046448 /* 1 + 2^-24 + 2^-52 */}) {
        v.push_back(Bits(d));
      }
      for (uint64_t b : {0x0000000000000001ull, 0x800fffffffffffffull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
                         0x7ff8000000000000ull}) {
        v.push_back(b);
      }
      return v;
    }
  }
  return {};
}
// Fewer values, for three-operand forms (the full product would be tens of thousands of inputs).
std::vector<uint64_t> FewEdges(Ty t) {
  std::vector<uint64_t> all = Edges(t);
  std::vector<uint64_t> few;
  for (size_t i = 0; i < all.size(); i += (i < 4 ? 1 : 2)) few.push_back(all[i]);
  if (Info(t).is_float && !IsNan(few.back(), t)) few.push_back(all.back());
  return few;
}
// Shift counts and bit positions: below, at and past every width.
std::vector<uint64_t> Counts() {
  return {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 0x80000000, 0xffffffff};
}

// ---- The table. ----

// What the reference accepts.
struct Want {
  enum Kind { kExact, kAny, kWithin } kind = kExact;
  uint64_t d0 = 0, d1 = 0;
  double relative = 0, absolute = 0;  // kWithin: |got - d0| <= relative * |d0| + absolute (d0 as a float).
  std::vector<uint64_t> also;         // Other values of d0 the ISA allows.
  // Packed results (d0 two halves of this format, kPred for none): each half compared on its own, any NaN for a
  // NaN; with either_zero_sign, +0 and -0 for a zero.
  Ty halves = Ty::kPred;
  bool either_zero_sign = false;
};
using Inputs = std::vector<uint64_t>;

struct Form {
  std::string family;
  std::string name;  // The instruction as written: opcode, modifiers, types.
  std::string body;  // PTX over %a0..%a2 (sources) and %d0, %d1 (results).
  std::vector<Ty> sources;
  Ty d0 = Ty::kB32;
  bool has_d1 = false;
  Ty d1 = Ty::kPred;
  std::vector<Inputs> inputs;
  std::function<Want(const Inputs&)> reference;
};

std::vector<Inputs> Product(const std::vector<std::vector<uint64_t>>& lists) {
  std::vector<Inputs> out = {{}};
  for (const auto& list : lists) {
    std::vector<Inputs> next;
    for (const Inputs& prefix : out) {
      for (uint64_t v : list) {
        Inputs in = prefix;
        in.push_back(v);
        next.push_back(in);
      }
    }
    out = std::move(next);
  }
  return out;
}

Want Exactly(uint64_t d0, uint64_t d1 = 0) {
  Want w;
  w.d0 = d0;
  w.d1 = d1;
  return w;
}
Want Anything() {
  Want w;
  w.kind = Want::kAny;
  return w;
}

class Table {
 public:
  // `text` is the instruction; a body "<text> %d0, %a0, %a1;" is made from the number of sources.
  void Add(const std::string& family, const std::string& text, Ty d0, std::vector<Ty> sources,
           std::function<Want(const Inputs&)> reference, std::vector<Inputs> inputs = {}) {
    Form f;
    f.family = family;
    f.name = text;
    f.body = text + " %d0";
    for (size_t i = 0; i < sources.size(); ++i) f.body += ", %a" + std::to_string(i);
    f.body += ";";
    f.sources = std::move(sources);
    f.d0 = d0;
    f.reference = std::move(reference);
    f.inputs = std::move(inputs);
    Push(std::move(f));
  }
  void Push(Form f) {
    if (f.inputs.empty()) {
      std::vector<std::vector<uint64_t>> lists;
      for (Ty t : f.sources) lists.push_back(f.sources.size() >= 3 ? FewEdges(t) : Edges(t));
      f.inputs = Product(lists);
    }
    forms_.push_back(std::move(f));
  }
  const std::vector<Form>& forms() const { return forms_; }

 private:
  std::vector<Form> forms_;
};

// ---- Float helpers of the reference. ----

Rounding RoundingOf(const std::string& rnd) {
  if (rnd == "rz" || rnd == "rzi") return Rounding::kTowardZero;
  if (rnd == "rm" || rnd == "rmi") return Rounding::kDown;
  if (rnd == "rp" || rnd == "rpi") return Rounding::kUp;
  if (rnd == "rna") return Rounding::kNearestAway;
  return Rounding::kNearestEven;
}
int HostMode(Rounding r) {
  switch (r) {
    case Rounding::kTowardZero: return FE_TOWARDZERO;
    case Rounding::kDown: return FE_DOWNWARD;
    case Rounding::kUp: return FE_UPWARD;
    default: return FE_TONEAREST;
  }
}
// Runs an IEEE operation of the host in rounding mode r (the ISA: f32/f64 add, sub, mul, fma, div, sqrt with
// .rn/.rz/.rm/.rp are IEEE 754 operations rounded in that mode). `f` stores its result to a volatile: GCC may
// otherwise move the arithmetic past the fesetround() that restores the mode, -frounding-math or not.
template <typename F>
auto InMode(Rounding r, F f) {
  std::fesetround(HostMode(r));
  auto out = f();
  std::fesetround(FE_TONEAREST);
  return out;
}
// A value the compiler must load at run time (inside InMode), so that it cannot fold the arithmetic on it.
template <typename T>
T Opaque(T v) {
  volatile T x = v;
  return x;
}
// The bits of `op` (a generic lambda of the operands' values) on the f32 (`f32`) or f64 values of `operands`,
// computed on the host in rounding mode r.
template <typename Op, typename... Operands>
uint64_t IeeeBits(bool f32, Rounding r, Op op, Operands... operands) {
  if (f32) {
    return Bits(InMode(r, [&] {
      volatile float q = op(Opaque(F32(operands))...);
      return q;
    }));
  }
  return Bits(InMode(r, [&] {
    volatile double q = op(Opaque(F64(operands))...);
    return q;
  }));
}
bool IsSubnormal32(uint64_t v) { return (v & 0x7f800000) == 0 && (v & 0x7fffff) != 0; }
// .ftz: subnormal f32 inputs and results become zeros of the same sign.
uint64_t Flush32(uint64_t v) { return IsSubnormal32(v) ? (v & 0x80000000) : v; }
// .sat: clamps to [0.0, 1.0]; NaN becomes +0.0.
uint64_t Saturate(uint64_t v, Ty t) {
  const Format f = FormatOf(t);
  const Exact x = Decode(v, f);
  if (x.nan) return 0;
  if (x.negative) return 0;  // -0.0 included: the ISA's result range is [+0.0, 1.0].
  if (x.inf || x.magnitude > 1) return Encode(FromUnsigned(1), f, Rounding::kNearestEven);
  return v;
}

// Half and bfloat16 arithmetic: exact in binary128, rounded once to the format (f16 add/sub/mul/fma are IEEE
// operations of that format).
uint64_t HalfOp(Ty t, const std::string& op, const Inputs& in, Rounding r) {
  const Format f = FormatOf(t);
  const Exact a = Decode(in[0], f), b = in.size() > 1 ? Decode(in[1], f) : Exact{};
  Exact x;
  if (op == "add")
    x = Add(a, b, r);
  else if (op == "sub")
    x = Add(a, Negate(b), r);
  else if (op == "mul")
    x = Multiply(a, b);
  else
    x = Add(Multiply(a, b), Decode(in[2], f), r);  // fma: one rounding.
  return Encode(x, f, r);
}

// The register type a kernel declares for a value of type t.
std::string RegTypeName(Ty t) {
  if (t == Ty::kPred) return "pred";
  if (t == Ty::kF32) return "f32";
  if (t == Ty::kF64) return "f64";
  return "b" + std::to_string(Info(t).reg_bits);
}

// ---- Building the table. ----

const std::vector<Ty> kIntTypes = {Ty::kS16, Ty::kU16, Ty::kS32, Ty::kU32, Ty::kS64, Ty::kU64};
const std::vector<std::string> kRoundings = {"rn", "rz", "rm", "rp"};

void IntegerForms(Table& t) {
  for (Ty ty : kIntTypes) {
    const std::string n = Name(ty);
    const int bits = Info(ty).bits;
    const bool s = Info(ty).is_signed;
    auto V = [ty](uint64_t v) { return IntValue(v, ty); };
    auto Out = [ty](uint64_t v) { return InRegister(v, ty); };
    t.Add("integer", "add." + n, ty, {ty, ty}, [=](const Inputs& i) { return Exactly(Out(i[0] + i[1])); });
    t.Add("integer", "sub." + n, ty, {ty, ty}, [=](const Inputs& i) { return Exactly(Out(i[0] - i[1])); });
    t.Add("integer", "mul.lo." + n, ty, {ty, ty}, [=](const Inputs& i) { return Exactly(Out(i[0] * i[1])); });
    // The high half of the full 2 * width-bit product.
    auto High = [=](uint64_t a, uint64_t b) {
      if (s) return static_cast<uint64_t>((static_cast<__int128>(AsSigned(a, ty)) * AsSigned(b, ty)) >> bits);
      return static_cast<uint64_t>((static_cast<unsigned __int128>(AsUnsigned(a, ty)) * AsUnsigned(b, ty)) >> bits);
    };
    t.Add("integer", "mul.hi." + n, ty, {ty, ty}, [=](const Inputs& i) { return Exactly(Out(High(i[0], i[1]))); });
    t.Add("integer", "mad.lo." + n, ty, {ty, ty, ty},
          [=](const Inputs& i) { return Exactly(Out(i[0] * i[1] + i[2])); });
    t.Add("integer", "mad.hi." + n, ty, {ty, ty, ty},
          [=](const Inputs& i) { return Exactly(Out(High(i[0], i[1]) + i[2])); });
    if (bits <= 32) {
      const Ty wide = s ? (bits == 16 ? Ty::kS32 : Ty::kS64) : (bits == 16 ? Ty::kU32 : Ty::kU64);
      t.Add("integer", "mul.wide." + n, wide, {ty, ty}, [=](const Inputs& i) {
        return Exactly(InRegister(static_cast<uint64_t>(V(i[0])) * static_cast<uint64_t>(V(i[1])), wide));
      });
      t.Add("integer", "mad.wide." + n, wide, {ty, ty, wide}, [=](const Inputs& i) {
        return Exactly(InRegister(static_cast<uint64_t>(V(i[0])) * static_cast<uint64_t>(V(i[1])) + i[2], wide));
      });
    }
    // div and rem: by zero the ISA gives "an unspecified, machine-specific value"; the most negative value over -1
    // overflows (the quotient wraps to the most negative value, the remainder is 0, as two's complement
    // arithmetic of the type's width gives).
    t.Add("integer", "div." + n, ty, {ty, ty}, [=](const Inputs& i) {
      if (AsUnsigned(i[1], ty) == 0) return Anything();
      if (!s) return Exactly(Out(AsUnsigned(i[0], ty) / AsUnsigned(i[1], ty)));
      if (V(i[1]) == -1) return Exactly(Out(0 - i[0]));
      return Exactly(Out(static_cast<uint64_t>(V(i[0]) / V(i[1]))));
    });
    t.Add("integer", "rem." + n, ty, {ty, ty}, [=](const Inputs& i) {
      if (AsUnsigned(i[1], ty) == 0) return Anything();
      if (!s) return Exactly(Out(AsUnsigned(i[0], ty) % AsUnsigned(i[1], ty)));
      if (V(i[1]) == -1) return Exactly(0);
      return Exactly(Out(static_cast<uint64_t>(V(i[0]) % V(i[1]))));
    });
    auto Less = [=](uint64_t a, uint64_t b) {
      return s ? AsSigned(a, ty) < AsSigned(b, ty) : AsUnsigned(a, ty) < AsUnsigned(b, ty);
    };
    t.Add("integer", "min." + n, ty, {ty, ty},
          [=](const Inputs& i) { return Exactly(Out(Less(i[1], i[0]) ? i[1] : i[0])); });
    t.Add("integer", "max." + n, ty, {ty, ty},
          [=](const Inputs& i) { return Exactly(Out(Less(i[0], i[1]) ? i[1] : i[0])); });
    if (s) {
      // abs and neg of the most negative value give it back (two's complement of the type's width).
      t.Add("integer", "abs." + n, ty, {ty},
            [=](const Inputs& i) { return Exactly(Out(V(i[0]) < 0 ? 0 - i[0] : i[0])); });
      t.Add("integer", "neg." + n, ty, {ty}, [=](const Inputs& i) { return Exactly(Out(0 - i[0])); });
    }
    t.Add("integer", "sad." + n, ty, {ty, ty, ty}, [=](const Inputs& i) {
      const bool less = s ? V(i[0]) < V(i[1]) : AsUnsigned(i[0], ty) < AsUnsigned(i[1], ty);
      return Exactly(Out(i[2] + (less ? i[1] - i[0] : i[0] - i[1])));
    });
  }
  // Saturating forms: .s32 only; the result clamps to [INT_MIN, INT_MAX].
  auto Clamp32 = [](__int128 v) {
    return Exactly(static_cast<uint32_t>(static_cast<int32_t>(v > INT32_MAX   ? INT32_MAX
                                                              : v < INT32_MIN ? INT32_MIN
                                                                              : v)));
  };
  auto S = [](uint64_t v) { return static_cast<__int128>(SignExtend(v, 32)); };
  t.Add("integer", "add.sat.s32", Ty::kS32, {Ty::kS32, Ty::kS32},
        [=](const Inputs& i) { return Clamp32(S(i[0]) + S(i[1])); });
  t.Add("integer", "sub.sat.s32", Ty::kS32, {Ty::kS32, Ty::kS32},
        [=](const Inputs& i) { return Clamp32(S(i[0]) - S(i[1])); });
  t.Add("integer", "mad.hi.sat.s32", Ty::kS32, {Ty::kS32, Ty::kS32, Ty::kS32},
        [=](const Inputs& i) { return Clamp32(((S(i[0]) * S(i[1])) >> 32) + S(i[2])); });
  // mul24/mad24: the low 24 bits of each source, as signed or unsigned 24-bit values; .lo the low 32 bits of the
  // 48-bit product, .hi its high 32 bits (bits 16..47).
  for (Ty ty : {Ty::kS32, Ty::kU32}) {
    const bool s = ty == Ty::kS32;
    auto Product24 = [s](uint64_t a, uint64_t b) {
      const int64_t x = s ? SignExtend(a, 24) : static_cast<int64_t>(a & 0xffffff);
      const int64_t y = s ? SignExtend(b, 24) : static_cast<int64_t>(b & 0xffffff);
      return static_cast<uint64_t>(x * y);
    };
    t.Add("integer", "mul24.lo." + Name(ty), ty, {ty, ty},
          [=](const Inputs& i) { return Exactly(Product24(i[0], i[1]) & 0xffffffff); });
    t.Add("integer", "mul24.hi." + Name(ty), ty, {ty, ty},
          [=](const Inputs& i) { return Exactly((Product24(i[0], i[1]) >> 16) & 0xffffffff); });
    t.Add("integer", "mad24.lo." + Name(ty), ty, {ty, ty, ty},
          [=](const Inputs& i) { return Exactly((Product24(i[0], i[1]) + i[2]) & 0xffffffff); });
  }
}

void BitForms(Table& t) {
  for (Ty ty : {Ty::kB16, Ty::kB32, Ty::kB64}) {
    const std::string n = Name(ty);
    const int bits = Info(ty).bits;
    const uint64_t m = Mask(bits);
    t.Add("bits", "and." + n, ty, {ty, ty}, [=](const Inputs& i) { return Exactly(i[0] & i[1] & m); });
    t.Add("bits", "or." + n, ty, {ty, ty}, [=](const Inputs& i) { return Exactly((i[0] | i[1]) & m); });
    t.Add("bits", "xor." + n, ty, {ty, ty}, [=](const Inputs& i) { return Exactly((i[0] ^ i[1]) & m); });
    t.Add("bits", "not." + n, ty, {ty}, [=](const Inputs& i) { return Exactly(~i[0] & m); });
    t.Add("bits", "cnot." + n, ty, {ty}, [=](const Inputs& i) { return Exactly((i[0] & m) == 0 ? 1 : 0); });
    // Shifts: the amount is a .u32; amounts past the width shift everything out (shr.s: copies of the sign).
    std::vector<Inputs> shifts = Product({Edges(ty), Counts()});
    t.Add(
        "bits", "shl." + n, ty, {ty, Ty::kU32},
        [=](const Inputs& i) { return Exactly(i[1] >= static_cast<uint64_t>(bits) ? 0 : (i[0] << i[1]) & m); }, shifts);
    const Ty u = bits == 16 ? Ty::kU16 : bits == 32 ? Ty::kU32 : Ty::kU64;
    const Ty s = bits == 16 ? Ty::kS16 : bits == 32 ? Ty::kS32 : Ty::kS64;
    for (Ty shr : {ty, u}) {
      t.Add(
          "bits", "shr." + Name(shr), shr, {shr, Ty::kU32},
          [=](const Inputs& i) { return Exactly(i[1] >= static_cast<uint64_t>(bits) ? 0 : (i[0] & m) >> i[1]); },
          shifts);
    }
    t.Add(
        "bits", "shr." + Name(s), s, {s, Ty::kU32},
        [=](const Inputs& i) {
          const int64_t v = SignExtend(i[0], bits);
          return Exactly(static_cast<uint64_t>(v >> (i[1] >= static_cast<uint64_t>(bits) ? bits - 1 : i[1])) & m);
        },
        shifts);
  }
  for (Ty ty : {Ty::kB32, Ty::kB64}) {
    const std::string n = Name(ty);
    const int bits = Info(ty).bits;
    const uint64_t m = Mask(bits);
    t.Add("bits", "popc." + n, Ty::kU32, {ty},
          [=](const Inputs& i) { return Exactly(__builtin_popcountll(i[0] & m)); });
    t.Add("bits", "clz." + n, Ty::kU32, {ty}, [=](const Inputs& i) {
      uint32_t c = 0;
      for (int b = bits - 1; b >= 0 && !((i[0] >> b) & 1); --b) ++c;
      return Exactly(c);
    });
    t.Add("bits", "brev." + n, ty, {ty}, [=](const Inputs& i) {
      uint64_t r = 0;
      for (int b = 0; b < bits; ++b) r |= ((i[0] >> b) & 1) << (bits - 1 - b);
      return Exactly(r);
    });
    // bfi: the low `len` bits of a into b at `pos`; pos and len are the low 8 bits of their operands (0..255);
    // nothing is inserted when len is 0 or pos is past the width.
    std::vector<Inputs> fields = Product({FewEdges(ty),
                                          {0, ~uint64_t{0} & m, 0x12345678},
                                          {0, 1, 8, 31, 32, 63, 64, 255, 256},
                                          {0, 1, 8, 31, 32, 33, 64, 255, 256}});
    const Ty bfi_ty = ty;
    Form bfi;
    bfi.family = "bits";
    bfi.name = "bfi." + n;
    bfi.body = "bfi." + n + " %d0, %a0, %a1, %a2, %a3;";
    bfi.sources = {bfi_ty, bfi_ty, Ty::kU32, Ty::kU32};
    bfi.d0 = bfi_ty;
    bfi.inputs = fields;
    bfi.reference = [=](const Inputs& i) {
      const uint64_t pos = i[2] & 0xff, len = i[3] & 0xff;
      uint64_t d = i[1] & m;
      for (uint64_t k = 0; k < len && pos + k < static_cast<uint64_t>(bits); ++k) {
        d = (d & ~(uint64_t{1} << (pos + k))) | (((i[0] >> k) & 1) << (pos + k));
      }
      return Exactly(d);
    };
    t.Push(bfi);
  }
  for (Ty ty : {Ty::kU32, Ty::kS32, Ty::kU64, Ty::kS64}) {
    const std::string n = Name(ty);
    const int bits = Info(ty).bits;
    const bool s = Info(ty).is_signed;
    // bfind: the position of the most significant non-sign bit (0xffffffff when there is none); .shiftamt gives
    // bits - 1 - position instead.
    for (bool shiftamt : {false, true}) {
      t.Add("bits", std::string("bfind") + (shiftamt ? ".shiftamt." : ".") + n, Ty::kU32, {ty}, [=](const Inputs& i) {
        uint64_t v = i[0] & Mask(bits);
        if (s && ((v >> (bits - 1)) & 1)) v = ~v & Mask(bits);
        int pos = -1;
        for (int b = bits - 1; b >= 0; --b) {
          if ((v >> b) & 1) {
            pos = b;
            break;
          }
        }
        if (pos < 0) return Exactly(0xffffffff);
        return Exactly(shiftamt ? static_cast<uint64_t>(bits - 1 - pos) : static_cast<uint64_t>(pos));
      });
    }
    // bfe: `len` bits of a from `pos` (each the low 8 bits of its operand), zero-extended for unsigned types and
    // sign-extended for signed ones from the field's last bit inside the value (the ISA's msb = min(pos+len-1,
    // width-1)); len 0 gives 0.
    Form bfe;
    bfe.family = "bits";
    bfe.name = "bfe." + n;
    bfe.body = "bfe." + n + " %d0, %a0, %a1, %a2;";
    bfe.sources = {ty, Ty::kU32, Ty::kU32};
    bfe.d0 = ty;
    bfe.inputs = Product(
        {FewEdges(ty), {0, 1, 7, 8, 31, 32, 63, 64, 255, 256, 0x101}, {0, 1, 7, 8, 16, 31, 32, 33, 63, 64, 255, 256}});
    bfe.reference = [=](const Inputs& i) {
      const uint64_t pos = i[1] & 0xff, len = i[2] & 0xff;
      const uint64_t a = i[0] & Mask(bits);
      const uint64_t msb = std::min<uint64_t>(pos + len - 1, bits - 1);
      const bool sbit = len == 0 ? false : (s ? ((a >> msb) & 1) : false);
      uint64_t d = 0;
      for (int k = 0; k < bits; ++k) {
        uint64_t bit;
        if (static_cast<uint64_t>(k) < len && pos + k <= static_cast<uint64_t>(bits - 1))
          bit = (a >> (pos + k)) & 1;
        else
          bit = sbit;
        d |= bit << k;
      }
      return Exactly(d);
    };
    t.Push(bfe);
  }
  // prmt: bytes of {b, a} picked by the selector c (default mode: the low 3 bits of each nibble pick a byte, the
  // nibble's top bit replicates that byte's sign); the named modes by their tables in the ISA.
  {
    const std::vector<Inputs> in = Product({{0x03020100, 0x80ff7f01, 0x12345678},
                                            {0x07060504, 0xfedcba98},
                                            {0x3210, 0x7654, 0x0123, 0x8888, 0xf9e1, 0x0, 0x1, 0x2, 0x3, 0xffff}});
    t.Add(
        "bits", "prmt.b32", Ty::kB32, {Ty::kB32, Ty::kB32, Ty::kB32},
        [](const Inputs& i) {
          const uint64_t src = (i[1] << 32) | (i[0] & 0xffffffff);
          uint64_t d = 0;
          for (int k = 0; k < 4; ++k) {
            const uint64_t sel = (i[2] >> (4 * k)) & 0xf;
            uint64_t byte = (src >> ((sel & 7) * 8)) & 0xff;
            if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
            d |= byte << (8 * k);
          }
          return Exactly(d);
        },
        in);
    struct Mode {
      const char* name;
      uint8_t table[4][4];
    };
    const Mode modes[] = {{"f4e", {{0, 1, 2, 3}, {1, 2, 3, 4}, {2, 3, 4, 5}, {3, 4, 5, 6}}},
                          {"b4e", {{0, 7, 6, 5}, {1, 0, 7, 6}, {2, 1, 0, 7}, {3, 2, 1, 0}}},
                          {"rc8", {{0, 0, 0, 0}, {1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}}},
                          {"ecl", {{0, 1, 2, 3}, {1, 1, 2, 3}, {2, 2, 2, 3}, {3, 3, 3, 3}}},
                          {"ecr", {{0, 0, 0, 0}, {0, 1, 1, 1}, {0, 1, 2, 2}, {0, 1, 2, 3}}},
                          {"rc16", {{0, 1, 0, 1}, {2, 3, 2, 3}, {0, 1, 0, 1}, {2, 3, 2, 3}}}};
    for (const Mode& mode : modes) {
      t.Add(
          "bits", std::string("prmt.b32.") + mode.name, Ty::kB32, {Ty::kB32, Ty::kB32, Ty::kB32},
          [mode](const Inputs& i) {
            const uint64_t src = (i[1] << 32) | (i[0] & 0xffffffff);
            uint64_t d = 0;
            for (int k = 0; k < 4; ++k) d |= ((src >> (mode.table[i[2] & 3][k] * 8)) & 0xff) << (8 * k);
            return Exactly(d);
          },
          in);
    }
  }
  // shf: a funnel shift of the 64-bit {b, a}; .wrap takes the amount modulo 32, .clamp caps it at 32.
  for (const char* dir : {"l", "r"}) {
    for (const char* mode : {"wrap", "clamp"}) {
      const bool left = dir[0] == 'l', clamp = mode[0] == 'c';
      t.Add(
          "bits", std::string("shf.") + dir + "." + mode + ".b32", Ty::kB32, {Ty::kB32, Ty::kB32, Ty::kU32},
          [=](const Inputs& i) {
            const uint64_t n = clamp ? std::min<uint64_t>(i[2] & 0xffffffff, 32) : (i[2] & 31);
            const uint64_t v = ((i[1] & 0xffffffff) << 32) | (i[0] & 0xffffffff);
            if (left) return Exactly(((v << n) >> 32) & 0xffffffff);
            return Exactly((v >> n) & 0xffffffff);
          },
          Product({{0x12345678, 0xffffffff, 0x80000001, 0}, {0x9abcdef0, 0, 0xffffffff}, Counts()}));
    }
  }
  // bmsk: ones in bits [a, a + b) of 32; .clamp caps a and b at 32, .wrap takes them modulo 32.
  for (const char* mode : {"clamp", "wrap"}) {
    const bool wrap = mode[0] == 'w';
    t.Add(
        "bits", std::string("bmsk.") + mode + ".b32", Ty::kB32, {Ty::kB32, Ty::kU32},
        [=](const Inputs& i) {
          uint64_t a = i[0] & 0xffffffff, b = i[1] & 0xffffffff;
          if (wrap) {
            a &= 31;
            b &= 31;
          } else {
            a = std::min<uint64_t>(a, 32);
            b = std::min<uint64_t>(b, 32);
          }
          uint64_t d = 0;
          for (uint64_t k = a; k < a + b && k < 32; ++k) d |= uint64_t{1} << k;
          return Exactly(d);
        },
        Product({Counts(), Counts()}));
  }
  // lop3: bit k of the result is bit (a_k*4 + b_k*2 + c_k) of the table.
  for (int lut : {0x00, 0xff, 0x96, 0xe8, 0x80, 0xfe, 0x1e, 0xca}) {
    std::vector<Inputs> in = Product({{0x0f0f0f0f, 0xffffffff, 0x12345678}, {0x00ff00ff, 0}, {0x33333333, 0xaaaaaaaa}});
    Form f;
    f.family = "bits";
    f.name = "lop3.b32 (lut " + std::to_string(lut) + ")";
    f.body = "lop3.b32 %d0, %a0, %a1, %a2, " + std::to_string(lut) + ";";
    f.sources = {Ty::kB32, Ty::kB32, Ty::kB32};
    f.d0 = Ty::kB32;
    f.inputs = in;
    f.reference = [lut](const Inputs& i) {
      uint64_t d = 0;
      for (int k = 0; k < 32; ++k) {
        const int idx = static_cast<int>(((i[0] >> k) & 1) * 4 + ((i[1] >> k) & 1) * 2 + ((i[2] >> k) & 1));
        d |= static_cast<uint64_t>((lut >> idx) & 1) << k;
      }
      return Exactly(d);
    };
    t.Push(f);
  }
  // dp4a / dp2a: sums of byte (dp2a: halfword by byte) products, signed or unsigned per operand type, plus c.
  for (Ty at : {Ty::kU32, Ty::kS32}) {
    for (Ty bt : {Ty::kU32, Ty::kS32}) {
      const bool as = at == Ty::kS32, bs = bt == Ty::kS32;
      const std::vector<Inputs> in =
          Product({{0x01020304, 0x80ff7f01, 0xffffffff}, {0x7f80ff01, 0x01010101}, {0, 0xffffffff, 0x7fffffff}});
      t.Add(
          "bits", "dp4a." + Name(at) + "." + Name(bt), Ty::kS32, {Ty::kB32, Ty::kB32, Ty::kB32},
          [=](const Inputs& i) {
            int64_t sum = SignExtend(i[2], 32);
            for (int k = 0; k < 4; ++k) {
              const uint64_t x = (i[0] >> (8 * k)) & 0xff, y = (i[1] >> (8 * k)) & 0xff;
              sum +=
                  (as ? SignExtend(x, 8) : static_cast<int64_t>(x)) * (bs ? SignExtend(y, 8) : static_cast<int64_t>(y));
            }
            return Exactly(static_cast<uint64_t>(sum) & 0xffffffff);
          },
          in);
      for (const char* half : {"lo", "hi"}) {
        const int first = half[0] == 'h' ? 2 : 0;
        t.Add(
            "bits", std::string("dp2a.") + half + "." + Name(at) + "." + Name(bt), Ty::kS32,
            {Ty::kB32, Ty::kB32, Ty::kB32},
            [=](const Inputs& i) {
              int64_t sum = SignExtend(i[2], 32);
              for (int k = 0; k < 2; ++k) {
                const uint64_t x = (i[0] >> (16 * k)) & 0xffff, y = (i[1] >> (8 * (first + k))) & 0xff;
                sum += (as ? SignExtend(x, 16) : static_cast<int64_t>(x)) *
                       (bs ? SignExtend(y, 8) : static_cast<int64_t>(y));
              }
              return Exactly(static_cast<uint64_t>(sum) & 0xffffffff);
            },
            in);
      }
    }
  }
}

// Carries: add.cc/sub.cc write the carry (borrow) flag; addc/subc read it. Each form sets the flag from %a2 (0 or 1)
// with add.cc of %a2 and -1, runs the instruction, and reads the flag back into %d1 with addc of 0 and 0.
void CarryForms(Table& t) {
  for (Ty ty : {Ty::kU32, Ty::kS32, Ty::kU64, Ty::kS64}) {
    const std::string n = Name(ty);
    const int bits = Info(ty).bits;
    const uint64_t m = Mask(bits);
    struct Op {
      std::string text;
      bool sub, carry_in, carry_out;
    };
    for (const Op& op :
         {Op{"add.cc", false, false, true}, Op{"addc", false, true, false}, Op{"addc.cc", false, true, true},
          Op{"sub.cc", true, false, true}, Op{"subc", true, true, false}, Op{"subc.cc", true, true, true}}) {
      Form f;
      f.family = "carry";
      f.name = op.text + "." + n + " (carry in from a2)";
      f.body =
          "add.cc." + n + " %d1, %a2, -1;\n  " + op.text + "." + n + " %d0, %a0, %a1;\n  addc." + n + " %d1, 0, 0;";
      f.sources = {ty, ty, ty};
      f.d0 = ty;
      f.has_d1 = true;
      f.d1 = ty;
      f.inputs = Product({Edges(ty), Edges(ty), {0, 1}});
      f.reference = [=](const Inputs& i) {
        const unsigned __int128 a = i[0] & m, b = i[1] & m, cin = op.carry_in ? i[2] : 0;
        unsigned __int128 r;
        uint64_t flag;
        if (op.sub) {
          // The ISA: subc computes a - (b + CC.CF); the flag after .cc is the borrow out.
          r = a - (b + cin);
          flag = a < b + cin ? 1 : 0;
        } else {
          r = a + b + cin;
          flag = static_cast<uint64_t>(r >> bits) & 1;
        }
        // Without .cc the flag keeps what add.cc of a2 and -1 wrote: 1 when a2 is 1.
        return Exactly(static_cast<uint64_t>(r) & m, op.carry_out ? flag : i[2]);
      };
      t.Push(f);
    }
  }
}

// ---- Comparisons, selection, tests. ----

// The ISA's comparison operators: ordered ones are false when either operand is NaN; the *u forms are true then;
// num: neither is NaN; nan: either is.
bool Compare(const std::string& cmp, const Exact& a, const Exact& b) {
  if (a.nan || b.nan) {
    return cmp == "equ" || cmp == "neu" || cmp == "ltu" || cmp == "leu" || cmp == "gtu" || cmp == "geu" || cmp == "nan";
  }
  if (cmp == "num") return true;
  if (cmp == "nan") return false;
  auto value = [](const Exact& x) -> long double {
    if (x.inf) return x.negative ? -INFINITY : INFINITY;
    return 0;  // Unused.
  };
  int order;  // -1: a < b, 0: equal, 1: a > b.
  if (a.inf || b.inf) {
    const long double va = a.inf ? value(a) : 0, vb = b.inf ? value(b) : 0;
    if (a.inf && b.inf)
      order = va < vb ? -1 : va > vb ? 1 : 0;
    else if (a.inf)
      order = a.negative ? -1 : 1;
    else
      order = b.negative ? 1 : -1;
  } else {
    const Quad x = a.negative ? -a.magnitude : a.magnitude, y = b.negative ? -b.magnitude : b.magnitude;
    order = x < y ? -1 : x > y ? 1 : 0;
  }
  const std::string c = cmp.size() == 3 && cmp.back() == 'u' ? cmp.substr(0, 2) : cmp;
  if (c == "eq") return order == 0;
  if (c == "ne") return order != 0;
  if (c == "lt") return order < 0;
  if (c == "le") return order <= 0;
  if (c == "gt") return order > 0;
  return order >= 0;  // ge
}
bool CompareInt(const std::string& cmp, uint64_t a, uint64_t b, Ty t) {
  const bool s = Info(t).is_signed && cmp != "lo" && cmp != "ls" && cmp != "hi" && cmp != "hs";
  const int64_t sa = AsSigned(a, t), sb = AsSigned(b, t);
  const uint64_t ua = AsUnsigned(a, t), ub = AsUnsigned(b, t);
  if (cmp == "eq") return ua == ub;
  if (cmp == "ne") return ua != ub;
  if (cmp == "lt") return s ? sa < sb : ua < ub;
  if (cmp == "le") return s ? sa <= sb : ua <= ub;
  if (cmp == "gt") return s ? sa > sb : ua > ub;
  if (cmp == "ge") return s ? sa >= sb : ua >= ub;
  if (cmp == "lo") return ua < ub;
  if (cmp == "ls") return ua <= ub;
  if (cmp == "hi") return ua > ub;
  return ua >= ub;  // hs
}
// .ftz on an f32 comparison: subnormal operands compare as zeros of their sign.
Exact DecodeForCompare(uint64_t v, Ty t, bool ftz) {
  Exact x = Decode(v & Mask(Info(t).bits), FormatOf(t));
  if (ftz && t == Ty::kF32 && IsSubnormal32(v)) x.magnitude = 0;
  return x;
}

void CompareForms(Table& t) {
  const std::vector<std::string> kFloatCmps = {"eq",  "ne",  "lt",  "le",  "gt",  "ge",  "equ",
                                               "neu", "ltu", "leu", "gtu", "geu", "num", "nan"};
  for (Ty ty : {Ty::kF32, Ty::kF64}) {
    for (const std::string& cmp : kFloatCmps) {
      for (bool ftz : {false, true}) {
        if (ftz && ty != Ty::kF32) continue;
        const std::string name = "setp." + cmp + (ftz ? ".ftz." : ".") + Name(ty);
        t.Add("compare", name, Ty::kPred, {ty, ty}, [=](const Inputs& i) {
          return Exactly(Compare(cmp, DecodeForCompare(i[0], ty, ftz), DecodeForCompare(i[1], ty, ftz)) ? 1 : 0);
        });
      }
      // set: 0xffffffff (integer destination) or 1.0f (f32 destination) when true, else 0.
      t.Add("compare", "set." + cmp + ".u32." + Name(ty), Ty::kU32, {ty, ty}, [=](const Inputs& i) {
        return Exactly(Compare(cmp, DecodeForCompare(i[0], ty, false), DecodeForCompare(i[1], ty, false)) ? 0xffffffff
                                                                                                          : 0);
      });
      t.Add("compare", "set." + cmp + ".f32." + Name(ty), Ty::kF32, {ty, ty}, [=](const Inputs& i) {
        return Exactly(Compare(cmp, DecodeForCompare(i[0], ty, false), DecodeForCompare(i[1], ty, false)) ? 0x3f800000
                                                                                                          : 0);
      });
    }
  }
  for (Ty ty : {Ty::kS16, Ty::kU16, Ty::kS32, Ty::kU32, Ty::kS64, Ty::kU64, Ty::kB32}) {
    std::vector<std::string> cmps = {"eq", "ne"};
    if (ty != Ty::kB32) cmps.insert(cmps.end(), {"lt", "le", "gt", "ge"});
    if (!Info(ty).is_signed && ty != Ty::kB32) cmps.insert(cmps.end(), {"lo", "ls", "hi", "hs"});
    for (const std::string& cmp : cmps) {
      t.Add("compare", "setp." + cmp + "." + Name(ty), Ty::kPred, {ty, ty},
            [=](const Inputs& i) { return Exactly(CompareInt(cmp, i[0], i[1], ty) ? 1 : 0); });
    }
  }
  // setp with a boolean combiner: p = (a cmp b) op c, and its complement into the second destination.
  for (const char* bop : {"and", "or", "xor"}) {
    Form f;
    f.family = "compare";
    f.name = std::string("setp.ltu.") + bop + ".f32 p|q";
    f.body = std::string("setp.ltu.") + bop + ".f32 %d0|%d1, %a0, %a1, %a2;";
    f.sources = {Ty::kF32, Ty::kF32, Ty::kPred};
    f.d0 = Ty::kPred;
    f.has_d1 = true;
    f.d1 = Ty::kPred;
    f.inputs = Product({FewEdges(Ty::kF32), FewEdges(Ty::kF32), {0, 1}});
    const std::string op = bop;
    f.reference = [op](const Inputs& i) {
      const bool c = Compare("ltu", Decode(i[0], kSingle), Decode(i[1], kSingle));
      const bool p = i[2] != 0;
      auto combine = [&](bool x) { return op == "and" ? x && p : op == "or" ? x || p : x != p; };
      return Exactly(combine(c) ? 1 : 0, combine(!c) ? 1 : 0);
    };
    t.Push(f);
  }
  // selp: a when the predicate is true, else b.
  for (Ty ty : {Ty::kB16, Ty::kB32, Ty::kB64, Ty::kS32, Ty::kU64, Ty::kF32, Ty::kF64}) {
    t.Add(
        "compare", "selp." + Name(ty), ty, {ty, ty, Ty::kPred},
        [](const Inputs& i) { return Exactly(i[2] ? i[0] : i[1]); },
        Product({FewEdges(ty), {0x5a5a5a5a5a5a5a5a & Mask(Info(ty).bits)}, {0, 1}}));
  }
  // slct: a when c >= 0, else b; with an f32 c, -0.0 counts as >= 0 and NaN as not; .ftz flushes a subnormal c.
  for (Ty ty : {Ty::kB32, Ty::kS32, Ty::kF32}) {
    const std::vector<Inputs> in = Product({{0x11111111}, {0x22222222}, Edges(Ty::kS32)});
    t.Add(
        "compare", "slct." + Name(ty) + ".s32", ty, {ty, ty, Ty::kS32},
        [](const Inputs& i) { return Exactly(SignExtend(i[2], 32) >= 0 ? i[0] : i[1]); }, in);
    for (bool ftz : {false, true}) {
      t.Add(
          "compare", std::string("slct") + (ftz ? ".ftz." : ".") + Name(ty) + ".f32", ty, {ty, ty, Ty::kF32},
          [](const Inputs& i) {
            const Exact c = Decode(i[2], kSingle);
            return Exactly(!c.nan && (!c.negative || (c.magnitude == 0 && !c.inf)) ? i[0] : i[1]);
          },
          Product({{0x11111111}, {0x22222222}, Edges(Ty::kF32)}));
    }
  }
  // testp.
  for (Ty ty : {Ty::kF32, Ty::kF64}) {
    const Format f = FormatOf(ty);
    const Quad min_normal = Pow2(f.emin);
    const std::map<std::string, std::function<bool(const Exact&)>> tests = {
        {"finite", [](const Exact& x) { return !x.nan && !x.inf; }},
        {"infinite", [](const Exact& x) { return x.inf; }},
        {"number", [](const Exact& x) { return !x.nan; }},
        {"notanumber", [](const Exact& x) { return x.nan; }},
        {"normal", [=](const Exact& x) { return !x.nan && !x.inf && x.magnitude >= min_normal; }},
        {"subnormal", [=](const Exact& x) { return !x.nan && !x.inf && x.magnitude > 0 && x.magnitude < min_normal; }}};
    for (const auto& [name, test] : tests) {
      auto check = test;
      t.Add("compare", "testp." + name + "." + Name(ty), Ty::kPred, {ty},
            [=](const Inputs& i) { return Exactly(check(Decode(i[0], f)) ? 1 : 0); });
    }
    // copysign: the magnitude of b with the sign of a.
    t.Add("compare", "copysign." + Name(ty), ty, {ty, ty}, [=](const Inputs& i) {
      const uint64_t sign = uint64_t{1} << (f.bits - 1);
      return Exactly((i[1] & ~sign & Mask(f.bits)) | (i[0] & sign));
    });
  }
}

// ---- Floating point. ----

// The reference result of an f32/f64 IEEE operation: the host's, in the instruction's rounding mode, with .ftz
// (f32: subnormal inputs and results to zeros of their sign) and .sat.
Want FloatResult(Ty ty, uint64_t bits, bool ftz, bool sat) {
  if (ftz && ty == Ty::kF32) bits = Flush32(bits);
  if (sat) bits = Saturate(bits, ty);
  return Exactly(bits);
}

void FloatForms(Table& t) {
  for (Ty ty : {Ty::kF32, Ty::kF64}) {
    const std::string n = Name(ty);
    const bool f32 = ty == Ty::kF32;
    auto In = [f32](uint64_t v, bool ftz) { return f32 && ftz ? Flush32(v) : v; };
    for (const std::string& op : {"add", "sub", "mul"}) {
      for (const std::string& rnd :
           {std::string(), std::string("rn"), std::string("rz"), std::string("rm"), std::string("rp")}) {
        for (int variant = 0; variant < (f32 ? 4 : 1); ++variant) {
          const bool ftz = variant & 1, sat = variant & 2;
          const std::string name =
              op + (rnd.empty() ? "" : "." + rnd) + (ftz ? ".ftz" : "") + (sat ? ".sat" : "") + "." + n;
          const Rounding r = RoundingOf(rnd);
          t.Add("float", name, ty, {ty, ty}, [=](const Inputs& i) {
            const uint64_t a = In(i[0], ftz), b = In(i[1], ftz);
            const uint64_t bits = IeeeBits(
                f32, r, [&](auto x, auto y) { return op == "add" ? x + y : op == "sub" ? x - y : x * y; }, a, b);
            return FloatResult(ty, bits, ftz, sat);
          });
        }
      }
    }
    for (const std::string& rnd : kRoundings) {
      for (int variant = 0; variant < (f32 ? 4 : 1); ++variant) {
        const bool ftz = variant & 1, sat = variant & 2;
        const std::string mods = "." + rnd + (ftz ? ".ftz" : "") + (sat ? ".sat" : "") + "." + n;
        const Rounding r = RoundingOf(rnd);
        for (const std::string& op : {"fma", "mad"}) {
          t.Add("float", op + mods, ty, {ty, ty, ty}, [=](const Inputs& i) {
            const uint64_t a = In(i[0], ftz), b = In(i[1], ftz), c = In(i[2], ftz);
            const uint64_t bits = IeeeBits(f32, r, [](auto x, auto y, auto z) { return std::fma(x, y, z); }, a, b, c);
            return FloatResult(ty, bits, ftz, sat);
          });
        }
        if (sat) continue;
        t.Add("float", "div" + mods, ty, {ty, ty}, [=](const Inputs& i) {
          const uint64_t a = In(i[0], ftz), b = In(i[1], ftz);
          const uint64_t bits = IeeeBits(f32, r, [](auto x, auto y) { return x / y; }, a, b);
          return FloatResult(ty, bits, ftz, false);
        });
        t.Add("float", "rcp" + mods, ty, {ty}, [=](const Inputs& i) {
          const uint64_t a = In(i[0], ftz);
          const uint64_t bits = IeeeBits(f32, r, [](auto x) { return decltype(x)(1) / x; }, a);
          return FloatResult(ty, bits, ftz, false);
        });
        t.Add("float", "sqrt" + mods, ty, {ty}, [=](const Inputs& i) {
          const uint64_t a = In(i[0], ftz);
          const uint64_t bits = IeeeBits(f32, r, [](auto x) { return std::sqrt(x); }, a);
          return FloatResult(ty, bits, ftz, false);
        });
      }
    }
    for (bool ftz : {false, true}) {
      if (ftz && !f32) continue;
      const std::string mods = std::string(ftz ? ".ftz." : ".") + n;
      const uint64_t sign = uint64_t{1} << (Info(ty).bits - 1);
      // abs and neg change the sign bit only (NaN included).
      t.Add("float", "abs" + mods, ty, {ty}, [=](const Inputs& i) { return Exactly(In(i[0], ftz) & ~sign); });
      t.Add("float", "neg" + mods, ty, {ty}, [=](const Inputs& i) { return Exactly(In(i[0], ftz) ^ sign); });
      // min/max: a NaN operand gives the other; two NaNs give NaN; with .NaN any NaN operand gives NaN. Between
      // +0.0 and -0.0, -0.0 is the smaller (the ISA's min/max treat -0.0 as less than +0.0).
      for (bool is_max : {false, true}) {
        for (bool nan_mode : {false, true}) {
          if (nan_mode && !f32) continue;
          const std::string name =
              std::string(is_max ? "max" : "min") + (ftz ? ".ftz" : "") + (nan_mode ? ".NaN" : "") + "." + n;
          t.Add("float", name, ty, {ty, ty}, [=](const Inputs& i) {
            const uint64_t a = In(i[0], ftz), b = In(i[1], ftz);
            const Exact x = Decode(a, FormatOf(ty)), y = Decode(b, FormatOf(ty));
            if (x.nan || y.nan) {
              if (nan_mode || (x.nan && y.nan)) return Exactly(QuietNanBits(FormatOf(ty)));
              return Exactly(x.nan ? b : a);
            }
            const bool a_less = Compare("lt", x, y) || (Compare("eq", x, y) && x.negative && !y.negative);
            return Exactly(is_max ? (a_less ? b : a) : (a_less ? a : b));
          });
        }
      }
    }
  }
}

// .approx forms: the ISA states each one's error bound (relative or absolute, over a stated range) and its special
// values; the reference is the exact function in long double.
void ApproxForms(Table& t) {
  struct Approx {
    std::string op;
    double relative, absolute;
    std::function<long double(long double)> f;
  };
  const long double kPi = 3.14159265358979323846264338327950288L;
  const std::vector<Approx> ops = {
      {"rcp", 0x1p-22, 0, [](long double x) { return 1.0L / x; }},
      {"sqrt", 0x1p-22, 0, [](long double x) { return std::sqrt(x); }},
      {"rsqrt", 0x1p-22, 0, [](long double x) { return 1.0L / std::sqrt(x); }},
      {"sin", 0, std::exp2(-20.9), [](long double x) { return std::sin(x); }},
      {"cos", 0, std::exp2(-20.9), [](long double x) { return std::cos(x); }},
      {"lg2", 0x1p-22, std::exp2(-22.6), [](long double x) { return std::log2(x); }},
      {"ex2", 0x1p-22, 0, [](long double x) { return std::exp2(x); }},
      {"tanh", std::exp2(-10.9), 0, [](long double x) { return std::tanh(x); }},
  };
  for (const Approx& a : ops) {
    for (bool ftz : {false, true}) {
      if (a.op == "tanh" && ftz) continue;
      const std::string name = a.op + ".approx" + (ftz ? ".ftz" : "") + ".f32";
      t.Add("approx", name, Ty::kF32, {Ty::kF32}, [=](const Inputs& i) {
        const uint64_t in = ftz ? Flush32(i[0]) : i[0];
        const float x = F32(in);
        // sin/cos: the bound holds in [-pi, pi]; outside it the ISA gives none (NaN for infinities).
        if ((a.op == "sin" || a.op == "cos") && std::isfinite(x) && std::fabs(x) > kPi) return Anything();
        const long double exact = a.f(static_cast<long double>(x));
        const float rounded = static_cast<float>(exact);
        Want w = Exactly(Bits(rounded));
        if (std::isnan(exact) || std::isinf(rounded) || rounded == 0) {
          // Special values exactly (zero results keep their sign); a finite result that overflows may round to
          // the largest finite value instead of infinity.
          if (ftz && rounded == 0) w.also.push_back(Bits(rounded) ^ 0x80000000);
          if (std::isinf(rounded) && std::isfinite(exact)) w.also.push_back(Bits(std::copysign(FLT_MAX, rounded)));
          if (rounded == 0 && exact != 0) {
            w.kind = Want::kWithin;
            w.absolute = 0x1p-149;
          }
          return w;
        }
        w.kind = Want::kWithin;
        w.relative = a.relative;
        w.absolute = a.absolute + (ftz ? 0x1p-126 : 0x1p-149);  // A subnormal result may flush or lose bits.
        return w;
      });
    }
  }
  // div.approx / div.full: 2 ulp for divisors in [2^-126, 2^126]; the ISA states nothing outside.
  for (const std::string& name : {"div.approx.f32", "div.full.f32", "div.approx.ftz.f32", "div.full.ftz.f32"}) {
    const bool ftz = name.find("ftz") != std::string::npos;
    t.Add("approx", name, Ty::kF32, {Ty::kF32, Ty::kF32}, [=](const Inputs& i) {
      const float a = F32(ftz ? Flush32(i[0]) : i[0]), b = F32(ftz ? Flush32(i[1]) : i[1]);
      const float mag = std::fabs(b);
      if (std::isnan(a) || std::isnan(b)) return Exactly(0x7fffffff);
      if (!(mag >= 0x1p-126f && mag <= 0x1p126f)) return Anything();
      const long double exact = static_cast<long double>(a) / b;
      const float rounded = static_cast<float>(exact);
      Want w = Exactly(Bits(rounded));
      if (std::isinf(rounded) || rounded == 0) {
        if (std::isinf(rounded) && std::isfinite(a)) w.also.push_back(Bits(std::copysign(FLT_MAX, rounded)));
        if (rounded == 0 && exact != 0) w.kind = Want::kWithin, w.absolute = 0x1p-149;
        return w;
      }
      w.kind = Want::kWithin;
      w.relative = 0x1p-21;
      w.absolute = ftz ? 0x1p-126 : 0x1p-148;
      return w;
    });
  }
}

// f16 and bf16 (scalar): add/sub/mul/fma round to nearest even (.rn, the only mode); .ftz flushes f16 subnormals;
// .sat clamps to [0, 1]. neg/abs flip or clear the sign; min/max as for f32.
void HalfForms(Table& t) {
  for (Ty ty : {Ty::kF16, Ty::kBF16}) {
    const std::string n = Name(ty);
    const Format f = FormatOf(ty);
    const uint64_t min_normal = uint64_t{1} << f.mantissa;
    auto Flush = [=](uint64_t v) { return (v & 0x7fff) < min_normal ? (v & 0x8000) : v; };
    for (const std::string& op : {"add", "sub", "mul", "fma"}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool ftz = variant & 1, sat = variant & 2;
        if (ty == Ty::kBF16 && (ftz || sat)) continue;  // bf16 arithmetic has neither.
        const std::string name = op + ".rn" + (ftz ? ".ftz" : "") + (sat ? ".sat" : "") + "." + n;
        std::vector<Ty> sources(op == "fma" ? 3 : 2, ty);
        t.Add("half", name, ty, sources, [=](const Inputs& i) {
          Inputs in = i;
          if (ftz)
            for (uint64_t& v : in) v = Flush(v);
          uint64_t bits = HalfOp(ty, op, in, Rounding::kNearestEven);
          if (ftz) bits = Flush(bits);
          if (sat) bits = Saturate(bits, ty);
          Want w = Exactly(bits);
          return w;
        });
      }
    }
    t.Add("half", "neg." + n, ty, {ty}, [](const Inputs& i) { return Exactly((i[0] ^ 0x8000) & 0xffff); });
    t.Add("half", "abs." + n, ty, {ty}, [](const Inputs& i) { return Exactly(i[0] & 0x7fff); });
    for (bool is_max : {false, true}) {
      for (bool nan_mode : {false, true}) {
        const std::string name = std::string(is_max ? "max" : "min") + (nan_mode ? ".NaN." : ".") + n;
        t.Add("half", name, ty, {ty, ty}, [=](const Inputs& i) {
          const Exact x = Decode(i[0], f), y = Decode(i[1], f);
          if (x.nan || y.nan) {
            if (nan_mode || (x.nan && y.nan)) return Exactly(QuietNanBits(f));
            return Exactly(x.nan ? i[1] : i[0]);
          }
          const bool a_less = Compare("lt", x, y) || (Compare("eq", x, y) && x.negative && !y.negative);
          return Exactly(is_max ? (a_less ? i[1] : i[0]) : (a_less ? i[0] : i[1]));
        });
      }
    }
  }
}

// cvt between every pair of types: integer to integer (sign- or zero-extend from the source, chop to the
// destination; .sat clamps to its range), integer to float (rounded in .rn/.rz/.rm/.rp), float to integer
// (rounded to an integral value by .rni/.rzi/.rmi/.rpi, clamped to the destination's range, NaN to 0), float to
// float (narrowing rounded by the mode; same size with an integer rounding mode rounds to an integral value);
// f32 .ftz and .sat. The destination register is as wide as the type's register: relaxed type-checking extends it.
void ConvertForms(Table& t) {
  const std::vector<Ty> kInts = {Ty::kS8, Ty::kS16, Ty::kS32, Ty::kS64, Ty::kU8, Ty::kU16, Ty::kU32, Ty::kU64};
  const std::vector<Ty> kFloats = {Ty::kF16, Ty::kBF16, Ty::kF32, Ty::kF64};
  std::vector<Ty> all = kInts;
  all.insert(all.end(), kFloats.begin(), kFloats.end());
  auto clamp_int = [](const Exact& x, Ty dt) -> uint64_t {
    const int bits = Info(dt).bits;
    if (x.nan) return 0;
    if (Info(dt).is_signed) {
      const __int128 hi = (static_cast<__int128>(1) << (bits - 1)) - 1, lo = -hi - 1;
      __int128 v;
      if (x.inf || x.magnitude >= Pow2(bits))
        v = x.negative ? lo : hi;
      else
        v = x.negative ? -static_cast<__int128>(x.magnitude) : static_cast<__int128>(x.magnitude);
      v = v > hi ? hi : v < lo ? lo : v;
      return InRegister(static_cast<uint64_t>(v), dt);
    }
    if (x.negative) return 0;
    if (x.inf || x.magnitude >= Pow2(bits)) return InRegister(Mask(bits), dt);
    return InRegister(static_cast<uint64_t>(static_cast<unsigned __int128>(x.magnitude)), dt);
  };
  for (Ty dt : all) {
    for (Ty st : all) {
      const bool dfloat = Info(dt).is_float, sfloat = Info(st).is_float;
      std::vector<std::string> modes;
      bool allow_ftz = sfloat && (st == Ty::kF32 || dt == Ty::kF32);
      bool allow_sat = dfloat && dt == Ty::kF32;
      if (!dfloat && !sfloat) {
        modes = {"", "sat"};
      } else if (!dfloat) {
        modes = {"rni", "rzi", "rmi", "rpi"};  // .sat is what float-to-integer does anyway.
      } else if (!sfloat) {
        modes = {"rn", "rz", "rm", "rp"};
        allow_sat = false;
      } else if (dt == st) {
        modes = {"rni", "rzi", "rmi", "rpi"};
      } else if (Info(dt).bits > Info(st).bits || (dt == Ty::kF32 && st == Ty::kBF16)) {
        modes = {""};  // Exact widening.
      } else {
        modes = {"rn", "rz", "rm", "rp"};
      }
      for (const std::string& mode : modes) {
        for (int variant = 0; variant < 4; ++variant) {
          const bool ftz = variant & 1, sat = variant & 2;
          if ((ftz && !allow_ftz) || (sat && !allow_sat)) continue;
          std::string name = "cvt";
          if (!mode.empty()) name += "." + mode;
          if (ftz) name += ".ftz";
          if (sat) name += ".sat";
          name += "." + Name(dt) + "." + Name(st);
          const Rounding r = RoundingOf(mode);
          t.Add("convert", name, dt, {st}, [=](const Inputs& i) {
            const uint64_t v = i[0];
            if (!dfloat && !sfloat) {
              const int64_t sv = IntValue(v, st);
              if (mode == "sat") {
                Exact x = Info(st).is_signed ? FromInteger(sv) : FromUnsigned(AsUnsigned(v, st));
                return Exactly(clamp_int(x, dt));
              }
              return Exactly(InRegister(static_cast<uint64_t>(sv), dt));
            }
            if (!dfloat) {
              Exact x = Decode(v & Mask(Info(st).bits), FormatOf(st));
              if (ftz && st == Ty::kF32 && IsSubnormal32(v)) x.magnitude = 0;
              return Exactly(clamp_int(RoundIntegral(x, r), dt));
            }
            Exact x;
            if (!sfloat) {
              x = Info(st).is_signed ? FromInteger(AsSigned(v, st)) : FromUnsigned(AsUnsigned(v, st));
            } else {
              x = Decode(v & Mask(Info(st).bits), FormatOf(st));
              if (ftz && st == Ty::kF32 && IsSubnormal32(v)) x.magnitude = 0;
              if (mode.size() == 3) x = RoundIntegral(x, r);
            }
            uint64_t bits = Encode(x, FormatOf(dt), mode.size() == 3 ? Rounding::kNearestEven : r);
            if (ftz && dt == Ty::kF32) bits = Flush32(bits);
            if (sat) return Exactly(Saturate(bits, dt));  // NaN included: .sat makes it +0.0.
            if (x.nan) return Exactly(QuietNanBits(FormatOf(dt)));
            return Exactly(bits);
          });
        }
      }
    }
  }
}

// Loads into registers wider than the type (the ISA's relaxed type-checking: signed types sign-extend, the
// others zero-extend): the source word is stored to the form's output slot and loaded back.
void LoadForms(Table& t) {
  for (Ty ty : {Ty::kS8, Ty::kS16, Ty::kS32, Ty::kU8, Ty::kU16, Ty::kU32, Ty::kB16, Ty::kB32}) {
    for (Ty reg : {Ty::kB32, Ty::kB64}) {
      if (Info(reg).bits <= Info(ty).bits) continue;
      for (const char* qualifier : {"", ".volatile", ".relaxed.gpu", ".acquire.gpu"}) {
        Form f;
        f.family = "load";
        f.name = std::string("ld") + qualifier + ".global." + Name(ty) + " into ." + Name(reg);
        f.body = "st.global.b64 [%rd5], %a0;\n  ld" + std::string(qualifier) + ".global." + Name(ty) + " %d0, [%rd5];";
        f.sources = {Ty::kB64};
        f.d0 = reg;
        for (uint64_t v : Edges(Ty::kB64)) f.inputs.push_back({v});
        for (uint64_t v : Edges(ty)) f.inputs.push_back({v});
        const int bits = Info(ty).bits;
        const bool s = Info(ty).is_signed;
        f.reference = [=](const Inputs& i) {
          const uint64_t v = s ? static_cast<uint64_t>(SignExtend(i[0], bits)) : (i[0] & Mask(bits));
          return Exactly(v & Mask(Info(reg).bits));
        };
        t.Push(f);
      }
    }
  }
}

// Atomics (atom returns the old value, red none): the memory word starts as %a0, the operand is %a1 (and %a2 for
// cas); %d0 is what atom returned and %d1 what the word holds after. The ISA: inc gives 0 when old >= b, else
// old + 1; dec gives b when old is 0 or old > b, else old - 1; cas stores c when old == b; atom.add.f32 rounds to
// nearest even and flushes subnormal inputs and results to sign-preserving zero; atom.add.f64 rounds to nearest
// even; atom.{min,max}.f32 as min/max.f32.
void AtomicForms(Table& t) {
  struct Case {
    std::string op;
    std::vector<Ty> types;
  };
  const std::vector<Case> cases = {{"add", {Ty::kU32, Ty::kS32, Ty::kU64, Ty::kF32, Ty::kF64}},
                                   {"min", {Ty::kU32, Ty::kS32, Ty::kU64, Ty::kS64}},
                                   {"max", {Ty::kU32, Ty::kS32, Ty::kU64, Ty::kS64}},
                                   {"inc", {Ty::kU32}},
                                   {"dec", {Ty::kU32}},
                                   {"and", {Ty::kB32, Ty::kB64}},
                                   {"or", {Ty::kB32, Ty::kB64}},
                                   {"xor", {Ty::kB32, Ty::kB64}},
                                   {"exch", {Ty::kB32, Ty::kB64}},
                                   {"cas", {Ty::kB32, Ty::kB64}}};
  for (const Case& c : cases) {
    for (Ty ty : c.types) {
      for (bool is_red : {false, true}) {
        if (is_red && (c.op == "exch" || c.op == "cas")) continue;
        const std::string n = Name(ty);
        const std::string bits = "b" + std::to_string(Info(ty).bits);
        Form f;
        f.family = "atomic";
        f.name = (is_red ? "red.global." : "atom.global.") + c.op + "." + n;
        const std::string operands = c.op == "cas" ? "%a1, %a2" : "%a1";
        f.body = "st.global." + bits + " [%rd5], %a0;\n  ";
        if (is_red)
          f.body += "red.global." + c.op + "." + n + " [%rd5], " + operands + ";\n  mov." + bits + " %d0, 0;\n  ";
        else
          f.body += "atom.global." + c.op + "." + n + " %d0, [%rd5], " + operands + ";\n  ";
        f.body += "ld.global." + bits + " %d1, [%rd5];";
        f.sources = {ty, ty};
        if (c.op == "cas") f.sources.push_back(ty);
        f.d0 = ty;
        f.has_d1 = true;
        f.d1 = ty;
        if (c.op == "cas") {
          const std::vector<uint64_t> e = FewEdges(ty);
          f.inputs = Product({e, e, {0x5a5a5a5a5a5a5a5a & Mask(Info(ty).bits)}});
          for (uint64_t v : e) f.inputs.push_back({v, v, 0x1234});  // old == b: swapped.
        }
        const std::string op = c.op;
        f.reference = [=](const Inputs& i) {
          const int w = Info(ty).bits;
          const uint64_t m = Mask(w), old = i[0] & m, b = i[1] & m;
          uint64_t next = old;
          const bool s = Info(ty).is_signed;
          if (op == "add") {
            if (ty == Ty::kF32) {
              const uint64_t x = Flush32(old), y = Flush32(b);
              next = Flush32(Bits(InMode(Rounding::kNearestEven, [&] {
                volatile float q = F32(x) + F32(y);
                return q;
              })));
            } else if (ty == Ty::kF64) {
              next = Bits(F64(old) + F64(b));
            } else {
              next = (old + b) & m;
            }
          } else if (op == "min" || op == "max") {
            const bool less = s ? SignExtend(b, w) < SignExtend(old, w) : b < old;
            const bool greater = s ? SignExtend(b, w) > SignExtend(old, w) : b > old;
            next = (op == "min" ? less : greater) ? b : old;
          } else if (op == "inc") {
            next = old >= b ? 0 : old + 1;
          } else if (op == "dec") {
            next = (old == 0 || old > b) ? b : old - 1;
          } else if (op == "and") {
            next = old & b;
          } else if (op == "or") {
            next = old | b;
          } else if (op == "xor") {
            next = old ^ b;
          } else if (op == "exch") {
            next = b;
          } else {
            next = old == b ? (i[2] & m) : old;
          }
          Want want = Exactly(is_red ? 0 : old, next);
          return want;
        };
        t.Push(f);
      }
    }
  }
}

// Packed halves: f16x2 and bf16x2 arithmetic is the scalar operation on each half; cvt.rn{.relu}{.satfinite}
// .{f16x2,bf16x2}.f32 d, a, b puts a in the upper half and b in the lower, .relu turning negatives into +0 and
// .satfinite infinities (of a finite input) into the largest finite value; mov packs and unpacks little-endian.
uint64_t PackedEdge(size_t i, Ty half) {
  const std::vector<uint64_t> e = Edges(half);
  return e[i % e.size()] | (e[(i * 7 + 3) % e.size()] << 16);
}
void PackedForms(Table& t) {
  for (Ty half : {Ty::kF16, Ty::kBF16}) {
    const std::string n = half == Ty::kF16 ? "f16x2" : "bf16x2";
    std::vector<uint64_t> packed;
    for (size_t i = 0; i < 40; ++i) packed.push_back(PackedEdge(i, half));
    for (const std::string& op : {"add", "sub", "mul", "fma"}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool ftz = variant & 1, sat = variant & 2;
        if (half == Ty::kBF16 && (ftz || sat)) continue;
        const std::string name = op + ".rn" + (ftz ? ".ftz" : "") + (sat ? ".sat" : "") + "." + n;
        std::vector<Inputs> in = op == "fma"
                                     ? Product({std::vector<uint64_t>(packed.begin(), packed.begin() + 12),
                                                std::vector<uint64_t>(packed.begin() + 12, packed.begin() + 24),
                                                std::vector<uint64_t>(packed.begin() + 24, packed.begin() + 32)})
                                     : Product({packed, packed});
        const Format f = FormatOf(half);
        const uint64_t min_normal = uint64_t{1} << f.mantissa;
        t.Add(
            "packed", name, Ty::kB32, std::vector<Ty>(op == "fma" ? 3 : 2, Ty::kB32),
            [=](const Inputs& i) {
              uint64_t out = 0;
              for (int h = 0; h < 2; ++h) {
                Inputs part;
                for (uint64_t v : i) {
                  uint64_t x = (v >> (16 * h)) & 0xffff;
                  if (ftz && (x & 0x7fff) < min_normal) x &= 0x8000;
                  part.push_back(x);
                }
                uint64_t r = HalfOp(half, op, part, Rounding::kNearestEven);
                if (ftz && (r & 0x7fff) < min_normal) r &= 0x8000;
                if (sat) r = Saturate(r, half);
                out |= r << (16 * h);
              }
              Want w = Exactly(out);
              w.halves = half;
              return w;
            },
            in);
      }
    }
    for (bool is_max : {false, true}) {
      for (bool nan_mode : {false, true}) {
        const std::string name = std::string(is_max ? "max" : "min") + (nan_mode ? ".NaN." : ".") + n;
        const Format f = FormatOf(half);
        t.Add(
            "packed", name, Ty::kB32, {Ty::kB32, Ty::kB32},
            [=](const Inputs& i) {
              uint64_t out = 0;
              for (int h = 0; h < 2; ++h) {
                const uint64_t a = (i[0] >> (16 * h)) & 0xffff, b = (i[1] >> (16 * h)) & 0xffff;
                const Exact x = Decode(a, f), y = Decode(b, f);
                uint64_t r;
                if (x.nan || y.nan) {
                  r = (nan_mode || (x.nan && y.nan)) ? QuietNanBits(f) : (x.nan ? b : a);
                } else {
                  const bool a_less = Compare("lt", x, y) || (Compare("eq", x, y) && x.negative && !y.negative);
                  r = is_max ? (a_less ? b : a) : (a_less ? a : b);
                }
                out |= r << (16 * h);
              }
              Want w = Exactly(out);
              w.halves = half;
              return w;
            },
            Product({packed, packed}));
      }
    }
    t.Add(
        "packed", "neg." + n, Ty::kB32, {Ty::kB32},
        [](const Inputs& i) { return Exactly((i[0] ^ 0x80008000) & 0xffffffff); }, Product({packed}));
    t.Add(
        "packed", "abs." + n, Ty::kB32, {Ty::kB32}, [](const Inputs& i) { return Exactly(i[0] & 0x7fff7fff); },
        Product({packed}));
    for (bool relu : {false, true}) {
      for (bool satfinite : {false, true}) {
        const std::string name =
            std::string("cvt.rn") + (relu ? ".relu" : "") + (satfinite ? ".satfinite" : "") + "." + n + ".f32";
        const Format f = FormatOf(half);
        Form form;
        form.family = "packed";
        form.name = name;
        form.body = name + " %d0, %a0, %a1;";
        form.sources = {Ty::kF32, Ty::kF32};
        form.d0 = Ty::kB32;
        form.inputs = Product({Edges(Ty::kF32), {Bits(1.0f), Bits(-70000.0f), 0x7fc00000}});
        form.reference = [=](const Inputs& i) {
          uint64_t out = 0;
          for (int k = 0; k < 2; ++k) {
            Exact x = Decode(i[k], kSingle);
            if (relu && x.negative && !x.nan) x = Exact{};
            uint64_t r = Encode(x, f, Rounding::kNearestEven);
            if (x.nan) r = QuietNanBits(f);
            if (satfinite && !x.nan && (r & 0x7fff) == (InfinityBits(f, false) & 0x7fff))
              r = MaxFiniteBits(f, x.negative);
            out |= r << (16 * (1 - k));  // a (k = 0) to the upper half.
          }
          // Unsettled: whether .relu makes -0.0 (not less than zero) +0.0; either zero is accepted.
          Want w = Exactly(out);
          w.halves = half;
          w.either_zero_sign = relu;
          return w;
        };
        t.Push(form);
      }
    }
  }
  // mov packing and unpacking.
  {
    Form pack;
    pack.family = "packed";
    pack.name = "mov.b64 {b32, b32}";
    pack.body = "mov.b64 %d0, {%a0, %a1};";
    pack.sources = {Ty::kB32, Ty::kB32};
    pack.d0 = Ty::kB64;
    pack.reference = [](const Inputs& i) { return Exactly((i[0] & 0xffffffff) | (i[1] << 32)); };
    t.Push(pack);
    Form pack16 = pack;
    pack16.name = "mov.b32 {b16, b16}";
    pack16.body = "mov.b32 %d0, {%a0, %a1};";
    pack16.sources = {Ty::kB16, Ty::kB16};
    pack16.d0 = Ty::kB32;
    pack16.inputs.clear();
    pack16.reference = [](const Inputs& i) { return Exactly((i[0] & 0xffff) | ((i[1] & 0xffff) << 16)); };
    t.Push(pack16);
    Form unpack;
    unpack.family = "packed";
    unpack.name = "mov.b64 {b32, b32} unpack";
    unpack.body = "mov.b64 {%d0, %d1}, %a0;";
    unpack.sources = {Ty::kB64};
    unpack.d0 = Ty::kB32;
    unpack.has_d1 = true;
    unpack.d1 = Ty::kB32;
    unpack.reference = [](const Inputs& i) { return Exactly(i[0] & 0xffffffff, i[0] >> 32); };
    t.Push(unpack);
  }
  // Predicate logic.
  for (const char* op : {"and", "or", "xor"}) {
    const std::string o = op;
    t.Add("packed", o + ".pred", Ty::kPred, {Ty::kPred, Ty::kPred}, [o](const Inputs& i) {
      const bool a = i[0] != 0, b = i[1] != 0;
      return Exactly((o == "and" ? a && b : o == "or" ? a || b : a != b) ? 1 : 0);
    });
  }
  t.Add("packed", "not.pred", Ty::kPred, {Ty::kPred}, [](const Inputs& i) { return Exactly(i[0] ? 0 : 1); });
  // Half comparisons.
  for (Ty half : {Ty::kF16, Ty::kBF16}) {
    for (const char* cmp :
         {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}) {
      const std::string c = cmp;
      t.Add("packed", "setp." + c + "." + Name(half), Ty::kPred, {half, half}, [=](const Inputs& i) {
        return Exactly(Compare(c, Decode(i[0] & 0xffff, FormatOf(half)), Decode(i[1] & 0xffff, FormatOf(half))) ? 1
                                                                                                                : 0);
      });
    }
  }
}

// fp8, as fp8 mma takes it: e4m3 (3 fraction bits, bias 7, no infinities, S.1111.111 NaN, largest 448) and e5m2
// (2 fraction bits, bias 15, IEEE 754 infinities and NaNs, largest 57344).
struct Fp8 {
  int mantissa, bias;
  bool ieee;
  uint64_t largest;  // The largest finite encoding.
};
constexpr Fp8 kE4M3{3, 7, false, 0x7e}, kE5M2{2, 15, true, 0x7b};

Exact DecodeFp8(uint64_t bits, Fp8 f) {
  Exact x;
  x.negative = bits & 0x80;
  const uint64_t exponent = (bits & 0x7f) >> f.mantissa, fraction = bits & ((1u << f.mantissa) - 1);
  const uint64_t all_ones = (1u << (7 - f.mantissa)) - 1;
  if (f.ieee && exponent == all_ones) {
    x.nan = fraction != 0;
    x.inf = fraction == 0;
  } else if (!f.ieee && (bits & 0x7f) == 0x7f) {
    x.nan = true;
  } else if (exponent == 0) {
    x.magnitude = static_cast<Quad>(fraction) * Pow2(1 - f.bias - f.mantissa);
  } else {
    x.magnitude = static_cast<Quad>(fraction | (1u << f.mantissa)) *
                  Pow2(static_cast<int>(exponent) - f.bias - f.mantissa);
  }
  return x;
}

// cvt.rn.satfinite to fp8: to nearest, ties to even, at fp8's precision (its subnormals included: a format of the
// same fraction bits and smallest exponent, and room above); beyond the largest finite value, infinities included,
// that value; NaN to 0x7f.
uint64_t EncodeFp8(const Exact& x, Fp8 f) {
  if (x.nan) return 0x7f;
  const uint64_t sign = x.negative ? 0x80 : 0;
  const Exact largest = DecodeFp8(f.largest, f);
  if (x.inf || x.magnitude >= largest.magnitude) return sign | f.largest;
  const Format wide{f.mantissa, 1 - f.bias, 1000, 16};
  const Exact rounded = Decode(Encode(x, wide, Rounding::kNearestEven), wide);
  if (rounded.magnitude > largest.magnitude) return sign | f.largest;
  for (uint64_t bits = 0; bits <= f.largest; ++bits) {
    if (DecodeFp8(bits, f).magnitude == rounded.magnitude) return sign | bits;
  }
  throw HarnessError("EncodeFp8: no encoding");
}

void Fp8Forms(Table& t) {
  for (const auto& [name, f] : {std::pair{"e4m3x2", kE4M3}, std::pair{"e5m2x2", kE5M2}}) {
    for (bool relu : {false, true}) {
      const Fp8 fmt = f;
      // a to the upper byte, b to the lower; .relu: negatives (not NaN) to +0.
      t.Add("fp8", std::string("cvt.rn.satfinite") + (relu ? ".relu." : ".") + name + ".f32", Ty::kB16,
            {Ty::kF32, Ty::kF32}, [fmt, relu](const Inputs& i) {
              auto one = [&](uint64_t v) {
                Exact x = Decode(v, kSingle);
                if (relu && x.negative && !x.nan) return uint64_t{0};
                return EncodeFp8(x, fmt);
              };
              return Exactly(one(i[0]) << 8 | one(i[1]));
            });
    }
    // Back to f16x2, exactly: every fp8 in each byte (the upper byte to the upper half); NaN to any NaN.
    const Fp8 fmt = f;
    Form back;
    back.family = "fp8";
    back.name = std::string("cvt.rn.f16x2.") + name;
    back.body = back.name + " %d0, %a0;";
    back.sources = {Ty::kB16};
    back.d0 = Ty::kB32;
    for (uint64_t v = 0; v < 256; ++v) back.inputs.push_back({v << 8 | (255 - v)});
    back.reference = [fmt](const Inputs& i) {
      auto half = [&](uint64_t bits) { return Encode(DecodeFp8(bits, fmt), kHalf, Rounding::kNearestEven); };
      Want w = Exactly(half((i[0] >> 8) & 0xff) << 16 | half(i[0] & 0xff));
      w.halves = Ty::kF16;
      return w;
    };
    t.Push(back);
  }
}

// More forms: the multiply-add carry chain, min/max.relu, set with integer sources, scalar cvt.relu to half and
// bfloat16, and cvt.rna.tf32.f32 (f32 rounded to nearest, ties away, to 10 mantissa bits, the low 13 bits zero).
void MoreForms(Table& t) {
  for (Ty ty : {Ty::kU32, Ty::kU64, Ty::kS32}) {
    const std::string n = Name(ty);
    const int bits = Info(ty).bits;
    const uint64_t m = Mask(bits);
    const bool s = Info(ty).is_signed;
    struct Op {
      std::string text;
      bool hi, carry_in, carry_out;
    };
    for (const Op& op : {Op{"mad.lo.cc", false, false, true}, Op{"mad.hi.cc", true, false, true},
                         Op{"madc.lo", false, true, false}, Op{"madc.hi.cc", true, true, true}}) {
      Form f;
      f.family = "more";
      f.name = op.text + "." + n + " (carry in from a3)";
      f.body = "add.cc." + n + " %d1, %a3, -1;\n  " + op.text + "." + n + " %d0, %a0, %a1, %a2;\n  addc." + n +
               " %d1, 0, 0;";
      f.sources = {ty, ty, ty, ty};
      f.d0 = ty;
      f.has_d1 = true;
      f.d1 = ty;
      f.inputs = Product({FewEdges(ty), FewEdges(ty), {0, 1, m, m - 1}, {0, 1}});
      f.reference = [=](const Inputs& i) {
        uint64_t product;
        if (op.hi) {
          product = s ? static_cast<uint64_t>((static_cast<__int128>(AsSigned(i[0], ty)) * AsSigned(i[1], ty)) >> bits)
                      : static_cast<uint64_t>((static_cast<unsigned __int128>(i[0] & m) * (i[1] & m)) >> bits);
        } else {
          product = i[0] * i[1];
        }
        const unsigned __int128 sum =
            static_cast<unsigned __int128>(product & m) + (i[2] & m) + (op.carry_in ? i[3] : 0);
        const uint64_t flag = static_cast<uint64_t>(sum >> bits) & 1;
        return Exactly(static_cast<uint64_t>(sum) & m, op.carry_out ? flag : i[3]);
      };
      t.Push(f);
    }
  }
  // min/max.relu.s32: the result, if negative, is 0.
  for (const char* op : {"min", "max"}) {
    const bool is_max = op[1] == 'a';
    t.Add("more", std::string(op) + ".relu.s32", Ty::kS32, {Ty::kS32, Ty::kS32}, [=](const Inputs& i) {
      const int64_t a = SignExtend(i[0], 32), b = SignExtend(i[1], 32);
      const int64_t r = is_max ? std::max(a, b) : std::min(a, b);
      return Exactly(static_cast<uint64_t>(std::max<int64_t>(r, 0)) & 0xffffffff);
    });
  }
  // set with integer sources: 0xffffffff or 1.0f when true.
  for (const auto& [cmp, st] : std::vector<std::pair<std::string, Ty>>{{"lt", Ty::kS32},
                                                                       {"ge", Ty::kS64},
                                                                       {"hi", Ty::kU32},
                                                                       {"ls", Ty::kU64},
                                                                       {"ne", Ty::kB16},
                                                                       {"gt", Ty::kS16}}) {
    const std::string c = cmp;
    const Ty source = st;
    t.Add("more", "set." + c + ".u32." + Name(st), Ty::kU32, {st, st},
          [=](const Inputs& i) { return Exactly(CompareInt(c, i[0], i[1], source) ? 0xffffffff : 0); });
    t.Add("more", "set." + c + ".f32." + Name(st), Ty::kF32, {st, st},
          [=](const Inputs& i) { return Exactly(CompareInt(c, i[0], i[1], source) ? 0x3f800000 : 0); });
  }
  // Scalar cvt.rn.relu to f16 and bf16: negative results (NaN excepted) become +0. Unsettled, as for the packed
  // forms: whether -0.0 (not less than zero) becomes +0.0; either zero is accepted.
  for (Ty half : {Ty::kF16, Ty::kBF16}) {
    t.Add("more", "cvt.rn.relu." + Name(half) + ".f32", half, {Ty::kF32}, [=](const Inputs& i) {
      Exact x = Decode(i[0], kSingle);
      if (x.negative && !x.nan && (x.inf || x.magnitude != 0)) x = Exact{};
      Want w = Exactly(x.nan ? QuietNanBits(FormatOf(half)) : Encode(x, FormatOf(half), Rounding::kNearestEven));
      if (x.magnitude == 0 && !x.nan && !x.inf) w.also = {0, 0x8000};
      return w;
    });
  }
  // Scalar cvt.rn.satfinite to f16 and bf16: a result that would be infinite is the largest finite value of its
  // sign; NaN stays NaN.
  for (Ty half : {Ty::kF16, Ty::kBF16}) {
    for (Ty source : {Ty::kF32, Ty::kF64}) {
      if (half == Ty::kBF16 && source == Ty::kF64) continue;
      t.Add("more", "cvt.rn.satfinite." + Name(half) + "." + Name(source), half, {source}, [=](const Inputs& i) {
        const Format f = FormatOf(half);
        const Exact x = Decode(i[0], FormatOf(source));
        if (x.nan) return Exactly(QuietNanBits(f));
        const uint64_t r = Encode(x, f, Rounding::kNearestEven);
        return Exactly((r & 0x7fff) == InfinityBits(f, false) ? MaxFiniteBits(f, x.negative) : r);
      });
    }
  }
  // mov copies the type's bits (16-bit and predicate moves take the interpreter's general form, wider ones its
  // fast one).
  for (Ty ty : {Ty::kPred, Ty::kB16, Ty::kU16, Ty::kS16, Ty::kB32, Ty::kF32, Ty::kB64, Ty::kS64, Ty::kF64}) {
    t.Add("more", "mov." + Name(ty), ty, {ty},
          [ty](const Inputs& i) { return Exactly(ty == Ty::kPred ? (i[0] != 0) : (i[0] & Mask(Info(ty).reg_bits))); });
  }
  // fma.rn.relu on f16 and bf16 (scalar and packed): the rounded result, if negative, is +0; NaN stays NaN.
  for (Ty half : {Ty::kF16, Ty::kBF16}) {
    const Format f = FormatOf(half);
    auto relu = [f](uint64_t r) {
      const Exact x = Decode(r, f);
      return (!x.nan && x.negative && (x.inf || x.magnitude != 0)) ? uint64_t{0} : r;
    };
    t.Add("more", "fma.rn.relu." + Name(half), half, {half, half, half}, [=](const Inputs& i) {
      Want w = Exactly(relu(HalfOp(half, "fma", i, Rounding::kNearestEven)));
      w.halves = half;  // One half: any NaN for NaN, either zero for a zero (-0.0 is not negative).
      w.either_zero_sign = true;
      return w;
    });
    // min/max.xorsign.abs (the ISA's pseudocode): the magnitudes compared by min/max's NaN rules (one NaN: the
    // other operand), then, unless the result is NaN, its sign set to the sign of a XOR the sign of b.
    for (bool is_max : {false, true}) {
      const std::string name = std::string(is_max ? "max" : "min") + ".xorsign.abs." + Name(half);
      t.Add("more", name, half, {half, half}, [=](const Inputs& i) {
        const uint64_t a = i[0] & 0x7fff, b = i[1] & 0x7fff;
        const Exact x = Decode(a, f), y = Decode(b, f);
        Want w;
        if (x.nan && y.nan) {
          w = Exactly(QuietNanBits(f));
        } else if (x.nan || y.nan) {
          w = Exactly((x.nan ? b : a) | ((i[0] ^ i[1]) & 0x8000));
        } else {
          const bool a_less = Compare("lt", x, y);
          w = Exactly((is_max ? (a_less ? b : a) : (a_less ? a : b)) | ((i[0] ^ i[1]) & 0x8000));
        }
        w.halves = half;
        return w;
      });
    }
  }
  for (bool is_max : {false, true}) {
    const std::string name = std::string(is_max ? "max" : "min") + ".xorsign.abs.f32";
    t.Add("more", name, Ty::kF32, {Ty::kF32, Ty::kF32}, [=](const Inputs& i) {
      const uint64_t a = i[0] & 0x7fffffff, b = i[1] & 0x7fffffff;
      const Exact x = Decode(a, kSingle), y = Decode(b, kSingle);
      if (x.nan && y.nan) return Exactly(QuietNanBits(kSingle));
      if (x.nan || y.nan) return Exactly((x.nan ? b : a) | ((i[0] ^ i[1]) & 0x80000000));
      const bool a_less = Compare("lt", x, y);
      return Exactly((is_max ? (a_less ? b : a) : (a_less ? a : b)) | ((i[0] ^ i[1]) & 0x80000000));
    });
  }
  // .ftz on f16 neg/abs/min/max: a subnormal input is a zero of its sign.
  {
    auto flush = [](uint64_t v) { return (v & 0x7c00) == 0 ? (v & 0x8000) : (v & 0xffff); };
    t.Add("more", "neg.ftz.f16", Ty::kF16, {Ty::kF16}, [=](const Inputs& i) { return Exactly(flush(i[0]) ^ 0x8000); });
    t.Add("more", "abs.ftz.f16", Ty::kF16, {Ty::kF16}, [=](const Inputs& i) { return Exactly(flush(i[0]) & 0x7fff); });
    for (bool is_max : {false, true}) {
      t.Add("more", std::string(is_max ? "max" : "min") + ".ftz.f16", Ty::kF16, {Ty::kF16, Ty::kF16},
            [=](const Inputs& i) {
              const uint64_t a = flush(i[0]), b = flush(i[1]);
              const Exact x = Decode(a, kHalf), y = Decode(b, kHalf);
              if (x.nan || y.nan) return Exactly(x.nan && y.nan ? QuietNanBits(kHalf) : (x.nan ? b : a));
              const bool a_less = Compare("lt", x, y) || (Compare("eq", x, y) && x.negative && !y.negative);
              return Exactly(is_max ? (a_less ? b : a) : (a_less ? a : b));
            });
    }
  }
  // mad24.hi: bits 16..47 of the 48-bit product of the low 24 bits, plus c.
  for (Ty ty : {Ty::kS32, Ty::kU32}) {
    const bool s = ty == Ty::kS32;
    t.Add("more", "mad24.hi." + Name(ty), ty, {ty, ty, ty}, [=](const Inputs& i) {
      const int64_t x = s ? SignExtend(i[0], 24) : static_cast<int64_t>(i[0] & 0xffffff);
      const int64_t y = s ? SignExtend(i[1], 24) : static_cast<int64_t>(i[1] & 0xffffff);
      return Exactly(((static_cast<uint64_t>(x * y) >> 16) + i[2]) & 0xffffffff);
    });
  }
  // setp on f16x2: each half compared, the lower into p and the upper into q.
  {
    Form f;
    f.family = "more";
    f.name = "setp.ltu.f16x2 p|q";
    f.body = "setp.ltu.f16x2 %d0|%d1, %a0, %a1;";
    f.sources = {Ty::kB32, Ty::kB32};
    f.d0 = Ty::kPred;
    f.has_d1 = true;
    f.d1 = Ty::kPred;
    for (size_t k = 0; k < 40; ++k) {
      for (size_t j = 0; j < 40; j += 3) f.inputs.push_back({PackedEdge(k, Ty::kF16), PackedEdge(j + 1, Ty::kF16)});
    }
    f.reference = [](const Inputs& i) {
      auto lt = [&](int h) {
        return Compare("ltu", Decode((i[0] >> (16 * h)) & 0xffff, kHalf), Decode((i[1] >> (16 * h)) & 0xffff, kHalf));
      };
      return Exactly(lt(0) ? 1 : 0, lt(1) ? 1 : 0);
    };
    t.Push(f);
  }
  // cvt.f32.f32 with .ftz and .sat only (no rounding: the value is already an f32).
  t.Add("more", "cvt.ftz.f32.f32", Ty::kF32, {Ty::kF32}, [](const Inputs& i) {
    const Exact x = Decode(i[0], kSingle);
    return Exactly(x.nan ? QuietNanBits(kSingle) : Flush32(i[0]));
  });
  t.Add("more", "cvt.sat.f32.f32", Ty::kF32, {Ty::kF32},
        [](const Inputs& i) { return Exactly(Saturate(i[0], Ty::kF32)); });
  // cvt.rna.tf32.f32: a tf32 is an f32 whose low 13 mantissa bits are zero (held in an f32 register, so that a NaN
  // is compared as any NaN: the ISA leaves its payload open).
  t.Add("more", "cvt.rna.tf32.f32", Ty::kF32, {Ty::kF32}, [](const Inputs& i) {
    const Format tf32{10, -126, 127, 19};
    const Exact x = Decode(i[0], kSingle);
    if (x.nan) return Exactly(QuietNanBits(kSingle));
    return Exactly(Encode(x, tf32, Rounding::kNearestAway) << 13);
  });
  Fp8Forms(t);
  // cvt.pack.sat: a and b saturated to the narrow type, b in the lowest bits, a above it; with c (types narrower
  // than 16 bits), c's low bits above both.
  for (const auto& [type, bits, is_signed] :
       {std::tuple{"u16", 16, false}, std::tuple{"s16", 16, true}, std::tuple{"u8", 8, false},
        std::tuple{"s8", 8, true}, std::tuple{"u4", 4, false}, std::tuple{"s4", 4, true}, std::tuple{"u2", 2, false},
        std::tuple{"s2", 2, true}}) {
    const int64_t low = is_signed ? -(int64_t{1} << (bits - 1)) : 0;
    const int64_t high = is_signed ? (int64_t{1} << (bits - 1)) - 1 : (int64_t{1} << bits) - 1;
    const int size = bits;
    auto saturate = [=](uint64_t v) {
      const int64_t x = static_cast<int32_t>(static_cast<uint32_t>(v));
      return static_cast<uint64_t>(x < low ? low : x > high ? high : x) & ((uint64_t{1} << size) - 1);
    };
    const std::string text = std::string("cvt.pack.sat.") + type + ".s32" + (bits == 16 ? "" : ".b32");
    if (bits == 16) {
      t.Add("more", text, Ty::kB32, {Ty::kS32, Ty::kS32},
            [=](const Inputs& i) { return Exactly(saturate(i[0]) << 16 | saturate(i[1])); });
    } else {
      t.Add("more", text, Ty::kB32, {Ty::kS32, Ty::kS32, Ty::kB32}, [=](const Inputs& i) {
        uint64_t d = saturate(i[0]) << size | saturate(i[1]);
        for (int bit = 2 * size; bit < 32; ++bit) d |= ((i[2] >> (bit - 2 * size)) & 1) << bit;
        return Exactly(d);
      });
    }
  }
}

Table BuildTable() {
  Table t;
  IntegerForms(t);
  BitForms(t);
  CarryForms(t);
  CompareForms(t);
  FloatForms(t);
  ApproxForms(t);
  HalfForms(t);
  ConvertForms(t);
  LoadForms(t);
  AtomicForms(t);
  PackedForms(t);
  MoreForms(t);
  return t;
}

// ---- The generator: one kernel per form. ----

std::string RegType(Ty t) { return RegTypeName(t); }

// Thread i reads the form's sources from in[i * 4 + k] (8-byte slots), runs the form's body, and writes %d0 to
// out[i * 2] and %d1 to out[i * 2 + 1] (predicates as 0 or 1 in a .u32).
std::string GenerateKernel(const Form& f) {
  std::string s = ".version 8.0\n.target sm_90\n.address_size 64\n";
  s += ".visible .entry conformance(.param .u64 in, .param .u64 out, .param .u32 n)\n{\n";
  s += "  .reg .pred %p<2>;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<8>;\n";
  for (size_t k = 0; k < f.sources.size(); ++k)
    s += "  .reg ." + RegType(f.sources[k]) + " %a" + std::to_string(k) + ";\n";
  s += "  .reg ." + RegType(f.d0) + " %d0;\n";
  if (f.has_d1) s += "  .reg ." + RegType(f.d1) + " %d1;\n";
  s += "  mov.u32 %r1, %ctaid.x;\n  mov.u32 %r2, %ntid.x;\n  mov.u32 %r3, %tid.x;\n  mad.lo.u32 %r1, %r1, %r2, %r3;\n";
  s += "  ld.param.u32 %r2, [n];\n  setp.ge.u32 %p1, %r1, %r2;\n  @%p1 bra DONE;\n";
  s += "  ld.param.u64 %rd1, [in];\n  ld.param.u64 %rd2, [out];\n";
  s += "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd2, %rd2;\n";
  s += "  mul.wide.u32 %rd3, %r1, 32;\n  add.s64 %rd4, %rd1, %rd3;\n";
  s += "  mul.wide.u32 %rd3, %r1, 16;\n  add.s64 %rd5, %rd2, %rd3;\n";
  for (size_t k = 0; k < f.sources.size(); ++k) {
    const std::string a = "%a" + std::to_string(k), at = "[%rd4+" + std::to_string(8 * k) + "]";
    if (f.sources[k] == Ty::kPred) {
      s += "  ld.global.u32 %r4, " + at + ";\n  setp.ne.u32 " + a + ", %r4, 0;\n";
    } else {
      s += "  ld.global." + RegType(f.sources[k]) + " " + a + ", " + at + ";\n";
    }
  }
  s += "  " + f.body + "\n";
  auto store = [&](const std::string& d, Ty t, int slot) {
    const std::string at = "[%rd5+" + std::to_string(8 * slot) + "]";
    if (t == Ty::kPred)
      s += "  selp.u32 %r5, 1, 0, " + d + ";\n  st.global.u32 " + at + ", %r5;\n";
    else
      s += "  st.global." + RegType(t) + " " + at + ", " + d + ";\n";
  };
  store("%d0", f.d0, 0);
  if (f.has_d1) store("%d1", f.d1, 1);
  s += "DONE:\n  ret;\n}\n";
  return s;
}

// ---- Running and comparing. ----

std::string Show(uint64_t v, Ty t) {
  char buf[96];
  const int bits = t == Ty::kPred ? 1 : Info(t).reg_bits;
  v &= Mask(bits);
  if (t == Ty::kF32) {
    std::snprintf(buf, sizeof(buf), "%.9g (0x%08" PRIx64 ")", F32(v), v);
  } else if (t == Ty::kF64) {
    std::snprintf(buf, sizeof(buf), "%.17g (0x%016" PRIx64 ")", F64(v), v);
  } else if (t == Ty::kF16 || t == Ty::kBF16) {
    const Exact x = Decode(v, FormatOf(t));
    const double d = x.nan ? NAN : x.inf ? INFINITY : static_cast<double>(x.magnitude);
    std::snprintf(buf, sizeof(buf), "%.6g (0x%04" PRIx64 ")", x.negative ? -d : d, v);
  } else if (Info(t).is_signed) {
    std::snprintf(buf, sizeof(buf), "%" PRId64 " (0x%" PRIx64 ")", SignExtend(v, bits), v);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " (0x%" PRIx64 ")", v, v);
  }
  return buf;
}

double AsDouble(uint64_t v, Ty t) {
  if (t == Ty::kF32) return F32(v);
  if (t == Ty::kF64) return F64(v);
  return static_cast<double>(v);
}

bool Accepts(const Want& w, Ty t, uint64_t got) {
  const uint64_t mask = Mask(t == Ty::kPred ? 32 : Info(t).reg_bits);
  got &= mask;
  if (w.kind == Want::kAny) return true;
  if ((w.d0 & mask) == got) return true;
  if (w.halves != Ty::kPred) {
    for (int h = 0; h < 2; ++h) {
      const uint64_t want = (w.d0 >> (16 * h)) & 0xffff, have = (got >> (16 * h)) & 0xffff;
      const bool same = want == have || (IsNan(want, w.halves) && IsNan(have, w.halves)) ||
                        (w.either_zero_sign && (want & 0x7fff) == 0 && (have & 0x7fff) == 0);
      if (!same) return false;
    }
    return true;
  }
  for (uint64_t v : w.also) {
    if ((v & mask) == got) return true;
  }
  // Any NaN stands for NaN: the ISA does not fix NaN payloads here.
  if (Info(t).is_float && IsNan(w.d0, t) && IsNan(got, t)) return true;
  if (w.kind == Want::kWithin && Info(t).is_float && !IsNan(got, t)) {
    const double want = AsDouble(w.d0, t), have = AsDouble(got, t);
    if (std::isinf(want) || std::isinf(have)) return false;
    return std::fabs(have - want) <= w.relative * std::fabs(want) + w.absolute;
  }
  return false;
}

class ConformanceTest : public EmuTest, public ::testing::WithParamInterface<std::string> {};

// Runs every form of the family; returns the mismatch report (empty when all agree) and counts forms and inputs.
TEST_P(ConformanceTest, EveryFormMatchesTheIsaReference) {
  static const Table table = BuildTable();
  size_t forms = 0, inputs = 0, mismatches = 0;
  std::string report;
  for (const Form& f : table.forms()) {
    if (f.family != GetParam()) continue;
    ++forms;
    Module* module = nullptr;
    const std::string ptx = GenerateKernel(f);
    CallStatus loaded = device().LoadPtx(ptx, &module);
    if (!loaded.ok()) {
      ++mismatches;
      report += f.name + ": refused at load: " + loaded.message() + "\n";
      continue;
    }
    const uint32_t n = static_cast<uint32_t>(f.inputs.size());
    std::vector<uint64_t> in(size_t{n} * 4, 0);
    for (uint32_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < f.inputs[i].size(); ++k) in[i * 4 + k] = f.inputs[i][k];
    }
    const uint64_t in_ptr = Upload(in);
    const uint64_t out_ptr = Output<uint64_t>(size_t{n} * 2, 0xA5);
    CallStatus launched = TryLaunch(Get(module, "conformance"), {(n + 127) / 128}, {128}, 0, in_ptr, out_ptr, n);
    if (!launched.ok()) {
      ++mismatches;
      report += f.name + ": launch failed: " + Describe(launched) + "\n";
      device().ResetContext();  // A fault is sticky: the next form starts on a clean context.
      continue;
    }
    const std::vector<uint64_t> out = Download<uint64_t>(out_ptr, size_t{n} * 2);
    Check(device().UnloadModule(module), "UnloadModule");
    int shown = 0;
    for (uint32_t i = 0; i < n; ++i) {
      ++inputs;
      const Want w = f.reference(f.inputs[i]);
      const bool ok0 = Accepts(w, f.d0, out[i * 2]);
      bool ok1 = true;
      if (f.has_d1 && w.kind != Want::kAny) {
        const uint64_t mask = Mask(f.d1 == Ty::kPred ? 32 : Info(f.d1).reg_bits);
        ok1 = (w.d1 & mask) == (out[i * 2 + 1] & mask);
      }
      if (ok0 && ok1) continue;
      ++mismatches;
      if (shown++ >= 4) continue;
      std::string input;
      for (size_t k = 0; k < f.sources.size(); ++k) {
        input += (k ? ", " : "") + Show(f.inputs[i][k], f.sources[k]);
      }
      report += f.name + " (" + input + "): expected " + Show(w.d0, f.d0);
      if (w.kind == Want::kWithin) report += " within the ISA's bound";
      if (f.has_d1) report += " and " + Show(w.d1, f.d1);
      report += ", got " + Show(out[i * 2], f.d0);
      if (f.has_d1) report += " and " + Show(out[i * 2 + 1], f.d1);
      report += "\n";
    }
    if (shown > 4) report += f.name + ": " + std::to_string(shown - 4) + " more mismatch(es)\n";
  }
  std::printf("[ conformance ] %s: %zu forms, %zu inputs, %zu mismatches\n", GetParam().c_str(), forms, inputs,
              mismatches);
  EXPECT_GT(forms, 0u);
  EXPECT_EQ(mismatches, 0u) << report;
}

INSTANTIATE_TEST_SUITE_P(Families, ConformanceTest,
                         ::testing::Values("integer", "bits", "carry", "compare", "float", "approx", "half", "convert",
                                           "load", "atomic", "packed", "more", "fp8"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The interpreter's instructions (internal::Op, what lib/emu/compile.cc decodes PTX into) that compute values each
// run in the body of at least one form above, so an instruction added to the decoder without a form here fails this
// test until the table covers it. The ops a form's kernel runs outside its body (loading the sources, storing the
// results) do not count: each form is compiled once more with an empty body and those ops are taken away.
class NoGlobals : public internal::GlobalAllocator {
 public:
  uint64_t Allocate(uint64_t, uint64_t) override { return 0; }
  void Write(uint64_t, const void*, uint64_t) override {}
  void Zero(uint64_t, uint64_t) override {}
};

std::multiset<internal::Op> OpsOf(const std::string& ptx) {
  auto parsed = ParsePtx(ptx);
  if (!parsed.ok()) throw HarnessError("ParsePtx: " + parsed.status().message());
  NoGlobals globals;
  auto program = internal::Compile(parsed.value(), globals);
  if (!program.ok()) throw HarnessError("Compile: " + program.status().message());
  std::multiset<internal::Op> ops;
  for (const internal::Function& f : program.value().functions) {
    for (const internal::Inst& inst : f.code) ops.insert(inst.op);
  }
  return ops;
}

TEST(ConformanceCoverage, EveryValueComputingInstructionOfTheInterpreterRunsInSomeForm) {
  using internal::Op;
  std::set<Op> in_bodies;
  const Table table = BuildTable();
  for (const Form& f : table.forms()) {
    Form empty = f;
    empty.body.clear();
    std::multiset<Op> ops = OpsOf(GenerateKernel(f));
    for (Op op : OpsOf(GenerateKernel(empty))) {
      auto it = ops.find(op);
      if (it != ops.end()) ops.erase(it);
    }
    in_bodies.insert(ops.begin(), ops.end());
  }
  // Control flow, warp collectives, barriers, asynchronous copies, tensor cores, textures and address-space
  // conversions: no values of an operand type to run on edge values; the kernel tests (tests/emu) cover them.
  const std::set<Op> elsewhere = {
      Op::kNop,      Op::kCvta,      Op::kCvtaTo,      Op::kIsspacep,   Op::kBra,       Op::kCall,      Op::kRet,
      Op::kExit,     Op::kTrap,      Op::kBar,         Op::kBarArrive,  Op::kBarRed,    Op::kWarpSync,  Op::kShfl,
      Op::kVote,     Op::kMatch,     Op::kRedux,       Op::kActivemask, Op::kFence,     Op::kNanosleep, Op::kBrxIdx,
      Op::kCpAsync,  Op::kMbarrier,  Op::kCpAsyncBulk, Op::kWmmaLoad,   Op::kWmmaStore, Op::kWmmaMma,   Op::kMma,
      Op::kLdmatrix, Op::kMovmatrix, Op::kTex,         Op::kTld4,       Op::kSuld,      Op::kSust,      Op::kFastMov};
  std::string missing;
  for (int op = 0; op <= static_cast<int>(Op::kSust); ++op) {
    if (in_bodies.count(static_cast<Op>(op)) || elsewhere.count(static_cast<Op>(op))) continue;
    missing += " " + std::to_string(op);
  }
  EXPECT_TRUE(missing.empty()) << "internal::Op values (lib/emu/program.h, counting from kNop = 0) that no form's "
                               << "body runs: add a form for each, or list it as covered elsewhere:" << missing;
  EXPECT_TRUE(in_bodies.count(Op::kSetp) && in_bodies.count(Op::kCvt) && in_bodies.count(Op::kFastAddF32))
      << "the forms' bodies were not told apart from the rest of their kernels";
}

}  // namespace
}  // namespace gpupool::emu::test::conformance
