// The emu backend: a session's CUDA work on an emulated device (lib/emu), below the session server.
#ifndef GPUPOOL_BACKEND_EMU_EMU_BACKEND_H_
#define GPUPOOL_BACKEND_EMU_EMU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "backend/device_backend.h"
#include "emu/device.h"
#include "gpupool/status.h"

namespace gpupool::backend {

struct EmuBackendConfig {
  std::string device_name;       // Reported as the device's name.
  int cc_major = 7, cc_minor = 5;  // Compute capability reported, and by which PTX is picked from fatbins.
  uint64_t memory_bytes = 0;     // The emulated device's memory (the slice's).
  uint64_t window_base = 0;      // Device addresses start here (the client's window for this slice).
  // The window's size: what lies beyond the slice's memory holds virtual memory reservations. 0: none.
  uint64_t window_bytes = 0;
  uint8_t uuid[16] = {};         // The device's UUID, as the agent reports it.
  int pci_bus = 0, pci_device = 0;
  int worker_threads = 0;        // Host threads for CTAs; 0 = one per core.
  // Shares the device's compute with the other sessions of the same device (DeviceTurns); null: alone.
  std::shared_ptr<ExecutionGate> gate;
};

// Creates the emulated device, or fails with kResourceExhausted when its memory cannot be reserved at the window.
Result<std::unique_ptr<DeviceBackend>> NewEmuBackend(const EmuBackendConfig& config);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_EMU_EMU_BACKEND_H_
