#include "kernel_harness.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gpupool {

void PrintTo(const CallStatus& status, std::ostream* os) { *os << emu::test::Describe(status); }

}  // namespace gpupool

namespace gpupool::emu::test {

const char* CodeName(int code) {
  switch (code) {
    case cu::kSuccess: return "kSuccess";
    case cu::kInvalidValue: return "kInvalidValue";
    case cu::kOutOfMemory: return "kOutOfMemory";
    case cu::kInvalidImage: return "kInvalidImage";
    case cu::kInvalidContext: return "kInvalidContext";
    case cu::kNoBinaryForGpu: return "kNoBinaryForGpu";
    case cu::kInvalidPtx: return "kInvalidPtx";
    case cu::kInvalidSource: return "kInvalidSource";
    case cu::kInvalidHandle: return "kInvalidHandle";
    case cu::kNotFound: return "kNotFound";
    case cu::kNotReady: return "kNotReady";
    case cu::kIllegalAddress: return "kIllegalAddress";
    case cu::kLaunchOutOfResources: return "kLaunchOutOfResources";
    case cu::kLaunchTimeout: return "kLaunchTimeout";
    case cu::kAssert: return "kAssert";
    case cu::kIllegalInstruction: return "kIllegalInstruction";
    case cu::kMisalignedAddress: return "kMisalignedAddress";
    case cu::kLaunchFailed: return "kLaunchFailed";
    case cu::kNotSupported: return "kNotSupported";
    case cu::kUnknown: return "kUnknown";
  }
  return "(unnamed code)";
}

std::string Describe(const CallStatus& status) {
  std::ostringstream os;
  os << CodeName(status.code()) << " (" << status.code() << ")";
  if (!status.message().empty()) os << ": " << status.message();
  return os.str();
}

void Check(const CallStatus& status, std::string_view what) {
  if (!status.ok()) throw HarnessError(std::string(what) + ": " + Describe(status));
}

std::string FatbinPath(std::string_view kernel, std::string_view variant) {
  return std::string(GPUPOOL_EMU_KERNEL_DIR) + "/" + std::string(kernel) + "." + std::string(variant) + ".fatbin";
}

std::string KernelSourcePath(std::string_view file) {
  return std::string(GPUPOOL_EMU_KERNEL_SRC_DIR) + "/" + std::string(file);
}

std::string NumbaPath(std::string_view file) { return std::string(GPUPOOL_EMU_NUMBA_DIR) + "/" + std::string(file); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw HarnessError("cannot read " + path + " (was emu_kernel_fatbins built?)");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

uint32_t NewSeed() {
  if (const char* env = std::getenv("GPUPOOL_EMU_TEST_SEED"); env != nullptr && *env != '\0') {
    return static_cast<uint32_t>(std::strtoul(env, nullptr, 0));
  }
  return std::random_device{}();
}

void PrintfCapture::Append(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  text_.append(text);
}

std::string PrintfCapture::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  out.swap(text_);
  return out;
}

void EmuTest::SetUp() {
  seed_ = NewSeed();
  rng_.seed(seed_);
  RecordProperty("seed", std::to_string(seed_));
  DeviceOptions options;
  options.memory_bytes = kMemoryBytes;
  // The newest architecture whose PTX the emulator runs: kernels built for sm_80 or sm_90 load as on such a GPU,
  // and those built for nvcc's default (compute_75 PTX) as before.
  options.cc_major = 9;
  options.cc_minor = 0;
  device_ = std::make_unique<Device>(options);
  // Keep device printf out of the test log; tests that check it read it back with TakePrintf().
  printf_ = std::make_shared<PrintfCapture>();
  std::shared_ptr<PrintfCapture> capture = printf_;
  device_->SetPrintfSink([capture](std::string_view text) { capture->Append(text); });
}

void EmuTest::TearDown() {
  if (HasFailure()) {
    std::cerr << "[ seed ] " << seed_ << " (rerun with GPUPOOL_EMU_TEST_SEED=" << seed_ << ")\n";
    std::string printed = printf_->Take();
    if (!printed.empty()) std::cerr << "[ device printf ]\n" << printed;
  }
  device_.reset();
}

Module* EmuTest::LoadFile(const std::string& path) {
  images_.push_back(std::make_unique<std::string>(ReadFile(path)));
  const std::string& image = *images_.back();
  Module* module = nullptr;
  Check(device_->LoadModule(image.data(), image.size(), &module), "LoadModule(" + path + ")");
  return module;
}

Module* EmuTest::LoadPtxText(const std::string& ptx) {
  Module* module = nullptr;
  Check(device_->LoadPtx(ptx, &module), "LoadPtx");
  return module;
}

Function* EmuTest::Get(Module* module, const std::string& name) {
  Function* function = nullptr;
  Check(device_->GetFunction(module, name, &function), "GetFunction(" + name + ")");
  return function;
}

uint64_t EmuTest::Alloc(size_t bytes) {
  uint64_t ptr = 0;
  Check(device_->Malloc(bytes == 0 ? 1 : bytes, &ptr), "Malloc(" + std::to_string(bytes) + ")");
  return ptr;
}

void EmuTest::CheckParams(Function* function, const std::vector<size_t>& sizes) {
  const std::vector<ParamInfo>& params = Device::Params(function);
  std::string name = Device::Name(function);
  if (params.size() != sizes.size()) {
    throw HarnessError(name + ": the kernel declares " + std::to_string(params.size()) +
                       " parameters, the test passes " + std::to_string(sizes.size()));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (params[i].size != sizes[i]) {
      throw HarnessError(name + ": parameter " + std::to_string(i) + " is " + std::to_string(params[i].size) +
                         " bytes in the kernel, " + std::to_string(sizes[i]) + " in the test");
    }
  }
}

std::string VariantTestName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace gpupool::emu::test
