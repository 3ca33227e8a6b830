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
void ExpectStickyThenRecover(ErrorTest* t, int code) {
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
  CallStatus status = TryLaunch(write_at, {1}, {32}, 0, far_away, 7);
  EXPECT_EQ(status.code(), cu::kIllegalAddress) << Describe(status);
  EXPECT_FALSE(status.message().empty());
  // A launch after the fault fails with the same error, as on a GPU.
  int n = 16;
  void* params[] = {&buffer, &n};
  EXPECT_EQ(device().Launch(fill, LaunchConfig{{1}, {32}, 0, nullptr}, params).code(), cu::kIllegalAddress)
      << "Launch after the fault";
  ExpectStickyThenRecover(this, cu::kIllegalAddress);
}

TEST_P(ErrorTest, NullPointerReadIsIllegalAddress) {
  uint64_t out = Output<int>(1);
  CallStatus status = TryLaunch(Kernel("errors", "read_at"), {1}, {32}, 0, uint64_t{0}, out);
  EXPECT_EQ(status.code(), cu::kIllegalAddress) << Describe(status);
  ExpectStickyThenRecover(this, cu::kIllegalAddress);
}

TEST_P(ErrorTest, MisalignedStoreIsMisalignedAddress) {
  uint64_t buffer = Zeros<int>(16);
  CallStatus status = TryLaunch(Kernel("errors", "misaligned_write"), {1}, {32}, 0, buffer);
  EXPECT_EQ(status.code(), cu::kMisalignedAddress) << Describe(status);
  ExpectStickyThenRecover(this, cu::kMisalignedAddress);
}

TEST_P(ErrorTest, FailedAssertIsAssertWithMessage) {
  TRACE_SEED();
  const int n = 512;
  std::vector<int> x(n);
  for (int& v : x) v = Int(0, 41);
  x[Int(0, n - 1)] = 42;
  TakePrintf();
  CallStatus status = TryLaunch(Kernel("errors", "assert_kernel"), {4}, {128}, 0, Upload(x), n);
  EXPECT_EQ(status.code(), cu::kAssert) << Describe(status);
  // The failing expression appears in the error message or in the device's output, as the CUDA driver prints
  // "...: block: [b,0,0], thread: [t,0,0] Assertion `v != 42` failed."
  std::string printed = TakePrintf();
  EXPECT_TRUE(status.message().find("v != 42") != std::string::npos || printed.find("v != 42") != std::string::npos)
      << "message: " << status.message() << "\nprinted: " << printed;
  ExpectStickyThenRecover(this, cu::kAssert);
}

TEST_P(ErrorTest, PassingAssertIsFine) {
  const int n = 512;
  std::vector<int> x(n, 7);
  Launch(Kernel("errors", "assert_kernel"), {4}, {128}, 0, Upload(x), n);
  EXPECT_TRUE(device().StickyError().ok());
}

TEST_P(ErrorTest, TrapIsLaunchFailed) {
  CallStatus status = TryLaunch(Kernel("errors", "trap_kernel"), {2}, {64}, 0, 37);
  EXPECT_EQ(status.code(), cu::kLaunchFailed) << Describe(status);
  ExpectStickyThenRecover(this, cu::kLaunchFailed);
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
  CallStatus status = result.get();
  EXPECT_EQ(status.code(), cu::kLaunchTimeout) << Describe(status);
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
  CallStatus status = result.get();
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
  CallStatus status = device().Launch(f, LaunchConfig{{1}, {128}, too_much, nullptr}, params);
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
  CallStatus status = device().LoadModule(image.data(), image.size(), &module);
  EXPECT_EQ(status.code(), cu::kNoBinaryForGpu) << Describe(status);
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
  CallStatus status = t->device().LoadPtx(ptx, &module);
  EXPECT_EQ(status.code(), cu::kInvalidPtx) << Describe(status);
  const std::string opcode = instruction.substr(0, instruction.find('.'));
  EXPECT_NE(status.message().find(opcode), std::string::npos)
      << "the message should name the instruction '" << instruction << "': " << status.message();
  EXPECT_NE(status.message().find(std::to_string(line)), std::string::npos)
      << "the message should give line " << line << ": " << status.message();
  EXPECT_TRUE(t->device().StickyError().ok());
  // The same text through LoadModule (which accepts PTX too) is refused the same way.
  EXPECT_EQ(t->device().LoadModule(ptx.c_str(), ptx.size() + 1, &module).code(), cu::kInvalidPtx);
}

// Texture objects run (kernel_texture_test.cc); texture references, removed in CUDA 12, are refused by name.
TEST_F(RefuseTest, TextureReferenceIsInvalidPtx) {
  std::string ptx = ReadFile(KernelSourcePath("unsupported_texref.ptx"));
  Module* module = nullptr;
  CallStatus status = device().LoadPtx(ptx, &module);
  EXPECT_EQ(status.code(), cu::kInvalidPtx) << Describe(status);
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
  CallStatus status = device().LoadPtx(ptx, &module);
  EXPECT_EQ(status.code(), cu::kInvalidPtx) << Describe(status);
  EXPECT_NE(status.message().find("removed in CUDA 12"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(std::to_string(LineOf(ptx, "tex.2d"))), std::string::npos) << status.message();
}

TEST_F(RefuseTest, UnknownOpcodeIsInvalidPtx) { ExpectRefusedPtx(this, "unknown_opcode.ptx", "frobnicate.b32"); }

TEST_F(RefuseTest, CorruptFatbinIsInvalidImage) {
  std::string image = ReadFile(FatbinPath("basic", "default"));
  image.resize(image.size() / 3);  // Truncated: entries run past the end.
  Module* module = nullptr;
  CallStatus status = device().LoadModule(image.data(), image.size(), &module);
  EXPECT_EQ(status.code(), cu::kInvalidImage) << Describe(status);
}

TEST_F(RefuseTest, UnknownKernelNameIsNotFound) {
  Module* module = LoadFile(FatbinPath("basic", "default"));
  Function* f = nullptr;
  EXPECT_EQ(device().GetFunction(module, "no_such_kernel", &f).code(), cu::kNotFound);
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
    CallStatus status = device().LoadPtx(Ptx(body), &module);
    EXPECT_EQ(status.code(), cu::kInvalidPtx) << Describe(status);
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
                           AtLimit{".visible .entry k() { .reg .b32 %r<65536>; ret; }", 0, 0, 64}}) {
    SCOPED_TRACE(c.body);
    Module* module = nullptr;
    ASSERT_TRUE(device().LoadPtx(Ptx(c.body), &module).ok());
    int shared = -1, local = -1, registers = -1;
    device().Attributes(Get(module, "k"), &shared, &local, &registers);
    EXPECT_EQ(shared, c.shared);
    EXPECT_EQ(local, c.local);
    EXPECT_EQ(registers, c.registers)
        << "NUM_REGS: at least 16; without launch bounds at most what lets the largest block launch (64)";
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
    CallStatus status = TryLaunch(Get(module, kernel), {1}, {1024}, 0, out);
    EXPECT_EQ(status.code(), cu::kLaunchOutOfResources) << Describe(status);
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
              cu::kLaunchOutOfResources) << most;
  }
  // A parameter buffer far beyond what the kernel takes is refused, not copied to every thread.
  std::vector<uint8_t> huge(1 << 20, 0);
  CallStatus status = device().LaunchPacked(Get(module, "big_local"), LaunchConfig{{1}, {1}, 0, nullptr},
                                           huge.data(), huge.size());
  EXPECT_EQ(status.code(), cu::kInvalidValue) << Describe(status);
  EXPECT_NE(status.message().find("32764"), std::string::npos) << status.message();
}

// A module's kernels each report and are limited by their own static shared memory (the variables they and their
// callees refer to), as on a GPU, not by the module's: Thrust's modules hold hundreds of kernels whose shared
// variables add up to far more than a block may have (their occupancy came out as zero blocks and their launches
// were refused). A kernel's registers fit its launch bounds, as ptxas fits them.
TEST_F(RefuseTest, KernelsReportTheirOwnSharedMemoryAndRegistersWithinTheirLaunchBounds) {
  Module* module = LoadPtxText(Ptx(R"(
.shared .align 4 .b8 big_tile[40960];
.shared .align 8 .b8 helper_tile[1024];
.extern .shared .align 16 .b8 dynamic_area[];
.func (.reg .b32 out) helper_sum(.reg .b32 in)
{
  .reg .b32 %r<3>;
  st.shared.u32 [helper_tile+1020], in;
  ld.shared.u32 %r1, [helper_tile+1020];
  add.u32 out, %r1, 1;
  ret;
}
.visible .entry big(.param .u64 out)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  mov.u32 %r1, 5;
  st.shared.u32 [big_tile+40956], %r1;
  ld.shared.u32 %r2, [big_tile+40956];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r2;
  ret;
}
.visible .entry small(.param .u64 out, .param .u32 last)
{
  .reg .b32 %r<5>;
  .reg .b64 %rd<5>;
  ld.param.u32 %r1, [last];
  call (%r2), helper_sum, (%r1);
  mov.u64 %rd3, dynamic_area;
  cvt.u64.u32 %rd4, %r1;
  add.u64 %rd3, %rd3, %rd4;
  st.shared.u8 [%rd3], %r2;
  ld.shared.u8 %r3, [%rd3];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r3;
  ret;
}
.visible .entry bounded_1024(.param .u64 out) .maxntid 1024, 1, 1
{
  .reg .b32 %r<300>;
  ret;
}
.visible .entry bounded_256_twice(.param .u64 out) .maxntid 128, 2, 1 .minnctapersm 2
{
  .reg .b32 %r<300>;
  ret;
}
.visible .entry bounded_maxnreg(.param .u64 out) .maxnreg 40
{
  .reg .b32 %r<300>;
  ret;
}
.visible .entry unbounded(.param .u64 out)
{
  .reg .b32 %r<300>;
  ret;
}
)"));
  struct Expected {
    const char* kernel;
    int shared, registers;
  };
  for (const Expected& e : {Expected{"big", 40960, 16}, Expected{"small", 1024, 16},
                            Expected{"bounded_1024", 0, 64}, Expected{"bounded_256_twice", 0, 128},
                            Expected{"bounded_maxnreg", 0, 40}, Expected{"unbounded", 0, 64}}) {
    SCOPED_TRACE(e.kernel);
    int shared = -1, local = -1, registers = -1;
    device().Attributes(Get(module, e.kernel), &shared, &local, &registers);
    EXPECT_EQ(shared, e.shared) << "SHARED_SIZE_BYTES: the kernel's own variables and its callees'";
    EXPECT_EQ(registers, e.registers) << "NUM_REGS within the launch bounds";
  }
  // `small` may take the rest of the opt-in limit as dynamic shared memory, and uses its last byte.
  const uint32_t optin = static_cast<uint32_t>(device().properties().shared_memory_per_block_optin);
  const uint32_t dynamic = optin - 1024;
  uint64_t out = Zeros<uint32_t>(1);
  Launch(Get(module, "small"), {2}, {32}, dynamic, out, dynamic - 1);
  EXPECT_EQ(DownloadValue<uint32_t>(out), dynamic & 0xffu) << "helper_sum(last) + 1, stored in the last byte";
  Launch(Get(module, "big"), {2}, {32}, optin - 40960, out);
  EXPECT_EQ(DownloadValue<uint32_t>(out), 5u);
  // One byte more than the limit is refused, naming it.
  CallStatus status = TryLaunch(Get(module, "small"), {1}, {32}, dynamic + 1, out, 0u);
  EXPECT_EQ(status.code(), cu::kLaunchOutOfResources) << Describe(status);
  EXPECT_NE(status.message().find(std::to_string(optin)), std::string::npos) << status.message();
  EXPECT_TRUE(device().StickyError().ok()) << "a refused launch is not a fault";
}

// A module that launches kernels from the device (dynamic parallelism: calls of the device runtime's
// cudaGetParameterBuffer / cudaLaunchDevice, under their CUDA 12 names too) is refused at load, naming the kernel
// and the call, whether the device runtime's definitions came with it or not; a module that only declares them,
// or whose device runtime calls itself, loads.
TEST_F(RefuseTest, DeviceSideLaunchesAreRefusedAtLoadNamingThem) {
  const std::string declarations = R"(
.extern .func (.param .b64 buffer) __cudaCDP2GetParameterBufferV2(.param .b64 f, .param .align 4 .b8 g[12],
                                                                  .param .align 4 .b8 b[12], .param .b32 s);
.extern .func (.param .b32 status) __cudaCDP2LaunchDeviceV2(.param .b64 buffer, .param .b64 stream);
.visible .entry child(.param .u64 out) { ret; }
)";
  const std::string parent = R"(
.visible .entry parent(.param .u64 out)
{
  .reg .b64 %rd<4>;
  .reg .b32 %r<2>;
  mov.u64 %rd1, child;
  mov.u64 %rd2, 0;
  { .param .b64 f; .param .align 4 .b8 g[12]; .param .align 4 .b8 b[12]; .param .b32 s; .param .b64 buffer;
    st.param.b64 [f], %rd1;
    call.uni (buffer), __cudaCDP2GetParameterBufferV2, (f, g, b, s);
    ld.param.b64 %rd3, [buffer]; }
  { .param .b64 buffer; .param .b64 stream; .param .b32 status;
    st.param.b64 [buffer], %rd3;
    st.param.b64 [stream], %rd2;
    call.uni (status), __cudaCDP2LaunchDeviceV2, (buffer, stream);
    ld.param.b32 %r1, [status]; }
  ret;
}
)";
  Module* module = nullptr;
  CallStatus status = device().LoadPtx(Ptx(declarations + parent), &module);
  EXPECT_EQ(status.code(), cu::kNotSupported) << Describe(status);
  for (const char* part : {"'parent' launches kernels from the device", "__cudaCDP2GetParameterBufferV2",
                           "dynamic parallelism", "launch the kernels from the host"}) {
    EXPECT_NE(status.message().find(part), std::string::npos) << "should say " << part << ": " << status.message();
  }
  // The device runtime's own definitions (as libcudadevrt's PTX would bring them) do not make it run.
  const std::string defined = R"(
.visible .func (.param .b64 buffer) cudaGetParameterBuffer(.param .b64 align, .param .b64 size)
{
  .reg .b64 %rd<2>;
  mov.u64 %rd1, 0;
  st.param.b64 [buffer], %rd1;
  ret;
}
.visible .entry old_parent(.param .u64 out)
{
  { .param .b64 align; .param .b64 size; .param .b64 buffer;
    call.uni (buffer), cudaGetParameterBuffer, (align, size); }
  ret;
}
)";
  status = device().LoadPtx(Ptx(defined), &module);
  EXPECT_EQ(status.code(), cu::kNotSupported) << Describe(status);
  EXPECT_NE(status.message().find("'old_parent' launches kernels from the device (it calls cudaGetParameterBuffer"),
            std::string::npos)
      << status.message();
  // Declared only, never called: the module loads and its kernels run.
  ASSERT_TRUE(device().LoadPtx(Ptx(declarations), &module).ok());
  Launch(Get(module, "child"), {1}, {32}, 0, uint64_t{0});
  EXPECT_TRUE(device().StickyError().ok());
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
  CallStatus status = TryLaunch(Get(module, "bounded"), {1}, {129}, 0, out);
  EXPECT_EQ(status.code(), cu::kLaunchOutOfResources) << Describe(status);
  EXPECT_NE(status.message().find("launch bounds (.maxntid/.reqntid) allow 128"), std::string::npos)
      << status.message();
  EXPECT_EQ(TryLaunch(Get(module, "required"), {1}, {128}, 0, out).code(), cu::kLaunchOutOfResources);
  EXPECT_TRUE(device().StickyError().ok()) << "a refused launch is not a fault";

  Module* refused = nullptr;
  CallStatus load = device().LoadPtx(Ptx(".visible .entry k()\n.maxntid 0, 1, 1\n{ ret; }"), &refused);
  EXPECT_EQ(load.code(), cu::kInvalidPtx) << Describe(load);
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
  CallStatus status = TryLaunch(Get(module, "recurse"), {1}, {32}, 0);
  EXPECT_EQ(status.code(), cu::kLaunchFailed) << Describe(status);
  EXPECT_NE(status.message().find("register stack overflow"), std::string::npos) << status.message();
}

// A kernel's blocks hold the shared variables it and its callees use, not the module's: two kernels with 40 KiB of
// temporary storage each run side by side in one module (as a library's hundreds of kernels do), each reports its
// own 40 KiB (plus the helper's), and a variable of a helper both call keeps one place, untouched by either's
// storage. Laid end to end, the module's 80 KiB exceeded every kernel's per-block limit: the launches failed.
TEST_F(RefuseTest, EachKernelHoldsOnlyTheSharedVariablesItUses) {
  // Each kernel keeps its value in its own 40 KiB storage (writing its last word too), passes it through the helper,
  // and adds both.
  auto Kernel = [](const std::string& which, int base) {
    std::string text = R"(
.visible .entry kernel_X(.param .u64 out) {
  .reg .u32 %t, %v, %w;
  .reg .u64 %o, %a, %s;
  ld.param.u64 %o, [out];
  mov.u32 %t, %tid.x;
  mul.wide.u32 %a, %t, 4;
  add.u32 %v, %t, BASE;
  mov.u64 %s, storage_X;
  add.u64 %s, %s, %a;
  st.shared.u32 [storage_X+40000], %v;
  st.shared.u32 [%s], %v;
  call (%w), through_helper, (%v);
  ld.shared.u32 %v, [%s];
  add.u32 %w, %w, %v;
  add.u64 %o, %o, %a;
  st.global.u32 [%o], %w;
  ret;
}
)";
    for (size_t at; (at = text.find("_X")) != std::string::npos;) text.replace(at, 2, "_" + which);
    text.replace(text.find("BASE"), 4, std::to_string(base));
    return text;
  };
  const std::string ptx = Ptx(R"(
.shared .align 4 .b8 storage_a[40960];
.shared .align 4 .b8 storage_b[40960];
.shared .align 4 .u32 helper_slot[32];
.func (.reg .u32 r) through_helper(.reg .u32 v) {
  .reg .u32 %t;
  .reg .u64 %a, %s;
  mov.u32 %t, %tid.x;
  mov.u64 %s, helper_slot;
  mul.wide.u32 %a, %t, 4;
  add.u64 %a, %a, %s;
  st.shared.u32 [%a], v;
  bar.sync 0;
  xor.b32 %t, %t, 1;
  mul.wide.u32 %a, %t, 4;
  add.u64 %a, %a, %s;
  ld.shared.u32 r, [%a];
  ret;
}
)") + Kernel("a", 1000) + Kernel("b", 2000);
  Module* module = nullptr;
  CallStatus loaded = device().LoadPtx(ptx, &module);
  ASSERT_TRUE(loaded.ok()) << Describe(loaded);
  for (const auto& [name, base] : {std::pair<const char*, uint32_t>{"kernel_a", 1000}, {"kernel_b", 2000}}) {
    SCOPED_TRACE(name);
    int shared = -1;
    device().Attributes(Get(module, name), &shared, nullptr, nullptr);
    EXPECT_EQ(shared, 40960 + 128) << "its own storage and the helper's slots, not the module's";
    uint64_t out = Output<uint32_t>(32);
    ASSERT_TRUE(TryLaunch(Get(module, name), Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, out).ok());
    std::vector<uint32_t> got = Download<uint32_t>(out, 32);
    for (uint32_t t = 0; t < 32; ++t) {
      // Its neighbour's value through the helper's slots, and its own back from its storage.
      EXPECT_EQ(got[t], (base + (t ^ 1)) + (base + t)) << "thread " << t;
    }
  }
  EXPECT_TRUE(device().StickyError().ok());
}

// min/max of packed 16-bit integers (.s16x2, .u16x2, .relu: PTX ISA 8.0), as CUB's compute_120 reductions use them:
// refused at load before ("needs a type"), which left CuPy's sum at 0.
TEST_F(RefuseTest, PackedSixteenBitIntegerMinAndMaxWorkHalfByHalf) {
  const std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n" + std::string(R"(
.visible .entry packed(.param .u64 in, .param .u64 out) {
  .reg .b32 %a, %b, %r<6>;
  .reg .u64 %i, %o;
  ld.param.u64 %i, [in];
  ld.param.u64 %o, [out];
  ld.global.b32 %a, [%i];
  ld.global.b32 %b, [%i+4];
  min.s16x2 %r0, %a, %b;
  max.s16x2 %r1, %a, %b;
  min.u16x2 %r2, %a, %b;
  max.u16x2 %r3, %a, %b;
  min.relu.s16x2 %r4, %a, %b;
  max.relu.s16x2 %r5, %a, %b;
  st.global.v4.b32 [%o], {%r0, %r1, %r2, %r3};
  st.global.v2.b32 [%o+16], {%r4, %r5};
  ret;
}
)");
  Module* module = nullptr;
  CallStatus loaded = device().LoadPtx(ptx, &module);
  ASSERT_TRUE(loaded.ok()) << Describe(loaded);
  const std::vector<std::pair<uint32_t, uint32_t>> inputs = {
      {0x8000'7fffu, 0x7fff'8000u}, {0xfffd'0003u, 0x0002'fffeu}, {0x0000'ffffu, 0xffff'0000u}, {0x1234'5678u, 0x1234'5678u}};
  for (const auto& [x, y] : inputs) {
    SCOPED_TRACE(::testing::Message() << std::hex << x << " " << y);
    uint64_t in = Upload(std::vector<uint32_t>{x, y});
    uint64_t out = Output<uint32_t>(6);
    ASSERT_TRUE(TryLaunch(Get(module, "packed"), Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, in, out).ok());
    std::vector<uint32_t> got = Download<uint32_t>(out, 6);
    auto pack = [&](auto op) {  // The ISA: each half of d from the same half of a and b.
      uint32_t r = 0;
      for (int h = 0; h < 2; ++h) r |= (static_cast<uint32_t>(op(x >> (16 * h) & 0xffff, y >> (16 * h) & 0xffff)) & 0xffff) << (16 * h);
      return r;
    };
    auto s = [](uint32_t v) { return static_cast<int>(static_cast<int16_t>(v)); };
    EXPECT_EQ(got[0], pack([&](uint32_t a, uint32_t b) { return std::min(s(a), s(b)); }));
    EXPECT_EQ(got[1], pack([&](uint32_t a, uint32_t b) { return std::max(s(a), s(b)); }));
    EXPECT_EQ(got[2], pack([](uint32_t a, uint32_t b) { return std::min(a, b); }));
    EXPECT_EQ(got[3], pack([](uint32_t a, uint32_t b) { return std::max(a, b); }));
    EXPECT_EQ(got[4], pack([&](uint32_t a, uint32_t b) { return std::max(0, std::min(s(a), s(b))); }));
    EXPECT_EQ(got[5], pack([&](uint32_t a, uint32_t b) { return std::max(0, std::max(s(a), s(b))); }));
  }
}

}  // namespace
}  // namespace gpupool::emu::test
