// The cuda backend's view of the system's real CUDA driver: loaded with dlopen (never linked), entry points
// resolved through cuGetProcAddress, so an agent on a GPU server works on first contact and an agent elsewhere
// still starts. Any library with the driver's API will do: gpupool's own libcuda.so.1 (attached to slices of
// another agent) stands in for a GPU in tests of the cuda backend.
#ifndef GPUPOOL_BACKEND_CUDA_CUDA_DRIVER_H_
#define GPUPOOL_BACKEND_CUDA_CUDA_DRIVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpupool/status.h"

namespace gpupool::backend {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML spells a GPU's UUID, from the driver's 16 bytes.
std::string GpuUuidString(const unsigned char bytes[16]);

// A device as the driver describes it (cuDeviceGetName, cuDeviceGetUuid, cuDeviceTotalMem).
struct DriverDevice {
  int ordinal = 0;
  std::string name;
  std::string uuid;  // GpuUuidString.
  uint64_t memory_bytes = 0;
};

class CudaDriver {
 public:
  // Loads `library` ("" = kSystemLibrary) and initialises it. Fails with kUnavailable and the reason: not
  // installed, "stub library" (the toolkit's link-time stub, CUDA_ERROR_STUB_LIBRARY), no device, a driver older
  // than 13.0, or gpupool's own libcuda.so.1 where `library` is the default name (found on the library path, as under
  // gp-run: never initialised then, since it would attach to a pool of its own). A library named by path or
  // configuration may be gpupool's.
  static Result<std::unique_ptr<CudaDriver>> Load(const std::string& library = kSystemLibrary);
  static constexpr const char* kSystemLibrary = "libcuda.so.1";
  ~CudaDriver();

  int version() const { return version_; }  // e.g. 13000.
  int device_count() const { return device_count_; }
  // Resolves an entry point of the loaded driver by name and ABI version (cuGetProcAddress_v2); nullptr if absent.
  void* Symbol(const char* name, int cuda_version) const;
  // The devices it sees, in ordinal order; kUnavailable when it cannot describe one.
  Result<std::vector<DriverDevice>> Devices() const;
  // Whether this is gpupool's own libcuda.so.1 (slices of a lease), not a GPU driver.
  bool is_gpupool() const { return is_gpupool_; }

 private:
  CudaDriver() = default;
  void* handle_ = nullptr;
  void* get_proc_ = nullptr;
  int version_ = 0;
  int device_count_ = 0;
  bool is_gpupool_ = false;
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_CUDA_CUDA_DRIVER_H_
