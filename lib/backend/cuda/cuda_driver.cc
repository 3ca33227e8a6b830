#include "backend/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace gpupool::backend {
namespace {

// The few driver types we need, spelled out so the backend does not depend on the toolkit's headers at run time.
using CUresult = int;
constexpr CUresult kSuccess = 0;
constexpr CUresult kNoDevice = 100;
constexpr CUresult kStubLibrary = 34;
using GetProcAddress = CUresult (*)(const char*, void**, int, unsigned long long, int*);
using Init = CUresult (*)(unsigned);
using DriverGetVersion = CUresult (*)(int*);
using DeviceGetCount = CUresult (*)(int*);

}  // namespace

Result<std::unique_ptr<CudaDriver>> CudaDriver::Load(const std::string& library) {
  auto driver = std::unique_ptr<CudaDriver>(new CudaDriver());
  driver->handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!driver->handle_) {
    return Status(StatusCode::kUnavailable, fmt::format("no CUDA driver: {}", dlerror()));
  }
  driver->get_proc_ = dlsym(driver->handle_, "cuGetProcAddress_v2");
  if (!driver->get_proc_) {
    return Status(StatusCode::kUnavailable, fmt::format("{} has no cuGetProcAddress_v2 (a driver older than CUDA 12)",
                                                        library));
  }
  auto init = reinterpret_cast<Init>(driver->Symbol("cuInit", 2000));
  auto get_version = reinterpret_cast<DriverGetVersion>(driver->Symbol("cuDriverGetVersion", 2020));
  auto get_count = reinterpret_cast<DeviceGetCount>(driver->Symbol("cuDeviceGetCount", 2000));
  if (!init || !get_version || !get_count) {
    // The stub answers every cuGetProcAddress with "stub library" too: ask it directly for the reason.
    auto plain_init = reinterpret_cast<Init>(dlsym(driver->handle_, "cuInit"));
    if (plain_init && plain_init(0) == kStubLibrary) {
      return Status(StatusCode::kUnavailable, fmt::format("{} is the CUDA toolkit's stub library, not a driver", library));
    }
    return Status(StatusCode::kUnavailable, fmt::format("{} lacks cuInit/cuDriverGetVersion/cuDeviceGetCount", library));
  }
  CUresult r = init(0);
  if (r == kStubLibrary) {
    return Status(StatusCode::kUnavailable, fmt::format("{} is the CUDA toolkit's stub library, not a driver", library));
  }
  if (r == kNoDevice) return Status(StatusCode::kUnavailable, "the CUDA driver sees no device");
  if (r != kSuccess) return Status(StatusCode::kUnavailable, fmt::format("cuInit failed with CUresult {}", r));
  if (get_version(&driver->version_) != kSuccess || driver->version_ < 13000) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("the CUDA driver is version {}; gpupool needs 13.0 or newer", driver->version_));
  }
  if (get_count(&driver->device_count_) != kSuccess) {
    return Status(StatusCode::kUnavailable, "cuDeviceGetCount failed");
  }
  return driver;
}

CudaDriver::~CudaDriver() {
  if (handle_) dlclose(handle_);
}

void* CudaDriver::Symbol(const char* name, int cuda_version) const {
  if (!get_proc_) return nullptr;
  void* fn = nullptr;
  int status = 0;
  CUresult r = reinterpret_cast<GetProcAddress>(get_proc_)(name, &fn, cuda_version, 0, &status);
  return r == kSuccess ? fn : nullptr;
}

}  // namespace gpupool::backend
