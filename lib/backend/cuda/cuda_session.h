// The cuda backend: a Session (lib/schema/session.capnp) executed on a physical GPU through the system driver.
// NOTE: written and compiled without a GPU; never run on one yet (see the closing note of issue 4).
#ifndef GPUPOOL_BACKEND_CUDA_CUDA_SESSION_H_
#define GPUPOOL_BACKEND_CUDA_CUDA_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>

#include <kj/memory.h>

#include "backend/cuda/cuda_driver.h"
#include "backend/emu/emu_session.h"
#include "gpupool/status.h"
#include "session.capnp.h"

namespace gpupool::backend {

struct CudaSessionConfig {
  std::string nvml_uuid;      // "GPU-xxxxxxxx-xxxx-..." from NVML: finds the CUDA ordinal whatever the device order.
  uint64_t memory_bytes = 0;  // The slice's memory quota.
  uint64_t window_base = 0;   // Device addresses of the session lie in [window_base, window_base + window_bytes).
  uint64_t window_bytes = 0;
  std::shared_ptr<SessionControl> control;
};

// Reserves the window with the virtual memory management API (cuMemAddressReserve at the client's address) and
// retains the device's primary context. kResourceExhausted when the window is taken; kUnavailable when the driver
// cannot do it (no VMM support, device not found).
Result<kj::Own<wire::Session::Server>> NewCudaSession(std::shared_ptr<CudaDriver> driver,
                                                      const CudaSessionConfig& config);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_CUDA_CUDA_SESSION_H_
