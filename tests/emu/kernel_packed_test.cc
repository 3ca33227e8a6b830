// Packed half-precision arithmetic, half comparisons and conversions, bmsk, indirect calls, %clock64 as time,
// calls of undefined device-runtime functions, and brx.idx jump tables on the emulated device. The kernels
// (kernels/packed.cu) are built for sm_80 and sm_90, whose headers emit different PTX for the same intrinsics;
// results are checked bit for bit against host arithmetic.
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_check.h"
#include "kernel_harness.h"

namespace gpupool::emu::test {
namespace {

using PackedTest = KernelTest;

uint16_t HalfBits(_Float16 h) { return std::bit_cast<uint16_t>(h); }
_Float16 HalfOf(uint16_t b) { return std::bit_cast<_Float16>(b); }
double Bf16Value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
// Rounds to bfloat16 (8 significant bits, ties to even) by scaling: independent of the emulator's rounding code.
// REQUIRES: v finite and within bfloat16's normal range, or zero.
uint16_t Bf16Bits(double v) {
  float f = 0;
  if (v != 0) {
    int e;
    double m = std::frexp(v, &e);
    f = static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8));
  } else {
    f = static_cast<float>(v);
  }
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
}

// PTX max/min: -0 below +0.
double Max(double x, double y) { return x > y ? x : y > x ? y : (std::signbit(x) ? y : x); }
double Min(double x, double y) { return x < y ? x : y < x ? y : (std::signbit(x) ? x : y); }

struct Format {
  bool bf16;
  double Value(uint16_t b) const { return bf16 ? Bf16Value(b) : static_cast<double>(HalfOf(b)); }
  uint16_t Round(double v) const { return bf16 ? Bf16Bits(v) : HalfBits(static_cast<_Float16>(v)); }
  uint16_t One() const { return bf16 ? 0x3f80 : 0x3c00; }
};

// The twelve records of PackedOps for one pair of halves.
std::vector<uint16_t> PackedReference(const Format& f, uint16_t a, uint16_t b, uint16_t c) {
  double x = f.Value(a), y = f.Value(b), z = f.Value(c);
  double fma = std::fma(x, y, z);
  bool lt = x < y;
  return {f.Round(x + y), f.Round(x - y),     f.Round(x * y), f.Round(fma),
          f.Round(Max(x, y)), f.Round(Min(x, y)), static_cast<uint16_t>(a ^ 0x8000), static_cast<uint16_t>(a & 0x7fff),
          f.Round(fma < 0 ? 0.0 : fma), static_cast<uint16_t>(lt ? f.One() : 0), static_cast<uint16_t>(lt ? 0xffff : 0),
          f.Round(Max(x, y))};
}

void CheckPackedOps(PackedTest* t, const std::string& kernel, bool bf16) {
  const int n = 3000;
  const Format format{bf16};
  std::vector<uint32_t> a(n), b(n), c(n);
  auto random_half = [&]() -> uint16_t {
    double v = t->Double(-120, 120);
    if (t->Int(0, 20) == 0) v = 0;  // Equal inputs and zeros now and then.
    return format.Round(v);
  };
  for (int i = 0; i < n; ++i) {
    a[i] = random_half() | (static_cast<uint32_t>(random_half()) << 16);
    b[i] = t->Int(0, 10) == 0 ? a[i] : random_half() | (static_cast<uint32_t>(random_half()) << 16);
    c[i] = random_half() | (static_cast<uint32_t>(random_half()) << 16);
  }
  uint64_t out = t->Output<uint32_t>(12ull * n);
  t->Launch(t->Kernel(kernel, bf16 ? "bfloat162_ops" : "half2_ops"), {(n + 127) / 128}, {128}, 0, t->Upload(a),
            t->Upload(b), t->Upload(c), out, n);
  std::vector<uint32_t> want(12ull * n);
  for (int i = 0; i < n; ++i) {
    auto lo = PackedReference(format, a[i] & 0xffff, b[i] & 0xffff, c[i] & 0xffff);
    auto hi = PackedReference(format, a[i] >> 16, b[i] >> 16, c[i] >> 16);
    for (int k = 0; k < 12; ++k) want[12ull * i + k] = lo[k] | (static_cast<uint32_t>(hi[k]) << 16);
  }
  EXPECT_TRUE(ArraysEqual(t->Download<uint32_t>(out, 12ull * n), want,
                          kernel + (bf16 ? " bf16x2" : " f16x2") +
                              " records (add, sub, mul, fma, max, min, neg, abs, fma.relu, set.lt, set.lt.u32, "
                              "max.NaN)"));
}

TEST_P(PackedTest, Half2ArithmeticAndComparisons) {
  TRACE_SEED();
  for (std::string kernel : {"packed", "packed_sm90"}) CheckPackedOps(this, kernel, false);
}

TEST_P(PackedTest, Bfloat162ArithmeticAndComparisons) {
  TRACE_SEED();
  for (std::string kernel : {"packed", "packed_sm90"}) CheckPackedOps(this, kernel, true);
}

TEST_P(PackedTest, PackedConversionsSaturationAndBmsk) {
  TRACE_SEED();
  const int n = 2000;
  std::vector<float> x(n), y(n);
  std::vector<uint32_t> h(n), ma(n), mb(n);
  for (int i = 0; i < n; ++i) {
    x[i] = Float(-70000, 70000);  // Beyond half's range too: rounds to infinity.
    y[i] = Float(-2, 2);
    h[i] = HalfBits(static_cast<_Float16>(Float(-1, 1))) | (static_cast<uint32_t>(HalfBits(static_cast<_Float16>(Float(-1, 1)))) << 16);
    ma[i] = static_cast<uint32_t>(Int(0, 40));
    mb[i] = static_cast<uint32_t>(Int(0, 40));
  }
  uint64_t out = Output<uint32_t>(5ull * n);
  Launch(Kernel("packed", "pack_and_masks"), {(n + 127) / 128}, {128}, 0, Upload(x), Upload(y), Upload(h), Upload(ma),
         Upload(mb), out, n);
  std::vector<uint32_t> want;
  const Format half{false};
  for (int i = 0; i < n; ++i) {
    want.push_back(HalfBits(static_cast<_Float16>(x[i])) | (static_cast<uint32_t>(HalfBits(static_cast<_Float16>(y[i]))) << 16));
    want.push_back(Bf16Bits(x[i]) | (static_cast<uint32_t>(Bf16Bits(y[i])) << 16));
    uint32_t sat = 0;
    for (int k = 0; k < 2; ++k) {
      double v = half.Value(static_cast<uint16_t>(h[i] >> (16 * k)));
      sat |= static_cast<uint32_t>(half.Round(std::min(1.0, std::max(0.0, v + v)))) << (16 * k);
    }
    want.push_back(sat);
    for (bool wrap : {false, true}) {
      uint32_t from = wrap ? ma[i] % 32 : std::min(ma[i], 32u), width = wrap ? mb[i] % 32 : std::min(mb[i], 32u);
      uint32_t mask = 0;
      for (uint32_t bit = 0; bit < 32; ++bit) {
        if (bit >= from && bit < from + width) mask |= 1u << bit;
      }
      want.push_back(mask);
    }
  }
  EXPECT_TRUE(ArraysEqual(Download<uint32_t>(out, 5ull * n), want,
                          "records (cvt.rn.f16x2.f32, cvt.rn.bf16x2.f32, add.sat.f16x2, bmsk.clamp, bmsk.wrap)"));
}

TEST_P(PackedTest, FunctionPointersAndVirtualCalls) {
  TRACE_SEED();
  const int n = 500;
  std::vector<int> in(n);
  for (int& v : in) v = Int(-30000, 30000);
  uint64_t out = Output<int>(n), areas = Output<float>(n);
  Launch(Kernel("packed", "indirect_calls"), {(n + 63) / 64}, {64}, 0, Upload(in), out, areas, n);
  std::vector<int> want(n);
  std::vector<float> want_areas(n);
  for (int i = 0; i < n; ++i) {
    want[i] = i % 3 == 0 ? 2 * in[i] : i % 3 == 1 ? -in[i] : in[i] * in[i];
    float f = static_cast<float>(i);
    want_areas[i] = (i & 1) ? f * f : 0.5f * f * 3.0f;
  }
  EXPECT_TRUE(ArraysEqual(Download<int>(out, n), want, "calls through a table of function pointers"));
  EXPECT_TRUE(ArraysEqual(Download<float>(areas, n), want_areas, "virtual Area() of objects made with new"));
}

TEST_P(PackedTest, Clock64CountsTimeAtTheReportedClockRate) {
  const long long cycles = static_cast<long long>(kClockRateKhz) * 40;  // 40 ms.
  uint64_t seen = Output<long long>(2);
  const auto start = std::chrono::steady_clock::now();
  Launch(Kernel("packed", "spin_cycles"), {1}, {1}, 0, cycles, seen);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  std::vector<long long> got = Download<long long>(seen, 2);
  EXPECT_GE(got[0], cycles);
  EXPECT_GE(elapsed, std::chrono::milliseconds(40));
  // %globaltimer moved by about the same time (nanoseconds), never less than the wait.
  EXPECT_GE(got[1], 39'000'000);
  EXPECT_LT(got[1], 20'000'000'000);
}

TEST_P(PackedTest, UndefinedDeviceRuntimeCallFailsTheLaunchNamingIt) {
  Module* module = LoadKernel("packed");  // The module loads: its other kernels run.
  uint64_t out = Output<int>(32);
  CallStatus status = TryLaunch(Get(module, "graph_set_conditional"), {1}, {32}, 0, uint64_t{0}, out);
  EXPECT_EQ(status.code(), cu::kNotSupported) << status.message();
  EXPECT_NE(status.message().find("cudaGraphSetConditional"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("device-side CUDA runtime function"), std::string::npos) << status.message();
}

TEST_P(PackedTest, AsyncCopiesToSharedMemoryWithZeroFill) {
  TRACE_SEED();
  const int blocks = 3, n = blocks * 256;
  std::vector<float> in(4 * n);
  for (float& v : in) v = Float(-1e6f, 1e6f);
  std::vector<int> ints(n), sizes(n);
  for (int& v : ints) v = Int(INT32_MIN, INT32_MAX);
  for (int& v : sizes) v = Int(0, 16);
  std::vector<uint8_t> bytes(16 * n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(Int(1, 255));
  uint64_t reversed = Output<float>(4 * n), ints_reversed = Output<int>(n), partial = Output<uint8_t>(16 * n);
  Launch(Kernel("packed", "async_copies"), {blocks}, {256}, 0, Upload(in), reversed, Upload(ints), ints_reversed,
         Upload(bytes), Upload(sizes), partial);
  std::vector<float> want(4 * n);
  std::vector<int> want_ints(n);
  std::vector<uint8_t> want_bytes(16 * n, 0);
  for (int i = 0; i < n; ++i) {
    int block = i / 256, t = i % 256, from = block * 256 + 255 - t;
    for (int k = 0; k < 4; ++k) want[4 * i + k] = in[4 * from + k];
    want_ints[i] = ints[from];
    for (int k = 0; k < sizes[i]; ++k) want_bytes[16 * i + k] = bytes[16 * i + k];
  }
  EXPECT_TRUE(ArraysEqual(Download<float>(reversed, 4 * n), want, "__pipeline_memcpy_async, reversed"));
  EXPECT_TRUE(ArraysEqual(Download<int>(ints_reversed, n), want_ints, "cg::memcpy_async, reversed"));
  EXPECT_TRUE(ArraysEqual(Download<uint8_t>(partial, 16 * n), want_bytes, "cp.async with a source size"));
}

TEST_P(PackedTest, MbarriersCompleteOnArrivalsAndBulkCopies) {
  TRACE_SEED();
  for (std::string kernel : {"packed", "packed_sm90"}) {
    const int blocks = 3, n = blocks * 2 * 256;
    std::vector<int> in(4 * n);
    for (int& v : in) v = Int(INT32_MIN, INT32_MAX);
    uint64_t out = Output<int>(4 * n);
    Launch(Kernel(kernel, "barrier_copies"), {blocks}, {256}, 0, Upload(in), out, 0);
    std::vector<int> want(4 * n);
    for (int i = 0; i < n; ++i) {
      const int chunk = i / 256, from = chunk * 256 + 255 - i % 256;
      for (int k = 0; k < 4; ++k) want[4 * i + k] = in[4 * from + k];
    }
    EXPECT_TRUE(ArraysEqual(Download<int>(out, 4 * n), want, kernel + ": staged through cuda::barrier, reversed"));
  }
}

// A barrier expecting one arrival more than the block makes can never complete: the launch says so instead of
// spinning for ever.
void ExpectStuckBarrierFails(PackedTest* t, const std::string& kernel) {
  std::vector<int> in(4 * 512, 1);
  uint64_t out = t->Output<int>(4 * 512);
  CallStatus stuck = t->TryLaunch(t->Kernel(kernel, "barrier_copies"), {1}, {64}, 0, t->Upload(in), out, 1);
  EXPECT_EQ(stuck.code(), cu::kLaunchTimeout) << stuck.message();
  EXPECT_NE(stuck.message().find("64 on an mbarrier phase that cannot complete"), std::string::npos)
      << stuck.message();
}
TEST_P(PackedTest, AnMbarrierThatCannotCompleteFailsTheLaunchSm80) { ExpectStuckBarrierFails(this, "packed"); }
TEST_P(PackedTest, AnMbarrierThatCannotCompleteFailsTheLaunchSm90) { ExpectStuckBarrierFails(this, "packed_sm90"); }

GPUPOOL_INSTANTIATE_VARIANTS(PackedTest);

// Hand-written PTX in the shape LLVM's NVPTX backend gives a switch: brx.idx through a .branchtargets list.
using JumpTableTest = EmuTest;

TEST_F(JumpTableTest, BrxIdxJumpsThroughItsBranchTargetsAndRefusesAnIndexOutsideThem) {
  EmuTest& device = *this;
  Module* module = LoadPtxText(ReadFile(KernelSourcePath("jump_table.ptx")));
  const int n = 64;
  std::vector<int> selectors(n);
  for (int i = 0; i < n; ++i) selectors[i] = (i * 7) % 4;
  uint64_t out = device.Output<int>(n);
  device.Launch(device.Get(module, "jump_table"), {1}, {n}, 0, out, device.Upload(selectors));
  std::vector<int> want(n);
  for (int i = 0; i < n; ++i) {
    int s = selectors[i];
    want[i] = s == 0 ? 100 : s == 1 ? i + 1000 : s == 2 ? i * i : 7;
  }
  EXPECT_TRUE(ArraysEqual(device.Download<int>(out, n), want, "brx.idx over 4 targets"));
  selectors[5] = 9;
  CallStatus status = device.TryLaunch(device.Get(module, "jump_table"), {1}, {n}, 0, out, device.Upload(selectors));
  EXPECT_EQ(status.code(), cu::kIllegalInstruction) << status.message();
  EXPECT_NE(status.message().find("brx.idx index 9"), std::string::npos) << status.message();
}

// Two modules in one linked image (what libcuda hands over for -rdc=true): one defines what the other declares; both
// have a private helper of the same name; a .visible symbol defined twice is refused, naming it.
TEST_F(JumpTableTest, LinkedImagesBindDeclarationsAndKeepPrivateNamesApart) {
  const std::string kernel_unit = R"(.version 7.8
.target sm_75
.address_size 64
.extern .func (.param .b32 out) triple(.param .b32 in);
.extern .global .align 4 .u32 counter;
.func (.param .b32 out) helper(.param .b32 in)
{
	.reg .b32 %r<3>;
	ld.param.u32 %r1, [in];
	add.u32 %r2, %r1, 1;
	st.param.b32 [out], %r2;
	ret;
}
.visible .entry run(.param .u64 run_out)
{
	.reg .b32 %r<5>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [run_out];
	mov.u32 %r1, %tid.x;
	{
	.param .b32 a;
	.param .b32 b;
	st.param.b32 [a], %r1;
	call (b), triple, (a);
	ld.param.b32 %r2, [b];
	}
	{
	.param .b32 c;
	.param .b32 d;
	st.param.b32 [c], %r2;
	call (d), helper, (c);
	ld.param.b32 %r3, [d];
	}
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r3;
	atom.global.add.u32 %r4, [counter], 1;
	ret;
}
)";
  const std::string library_unit = R"(//
// A second module.
//
.version 7.8
.target sm_75
.address_size 64
.visible .global .align 4 .u32 counter = 5;
.func (.param .b32 out) helper(.param .b32 in)
{
	.reg .b32 %r<3>;
	ld.param.u32 %r1, [in];
	mul.lo.u32 %r2, %r1, 3;
	st.param.b32 [out], %r2;
	ret;
}
.visible .func (.param .b32 out) triple(.param .b32 in)
{
	.reg .b32 %r<3>;
	ld.param.u32 %r1, [in];
	{
	.param .b32 x;
	.param .b32 y;
	st.param.b32 [x], %r1;
	call (y), helper, (x);
	ld.param.b32 %r2, [y];
	}
	st.param.b32 [out], %r2;
	ret;
}
)";
  Module* module = LoadPtxText(kernel_unit + library_unit);
  uint64_t out = Output<uint32_t>(32);
  Launch(Get(module, "run"), {1}, {32}, 0, out);
  std::vector<uint32_t> want(32);
  for (uint32_t i = 0; i < 32; ++i) want[i] = 3 * i + 1;  // The library's helper triples; the kernel's adds one.
  EXPECT_TRUE(ArraysEqual(Download<uint32_t>(out, 32), want, "triple() from the library, helper() from each unit"));

  Module* refused = nullptr;
  CallStatus twice = device().LoadPtx(library_unit + library_unit, &refused);
  EXPECT_EQ(twice.code(), cu::kInvalidPtx) << twice.message();
  EXPECT_NE(twice.message().find("'triple' is defined in module 1 and in module 2"), std::string::npos)
      << twice.message();
}

}  // namespace
}  // namespace gpupool::emu::test
