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
using DeviceGet = CUresult (*)(int*, int);
using DeviceGetName = CUresult (*)(char*, int, int);
using DeviceGetUuid = CUresult (*)(unsigned char*, int);  // CUuuid is 16 bytes.
using DeviceTotalMem = CUresult (*)(size_t*, int);

}  // namespace

Result<std::unique_ptr<CudaDriver>> CudaDriver::Load(const std::string& name) {
  const std::string library = name.empty() ? kSystemLibrary : name;
  auto driver = std::unique_ptr<CudaDriver>(new CudaDriver());
  // Never unloaded: a driver keeps threads of its own running.
  driver->handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!driver->handle_) {
    return Status(StatusCode::kUnavailable, fmt::format("no CUDA driver: {}", dlerror()));
  }
  // Its slices' utilisation export is gpupool's alone.
  driver->is_gpupool_ = dlsym(driver->handle_, "cuGpupoolSliceUtilization") != nullptr;
  if (driver->is_gpupool_ && library == kSystemLibrary) {
    return Status(StatusCode::kUnavailable, "libcuda.so.1 on the library path is gpupool's own (slices of a lease), "
                                            "not a GPU driver");
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

std::string GpuUuidString(const unsigned char b[16]) {
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                     b[15]);
}

Result<std::vector<DriverDevice>> CudaDriver::Devices() const {
  auto get = reinterpret_cast<DeviceGet>(Symbol("cuDeviceGet", 2000));
  auto get_name = reinterpret_cast<DeviceGetName>(Symbol("cuDeviceGetName", 2000));
  auto get_uuid = reinterpret_cast<DeviceGetUuid>(Symbol("cuDeviceGetUuid", 11040));
  auto total_mem = reinterpret_cast<DeviceTotalMem>(Symbol("cuDeviceTotalMem", 3020));
  if (!get || !get_name || !get_uuid || !total_mem) {
    return Status(StatusCode::kUnavailable, "the CUDA driver lacks cuDeviceGet/GetName/GetUuid/TotalMem");
  }
  std::vector<DriverDevice> out;
  for (int i = 0; i < device_count_; ++i) {
    DriverDevice d;
    d.ordinal = i;
    int device = 0;
    char name[256] = {0};
    unsigned char uuid[16] = {0};
    size_t bytes = 0;
    CUresult r = get(&device, i);
    if (r == kSuccess) r = get_name(name, sizeof(name) - 1, device);
    if (r == kSuccess) r = get_uuid(uuid, device);
    if (r == kSuccess) r = total_mem(&bytes, device);
    if (r != kSuccess) {
      return Status(StatusCode::kUnavailable, fmt::format("the CUDA driver cannot describe device {} (CUresult {})", i, r));
    }
    d.name = name;
    d.uuid = GpuUuidString(uuid);
    d.memory_bytes = bytes;
    out.push_back(std::move(d));
  }
  return out;
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
