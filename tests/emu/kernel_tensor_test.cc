// Tensor-core instructions (tests/emu/kernels/tensor.cu) on the emulated device: wmma for every type, shape and
// layout; mma.sync, ldmatrix and movmatrix with the per-lane fragment layouts of the PTX ISA, built and read here
// on the host; the two composed as real kernels compose them. Every test runs once per fatbin variant.
//
// References are computed here in double precision. Inputs of the layout tests are small multiples of powers of
// two, so every product and sum is exact in every accumulator type and results must match bit for bit whatever
// order the hardware sums in; the tests with arbitrary values allow the rounding the ISA leaves unspecified.
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_check.h"
#include "kernel_harness.h"

namespace gpupool::emu::test {
namespace {

using TensorTest = KernelTest;

// ---- Element encodings. ----

enum class Kind { kF16, kBF16, kTF32, kF32, kF64, kS8, kU8, kS32, kE4M3, kE5M2 };

int Bytes(Kind k) {
  switch (k) {
    case Kind::kF16: case Kind::kBF16: return 2;
    case Kind::kS8: case Kind::kU8: case Kind::kE4M3: case Kind::kE5M2: return 1;
    case Kind::kF64: return 8;
    default: return 4;
  }
}

// IEEE binary16, rounding to nearest even (values here are exact or within range).
uint16_t ToHalf(double v) {
  if (std::isnan(v)) return 0x7e00;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  v = std::fabs(v);
  if (v >= 65520.0) return sign | 0x7c00;
  if (v < std::ldexp(1.0, -14)) {  // Subnormal: multiples of 2^-24.
    return sign | static_cast<uint16_t>(std::nearbyint(v * std::ldexp(1.0, 24)));
  }
  int e = std::ilogb(v);
  double mantissa = std::nearbyint(std::ldexp(v, 10 - e));  // In [1024, 2048].
  if (mantissa >= 2048) {
    mantissa /= 2;
    ++e;
  }
  if (e > 15) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((e + 15) << 10 | (static_cast<int>(mantissa) - 1024));
}

double FromHalf(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1 : 1;
  if (e == 0x1f) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

// fp8 with `mantissa_bits` of fraction and exponent bias `bias`, for values it holds exactly (normal or zero).
uint8_t ToFp8(double v, int mantissa_bits, int bias) {
  if (v == 0) return 0;
  const uint8_t sign = v < 0 ? 0x80 : 0;
  const int e = std::ilogb(v);
  const int fraction = static_cast<int>(std::ldexp(std::fabs(v), mantissa_bits - e)) - (1 << mantissa_bits);
  return sign | static_cast<uint8_t>((e + bias) << mantissa_bits | fraction);
}

// Every fp8 encoding but NaN and infinity: subnormals (exponent field 0) included.
double FromFp8(uint8_t bits, int mantissa_bits, int bias) {
  const int exponent = (bits & 0x7f) >> mantissa_bits, fraction = bits & ((1 << mantissa_bits) - 1);
  const double sign = (bits & 0x80) ? -1 : 1;
  if (exponent == 0) return sign * std::ldexp(fraction, 1 - bias - mantissa_bits);
  return sign * std::ldexp((1 << mantissa_bits) + fraction, exponent - bias - mantissa_bits);
}

// Raw bits of `v` as element kind `k` (v must be representable for bf16 and tf32, which are truncated).
uint64_t EncodeBits(Kind k, double v) {
  switch (k) {
    case Kind::kF16: return ToHalf(v);
    case Kind::kBF16: return std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16;
    case Kind::kTF32: return std::bit_cast<uint32_t>(static_cast<float>(v)) & 0xffffe000u;
    case Kind::kF32: return std::bit_cast<uint32_t>(static_cast<float>(v));
    case Kind::kF64: return std::bit_cast<uint64_t>(v);
    case Kind::kS8: case Kind::kU8: return static_cast<uint8_t>(static_cast<int64_t>(v));
    case Kind::kS32: return static_cast<uint32_t>(static_cast<int64_t>(v));
    case Kind::kE4M3: return ToFp8(v, 3, 7);
    case Kind::kE5M2: return ToFp8(v, 2, 15);
  }
  return 0;
}

double DecodeBits(Kind k, uint64_t bits) {
  switch (k) {
    case Kind::kF16: return FromHalf(static_cast<uint16_t>(bits));
    case Kind::kBF16: return FromBits(static_cast<uint32_t>(bits) << 16);
    case Kind::kTF32: return FromBits(static_cast<uint32_t>(bits) & 0xffffe000u);
    case Kind::kF32: return FromBits(static_cast<uint32_t>(bits));
    case Kind::kF64: return std::bit_cast<double>(bits);
    case Kind::kS8: return static_cast<int8_t>(bits);
    case Kind::kU8: return static_cast<uint8_t>(bits);
    case Kind::kS32: return static_cast<int32_t>(bits);
    case Kind::kE4M3: return FromFp8(static_cast<uint8_t>(bits), 3, 7);
    case Kind::kE5M2: return FromFp8(static_cast<uint8_t>(bits), 2, 15);
  }
  return 0;
}

bool IsInt(Kind k) { return k == Kind::kS8 || k == Kind::kU8 || k == Kind::kS32; }

// A value exactly representable in `k`, small enough that sums of 32 products stay exact in f16.
double ExactValue(EmuTest* t, Kind k) {
  switch (k) {
    case Kind::kS8: return t->Int(-128, 127);
    case Kind::kU8: return t->Int(0, 255);
    case Kind::kS32: return t->Int(-100000, 100000);
    case Kind::kTF32: return t->Int(-16, 16) / 4.0;
    case Kind::kF64: return t->Int(-64, 64) / 8.0;
    case Kind::kE4M3: return t->Int(-15, 15) / 4.0;  // Three fraction bits hold every multiple of 1/4 up to 4.
    case Kind::kE5M2: return t->Int(-7, 7) / 4.0;    // Two: up to 7/4 (1.11 in binary).
    default: return t->Int(-6, 6) / 2.0;  // f16, bf16, f32.
  }
}

// Row-major m x n matrix of doubles.
struct Mat {
  int rows = 0, cols = 0;
  std::vector<double> v;
  Mat(int r, int c) : rows(r), cols(c), v(static_cast<size_t>(r) * c) {}
  double& at(int r, int c) { return v[static_cast<size_t>(r) * cols + c]; }
  double at(int r, int c) const { return v[static_cast<size_t>(r) * cols + c]; }
};

Mat Random(EmuTest* t, int rows, int cols, Kind k) {
  Mat m(rows, cols);
  for (double& x : m.v) x = ExactValue(t, k);
  return m;
}

// A * B + C, exact for the values above (double holds every partial sum).
Mat MultiplyAdd(const Mat& a, const Mat& b, const Mat& c) {
  Mat d(c.rows, c.cols);
  for (int r = 0; r < c.rows; ++r) {
    for (int col = 0; col < c.cols; ++col) {
      double acc = c.at(r, col);
      for (int x = 0; x < a.cols; ++x) acc += a.at(r, x) * b.at(x, col);
      d.at(r, col) = acc;
    }
  }
  return d;
}

// ---- wmma. ----

// Bytes of a matrix stored with leading dimension ld in the given layout; elements outside the tile keep the
// poison pattern 0xA5.
std::vector<uint8_t> Store(const Mat& m, Kind k, bool row_major, int ld) {
  const int outer = row_major ? m.rows : m.cols;
  std::vector<uint8_t> bytes(static_cast<size_t>(outer) * ld * Bytes(k), 0xA5);
  for (int r = 0; r < m.rows; ++r) {
    for (int c = 0; c < m.cols; ++c) {
      const size_t index = row_major ? static_cast<size_t>(r) * ld + c : static_cast<size_t>(c) * ld + r;
      const uint64_t bits = EncodeBits(k, m.at(r, c));
      std::memcpy(bytes.data() + index * Bytes(k), &bits, Bytes(k));
    }
  }
  return bytes;
}

struct WmmaForm {
  std::string prefix;  // Kernel name without _<layouts>.
  Kind in, acc;
  int m, n, k;
};

void CheckWmma(TensorTest* t, Module* module, const WmmaForm& form) {
  const char* layouts[] = {"rr", "rc", "cr", "cc"};
  for (int l = 0; l < 4; ++l) {
    const bool a_row = layouts[l][0] == 'r', b_row = layouts[l][1] == 'r';
    const std::string name = form.prefix + "_" + layouts[l];
    SCOPED_TRACE(name);
    // Leading dimensions padded past the tile (by multiples of 16 elements, as wmma's alignment rules want).
    const int pad = 16 * t->Int(0, 1);
    const int lda = (a_row ? form.k : form.m) + pad, ldb = (b_row ? form.n : form.k) + pad;
    const int c_mode = l % 3, d_col = l % 2;
    const int ldc = (c_mode == 2 ? form.m : form.n) + pad, ldd = (d_col ? form.m : form.n) + 16 - pad;
    Mat a = Random(t, form.m, form.k, form.in), b = Random(t, form.k, form.n, form.in);
    Mat c = Random(t, form.m, form.n, form.acc);
    if (c_mode == 0) std::fill(c.v.begin(), c.v.end(), c.v[0]);
    // Half accumulators are not scaled by the kernel (see tensor.cu).
    const double scale = form.acc == Kind::kF16 ? 1 : 2;
    Mat want = MultiplyAdd(a, b, c);
    for (double& x : want.v) x *= scale;
    std::vector<uint8_t> c_bytes = c_mode == 0 ? Store(c, form.acc, true, form.n)
                                               : Store(c, form.acc, c_mode == 1, ldc);
    const std::vector<uint8_t> poison(static_cast<size_t>(d_col ? form.n : form.m) * ldd * Bytes(form.acc), 0xA5);
    uint64_t d = t->Upload(poison);
    uint64_t args[4] = {t->Upload(Store(a, form.in, a_row, lda)), t->Upload(Store(b, form.in, b_row, ldb)),
                        t->Upload(c_bytes), d};
    Function* f = t->Get(module, name);
    switch (form.acc) {
      case Kind::kF32:
        t->Launch(f, {1}, {32}, 0, args[0], args[1], args[2], args[3], lda, ldb, ldc, ldd, c_mode, d_col,
                  static_cast<float>(scale));
        break;
      case Kind::kF64:
        t->Launch(f, {1}, {32}, 0, args[0], args[1], args[2], args[3], lda, ldb, ldc, ldd, c_mode, d_col, scale);
        break;
      case Kind::kS32:
        t->Launch(f, {1}, {32}, 0, args[0], args[1], args[2], args[3], lda, ldb, ldc, ldd, c_mode, d_col,
                  static_cast<int>(scale));
        break;
      default:  // f16: a __half scale, passed as its bits.
        t->Launch(f, {1}, {32}, 0, args[0], args[1], args[2], args[3], lda, ldb, ldc, ldd, c_mode, d_col,
                  ToHalf(scale));
        break;
    }
    std::vector<uint8_t> got = t->Download<uint8_t>(d, poison.size());
    std::vector<uint8_t> expected = Store(want, form.acc, !d_col, ldd);
    EXPECT_TRUE(ArraysEqual(got, expected, name + ": D bytes (0xA5 outside the tile)"));
  }
}

TEST_P(TensorTest, WmmaF16) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  for (const char* shape : {"m16n16k16", "m32n8k16", "m8n32k16"}) {
    const int m = shape[1] == '1' ? 16 : shape[1] == '3' ? 32 : 8, n = 256 / m;
    CheckWmma(this, module, {std::string("wmma_f16_f32_") + shape, Kind::kF16, Kind::kF32, m, n, 16});
    CheckWmma(this, module, {std::string("wmma_f16_f16_") + shape, Kind::kF16, Kind::kF16, m, n, 16});
  }
}

TEST_P(TensorTest, WmmaBf16) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  CheckWmma(this, module, {"wmma_bf16_f32_m16n16k16", Kind::kBF16, Kind::kF32, 16, 16, 16});
  CheckWmma(this, module, {"wmma_bf16_f32_m32n8k16", Kind::kBF16, Kind::kF32, 32, 8, 16});
  CheckWmma(this, module, {"wmma_bf16_f32_m8n32k16", Kind::kBF16, Kind::kF32, 8, 32, 16});
}

TEST_P(TensorTest, WmmaInt8) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  for (const char* type : {"s8", "u8"}) {
    const Kind kind = type[0] == 's' ? Kind::kS8 : Kind::kU8;
    CheckWmma(this, module, {std::string("wmma_") + type + "_s32_m16n16k16", kind, Kind::kS32, 16, 16, 16});
    CheckWmma(this, module, {std::string("wmma_") + type + "_s32_m32n8k16", kind, Kind::kS32, 32, 8, 16});
    CheckWmma(this, module, {std::string("wmma_") + type + "_s32_m8n32k16", kind, Kind::kS32, 8, 32, 16});
  }
}

TEST_P(TensorTest, WmmaTf32AndF64) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  CheckWmma(this, module, {"wmma_tf32_f32_m16n16k8", Kind::kTF32, Kind::kF32, 16, 16, 8});
  CheckWmma(this, module, {"wmma_f64_f64_m8n8k4", Kind::kF64, Kind::kF64, 8, 8, 4});
}

// wmma.mma with a half C and a float D.
TEST_P(TensorTest, WmmaMixedAccumulators) {
  TRACE_SEED();
  Mat a = Random(this, 16, 16, Kind::kF16), b = Random(this, 16, 16, Kind::kF16), c = Random(this, 16, 16, Kind::kF16);
  uint64_t d = Output<float>(256);
  Launch(Kernel("tensor", "wmma_f16_mixed_m16n16k16"), {1}, {32}, 0, Upload(Store(a, Kind::kF16, true, 16)),
         Upload(Store(b, Kind::kF16, false, 16)), Upload(Store(c, Kind::kF16, true, 16)), d);
  Mat want = MultiplyAdd(a, b, c);
  std::vector<float> expected(want.v.begin(), want.v.end());
  EXPECT_TRUE(ArraysEqual(Download<float>(d, 256), expected, "D"));
}

// Several warps, shared-memory fragments, accumulation over k: a whole GEMM.
TEST_P(TensorTest, WmmaGemm) {
  TRACE_SEED();
  const int m = 48, n = 32, k = 64;
  Mat a = Random(this, m, k, Kind::kF16), b = Random(this, k, n, Kind::kF16);
  uint64_t c = Output<float>(m * n);
  const int tiles = (m / 16) * (n / 16);
  Launch(Kernel("tensor", "wmma_gemm_f16"), {static_cast<uint32_t>((tiles + 3) / 4)}, {128}, 0,
         Upload(Store(a, Kind::kF16, true, k)), Upload(Store(b, Kind::kF16, true, n)), c, m, n, k);
  Mat want = MultiplyAdd(a, b, Mat(m, n));
  EXPECT_TRUE(ArraysEqual(Download<float>(c, m * n), std::vector<float>(want.v.begin(), want.v.end()), "C"));
}

// ---- mma.sync. ----

struct Cell {
  int batch, row, col;
};

// The PTX ISA's fragment layouts ("Matrix fragments for mma.mMnNkK"), written out per form: where element i of
// `lane`'s fragment of A, B or C/D sits.
using Layout = std::function<Cell(char matrix, int lane, int i)>;

struct MmaForm {
  std::string kernel;
  int m, n, k;
  Kind a, b, c, d;
  int regs_a, regs_b, regs_c, regs_d;
  Layout layout;
  bool satfinite = false;
  int batches = 1;
};

int PerRegister(Kind k) { return k == Kind::kF16 || k == Kind::kBF16 ? 2 : Bytes(k) == 1 ? 4 : 1; }

// Accumulators of every m16n8 form: c0, c1 in row groupID, c2, c3 eight rows down.
Cell Accumulator16(int lane, int i) { return {0, lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2}; }

Layout F16K16() {
  return [](char x, int lane, int i) -> Cell {
    const int g = lane / 4, t = lane % 4;
    if (x == 'a') return {0, g + 8 * ((i / 2) % 2), 2 * t + i % 2 + 8 * (i / 4)};
    if (x == 'b') return {0, 2 * t + i % 2 + 8 * (i / 2), g};
    return Accumulator16(lane, i);
  };
}
Layout F16K8() {
  return [](char x, int lane, int i) -> Cell {
    const int g = lane / 4, t = lane % 4;
    if (x == 'a') return {0, g + 8 * (i / 2), 2 * t + i % 2};
    if (x == 'b') return {0, 2 * t + i, g};
    return Accumulator16(lane, i);
  };
}
Layout Tf32K4() {
  return [](char x, int lane, int i) -> Cell {
    const int g = lane / 4, t = lane % 4;
    if (x == 'a') return {0, g + 8 * i, t};
    if (x == 'b') return {0, t, g};
    return Accumulator16(lane, i);
  };
}
Layout Tf32K8() {
  return [](char x, int lane, int i) -> Cell {
    const int g = lane / 4, t = lane % 4;
    if (x == 'a') return {0, g + 8 * (i % 2), t + 4 * (i / 2)};
    if (x == 'b') return {0, t + 4 * i, g};
    return Accumulator16(lane, i);
  };
}
Layout Int8K16() {
  return [](char x, int lane, int i) -> Cell {
    const int g = lane / 4, t = lane % 4;
    if (x == 'a') return {0, g + 8 * (i / 4), 4 * t + i % 4};
    if (x == 'b') return {0, 4 * t + i, g};
    return Accumulator16(lane, i);
  };
}
Layout Int8K32() {
  return [](char x, int lane, int i) -> Cell {
    const int g = lane / 4, t = lane % 4;
    if (x == 'a') return {0, g + 8 * ((i / 4) % 2), 4 * t + i % 4 + 16 * (i / 8)};
    if (x == 'b') return {0, 4 * t + i % 4 + 16 * (i / 4), g};
    return Accumulator16(lane, i);
  };
}
Layout Int8M8K16() {
  return [](char x, int lane, int i) -> Cell {
    const int g = lane / 4, t = lane % 4;
    if (x == 'a') return {0, g, 4 * t + i};
    if (x == 'b') return {0, 4 * t + i, g};
    return {0, g, 2 * t + i};
  };
}
// m8n8k4 f16: quad pair q (lanes 4q..4q+3 and 4q+16..4q+19) computes product q.
Layout Quadpair(bool a_row, bool b_row, bool c_f32, bool d_f32) {
  return [=](char x, int lane, int i) -> Cell {
    const int q = (lane / 4) % 4, t = lane % 4, high = lane >= 16 ? 4 : 0;
    if (x == 'a') return a_row ? Cell{q, t + high, i} : Cell{q, i + high, t};
    if (x == 'b') return b_row ? Cell{q, t, i + high} : Cell{q, i, t + high};
    const bool f32 = x == 'c' ? c_f32 : d_f32;
    if (!f32) return {q, t + high, i};
    return {q, (lane % 2) + (i & 2) + high, (i & 1) + (lane & 2) + (i & 4)};
  };
}

// Builds every lane's registers from random A, B, C, runs the kernel, reads D back and checks it.
void CheckMma(TensorTest* t, Module* module, const MmaForm& form, bool extreme_accumulators = false) {
  SCOPED_TRACE(form.kernel);
  const int warps = 2, lanes = 32 * warps;
  const int in_words = form.regs_a + form.regs_b + form.regs_c;
  std::vector<uint32_t> in(static_cast<size_t>(lanes) * in_words, 0);
  std::vector<Mat> wants;
  for (int w = 0; w < warps; ++w) {
    std::vector<Mat> a, b, c;
    for (int q = 0; q < form.batches; ++q) {
      a.push_back(Random(t, form.m, form.k, form.a));
      b.push_back(Random(t, form.k, form.n, form.b));
      c.push_back(Random(t, form.m, form.n, form.c));
      if (extreme_accumulators) {
        for (double& x : c.back().v) x = t->Int(0, 1) ? INT32_MAX - t->Int(0, 300000) : INT32_MIN + t->Int(0, 300000);
      }
    }
    auto pack = [&](char x, const std::vector<Mat>& mats, Kind kind, int regs, int first_word) {
      const int per = PerRegister(kind), bits = 32 / per;
      for (int lane = 0; lane < 32; ++lane) {
        uint32_t* words = &in[static_cast<size_t>(w * 32 + lane) * in_words + first_word];
        for (int i = 0; i < regs * per; ++i) {
          const Cell cell = form.layout(x, lane, i);
          const uint64_t v = EncodeBits(kind, mats[cell.batch].at(cell.row, cell.col));
          words[i / per] |= static_cast<uint32_t>(v << (bits * (i % per)));
        }
      }
    };
    pack('a', a, form.a, form.regs_a, 0);
    pack('b', b, form.b, form.regs_b, form.regs_a);
    pack('c', c, form.c, form.regs_c, form.regs_a + form.regs_b);
    for (int q = 0; q < form.batches; ++q) wants.push_back(MultiplyAdd(a[q], b[q], c[q]));
  }
  uint64_t out = t->Output<uint32_t>(static_cast<size_t>(lanes) * form.regs_d);
  t->Launch(t->Get(module, form.kernel), {1}, {static_cast<uint32_t>(lanes)}, 0, t->Upload(in), out);
  std::vector<uint32_t> got = t->Download<uint32_t>(out, static_cast<size_t>(lanes) * form.regs_d);
  std::vector<uint32_t> expected(got.size(), 0);
  const int per = PerRegister(form.d), bits = 32 / per;
  for (int w = 0; w < warps; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t* words = &expected[static_cast<size_t>(w * 32 + lane) * form.regs_d];
      for (int i = 0; i < form.regs_d * per; ++i) {
        const Cell cell = form.layout('d', lane, i);
        double v = wants[static_cast<size_t>(w * form.batches + cell.batch)].at(cell.row, cell.col);
        if (form.satfinite) v = std::clamp<double>(v, INT32_MIN, INT32_MAX);
        if (IsInt(form.d)) v = static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(v))));
        words[i / per] |= static_cast<uint32_t>(EncodeBits(form.d, v) << (bits * (i % per)));
      }
    }
  }
  EXPECT_TRUE(ArraysEqual(got, expected, form.kernel + ": D registers of lanes 0..63"));
}

TEST_P(TensorTest, MmaF16AndBf16) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  CheckMma(this, module, {"mma_m16n8k8_f32_f16_f16_f32", 16, 8, 8, Kind::kF16, Kind::kF16, Kind::kF32, Kind::kF32,
                          2, 1, 4, 4, F16K8()});
  CheckMma(this, module, {"mma_m16n8k8_f16_f16_f16_f16", 16, 8, 8, Kind::kF16, Kind::kF16, Kind::kF16, Kind::kF16,
                          2, 1, 2, 2, F16K8()});
  CheckMma(this, module, {"mma_m16n8k16_f32_f16_f16_f32", 16, 8, 16, Kind::kF16, Kind::kF16, Kind::kF32,
                          Kind::kF32, 4, 2, 4, 4, F16K16()});
  CheckMma(this, module, {"mma_m16n8k16_f16_f16_f16_f16", 16, 8, 16, Kind::kF16, Kind::kF16, Kind::kF16,
                          Kind::kF16, 4, 2, 2, 2, F16K16()});
  CheckMma(this, module, {"mma_m16n8k8_f32_bf16_bf16_f32", 16, 8, 8, Kind::kBF16, Kind::kBF16, Kind::kF32,
                          Kind::kF32, 2, 1, 4, 4, F16K8()});
  CheckMma(this, module, {"mma_m16n8k16_f32_bf16_bf16_f32", 16, 8, 16, Kind::kBF16, Kind::kBF16, Kind::kF32,
                          Kind::kF32, 4, 2, 4, 4, F16K16()});
}

TEST_P(TensorTest, MmaTf32) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  CheckMma(this, module, {"mma_m16n8k4_f32_tf32_tf32_f32", 16, 8, 4, Kind::kTF32, Kind::kTF32, Kind::kF32,
                          Kind::kF32, 2, 1, 4, 4, Tf32K4()});
  CheckMma(this, module, {"mma_m16n8k8_f32_tf32_tf32_f32", 16, 8, 8, Kind::kTF32, Kind::kTF32, Kind::kF32,
                          Kind::kF32, 4, 2, 4, 4, Tf32K8()});
}

TEST_P(TensorTest, MmaInt8) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  CheckMma(this, module, {"mma_m16n8k16_s32_s8_s8_s32", 16, 8, 16, Kind::kS8, Kind::kS8, Kind::kS32, Kind::kS32,
                          2, 1, 4, 4, Int8K16()});
  CheckMma(this, module, {"mma_m16n8k32_s32_u8_u8_s32", 16, 8, 32, Kind::kU8, Kind::kU8, Kind::kS32, Kind::kS32,
                          4, 2, 4, 4, Int8K32()});
  CheckMma(this, module, {"mma_m8n8k16_s32_s8_s8_s32", 8, 8, 16, Kind::kS8, Kind::kS8, Kind::kS32, Kind::kS32, 1,
                          1, 2, 2, Int8M8K16()});
  // Accumulators near the ends of the s32 range: wrapping without .satfinite, clamping with it.
  CheckMma(this, module,
           {"mma_m16n8k32_s32_u8_u8_s32", 16, 8, 32, Kind::kU8, Kind::kU8, Kind::kS32, Kind::kS32, 4, 2, 4, 4,
            Int8K32()},
           true);
  MmaForm saturating{"mma_m16n8k16_s32_u8_s8_s32_satfinite", 16, 8, 16, Kind::kU8, Kind::kS8, Kind::kS32,
                     Kind::kS32, 2, 1, 4, 4, Int8K16()};
  saturating.satfinite = true;
  CheckMma(this, module, saturating, true);
  saturating = {"mma_m16n8k32_s32_s8_u8_s32_satfinite", 16, 8, 32, Kind::kS8, Kind::kU8, Kind::kS32, Kind::kS32,
                4, 2, 4, 4, Int8K32()};
  saturating.satfinite = true;
  CheckMma(this, module, saturating, true);
}

// fp8 multiplicands (cuBLASLt's fp8 GEMMs): every pairing of e4m3 and e5m2, in the 8-bit integers' layout.
TEST_P(TensorTest, MmaFp8) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor_fp8");
  for (Kind a : {Kind::kE4M3, Kind::kE5M2}) {
    for (Kind b : {Kind::kE4M3, Kind::kE5M2}) {
      const std::string name = std::string("mma_m16n8k32_f32_") + (a == Kind::kE4M3 ? "e4m3" : "e5m2") + "_" +
                               (b == Kind::kE4M3 ? "e4m3" : "e5m2") + "_f32";
      CheckMma(this, module, {name, 16, 8, 32, a, b, Kind::kF32, Kind::kF32, 4, 2, 4, 4, Int8K32()});
    }
  }
}

// fp8 decoding at the formats' edges: subnormals, the largest finite values (e4m3 448, e5m2 57344), the sign.
TEST_P(TensorTest, MmaFp8EdgeEncodings) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor_fp8");
  // A's row 0 and B's column 0 hold the encodings under test at k = 0; every other element is zero, so D(0,0) is
  // the product of the two decoded values (exact in f32), and C is zero.
  const struct {
    Kind a, b;
    uint8_t a_bits, b_bits;
    float want;
  } cases[] = {
      {Kind::kE4M3, Kind::kE4M3, 0x7e, 0x38, 448.0f},                 // 448 x 1.
      {Kind::kE4M3, Kind::kE4M3, 0x01, 0x38, 0x1p-9f},                // Smallest subnormal x 1.
      {Kind::kE4M3, Kind::kE4M3, 0x87, 0x38, -7 * 0x1p-9f},           // Largest negative subnormal x 1.
      {Kind::kE5M2, Kind::kE4M3, 0x7b, 0x38, 57344.0f},               // e5m2 57344 x 1.
      {Kind::kE5M2, Kind::kE5M2, 0x01, 0x3c, 0x1p-16f},               // e5m2 smallest subnormal x 1.
      {Kind::kE4M3, Kind::kE5M2, 0xc0, 0x40, -4.0f},                  // -2 x 2.
  };
  for (const auto& c : cases) {
    const std::string name = std::string("mma_m16n8k32_f32_") + (c.a == Kind::kE4M3 ? "e4m3" : "e5m2") + "_" +
                             (c.b == Kind::kE4M3 ? "e4m3" : "e5m2") + "_f32";
    SCOPED_TRACE(name);
    // Lane 0 holds A(0, 0..3) in its first register and B(0..3, 0) in its fifth (the layouts of Int8K32()).
    std::vector<uint32_t> in(64 * 10, 0);
    in[0] = c.a_bits;
    in[4] = c.b_bits;
    uint64_t out = Output<uint32_t>(64 * 4);
    Launch(Get(module, name), {1}, {64}, 0, Upload(in), out);
    std::vector<uint32_t> got = Download<uint32_t>(out, 64 * 4);
    EXPECT_EQ(got[0], std::bit_cast<uint32_t>(c.want)) << FromBits(got[0]) << " want " << c.want;
  }
}

// The host's f32 -> fp8 conversion, by search: the nearest finite encoding, a tie to the even one (fraction LSB 0);
// .satfinite: beyond the largest finite value, infinities included, that value; NaN to 0x7f; `relu`: negatives to
// +0.
uint8_t NearestFp8(float value, int mantissa_bits, int bias, bool relu) {
  if (std::isnan(value)) return 0x7f;
  if (relu && std::signbit(value)) return 0;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  const uint8_t largest = mantissa_bits == 3 ? 0x7e : 0x7b;
  const double v = std::fabs(static_cast<double>(value));
  uint8_t best = 0;
  for (int bits = 1; bits <= largest; ++bits) {
    const double here = FromFp8(static_cast<uint8_t>(bits), mantissa_bits, bias);
    const double d = std::fabs(here - v), best_d = std::fabs(FromFp8(best, mantissa_bits, bias) - v);
    if (d < best_d || (d == best_d && (bits & 1) == 0)) best = static_cast<uint8_t>(bits);
  }
  if (v >= FromFp8(largest, mantissa_bits, bias)) best = largest;
  return sign | best;
}

// Every fp8 value, the midpoints between neighbours (ties), a hair either side of them, values beyond the largest
// finite one, subnormals, infinities and NaN, in pairs.
TEST_P(TensorTest, CvtF32ToFp8x2) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor_fp8");
  for (const auto& [kernel, mantissa_bits, bias, relu] :
       {std::tuple{"cvt_e4m3x2_f32", 3, 7, false}, std::tuple{"cvt_e5m2x2_f32", 2, 15, false},
        std::tuple{"cvt_relu_e4m3x2_f32", 3, 7, true}}) {
    SCOPED_TRACE(kernel);
    std::vector<float> in;
    const int largest = mantissa_bits == 3 ? 0x7e : 0x7b;
    for (int bits = 0; bits <= largest; ++bits) {
      const double here = FromFp8(static_cast<uint8_t>(bits), mantissa_bits, bias);
      const double next = FromFp8(static_cast<uint8_t>(bits + 1), mantissa_bits, bias);
      const float mid = static_cast<float>((here + next) / 2);
      for (float x : {static_cast<float>(here), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        in.push_back(x);
        in.push_back(-x);
      }
    }
    for (float x : {500.0f, 1e6f, 60000.0f, 65504.0f, INFINITY, -INFINITY, NAN, -0.0f, 1e-30f, -1e-30f}) {
      in.push_back(x);
    }
    if (in.size() % 2) in.push_back(1.0f);
    const size_t pairs = in.size() / 2;
    uint64_t out = Output<uint32_t>(pairs);
    Launch(Get(module, kernel), {static_cast<uint32_t>(pairs)}, {1}, 0, Upload(in), out);
    std::vector<uint32_t> got = Download<uint32_t>(out, pairs), want(pairs);
    for (size_t i = 0; i < pairs; ++i) {
      want[i] = static_cast<uint32_t>(NearestFp8(in[2 * i], mantissa_bits, bias, relu)) << 8 |
                NearestFp8(in[2 * i + 1], mantissa_bits, bias, relu);
    }
    EXPECT_TRUE(ArraysEqual(got, want, "fp8 pairs"));
  }
}

// Every fp8 encoding in both bytes, to f16 (exact; NaN to the canonical 0x7fff; e5m2's infinities stay).
TEST_P(TensorTest, CvtFp8x2ToF16x2) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor_fp8");
  for (const auto& [kernel, mantissa_bits, bias] :
       {std::tuple{"cvt_f16x2_e4m3x2", 3, 7}, std::tuple{"cvt_f16x2_e5m2x2", 2, 15}}) {
    SCOPED_TRACE(kernel);
    std::vector<uint32_t> in(256);
    for (uint32_t i = 0; i < 256; ++i) in[i] = i << 8 | (255 - i);
    uint64_t out = Output<uint32_t>(256);
    Launch(Get(module, kernel), {256}, {1}, 0, Upload(in), out);
    auto half = [&](uint8_t bits) -> uint32_t {
      const int exponent = (bits & 0x7f) >> mantissa_bits, fraction = bits & ((1 << mantissa_bits) - 1);
      const bool e5m2 = mantissa_bits == 2;
      if (e5m2 && exponent == 31) return fraction ? 0x7fff : (bits & 0x80 ? 0xfc00 : 0x7c00);
      if (!e5m2 && (bits & 0x7f) == 0x7f) return 0x7fff;
      return ToHalf(FromFp8(bits, mantissa_bits, bias));
    };
    std::vector<uint32_t> want(256);
    for (uint32_t i = 0; i < 256; ++i) {
      want[i] = half(static_cast<uint8_t>(i)) << 16 | half(static_cast<uint8_t>(255 - i));
    }
    EXPECT_TRUE(ArraysEqual(Download<uint32_t>(out, 256), want, "f16x2"));
  }
}

TEST_P(TensorTest, GriddepcontrolRunsInStreamOrder) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor_fp8");
  std::vector<uint32_t> in(256);
  std::iota(in.begin(), in.end(), 7u);
  uint64_t out = Output<uint32_t>(256);
  Launch(Get(module, "griddepcontrol_increment"), {2}, {128}, 0, Upload(in), out);
  std::vector<uint32_t> want(256);
  std::iota(want.begin(), want.end(), 8u);
  EXPECT_TRUE(ArraysEqual(Download<uint32_t>(out, 256), want, "out"));
}

TEST_P(TensorTest, MmaM8n8k4F16EveryLayout) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  for (const char* la : {"row", "col"}) {
    for (const char* lb : {"row", "col"}) {
      const bool a_row = la[0] == 'r', b_row = lb[0] == 'r';
      MmaForm f32{std::string("mma_m8n8k4_") + la + "_" + lb + "_f32_f16_f16_f32", 8, 8, 4, Kind::kF16, Kind::kF16,
                  Kind::kF32, Kind::kF32, 2, 2, 8, 8, Quadpair(a_row, b_row, true, true)};
      f32.batches = 4;
      CheckMma(this, module, f32);
      MmaForm f16{std::string("mma_m8n8k4_") + la + "_" + lb + "_f16_f16_f16_f16", 8, 8, 4, Kind::kF16, Kind::kF16,
                  Kind::kF16, Kind::kF16, 2, 2, 4, 4, Quadpair(a_row, b_row, false, false)};
      f16.batches = 4;
      CheckMma(this, module, f16);
    }
  }
}

TEST_P(TensorTest, MmaM8n8k4MixedAccumulators) {
  TRACE_SEED();
  MmaForm mixed{"mma_m8n8k4_row_col_f32_f16_f16_f16", 8, 8, 4, Kind::kF16, Kind::kF16, Kind::kF16, Kind::kF32,
                2, 2, 4, 8, Quadpair(true, false, false, true)};
  mixed.batches = 4;
  CheckMma(this, LoadKernel("tensor"), mixed);
}

TEST_P(TensorTest, MmaM8n8k4F64) {
  TRACE_SEED();
  // A (8x4): row groupID, column threadID_in_group; B (4x8) the transpose; C/D: row groupID, columns 2t and 2t+1.
  std::vector<Mat> a, b, c;
  const int warps = 2;
  std::vector<double> in(32 * warps * 4);
  for (int w = 0; w < warps; ++w) {
    a.push_back(Random(this, 8, 4, Kind::kF64));
    b.push_back(Random(this, 4, 8, Kind::kF64));
    c.push_back(Random(this, 8, 8, Kind::kF64));
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      double* x = &in[static_cast<size_t>(w * 32 + lane) * 4];
      x[0] = a[w].at(g, t);
      x[1] = b[w].at(t, g);
      x[2] = c[w].at(g, 2 * t);
      x[3] = c[w].at(g, 2 * t + 1);
    }
  }
  uint64_t out = Output<double>(32 * warps * 2);
  Launch(Kernel("tensor", "mma_m8n8k4_f64"), {1}, {32u * warps}, 0, Upload(in), out);
  std::vector<double> got = Download<double>(out, 32 * warps * 2), want(got.size());
  for (int w = 0; w < warps; ++w) {
    Mat d = MultiplyAdd(a[w], b[w], c[w]);
    for (int lane = 0; lane < 32; ++lane) {
      want[(w * 32 + lane) * 2] = d.at(lane / 4, 2 * (lane % 4));
      want[(w * 32 + lane) * 2 + 1] = d.at(lane / 4, 2 * (lane % 4) + 1);
    }
  }
  EXPECT_TRUE(ArraysEqual(got, want, "D"));
}

// Arbitrary f16 values with f32 accumulation: the ISA leaves the order and intermediate precision of the sum
// unspecified, so allow a few f32 ulps of the magnitudes summed. Also tf32 registers holding full f32 values: the
// low 13 bits are ignored (see exec_matrix.inc), so the reference multiplies truncated values.
TEST_P(TensorTest, MmaRoundingWithArbitraryValues) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  for (const bool tf32 : {false, true}) {
    SCOPED_TRACE(tf32 ? "tf32 m16n8k8" : "f16 m16n8k16");
    const int k = tf32 ? 8 : 16;
    const Layout layout = tf32 ? Tf32K8() : F16K16();
    const int regs_a = 4, regs_b = 2, in_words = 10;
    Mat a(16, k), b(k, 8), c(16, 8);
    for (double& x : a.v) x = tf32 ? Float(-4, 4) : FromHalf(ToHalf(Float(-4, 4)));
    for (double& x : b.v) x = tf32 ? Float(-4, 4) : FromHalf(ToHalf(Float(-4, 4)));
    for (double& x : c.v) x = Float(-100, 100);
    const Kind kind = tf32 ? Kind::kF32 : Kind::kF16;  // tf32: the full f32 bits go in.
    std::vector<uint32_t> in(32 * in_words, 0);
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t* words = &in[static_cast<size_t>(lane) * in_words];
      const int per = tf32 ? 1 : 2, bits = 32 / per;
      for (int i = 0; i < regs_a * per; ++i) {
        Cell cell = layout('a', lane, i);
        words[i / per] |= static_cast<uint32_t>(EncodeBits(kind, a.at(cell.row, cell.col)) << (bits * (i % per)));
      }
      for (int i = 0; i < regs_b * per; ++i) {
        Cell cell = layout('b', lane, i);
        words[regs_a + i / per] |=
            static_cast<uint32_t>(EncodeBits(kind, b.at(cell.row, cell.col)) << (bits * (i % per)));
      }
      for (int i = 0; i < 4; ++i) {
        Cell cell = layout('c', lane, i);
        words[regs_a + regs_b + i] = static_cast<uint32_t>(EncodeBits(Kind::kF32, c.at(cell.row, cell.col)));
      }
    }
    if (tf32) {
      for (double& x : a.v) x = DecodeBits(Kind::kTF32, EncodeBits(Kind::kF32, x));
      for (double& x : b.v) x = DecodeBits(Kind::kTF32, EncodeBits(Kind::kF32, x));
    }
    for (double& x : c.v) x = static_cast<float>(x);
    uint64_t out = Output<uint32_t>(32 * 4);
    Launch(Get(module, tf32 ? "mma_m16n8k8_f32_tf32_tf32_f32" : "mma_m16n8k16_f32_f16_f16_f32"), {1}, {32}, 0,
           Upload(in), out);
    std::vector<uint32_t> got = Download<uint32_t>(out, 32 * 4);
    Mat want = MultiplyAdd(a, b, c);
    int bad = 0;
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 4; ++i) {
        Cell cell = layout('d', lane, i);
        double magnitude = std::fabs(c.at(cell.row, cell.col));
        for (int x = 0; x < k; ++x) magnitude += std::fabs(a.at(cell.row, x) * b.at(x, cell.col));
        const double tolerance = 4 * magnitude * std::ldexp(1.0, -24);
        const double value = FromBits(got[static_cast<size_t>(lane) * 4 + i]);
        if (!(std::fabs(value - want.at(cell.row, cell.col)) <= tolerance) && ++bad <= 10) {
          ADD_FAILURE() << "D(" << cell.row << "," << cell.col << ") = " << value << ", want "
                        << want.at(cell.row, cell.col) << " within " << tolerance;
        }
      }
    }
  }
}

// cvt.rna.tf32.f32 keeps 10 mantissa bits, rounding to nearest with ties away from zero; infinities stay, NaN
// stays NaN, and rounding up from the largest floats overflows to infinity.
TEST_P(TensorTest, FloatToTf32RoundsToNearestTiesAway) {
  TRACE_SEED();
  std::vector<float> in = {0.0f, -0.0f, 1.0f, INFINITY, -INFINITY, NAN, FromBits(0x7f7fffffu),
                           FromBits(0x3f801000u), FromBits(0xbf801000u), FromBits(0x3f803000u),
                           FromBits(0x3f800fffu), FromBits(0x00001fffu)};
  for (int i = 0; i < 500; ++i) in.push_back(FromBits(U32()));
  const int n = static_cast<int>(in.size());
  uint64_t out = Output<float>(n);
  Launch(Kernel("tensor", "float_to_tf32"), {(n + 127) / 128u}, {128}, 0, Upload(in), out, n);
  std::vector<float> got = Download<float>(out, n);
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(in[i]);
    const uint32_t result = std::bit_cast<uint32_t>(got[i]);
    if (std::isnan(in[i])) {
      if (!std::isnan(got[i]) && ++bad <= 10) ADD_FAILURE() << "NaN in, " << Show(got[i]) << " out";
      continue;
    }
    // Round the magnitude to a multiple of 2^13 in the bit pattern, half-way cases up (away from zero).
    const uint32_t magnitude = bits & 0x7fffffffu;
    const uint32_t want = (bits & 0x80000000u) | (((magnitude + 0x1000u) & 0xffffe000u));
    if (result != want && ++bad <= 10) {
      ADD_FAILURE() << "tf32(" << Show(in[i]) << ") = " << Show(got[i]) << ", want " << Show(FromBits(want));
    }
  }
}

// ---- ldmatrix and movmatrix. ----

TEST_P(TensorTest, Ldmatrix) {
  TRACE_SEED();
  Module* module = LoadKernel("tensor");
  for (int count : {1, 2, 4}) {
    for (bool trans : {false, true}) {
      const std::string name = "ldmatrix_x" + std::to_string(count) + (trans ? "_trans" : "");
      SCOPED_TRACE(name);
      std::vector<uint16_t> rows(32 * 8);
      for (auto& v : rows) v = static_cast<uint16_t>(U32());
      // Lane 8j + r names row r of matrix j: any row of the 32 in shared memory. Lanes past 8 * count give an
      // address far outside shared memory, which the instruction must not read.
      std::vector<int> row_of_lane(32);
      std::iota(row_of_lane.begin(), row_of_lane.end(), 0);
      std::shuffle(row_of_lane.begin(), row_of_lane.end(), rng());
      for (int lane = 8 * count; lane < 32; ++lane) row_of_lane[lane] = 1 << 20;
      uint64_t out = Output<uint32_t>(32 * count);
      Launch(Get(module, name), {1}, {32}, 0, Upload(rows), Upload(row_of_lane), out);
      std::vector<uint32_t> want(32 * count);
      for (int lane = 0; lane < 32; ++lane) {
        for (int j = 0; j < count; ++j) {
          // Element (r, c) of matrix j is rows[row_of_lane[8j + r]][c]; lane l gets row l/4, columns 2(l%4) and
          // 2(l%4)+1, or with .trans the same positions of the transpose.
          auto element = [&](int r, int c) { return rows[static_cast<size_t>(row_of_lane[8 * j + r]) * 8 + c]; };
          const int r = lane / 4, c = 2 * (lane % 4);
          const uint32_t lo = trans ? element(c, r) : element(r, c);
          const uint32_t hi = trans ? element(c + 1, r) : element(r, c + 1);
          want[static_cast<size_t>(lane) * count + j] = lo | hi << 16;
        }
      }
      EXPECT_TRUE(ArraysEqual(Download<uint32_t>(out, 32 * count), want, name));
    }
  }
}

TEST_P(TensorTest, Movmatrix) {
  TRACE_SEED();
  std::vector<uint32_t> in(64);
  for (auto& v : in) v = U32();
  uint64_t out = Output<uint32_t>(64);
  Launch(Kernel("tensor", "movmatrix_trans"), {1}, {64}, 0, Upload(in), out);
  std::vector<uint32_t> want(64);
  for (int w = 0; w < 2; ++w) {
    // Lane l holds row l/4, columns 2(l%4) and 2(l%4)+1, before and after.
    auto element = [&](int r, int c) { return (in[w * 32 + r * 4 + c / 2] >> (16 * (c % 2))) & 0xffff; };
    for (int lane = 0; lane < 32; ++lane) {
      const int r = lane / 4, c = 2 * (lane % 4);
      want[w * 32 + lane] = element(c, r) | element(c + 1, r) << 16;
    }
  }
  EXPECT_TRUE(ArraysEqual(Download<uint32_t>(out, 64), want, "transposed fragments"));
}

// ldmatrix feeding mma as hand-written kernels do: right only if both follow the ISA's layouts.
TEST_P(TensorTest, LdmatrixFeedsMma) {
  TRACE_SEED();
  Mat a = Random(this, 16, 16, Kind::kF16), b = Random(this, 16, 8, Kind::kF16);
  uint64_t d = Output<float>(128);
  Launch(Kernel("tensor", "ldmatrix_mma_m16n8k16"), {1}, {32}, 0, Upload(Store(a, Kind::kF16, true, 16)),
         Upload(Store(b, Kind::kF16, true, 8)), d);
  Mat want = MultiplyAdd(a, b, Mat(16, 8));
  EXPECT_TRUE(ArraysEqual(Download<float>(d, 128), std::vector<float>(want.v.begin(), want.v.end()), "D"));
}

GPUPOOL_INSTANTIATE_VARIANTS(TensorTest);

// ---- Forms the interpreter does not implement are refused at load, naming the instruction. ----

using TensorRefuseTest = EmuTest;

void ExpectRefused(TensorRefuseTest* t, const std::string& instruction, const std::string& declarations) {
  SCOPED_TRACE(instruction);
  const std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n" +
                          declarations + "\n" + instruction + "\nret;\n}\n";
  Module* module = nullptr;
  CallStatus status = t->device().LoadPtx(ptx, &module);
  EXPECT_EQ(status.code(), cu::kInvalidPtx) << Describe(status);
  const std::string opcode = instruction.substr(0, instruction.find(' '));
  EXPECT_NE(status.message().find(opcode), std::string::npos) << status.message();
}

TEST_F(TensorRefuseTest, UnimplementedFormsAreInvalidPtx) {
  const std::string regs = ".reg .b32 %r<40>;\n.reg .f32 %f<40>;\n.reg .b64 %rd<4>;\n.reg .f64 %fd<40>;";
  // fp8 multiplicands with f16 accumulators (PTX 8.7), and at shape m16n8k16.
  ExpectRefused(this, "mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 {%r0,%r1}, {%r2,%r3,%r4,%r5}, "
                      "{%r6,%r7}, {%r8,%r9};", regs);
  ExpectRefused(this, "mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1}, "
                      "{%r4}, {%f4,%f5,%f6,%f7};", regs);
  // f64 m16n8k8 (sm_90).
  ExpectRefused(this, "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%fd0,%fd1,%fd2,%fd3}, "
                      "{%fd4,%fd5,%fd6,%fd7}, {%fd8,%fd9}, {%fd10,%fd11,%fd12,%fd13};", regs);
  // Sparse mma and sub-byte integers.
  ExpectRefused(this, "mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, "
                      "{%r4,%r5,%r6,%r7}, {%f4,%f5,%f6,%f7}, %r8, 0x0;", regs);
  ExpectRefused(this, "mma.sync.aligned.m8n8k32.row.col.s32.s4.s4.s32 {%r0,%r1}, {%r2}, {%r3}, {%r4,%r5};", regs);
  ExpectRefused(this, "wmma.load.a.sync.aligned.row.m8n8k32.s4 {%r0}, [%rd0], %r1;", regs);
  // A layout m16n8k16 does not take, and the wrong number of registers.
  ExpectRefused(this, "mma.sync.aligned.m16n8k16.row.row.f32.f16.f16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, "
                      "{%r4,%r5}, {%f4,%f5,%f6,%f7};", regs);
  ExpectRefused(this, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0,%f1,%f2}, {%r0,%r1,%r2,%r3}, "
                      "{%r4,%r5}, {%f4,%f5,%f6,%f7};", regs);
  // ldmatrix shapes and element types of sm_100, and movmatrix without .trans.
  ExpectRefused(this, "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r0,%r1}, [%r2];", regs);
  ExpectRefused(this, "movmatrix.sync.aligned.m8n8.b16 %r0, %r1;", regs);
}

}  // namespace
}  // namespace gpupool::emu::test
