// Test harness for the kernel suite (tests/emu/kernel_*_test.cc): a fresh emulated Device per test, helpers to
// upload inputs, allocate poisoned outputs, launch with checked parameter sizes and download results, and a
// random generator whose seed is printed on failure.
//
// Helpers report failures by throwing HarnessError; GoogleTest turns an exception escaping a test body into a
// failure of that test with the message, so call sites need no ASSERT boilerplate.
//
// Seeds: fresh from std::random_device each run; GPUPOOL_EMU_TEST_SEED=<n> in the environment replays one.
#ifndef GPUPOOL_TESTS_EMU_KERNEL_HARNESS_H_
#define GPUPOOL_TESTS_EMU_KERNEL_HARNESS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/call_status.h"
#include "emu/device.h"

namespace gpupool {
// GoogleTest's printer, found by ADL, so that a failed expectation on a status shows its code by name.
void PrintTo(const CallStatus& status, std::ostream* os);
}  // namespace gpupool

namespace gpupool::emu::test {

// The fatbin variants built by tests/emu/kernels.cmake; keep in sync with GPUPOOL_EMU_VARIANTS there.
inline const std::vector<std::string>& Variants() {
  static const std::vector<std::string> kVariants = {"default", "lz4", "none", "debug"};
  return kVariants;
}

class HarnessError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The name of a CUresult the emulator returns (its cu:: constant), for messages.
const char* CodeName(int code);
std::string Describe(const CallStatus& status);
// Throws HarnessError("<what>: <code name> (<number>): <message>") unless `status` is ok.
void Check(const CallStatus& status, std::string_view what);

std::string FatbinPath(std::string_view kernel, std::string_view variant);  // In the build tree.
std::string KernelSourcePath(std::string_view file);                        // tests/emu/kernels/<file>
std::string NumbaPath(std::string_view file);                               // tests/emu/numba/<file>
std::string ReadFile(const std::string& path);                              // Throws when unreadable.

// The seed for this test: GPUPOOL_EMU_TEST_SEED if set, otherwise from std::random_device.
uint32_t NewSeed();

// Appends everything the device prints; thread-safe.
class PrintfCapture {
 public:
  void Append(std::string_view text);
  std::string Take();

 private:
  std::mutex mu_;
  std::string text_;
};

// Helpers are public so that lambdas and helper functions in the tests can use them.
class EmuTest : public ::testing::Test {
 public:
  static constexpr uint64_t kMemoryBytes = 256ull << 20;

  void SetUp() override;
  void TearDown() override;

  Device& device() { return *device_; }
  std::mt19937& rng() { return rng_; }
  uint32_t seed() const { return seed_; }
  // Text printed by kernels since the last call.
  std::string TakePrintf() { return printf_->Take(); }

  // Loads a fatbin (or any image LoadModule accepts) from a file. The bytes stay alive for the whole test.
  Module* LoadFile(const std::string& path);
  Module* LoadPtxText(const std::string& ptx);
  Function* Get(Module* module, const std::string& name);

  uint64_t Alloc(size_t bytes);
  template <typename T>
  uint64_t Upload(const std::vector<T>& host) {
    uint64_t ptr = Alloc(host.size() * sizeof(T));
    Check(device_->CopyToDevice(ptr, host.data(), host.size() * sizeof(T)), "CopyToDevice");
    return ptr;
  }
  template <typename T>
  uint64_t UploadValue(const T& value) {
    return Upload(std::vector<T>{value});
  }
  // An output buffer of `count` elements, every byte set to `poison` (0xFF: NaN for floats, -1 for integers),
  // so an element the kernel forgets to write cannot pass for a right answer.
  template <typename T>
  uint64_t Output(size_t count, uint8_t poison = 0xFF) {
    std::vector<uint8_t> bytes(count * sizeof(T), poison);
    return Upload(bytes);
  }
  // An accumulator the kernel adds into: zero-filled.
  template <typename T>
  uint64_t Zeros(size_t count) {
    return Output<T>(count, 0);
  }
  template <typename T>
  std::vector<T> Download(uint64_t ptr, size_t count) {
    std::vector<T> host(count);
    Check(device_->CopyFromDevice(host.data(), ptr, count * sizeof(T)), "CopyFromDevice");
    return host;
  }
  template <typename T>
  T DownloadValue(uint64_t ptr) {
    return Download<T>(ptr, 1)[0];
  }

  // Launches and waits; returns the first error of the launch or of the synchronisation. Before launching,
  // checks that the arguments match Device::Params() in number and size (a mismatch throws: it would make the
  // kernel read garbage).
  template <typename... Args>
  CallStatus TryLaunch(Function* function, Dim3 grid, Dim3 block, uint32_t shared_bytes, const Args&... args) {
    std::tuple<Args...> values(args...);
    std::vector<void*> pointers;
    std::vector<size_t> sizes;
    std::apply(
        [&](auto&... v) {
          (pointers.push_back(const_cast<void*>(static_cast<const void*>(&v))), ...);
          (sizes.push_back(sizeof(v)), ...);
        },
        values);
    CheckParams(function, sizes);
    LaunchConfig config{grid, block, shared_bytes, nullptr};
    CallStatus status = device_->Launch(function, config, pointers.empty() ? nullptr : pointers.data());
    CallStatus sync = device_->Synchronize();
    return status.ok() ? sync : status;
  }
  template <typename... Args>
  void Launch(Function* function, Dim3 grid, Dim3 block, uint32_t shared_bytes, const Args&... args) {
    Check(TryLaunch(function, grid, block, shared_bytes, args...), "launch of " + Device::Name(function));
  }

  // Random helpers.
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  uint32_t U32() { return static_cast<uint32_t>(rng_()); }
  uint64_t U64() { return (static_cast<uint64_t>(rng_()) << 32) | rng_(); }
  float Float(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  double Double(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }

  std::unique_ptr<Device> device_;

 private:
  void CheckParams(Function* function, const std::vector<size_t>& sizes);

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::shared_ptr<PrintfCapture> printf_;
  std::vector<std::unique_ptr<std::string>> images_;
};

// Kernel tests run once per fatbin variant.
class KernelTest : public EmuTest, public ::testing::WithParamInterface<std::string> {
 public:
  const std::string& variant() const { return GetParam(); }
  bool debug_variant() const { return GetParam() == "debug"; }
  // Loads tests/emu/kernels/<kernel>.cu as built for this test's variant.
  Module* LoadKernel(std::string_view kernel) { return LoadFile(FatbinPath(kernel, variant())); }
  Function* Kernel(std::string_view kernel, const std::string& name) { return Get(LoadKernel(kernel), name); }
};

std::string VariantTestName(const ::testing::TestParamInfo<std::string>& info);

#define GPUPOOL_INSTANTIATE_VARIANTS(Suite)                                                        \
  INSTANTIATE_TEST_SUITE_P(Variants, Suite, ::testing::ValuesIn(::gpupool::emu::test::Variants()), \
                           ::gpupool::emu::test::VariantTestName)

// Puts the seed into every failure message of the enclosing scope.
#define TRACE_SEED() SCOPED_TRACE(::testing::Message() << "seed " << seed() << " (GPUPOOL_EMU_TEST_SEED to replay)")

}  // namespace gpupool::emu::test

#endif  // GPUPOOL_TESTS_EMU_KERNEL_HARNESS_H_
