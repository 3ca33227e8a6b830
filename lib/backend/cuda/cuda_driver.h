// The cuda backend's view of the system's real CUDA driver: loaded with dlopen (never linked), entry points
// resolved through cuGetProcAddress, so an agent on a GPU server works on first contact and an agent elsewhere
// still starts. Sessions on physical GPUs are not executed through it yet (see agent_service.cc).
#ifndef GPUPOOL_BACKEND_CUDA_CUDA_DRIVER_H_
#define GPUPOOL_BACKEND_CUDA_CUDA_DRIVER_H_

#include <memory>
#include <string>

#include "gpupool/status.h"

namespace gpupool::backend {

class CudaDriver {
 public:
  // Loads `library` (default: the system's "libcuda.so.1") and initialises it. Fails with kUnavailable and the
  // reason: not installed, "stub library" (the toolkit's link-time stub, CUDA_ERROR_STUB_LIBRARY), no device,
  // or a driver older than 13.0.
  static Result<std::unique_ptr<CudaDriver>> Load(const std::string& library = "libcuda.so.1");
  ~CudaDriver();

  int version() const { return version_; }  // e.g. 13000.
  int device_count() const { return device_count_; }
  // Resolves an entry point of the loaded driver by name and ABI version (cuGetProcAddress_v2); nullptr if absent.
  void* Symbol(const char* name, int cuda_version) const;

 private:
  CudaDriver() = default;
  void* handle_ = nullptr;
  void* get_proc_ = nullptr;
  int version_ = 0;
  int device_count_ = 0;
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_CUDA_CUDA_DRIVER_H_
