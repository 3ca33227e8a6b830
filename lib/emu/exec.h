// Executes one kernel launch of a compiled Program: CTAs in parallel on worker threads, the threads of a CTA as
// cooperatively scheduled contexts that switch at barriers and warp collectives. Internal to lib/emu.
#ifndef GPUPOOL_EMU_EXEC_H_
#define GPUPOOL_EMU_EXEC_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "emu/device.h"
#include "emu/program.h"

namespace gpupool::emu::internal {

// What a launch may touch in device memory: the live allocations when it started, and the device heap.
class MemoryMap {
 public:
  virtual ~MemoryMap() = default;
  // Sorted, disjoint [base, end) ranges of live allocations.
  virtual std::shared_ptr<const std::vector<std::pair<uint64_t, uint64_t>>> Ranges() const = 0;
  // Device-side malloc/free (from kernels). 0 when the heap is exhausted.
  virtual uint64_t HeapAlloc(uint64_t bytes) = 0;
  virtual void HeapFree(uint64_t address) = 0;
};

struct Launch {
  const Program* program = nullptr;
  int function = -1;
  Dim3 grid, block;
  uint32_t dynamic_shared = 0;
  std::vector<uint8_t> params;  // Packed at the kernel's ParamInfo offsets.
  uint32_t grid_id = 0;
  // Cooperative launch: every CTA is resident at once, and grid sync's workspace is at `grid_workspace` (device
  // memory the launch owns, zeroed); 0 for other launches, where grid sync traps as on a GPU.
  bool cooperative = false;
  uint64_t grid_workspace = 0;
};

struct LaunchOutcome {
  EmuStatus status;
  std::string printf_output;       // In CTA order, each CTA's lines in the order its threads printed them.
  uint64_t instructions = 0;       // Dynamic thread-instructions executed.
};

// Runs `launch` to completion on `workers` host threads (the caller's thread is one of them). Setting `*cancel`
// stops it soon after (the outcome is then kLaunchFailed "cancelled"), even inside an endless loop.
// `gate`, when set, is passed at checkpoints (see ExecutionGate); the caller has entered it.
LaunchOutcome Execute(const Launch& launch, MemoryMap& memory, int workers, int sm_count,
                      const std::atomic<bool>* cancel = nullptr, ExecutionGate* gate = nullptr);

}  // namespace gpupool::emu::internal

#endif  // GPUPOOL_EMU_EXEC_H_
