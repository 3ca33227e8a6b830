// The execution gate: how a device shares its compute with the other users of the same hardware. Declared here,
// beneath both of its sides, so that neither depends on the other: the emulated device (lib/emu) passes its kernels
// through a gate, and the agent's device turns (lib/backend/device_turns.h) are one.
#ifndef GPUPOOL_CORE_EXECUTION_GATE_H_
#define GPUPOOL_CORE_EXECUTION_GATE_H_

#include <atomic>

namespace gpupool {

// Shares the device's execution with other users of the same hardware (the sessions of one emulated GPU, each in
// a process of its own). The device enters the gate before each kernel and leaves it after; the kernel's threads
// pass checkpoints now and then, where the gate may hold them while another user has its turn: a time slice, as a
// GPU gives its contexts, so that a kernel that never ends cannot keep the device from its neighbours.
class ExecutionGate {
 public:
  virtual ~ExecutionGate() = default;
  // Blocks until this user may run kernels; returns early once `cancel` is set.
  virtual void Enter(const std::atomic<bool>& cancel) = 0;
  // The kernel ended: the device's time goes to whoever waits. `more_queued`: this user has more work queued and
  // will enter again at once (the gate may keep the next turn for it an instant).
  virtual void Leave(bool more_queued) = 0;
  // Called by every thread of a running kernel, concurrently, every few thousand instructions. Blocks while
  // another user has the turn; returns early once `cancel` is set.
  virtual void Checkpoint(const std::atomic<bool>& cancel) = 0;
};

}  // namespace gpupool

#endif  // GPUPOOL_CORE_EXECUTION_GATE_H_
