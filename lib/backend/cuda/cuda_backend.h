// The cuda backend: a session's CUDA work on a physical GPU through the system driver, below the session server.
// Each session runs in its own worker process, so its primary context holds only its own memory.
#ifndef GPUPOOL_BACKEND_CUDA_CUDA_BACKEND_H_
#define GPUPOOL_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/cuda_driver.h"
#include "backend/device_backend.h"
#include "gpupool/status.h"

namespace gpupool::backend {

struct CudaBackendConfig {
  std::string nvml_uuid;      // "GPU-xxxxxxxx-xxxx-..." from NVML: finds the CUDA ordinal whatever the device order.
  uint64_t memory_bytes = 0;  // The slice's memory.
  uint64_t window_base = 0;   // Device addresses of the session lie in [window_base, window_base + window_bytes).
  uint64_t window_bytes = 0;
};

// Reserves the window with the virtual memory management API (cuMemAddressReserve at the client's address) and
// retains the device's primary context. kResourceExhausted when the window is taken; kUnavailable when the driver
// cannot do it (no VMM support, device not found).
Result<std::unique_ptr<DeviceBackend>> NewCudaBackend(std::shared_ptr<CudaDriver> driver,
                                                      const CudaBackendConfig& config);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_CUDA_CUDA_BACKEND_H_
