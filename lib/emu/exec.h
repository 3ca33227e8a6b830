// Executes kernel launches of a compiled Program. Internal to lib/emu.
#ifndef GPUPOOL_EMU_EXEC_H_
#define GPUPOOL_EMU_EXEC_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "emu/device.h"
#include "emu/program.h"
#include "emu/texture.h"

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
  // The device's texture and surface objects (texture.h); not written while a launch runs.
  virtual const TextureTable& Textures() const = 0;
};

// A launch's parameter buffer, packed at the kernel's ParamInfo offsets. Held inline up to kInlineBytes (nearly
// every kernel's parameters fit), so that queueing a launch allocates nothing; larger buffers go to the heap.
class ParamBuffer {
 public:
  static constexpr size_t kInlineBytes = 256;
  // Copies `bytes` from `data`, then zero-pads to `at_least` bytes.
  void Assign(const void* data, size_t bytes, size_t at_least);
  const uint8_t* data() const { return size_ > kInlineBytes ? heap_.data() : inline_; }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
  std::vector<uint8_t> heap_;  // Only for buffers beyond kInlineBytes.
  uint8_t inline_[kInlineBytes];
};

struct Launch {
  const Program* program = nullptr;
  int function = -1;
  Dim3 grid, block;
  uint32_t dynamic_shared = 0;
  ParamBuffer params;
  uint32_t grid_id = 0;
  // Cooperative launch: every CTA is resident at once, and grid sync's workspace is at `grid_workspace` (device
  // memory the launch owns, zeroed); 0 for other launches, where grid sync traps as on a GPU.
  bool cooperative = false;
  uint64_t grid_workspace = 0;
  bool warp_major = true;  // DeviceOptions::warp_major.
};

struct LaunchOutcome {
  CallStatus status;
  std::string printf_output;       // In CTA order, each CTA's lines in the order its threads printed them.
  uint64_t instructions = 0;       // Dynamic thread-instructions executed.
};

// What the interpreter sets up for each block of a launch, per thread and in all. A GPU refuses a launch whose
// block needs more registers, shared or local memory than a multiprocessor holds; the interpreter holds a block in
// host memory, and refuses a launch whose block would take more than kMaxBlockFootprintBytes (issue "Tenant
// isolation, hardened", item 5: what a module declares times the block size must not grow a worker without
// bound). Calls made while the block runs are bounded by the same budget (registers) and by the stacks below.
struct BlockLayout {
  uint32_t shared_bytes = 0;        // The shared window (static, dynamic, reserved), without slack.
  uint32_t local_bytes = 0;         // Local stack per thread.
  size_t param_stack_bytes = 0;     // Parameter stack per thread.
  uint32_t registers = 0;           // Register slots per thread the block may use, its calls included.
  uint64_t footprint = 0;           // Bytes of host memory for the whole block, with its registers at their limit.
};
inline constexpr uint64_t kMaxBlockFootprintBytes = 256ull << 20;
// And all the blocks a launch runs at once (one per worker; a cooperative grid's all): a launch of large blocks runs
// on fewer workers, and a cooperative grid beyond it is refused (kCooperativeLaunchTooLarge). Stacks are zeroed
// pages the host commits only as a kernel touches them, so these bound what a kernel can make resident; the
// largest cooperative grids of nvcc-built kernels with calls take about 1 GiB.
inline constexpr uint64_t kMaxLaunchFootprintBytes = 4ull << 30;
// The layout of a block of `block` threads of `program`'s function `function`; false when it does not fit
// kMaxBlockFootprintBytes (the layout is then filled in as far as it goes, for the message).
bool LayBlock(const Program& program, int function, const Dim3& block, uint32_t dynamic_shared, size_t param_bytes,
              BlockLayout* layout);

// Runs kernel launches one at a time: the CTAs in parallel on `workers` host threads (the caller's thread is one
// of them), the threads of a CTA as cooperatively scheduled contexts that switch at barriers and warp collectives.
// What a launch needs is kept from one launch to the next, so that a launch of a shape seen before allocates
// nothing: the other workers' threads (started by the first launch of several CTAs, parked between launches) and
// each worker's CTA context (its threads' registers, call frames, parameter and local stacks, shared memory),
// which grows to the largest block it has run.
// Thread safety: Run may not be called concurrently (the device's queue executor is its only caller).
class LaunchRunner {
 public:
  LaunchRunner(int workers, int sm_count);
  ~LaunchRunner();  // Stops the parked threads. REQUIRES: no Run in progress.
  LaunchRunner(const LaunchRunner&) = delete;
  LaunchRunner& operator=(const LaunchRunner&) = delete;

  // Runs `launch` to completion. Setting `*cancel` stops it soon after (the outcome is then kLaunchFailed
  // "cancelled"), even inside an endless loop. `gate`, when set, is passed at checkpoints (see ExecutionGate); the
  // caller has entered it.
  LaunchOutcome Run(const Launch& launch, MemoryMap& memory, const std::atomic<bool>* cancel = nullptr,
                    ExecutionGate* gate = nullptr);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gpupool::emu::internal

#endif  // GPUPOOL_EMU_EXEC_H_
