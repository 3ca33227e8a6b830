// Loads and conversions into registers wider than the instruction's type: the PTX ISA's relaxed type-checking rules
// for destination operands ("Operand Size Exceeding Instruction-Type Size") make ld and cvt sign-extend signed
// types to the register's width and zero-extend unsigned and bit-size ones. Hand-written PTX covers every state
// space and load qualifier the emulator accepts, scalar and vector, warp-wide and lane by lane.
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_harness.h"

namespace gpupool::emu::test {
namespace {

std::string Ptx(const std::string& body) { return ".version 8.0\n.target sm_90\n.address_size 64\n" + body; }

// The words every kernel reads, one per thread; 13 threads: a partial warp, all lanes in one group.
const std::vector<int32_t> kWords = {-3,
                                     INT_MIN,
                                     -1,
                                     0,
                                     1,
                                     INT_MAX,
                                     INT_MIN + 1,
                                     -32768,
                                     32767,
                                     -129,
                                     128,
                                     0x12348765,
                                     static_cast<int32_t>(0x8000ff80)};

// One kernel per way of loading: thread i loads the 32-bit word i of `in` (where `stage` puts it: as read, in
// shared or local memory) with `load` into %rd10 (and %rd11..13 for vectors), and stores %rd10 to out[i].
struct LoadCase {
  std::string name;
  std::string load;   // Loads from the address in %rd5 (a 32-bit one in %r5 for the *32 forms).
  std::string stage;  // Copies the word at %rd5 elsewhere and points %rd5 (and %r5) there.
  int64_t (*expect)(int32_t word);
};

int64_t SignExtend32(int32_t w) { return w; }
int64_t ZeroExtend32(int32_t w) { return static_cast<int64_t>(static_cast<uint32_t>(w)); }
int64_t SignExtend16(int32_t w) { return static_cast<int16_t>(w & 0xffff); }
int64_t SignExtend8(int32_t w) { return static_cast<int8_t>(w & 0xff); }
int64_t ZeroExtend16(int32_t w) { return w & 0xffff; }

const char* const kToShared =
    "  ld.global.u32 %r6, [%rd5];\n"
    "  mov.u64 %rd6, words;\n"
    "  add.s64 %rd5, %rd6, %rd4;\n"
    "  st.shared.u32 [%rd5], %r6;\n"
    "  cvt.u32.u64 %r5, %rd5;\n"
    "  bar.sync 0;\n";
const char* const kToLocal =
    "  ld.global.u32 %r6, [%rd5];\n"
    "  mov.u64 %rd5, slot;\n"
    "  st.local.u32 [%rd5], %r6;\n"
    "  cvt.u32.u64 %r5, %rd5;\n";
const char* const kToGeneric = "  cvta.global.u64 %rd5, %rd5;\n";

std::vector<LoadCase> LoadCases() {
  return {
      {"global_s32", "ld.global.s32 %rd10, [%rd5];", "", SignExtend32},
      {"global_nc_s32", "ld.global.nc.s32 %rd10, [%rd5];", "", SignExtend32},
      {"ldu_global_s32", "ldu.global.s32 %rd10, [%rd5];", "", SignExtend32},
      {"volatile_global_s32", "ld.volatile.global.s32 %rd10, [%rd5];", "", SignExtend32},
      {"relaxed_global_s32", "ld.relaxed.gpu.global.s32 %rd10, [%rd5];", "", SignExtend32},
      {"acquire_global_s32", "ld.acquire.sys.global.s32 %rd10, [%rd5];", "", SignExtend32},
      {"generic_s32", "ld.s32 %rd10, [%rd5];", kToGeneric, SignExtend32},
      {"global_v2_s32", "ld.global.v2.s32 {%rd10, %rd11}, [%rd5];", "", SignExtend32},
      {"global_v4_s32", "ld.global.v4.s32 {%rd10, %rd11, %rd12, %rd13}, [%rd5];", "", SignExtend32},
      {"shared_s32", "ld.shared.s32 %rd10, [%rd5];", kToShared, SignExtend32},
      {"shared32_s32", "ld.shared.s32 %rd10, [%r5];", kToShared, SignExtend32},
      {"shared_v2_s32", "ld.shared.v2.s32 {%rd10, %rd11}, [%rd5];", kToShared, SignExtend32},
      {"local_s32", "ld.local.s32 %rd10, [%rd5];", kToLocal, SignExtend32},
      {"local_v2_s32", "ld.local.v2.s32 {%rd10, %rd11}, [%rd5];", kToLocal, SignExtend32},
      {"global_s32_into_32_bits", "ld.global.s32 %r7, [%rd5];\n  cvt.u64.u32 %rd10, %r7;", "", ZeroExtend32},
      {"global_u32", "ld.global.u32 %rd10, [%rd5];", "", ZeroExtend32},
      {"global_b32", "ld.global.b32 %rd10, [%rd5];", "", ZeroExtend32},
      {"shared_u32", "ld.shared.u32 %rd10, [%rd5];", kToShared, ZeroExtend32},
      {"local_u32", "ld.local.u32 %rd10, [%rd5];", kToLocal, ZeroExtend32},
      {"global_s16", "ld.global.s16 %rd10, [%rd5];", "", SignExtend16},
      {"global_u16", "ld.global.u16 %rd10, [%rd5];", "", ZeroExtend16},
      {"global_s8", "ld.global.s8 %rd10, [%rd5];", "", SignExtend8},
      // With a cache policy operand (cuBLAS's kernels): a hint, the load the same.
      {"global_cache_hint_s32",
       "createpolicy.fractional.L2::evict_last.b64 %rd9, 1.0;\n  ld.global.L2::cache_hint.s32 %rd10, [%rd5], %rd9;", "",
       SignExtend32},
      {"global_nc_cache_hint_v2_s32",
       "createpolicy.fractional.L2::evict_first.b64 %rd9, 0.5;\n"
       "  ld.global.nc.L2::cache_hint.v2.s32 {%rd10, %rd11}, [%rd5], %rd9;",
       "", SignExtend32},
      {"local_s16", "ld.local.s16 %rd10, [%rd5];", kToLocal, SignExtend16},
  };
}

// The kernel for `c`: out[i] = (int64) load(in + 4 * i), with the vector forms reading in[i..i+3] (in has room).
std::string LoadKernel(const LoadCase& c) {
  return ".visible .entry " + c.name +
         "(.param .u64 in, .param .u64 out)\n"
         "{\n"
         "  .shared .align 16 .b8 words[256];\n"
         "  .local .align 16 .b8 slot[16];\n"
         "  .reg .b32 %r<8>;\n"
         "  .reg .b64 %rd<16>;\n"
         "  ld.param.u64 %rd1, [in];\n"
         "  ld.param.u64 %rd2, [out];\n"
         "  cvta.to.global.u64 %rd1, %rd1;\n"
         "  cvta.to.global.u64 %rd2, %rd2;\n"
         "  mov.u32 %r1, %tid.x;\n"
         "  mul.wide.u32 %rd4, %r1, 4;\n"
         "  add.s64 %rd5, %rd1, %rd4;\n" +
         c.stage + "  " + c.load +
         "\n"
         "  mul.wide.u32 %rd7, %r1, 8;\n"
         "  add.s64 %rd8, %rd2, %rd7;\n"
         "  st.global.u64 [%rd8], %rd10;\n"
         "  ret;\n"
         "}\n";
}

using LoadExtensionTest = EmuTest;

// Regression (issue 45): `ld.global.s32 %rd, [...]` of -3 gave 4294967293, so CuPy's int64 - int32 gave
// -4294967296 where 0 was expected. Every state space, qualifier and vector width sign-extends a signed load.
TEST_F(LoadExtensionTest, ASignedLoadIntoAWiderRegisterSignExtendsInEverySpace) {
  std::string module_text;
  for (const LoadCase& c : LoadCases()) module_text += LoadKernel(c);
  Module* module = LoadPtxText(Ptx(module_text));
  std::vector<int32_t> padded = kWords;
  padded.resize(kWords.size() + 4, 0);  // The v4 loads of the last threads read past the words.
  const uint64_t in = Upload(padded);
  const uint32_t n = static_cast<uint32_t>(kWords.size());
  for (const LoadCase& c : LoadCases()) {
    SCOPED_TRACE(c.name + ": " + c.load);
    const uint64_t out = Output<int64_t>(n);
    Launch(Get(module, c.name), {1}, {n}, 0, in, out);
    std::vector<int64_t> got = Download<int64_t>(out, n);
    std::string wrong;
    for (uint32_t i = 0; i < n; ++i) {
      if (got[i] == c.expect(kWords[i])) continue;
      wrong += "\n  word " + std::to_string(kWords[i]) + ": expected " + std::to_string(c.expect(kWords[i])) +
               ", got " + std::to_string(got[i]);
    }
    EXPECT_TRUE(wrong.empty()) << c.load << wrong;
  }
}

// The other ways a narrow signed value reaches a wide register: a .s32 kernel parameter and a .const word loaded
// into a 64-bit register, and the vector lanes beyond the first of a signed vector load.
TEST_F(LoadExtensionTest, SignedParamConstAndVectorLanesSignExtend) {
  Module* module = LoadPtxText(Ptx(R"(
.const .align 4 .s32 table[2] = {-3, -2147483648};
.visible .entry k(.param .s32 value, .param .u64 in, .param .u64 out)
{
  .reg .b64 %rd<16>;
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  ld.param.s32 %rd3, [value];
  st.global.u64 [%rd2], %rd3;
  ld.const.s32 %rd4, [table];
  st.global.u64 [%rd2+8], %rd4;
  ld.const.s32 %rd5, [table+4];
  st.global.u64 [%rd2+16], %rd5;
  ld.global.v4.s32 {%rd6, %rd7, %rd8, %rd9}, [%rd1];
  st.global.u64 [%rd2+24], %rd6;
  st.global.u64 [%rd2+32], %rd7;
  st.global.u64 [%rd2+40], %rd8;
  st.global.u64 [%rd2+48], %rd9;
  ld.global.v2.s16 {%rd10, %rd11}, [%rd1];
  st.global.u64 [%rd2+56], %rd10;
  st.global.u64 [%rd2+64], %rd11;
  ret;
}
)"));
  const uint64_t in = Upload(std::vector<int32_t>{-7, INT_MIN, 5, -1});
  const uint64_t out = Output<int64_t>(9);
  Launch(Get(module, "k"), {1}, {1}, 0, int32_t{-5}, in, out);
  const std::vector<int64_t> want = {-5, -3, INT_MIN, -7, INT_MIN, 5, -1, -7, -1};
  EXPECT_EQ(Download<int64_t>(out, 9), want);
}

// cvt into a register wider than its destination type: .s32 sign-extends, .u32 zero-extends (the same relaxed
// rules as ld).
TEST_F(LoadExtensionTest, ConversionsIntoAWiderRegisterExtendByTheDestinationType) {
  Module* module = LoadPtxText(Ptx(R"(
.visible .entry k(.param .u64 out)
{
  .reg .b16 %rs<4>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<16>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.b16 %rs1, -3;
  cvt.s32.s16 %rd2, %rs1;
  st.global.u64 [%rd1], %rd2;
  cvt.u32.s16 %rd3, %rs1;
  st.global.u64 [%rd1+8], %rd3;
  mov.b32 %r1, -3;
  cvt.s16.s32 %rd4, %r1;
  st.global.u64 [%rd1+16], %rd4;
  cvt.s64.s32 %rd5, %r1;
  st.global.u64 [%rd1+24], %rd5;
  cvt.u64.u32 %rd6, %r1;
  st.global.u64 [%rd1+32], %rd6;
  cvt.rzi.s32.f32 %rd7, 0fC0400000;
  st.global.u64 [%rd1+40], %rd7;
  ret;
}
)"));
  const uint64_t out = Output<int64_t>(6);
  Launch(Get(module, "k"), {1}, {1}, 0, out);
  const std::vector<int64_t> want = {-3, 0xfffffffd, -3, -3, 0xfffffffd, -3};
  EXPECT_EQ(Download<int64_t>(out, 6), want);
}

}  // namespace
}  // namespace gpupool::emu::test
