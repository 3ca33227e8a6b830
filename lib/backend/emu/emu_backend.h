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
  // The emulated device's memory (the slice's): what it reports and what its arena places. Not a limit of its own:
  // the session server's slice quota (session_server.h) is the slice's one limit, and counts the modules' memory
  // through DriverHeldBytes.
  uint64_t memory_bytes = 0;
  uint64_t window_base = 0;      // Device addresses start here (the client's window for this slice).
  // The window's size: what lies beyond the slice's memory holds virtual memory reservations. 0: none.
  uint64_t window_bytes = 0;
  uint8_t uuid[16] = {};         // The device's UUID, as the agent reports it.
  int pci_bus = 0, pci_device = 0;
  int worker_threads = 0;        // Host threads for CTAs; 0 = one per core.
  // Shares the device's compute with the other sessions of the same device (DeviceTurns); null: alone.
  std::shared_ptr<ExecutionGate> gate;
  // The memory file holding the device's memory (emu::DeviceOptions::memory_fd), or -1; and whether it holds the
  // session being restored already (a move within one agent: DeviceBackend::MemoryKept).
  int memory_fd = -1;
  bool memory_kept = false;
};

// Creates the emulated device, or fails with kResourceExhausted when its memory cannot be reserved at the window.
Result<std::unique_ptr<DeviceBackend>> NewEmuBackend(const EmuBackendConfig& config);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_EMU_EMU_BACKEND_H_
