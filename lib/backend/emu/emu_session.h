// The emu backend: a Session (lib/schema/session.capnp) whose CUDA work runs on an emulated device (lib/emu).
#ifndef GPUPOOL_BACKEND_EMU_EMU_SESSION_H_
#define GPUPOOL_BACKEND_EMU_EMU_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <kj/memory.h>

#include "emu/device.h"
#include "gpupool/status.h"
#include "session.capnp.h"

namespace gpupool::backend {

// Lets the agent end a session whose lease ended while the client still holds the capability.
struct SessionControl {
  std::mutex mu;
  std::function<void()> revoke;  // Set while the session lives; frees its device memory and fails later calls.
};

struct EmuSessionConfig {
  std::string device_name;       // Reported as the device's name.
  uint64_t memory_bytes = 0;     // The slice's memory: allocations beyond it fail with out-of-memory.
  uint64_t window_base = 0;      // Device addresses start here (the client's window for this slice).
  uint8_t uuid[16] = {};         // The device's UUID, as the agent reports it.
  int pci_bus = 0, pci_device = 0;
  int worker_threads = 0;        // Host threads for CTAs; 0 = one per core.
  // Shares the device's compute with the other sessions of the same device (DeviceTurns); null: alone.
  std::shared_ptr<emu::ExecutionGate> gate;
  std::shared_ptr<SessionControl> control;
};

// Creates the session, or fails with kResourceExhausted when the window is taken in this process (the client
// then proposes another) or the memory cannot be reserved. Called on the agent's event-loop thread; the session
// keeps that thread responsive: waits on device work resolve as promises.
Result<kj::Own<wire::Session::Server>> NewEmuSession(const EmuSessionConfig& config);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_EMU_EMU_SESSION_H_
