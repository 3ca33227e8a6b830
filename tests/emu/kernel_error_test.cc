// Kernels that fault, modules the device must refuse, and barriers that never complete: each must give CUDA's
// error code with a useful message, faults must be sticky until ResetContext(), and nothing may hang.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "emu/exec.h"
#include "kernel_check.h"
#include "kernel_harness.h"

namespace gpupool::emu::test {
namespace {

using ErrorTest = KernelTest;

// After a sticky fault: StickyError() and every later call report it; ResetContext() clears it, frees
// everything, and a freshly loaded module works again.
void ExpectStickyThenRecover(ErrorTest* t, Code code) {
  EXPECT_EQ(t->device().StickyError().code(), code) << "StickyError() after the fault";
  uint64_t ptr = 0;
  EXPECT_EQ(t->device().Malloc(256, &ptr).code(), code) << "Malloc after the fault";
  EXPECT_EQ(t->device().Synchronize().code(), code) << "Synchronize after the fault";
  t->device().ResetContext();
  EXPECT_TRUE(t->device().StickyError().ok()) << Describe(t->device().StickyError());
  const int n = 1000;
  uint64_t out = t->Output<int>(n);
  t->Launch(t->Kernel("errors", "fill_index"), {4}, {256}, 0, out, n);
  std::vector<int> want(n);
  for (int i = 0; i < n; ++i) want[i] = i * 3 + 1;
  EXPECT_TRUE(ArraysEqual(t->Download<int>(out, n), want, "after ResetContext"));
}

TEST_P(ErrorTest, OutOfBoundsWriteIsIllegalAddressAndSticky) {
  Module* module = LoadKernel("errors");
  Function* write_at = Get(module, "write_at");
  Function* fill = Get(module, "fill_index");
  uint64_t buffer = Zeros<int>(64);
  const uint64_t far_away = buffer + (1ull << 40);  // Far outside any allocation of a 256 MiB device.
  EmuStatus status = TryLaunch(write_at, {1}, {32}, 0, far_away, 7);
  EXPECT_EQ(status.code(), Code::kIllegalAddress) << Describe(status);
  EXPECT_FALSE(status.message().empty());
  // A launch after the fault fails with the same error, as on a GPU.
  int n = 16;
  void* params[] = {&buffer, &n};
  EXPECT_EQ(device().Launch(fill, LaunchConfig{{1}, {32}, 0, nullptr}, params).code(), Code::kIllegalAddress)
      << "Launch after the fault";
  ExpectStickyThenRecover(this, Code::kIllegalAddress);
}

TEST_P(ErrorTest, NullPointerReadIsIllegalAddress) {
  uint64_t out = Output<int>(1);
  EmuStatus status = TryLaunch(Kernel("errors", "read_at"), {1}, {32}, 0, uint64_t{0}, out);
  EXPECT_EQ(status.code(), Code::kIllegalAddress) << Describe(status);
  ExpectStickyThenRecover(this, Code::kIllegalAddress);
}

TEST_P(ErrorTest, MisalignedStoreIsMisalignedAddress) {
  uint64_t buffer = Zeros<int>(16);
  EmuStatus status = TryLaunch(Kernel("errors", "misaligned_write"), {1}, {32}, 0, buffer);
  EXPECT_EQ(status.code(), Code::kMisalignedAddress) << Describe(status);
  ExpectStickyThenRecover(this, Code::kMisalignedAddress);
}

TEST_P(ErrorTest, FailedAssertIsAssertWithMessage) {
  TRACE_SEED();
  const int n = 512;
  std::vector<int> x(n);
  for (int& v : x) v = Int(0, 41);
  x[Int(0, n - 1)] = 42;
  TakePrintf();
  EmuStatus status = TryLaunch(Kernel("errors", "assert_kernel"), {4}, {128}, 0, Upload(x), n);
  EXPECT_EQ(status.code(), Code::kAssert) << Describe(status);
  // The failing expression appears in the error message or in the device's output, as the CUDA driver prints
  // "...: block: [b,0,0], thread: [t,0,0] Assertion `v != 42` failed."
  std::string printed = TakePrintf();
  EXPECT_TRUE(status.message().find("v != 42") != std::string::npos || printed.find("v != 42") != std::string::npos)
      << "message: " << status.message() << "\nprinted: " << printed;
  ExpectStickyThenRecover(this, Code::kAssert);
}

TEST_P(ErrorTest, PassingAssertIsFine) {
  const int n = 512;
  std::vector<int> x(n, 7);
  Launch(Kernel("errors", "assert_kernel"), {4}, {128}, 0, Upload(x), n);
  EXPECT_TRUE(device().StickyError().ok());
}

TEST_P(ErrorTest, TrapIsLaunchFailed) {
  EmuStatus status = TryLaunch(Kernel("errors", "trap_kernel"), {2}, {64}, 0, 37);
  EXPECT_EQ(status.code(), Code::kLaunchFailed) << Describe(status);
  ExpectStickyThenRecover(this, Code::kLaunchFailed);
}

TEST_P(ErrorTest, BarrierDeadlockFailsInsteadOfHanging) {
  Function* f = Kernel("barrier", "barrier_deadlock");
  uint64_t out = Zeros<int>(64);
  // The launch runs on another thread so that a hang fails this test instead of the whole run.
  auto result = std::async(std::launch::async, [&] { return TryLaunch(f, {2}, {64}, 0, out); });
  if (result.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    ADD_FAILURE() << "a barrier deadlock hung the device for 120 s";
    std::fprintf(stderr, "emu_kernel_tests: aborting: the device hangs on a barrier deadlock\n");
    std::fflush(nullptr);
    std::_Exit(1);  // The hung launch cannot be cancelled, and ~Device would wait for it.
  }
  EmuStatus status = result.get();
  EXPECT_EQ(status.code(), Code::kLaunchTimeout) << Describe(status);
  EXPECT_FALSE(status.message().empty());
  device().ResetContext();
}

TEST_P(ErrorTest, ExitedThreadsReleaseBarrier) {
  // Not a deadlock: per the PTX ISA, threads that exit stop holding up a barrier.
  uint64_t out = Zeros<int>(64);
  auto result = std::async(std::launch::async,
                           [&] { return TryLaunch(Kernel("barrier", "barrier_after_exit"), {1}, {64}, 0, out); });
  if (result.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    ADD_FAILURE() << "barrier with exited threads hung for 120 s";
    std::fflush(nullptr);
    std::_Exit(1);
  }
  EmuStatus status = result.get();
  ASSERT_TRUE(status.ok()) << Describe(status);
  std::vector<int> want(64, 0);
  for (int t = 0; t < 16; ++t) want[t] = 1;
  EXPECT_TRUE(ArraysEqual(Download<int>(out, 64), want, "flags of the threads past the barrier"));
}

TEST_P(ErrorTest, TooMuchDynamicSharedMemoryIsRefusedNotSticky) {
  Function* f = Kernel("params", "dyn_shared_reverse");
  uint64_t in = Zeros<float>(128), out = Zeros<float>(128);
  int n = 128;
  void* params[] = {&in, &out, &n};
  const uint32_t too_much = device().properties().shared_memory_per_block_optin + 4096;
  EmuStatus status = device().Launch(f, LaunchConfig{{1}, {128}, too_much, nullptr}, params);
  if (status.ok()) status = device().Synchronize();
  EXPECT_FALSE(status.ok()) << "launch with " << too_much << " bytes of dynamic shared memory";
  EXPECT_TRUE(device().StickyError().ok()) << "a refused launch is not a fault: " << Describe(device().StickyError());
}

GPUPOOL_INSTANTIATE_VARIANTS(ErrorTest);

// ---- Images the device must refuse (no variants). ----

using RefuseTest = EmuTest;

TEST_F(RefuseTest, SassOnlyFatbinIsNoBinaryForGpu) {
  std::string image = ReadFile(FatbinPath("basic", "sm80"));
  Module* module = nullptr;
  EmuStatus status = device().LoadModule(image.data(), image.size(), &module);
  EXPECT_EQ(status.code(), Code::kNoBinaryForGpu) << Describe(status);
  EXPECT_TRUE(device().StickyError().ok()) << "a refused module is not a fault";
}

// The 1-based line of the first line of `text` containing `needle`.
int LineOf(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  if (at == std::string::npos) throw HarnessError("'" + needle + "' not in the PTX file");
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

void ExpectRefusedPtx(RefuseTest* t, const std::string& file, const std::string& instruction) {
  std::string ptx = ReadFile(KernelSourcePath(file));
  const int line = LineOf(ptx, instruction);
  Module* module = nullptr;
  EmuStatus status = t->device().LoadPtx(ptx, &module);
  EXPECT_EQ(status.code(), Code::kInvalidPtx) << Describe(status);
  const std::string opcode = instruction.substr(0, instruction.find('.'));
  EXPECT_NE(status.message().find(opcode), std::string::npos)
      << "the message should name the instruction '" << instruction << "': " << status.message();
  EXPECT_NE(status.message().find(std::to_string(line)), std::string::npos)
      << "the message should give line " << line << ": " << status.message();
  EXPECT_TRUE(t->device().StickyError().ok());
  // The same text through LoadModule (which accepts PTX too) is refused the same way.
  EXPECT_EQ(t->device().LoadModule(ptx.c_str(), ptx.size() + 1, &module).code(), Code::kInvalidPtx);
}

// Texture objects run (kernel_texture_test.cc); texture references, removed in CUDA 12, are refused by name.
TEST_F(RefuseTest, TextureReferenceIsInvalidPtx) {
  std::string ptx = ReadFile(KernelSourcePath("unsupported_texref.ptx"));
  Module* module = nullptr;
  EmuStatus status = device().LoadPtx(ptx, &module);
  EXPECT_EQ(status.code(), Code::kInvalidPtx) << Describe(status);
  for (const std::string& part : {std::string("old_texture"), std::string("removed in CUDA 12"),
                                  std::to_string(LineOf(ptx, ".global .texref"))}) {
    EXPECT_NE(status.message().find(part), std::string::npos) << "the message should say " << part << ": "
                                                              << status.message();
  }
  EXPECT_TRUE(device().StickyError().ok());
}

// A texture handle that names a variable rather than a register is a texture reference too.
TEST_F(RefuseTest, TextureReferenceOperandIsInvalidPtx) {
  std::string ptx = ReadFile(KernelSourcePath("unsupported_texref.ptx"));
  ptx.replace(ptx.find(".global .texref old_texture;"), 28, ".global .u64 old_texture;   ");
  Module* module = nullptr;
  EmuStatus status = device().LoadPtx(ptx, &module);
  EXPECT_EQ(status.code(), Code::kInvalidPtx) << Describe(status);
  EXPECT_NE(status.message().find("removed in CUDA 12"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(std::to_string(LineOf(ptx, "tex.2d"))), std::string::npos) << status.message();
}

TEST_F(RefuseTest, UnknownOpcodeIsInvalidPtx) { ExpectRefusedPtx(this, "unknown_opcode.ptx", "frobnicate.b32"); }

TEST_F(RefuseTest, CorruptFatbinIsInvalidImage) {
  std::string image = ReadFile(FatbinPath("basic", "default"));
  image.resize(image.size() / 3);  // Truncated: entries run past the end.
  Module* module = nullptr;
  EmuStatus status = device().LoadModule(image.data(), image.size(), &module);
  EXPECT_EQ(status.code(), Code::kInvalidImage) << Describe(status);
}

TEST_F(RefuseTest, UnknownKernelNameIsNotFound) {
  Module* module = LoadFile(FatbinPath("basic", "default"));
  Function* f = nullptr;
  EXPECT_EQ(device().GetFunction(module, "no_such_kernel", &f).code(), Code::kNotFound);
}

// ---- Issue "Tenant isolation, hardened", item 5: what a module declares, and what a launch multiplies it by,
// is bounded as a GPU bounds it, each refused naming the limit, and never reaches the interpreter unbounded. ----

std::string Ptx(const std::string& body) {
  return ".version 7.0\n.target sm_75\n.address_size 64\n" + body;
}

// What ptxas refuses for a GPU of compute capability 7.x-9.x is refused at load, with the limit in the message.
TEST_F(RefuseTest, ResourcesBeyondAGpusLimitsAreRefusedAtLoad) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {".visible .entry k() { .local .align 4 .b8 a[524305]; ret; }", "at most 512 KiB"},
      // A terabyte of locals once wrapped to nothing in the 32-bit frame size and loaded.
      {".visible .entry k() { .local .align 4 .b8 a[1099511627776]; ret; }", "at most 512 KiB"},
      {".shared .align 4 .b8 s[49153];\n.visible .entry k() { ret; }", "at most 48 KiB per block"},
      {".visible .entry k() { .shared .align 4 .b8 s[30000]; .shared .align 4 .b8 t[30000]; ret; }",
       "'k' takes 60000 bytes of static shared memory; a GPU allows at most 48 KiB per block"},
      {".visible .entry k(.param .align 4 .b8 p[32768]) { ret; }", "at most 32764"},
      {".visible .entry k(.param .align 4 .b8 p[4294967312]) { ret; }", "at most 32764"},
      {".visible .entry k() { .param .b8 p[70000]; ret; }", "at most 64 KiB per function"},
      {".visible .entry k() { .reg .b32 %r<65537>; ret; }", "65536 registers"},
  };
  for (const auto& [body, limit] : cases) {
    SCOPED_TRACE(body);
    Module* module = nullptr;
    EmuStatus status = device().LoadPtx(Ptx(body), &module);
    EXPECT_EQ(status.code(), Code::kInvalidPtx) << Describe(status);
    EXPECT_NE(status.message().find(limit), std::string::npos) << "should name the limit: " << status.message();
  }
  // At the limits, modules load, and cuFuncGetAttribute's values (Device::Attributes) and cuDeviceGetAttribute's
  // (DeviceProperties) agree with the limits.
  struct AtLimit {
    const char* body;
    int shared, local, registers;
  };
  for (const AtLimit& c : {AtLimit{".visible .entry k() { .local .align 4 .b8 a[524288]; ret; }", 0, 524288, 16},
                           AtLimit{".visible .entry k() { .shared .align 4 .b8 s[49152]; ret; }", 49152, 0, 16},
                           AtLimit{".visible .entry k(.param .align 4 .b8 p[32764]) { ret; }", 0, 0, 16},
                           AtLimit{".visible .entry k() { .reg .b32 %r<65536>; ret; }", 0, 0, 255}}) {
    SCOPED_TRACE(c.body);
    Module* module = nullptr;
    ASSERT_TRUE(device().LoadPtx(Ptx(c.body), &module).ok());
    int shared = -1, local = -1, registers = -1;
    Device::Attributes(Get(module, "k"), &shared, &local, &registers);
    EXPECT_EQ(shared, c.shared);
    EXPECT_EQ(local, c.local);
    EXPECT_EQ(registers, c.registers) << "NUM_REGS: at least 16, at most a GPU's 255 per thread";
  }
  EXPECT_EQ(device().properties().shared_memory_per_block, 48 * 1024) << "the static shared limit at load";
  EXPECT_GE(device().properties().shared_memory_per_block_optin, device().properties().shared_memory_per_block);
  EXPECT_TRUE(device().StickyError().ok());
}

// A kernel at the local memory limit runs with small blocks (its locals reach their last byte), and a block whose
// registers, stacks and shared memory would take more than the emulator holds for a block is refused at launch,
// as a GPU refuses a block it cannot hold, without a fault.
TEST_F(RefuseTest, BlocksBeyondTheEmulatorsFootprintAreRefusedAtLaunch) {
  Module* module = LoadPtxText(Ptx(R"(
.visible .entry big_local(.param .u64 out)
{
  .local .align 4 .b8 a[524288];
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, 7;
  st.local.u32 [a+524284], %r1;
  ld.local.u32 %r2, [a+524284];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r2;
  ret;
}
.visible .entry many_registers(.param .u64 out)
{
  .reg .b32 %r<65530>;
  .reg .b64 %rd<4>;
  mov.u32 %r65529, 9;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r65529;
  ret;
}
)"));
  uint64_t out = Zeros<uint32_t>(1);
  Launch(Get(module, "big_local"), {2}, {32}, 0, out);
  EXPECT_EQ(DownloadValue<uint32_t>(out), 7u);
  Launch(Get(module, "many_registers"), {2}, {32}, 0, out);
  EXPECT_EQ(DownloadValue<uint32_t>(out), 9u);
  for (const char* kernel : {"big_local", "many_registers"}) {
    SCOPED_TRACE(kernel);
    EmuStatus status = TryLaunch(Get(module, kernel), {1}, {1024}, 0, out);
    EXPECT_EQ(status.code(), Code::kLaunchOutOfResources) << Describe(status);
    EXPECT_NE(status.message().find("too many resources requested for launch"), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find(std::to_string(internal::kMaxBlockFootprintBytes)), std::string::npos)
        << "should name the limit: " << status.message();
    EXPECT_TRUE(device().StickyError().ok()) << "a refused launch is not a fault";
    // cuFuncGetAttribute's MAX_THREADS_PER_BLOCK is the largest block that is not refused, in whole warps.
    const int most = device().MaxThreadsPerBlock(Get(module, kernel));
    EXPECT_GT(most, 0);
    EXPECT_LT(most, 1024);
    EXPECT_EQ(most % 32, 0) << most;
    EXPECT_TRUE(TryLaunch(Get(module, kernel), {1}, {static_cast<uint32_t>(most)}, 0, out).ok()) << most;
    EXPECT_EQ(TryLaunch(Get(module, kernel), {1}, {static_cast<uint32_t>(most + 32)}, 0, out).code(),
              Code::kLaunchOutOfResources) << most;
  }
  // A parameter buffer far beyond what the kernel takes is refused, not copied to every thread.
  std::vector<uint8_t> huge(1 << 20, 0);
  EmuStatus status = device().LaunchPacked(Get(module, "big_local"), LaunchConfig{{1}, {1}, 0, nullptr},
                                           huge.data(), huge.size());
  EXPECT_EQ(status.code(), Code::kInvalidValue) << Describe(status);
  EXPECT_NE(status.message().find("32764"), std::string::npos) << status.message();
}

// __launch_bounds__ (.maxntid, .reqntid) bound the block as on a GPU: MaxThreadsPerBlock reports the bound, a
// larger block is refused at launch with the bound named, and a bound of no threads is refused at load.
TEST_F(RefuseTest, LaunchBoundsAreTheKernelsMaxThreadsPerBlock) {
  Module* module = LoadPtxText(Ptx(R"(
.visible .entry bounded(.param .u64 out)
.maxntid 64, 2, 1
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  mov.u32 %r1, 5;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r1;
  ret;
}
.visible .entry required(.param .u64 out)
.reqntid 96
{
  ret;
}
.visible .entry unbounded(.param .u64 out)
{
  ret;
}
)"));
  EXPECT_EQ(device().MaxThreadsPerBlock(Get(module, "bounded")), 128);
  EXPECT_EQ(device().MaxThreadsPerBlock(Get(module, "required")), 96);
  EXPECT_EQ(device().MaxThreadsPerBlock(Get(module, "unbounded")), 1024);
  uint64_t out = Zeros<uint32_t>(1);
  Launch(Get(module, "bounded"), {1}, {64, 2}, 0, out);
  EXPECT_EQ(DownloadValue<uint32_t>(out), 5u);
  EmuStatus status = TryLaunch(Get(module, "bounded"), {1}, {129}, 0, out);
  EXPECT_EQ(status.code(), Code::kLaunchOutOfResources) << Describe(status);
  EXPECT_NE(status.message().find("launch bounds (.maxntid/.reqntid) allow 128"), std::string::npos)
      << status.message();
  EXPECT_EQ(TryLaunch(Get(module, "required"), {1}, {128}, 0, out).code(), Code::kLaunchOutOfResources);
  EXPECT_TRUE(device().StickyError().ok()) << "a refused launch is not a fault";

  Module* refused = nullptr;
  EmuStatus load = device().LoadPtx(Ptx(".visible .entry k()\n.maxntid 0, 1, 1\n{ ret; }"), &refused);
  EXPECT_EQ(load.code(), Code::kInvalidPtx) << Describe(load);
  EXPECT_NE(load.message().find("each must be 1 to 1024"), std::string::npos) << load.message();
}

// Recursion grows every lane's registers by the callee's: it stops at the block's register budget with a launch
// failure naming it, instead of growing the warp's register file toward 4096 frames of 60000 registers (60 GiB).
TEST_F(RefuseTest, DeepRecursionOfLargeFramesStopsAtTheRegisterBudget) {
  Module* module = LoadPtxText(Ptx(R"(
.func deep(.param .b32 n)
{
  .reg .b32 %r<60000>;
  ld.param.b32 %r1, [n];
  add.s32 %r2, %r1, 1;
  {
    .param .b32 arg;
    st.param.b32 [arg], %r2;
    call deep, (arg);
  }
  ret;
}
.visible .entry recurse()
{
  .reg .b32 %r<2>;
  mov.u32 %r1, 0;
  {
    .param .b32 arg;
    st.param.b32 [arg], %r1;
    call deep, (arg);
  }
  ret;
}
)"));
  EmuStatus status = TryLaunch(Get(module, "recurse"), {1}, {32}, 0);
  EXPECT_EQ(status.code(), Code::kLaunchFailed) << Describe(status);
  EXPECT_NE(status.message().find("register stack overflow"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace gpupool::emu::test
