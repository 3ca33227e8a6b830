// The emulated GPU: device memory in host RAM, modules loaded from fatbins or PTX, kernels executed by the PTX
// interpreter on a pool of host threads, streams and events with CUDA's ordering. It is a real, slow GPU: it
// computes what a GPU computes for the programs it accepts and refuses clearly what it does not support.
//
// Thread safety: every method may be called from any thread.
#ifndef GPUPOOL_EMU_DEVICE_H_
#define GPUPOOL_EMU_DEVICE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/call_status.h"
#include "core/execution_gate.h"
#include "emu/texture.h"

namespace gpupool::emu {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

// The gate a device's kernels pass (core/execution_gate.h): null in DeviceOptions, the device runs alone.
using ExecutionGate = ::gpupool::ExecutionGate;

// The clock %clock and %clock64 count at, and cuDeviceGetAttribute's CLOCK_RATE: kernels that time themselves or
// wait a number of cycles see wall-clock time, as on a GPU (1.59 GHz, a T4's boost clock).
inline constexpr int kClockRateKhz = 1590000;

struct DeviceOptions {
  uint64_t memory_bytes = 1ull << 30;  // Capacity; allocations beyond it fail with kOutOfMemory. Default 1 GiB.
  // False where the device's owner enforces the memory limit itself, in one place for every process that shares it
  // (a session server's slice quota): the device then refuses only what its arena cannot place, and its owner counts
  // module memory through ModuleBytes(). Default true: the device is its own limit.
  bool enforce_capacity = true;
  int cc_major = 7, cc_minor = 5;      // Compute capability reported and used to pick PTX. Default 7.5.
  std::string name = "gpupool emulated GPU";
  int worker_threads = 0;              // Host threads running CTAs. Default 0: one per core.
  // Where device memory starts in this process's address space (device pointers equal host addresses). Default
  // 0: anywhere. A fixed base lets a remote client pick addresses that never collide with its other devices.
  uint64_t base_address = 0;
  // Address space the device may use from its memory's start: what lies beyond its memory (from the next 2 MiB)
  // holds virtual memory reservations (ReserveAddress). Default 0: none, and ReserveAddress fails.
  uint64_t address_space_bytes = 0;
  // Runs the lanes of a warp together (one decode per instruction for every lane at it); false: one thread at a
  // time between synchronisation points, as before warp-major execution (kept for emu_bench's comparison).
  // Default true.
  bool warp_major = true;
  // Shares execution with other devices' users on the same hardware; null: this device runs alone.
  std::shared_ptr<ExecutionGate> gate;
  // A memfd (or any shared memory file) to hold the device's memory at `base_address`, grown to the memory's size if
  // smaller; the caller keeps it. Another process that maps the same file sees the same memory: a session's next
  // worker takes it over without a copy. Default -1: private anonymous memory.
  int memory_fd = -1;
};

// What cuDeviceGetAttribute reports; values look like a real GPU of the chosen compute capability
// (PropertiesOfCapability). The defaults are a Tesla T4's (7.5).
struct DeviceProperties {
  std::string name;
  int cc_major = 7, cc_minor = 5;
  uint64_t total_memory = 0;
  int multiprocessor_count = 40;
  int warp_size = 32;
  int max_threads_per_block = 1024;
  Dim3 max_block_dim{1024, 1024, 64};
  Dim3 max_grid_dim{2147483647u, 65535, 65535};
  int shared_memory_per_block = 48 * 1024;
  int shared_memory_per_block_optin = 64 * 1024;
  int shared_memory_per_multiprocessor = 64 * 1024;
  int reserved_shared_memory_per_block = 0;  // Shared memory the system keeps in every block (1 KiB from 8.0).
  int registers_per_block = 65536;
  int registers_per_multiprocessor = 65536;
  int max_threads_per_multiprocessor = 1024;
  int max_blocks_per_multiprocessor = 16;
  int clock_rate_khz = kClockRateKhz;
  int memory_clock_rate_khz = 5001000;
  int memory_bus_width = 256;
  int l2_cache_size = 4 * 1024 * 1024;
  int total_constant_memory = 64 * 1024;
  int texture_alignment = 512;
  int pci_bus_id = 0, pci_device_id = 0, pci_domain_id = 0;
  uint8_t uuid[16] = {};
};

// The properties of a real NVIDIA GPU of compute capability `cc_major`.`cc_minor` (one of those gp-agent --emu-cc
// accepts; any other gets a T4's): the per-multiprocessor limits every GPU of that capability shares, and the
// multiprocessor count and L2 size of one named product (device.cc), so that programs that size their work from
// the attributes choose what they would choose on that GPU.
DeviceProperties PropertiesOfCapability(int cc_major, int cc_minor);

// One kernel parameter as the PTX signature declares it.
struct ParamInfo {
  uint32_t offset = 0;  // In the parameter buffer, aligned as the type requires.
  uint32_t size = 0;
  uint32_t align = 0;
};

class Module;
class Function;
class Stream;
class Event;

struct LaunchConfig {
  Dim3 grid, block;
  uint32_t shared_bytes = 0;  // Dynamic shared memory.
  Stream* stream = nullptr;   // nullptr: the default (legacy) stream.
  // cuLaunchCooperativeKernel: all blocks resident at once, so that cooperative_groups' grid sync works; the grid
  // must fit the device at once (kCooperativeLaunchTooLarge otherwise).
  bool cooperative = false;
};

class Device {
 public:
  explicit Device(DeviceOptions options = {});
  ~Device();  // Waits for running work, then frees everything.
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceProperties& properties() const;
  // Whether the device could reserve its memory (at base_address, when one was asked for).
  CallStatus StartupStatus() const;

  // ---- Memory. Device addresses are stable for the allocation's life and 256-byte aligned. ----
  CallStatus Malloc(uint64_t bytes, uint64_t* device_ptr);
  // Allocates exactly [address, address + bytes): a session restored on this device keeps the addresses its program
  // and its device memory hold. kInvalidValue when any of that range is taken or outside the device's memory.
  CallStatus MallocAt(uint64_t address, uint64_t bytes);
  CallStatus Free(uint64_t device_ptr);
  // Frees in stream order without blocking the caller (the memory stays valid for work queued before).
  CallStatus FreeAsync(uint64_t device_ptr, Stream* stream = nullptr);
  void MemInfo(uint64_t* free_bytes, uint64_t* total_bytes) const;
  // Device memory held for the loaded modules' variables (part of MemInfo's used memory).
  uint64_t ModuleBytes() const;

  // ---- Virtual memory, as cuMemAddressReserve/cuMemCreate/cuMemMap: physical memory (counted like allocations)
  // mapped into reserved address space; one physical allocation may be mapped at several addresses. Sizes, offsets
  // and addresses are multiples of kMappingGranularity. The caller keeps the books (a reservation is freed empty, a
  // physical allocation released unmapped, mappings unmapped whole); the device checks the bounds. ----
  static constexpr uint64_t kMappingGranularity = 2ull << 20;
  // `hint`: a wanted address (0: any); another is chosen when it is not free.
  CallStatus ReserveAddress(uint64_t bytes, uint64_t alignment, uint64_t hint, uint64_t* address);
  CallStatus FreeAddress(uint64_t address, uint64_t bytes);
  CallStatus CreatePhysical(uint64_t bytes, uint64_t* handle);
  CallStatus ReleasePhysical(uint64_t handle);
  CallStatus Map(uint64_t address, uint64_t bytes, uint64_t handle, uint64_t offset);
  // Waits for all queued work first, as cuMemUnmap does.
  CallStatus Unmap(uint64_t address, uint64_t bytes);
  // The allocation containing `device_ptr`: its base and size; kInvalidValue if none.
  CallStatus AddressRange(uint64_t device_ptr, uint64_t* base, uint64_t* size) const;
  // Synchronous copies and sets wait for earlier work on the default stream, like cuMemcpy.
  CallStatus CopyToDevice(uint64_t dst, const void* src, size_t bytes, Stream* stream = nullptr, bool async = false);
  CallStatus CopyFromDevice(void* dst, uint64_t src, size_t bytes, Stream* stream = nullptr, bool async = false);
  CallStatus CopyOnDevice(uint64_t dst, uint64_t src, size_t bytes, Stream* stream = nullptr, bool async = false);
  // Fills `count` elements of `element_size` (1, 2 or 4) bytes with the low bytes of `value`.
  CallStatus Memset(uint64_t dst, uint32_t value, size_t element_size, size_t count, Stream* stream = nullptr,
                   bool async = false);

  // ---- Texture and surface objects (texture.h): the description goes into the device's TextureTable, which only
  // the device writes, and the handle is an opaque number naming it (never an address). The resource's texels must
  // lie inside one allocation. At most TextureTable::kCapacity objects live at once (kOutOfMemory beyond). ----
  CallStatus CreateTextureObject(const TextureDesc& desc, uint64_t* handle);
  // Frees in stream order: kernels queued before may still sample the object.
  CallStatus DestroyTextureObject(uint64_t handle);
  // CreateTextureObject under a given handle (a restored session's, on a device in the same window): refused when
  // the handle is not of this device's window or is taken.
  CallStatus CreateTextureObjectAt(const TextureDesc& desc, uint64_t handle);

  // ---- Modules. ----
  // `image`: fatbin wrapper, fatbin container or PTX text (see fatbin.h); `size` 0 if unknown.
  // Errors: kNoBinaryForGpu (no PTX), kInvalidImage (corrupt), kInvalidPtx (malformed or unsupported PTX, with
  // the line and instruction).
  CallStatus LoadModule(const void* image, size_t size, Module** module);
  CallStatus LoadPtx(std::string_view ptx, Module** module);
  // LoadModule with the module's variables at `placements` (ModulePlacements of the same image loaded on a device
  // with the same memory window): a restored module's variables keep their addresses. kInvalidValue when one of
  // them is taken, or the module places another number of variables.
  // `memory_kept`: the device's memory already holds the variables' values (it was handed over from the device the
  // module was checkpointed on, DeviceOptions::memory_fd): they are placed, not initialized.
  CallStatus LoadModuleAt(const void* image, size_t size, const std::vector<uint64_t>& placements, Module** module,
                          bool memory_kept = false);
  // Where `module` placed its variables, in the order it placed them.
  std::vector<uint64_t> ModulePlacements(const Module* module) const;
  CallStatus UnloadModule(Module* module);
  CallStatus GetFunction(Module* module, const std::string& name, Function** function);
  // Module-scope .global/.const variable: device address and size.
  CallStatus GetGlobal(Module* module, const std::string& name, uint64_t* device_ptr, size_t* bytes);
  static const std::vector<ParamInfo>& Params(const Function* function);
  static const std::string& Name(const Function* function);
  // Static shared memory, local (stack) bytes per thread, and the register count we claim: what a GPU's compiler
  // could give the kernel (the PTX's virtual registers, 16 to 255) within its launch bounds (.maxntid/.reqntid,
  // .minnctapersm, .maxnreg), as ptxas fits a bounded kernel's registers to them. The emulator keeps registers in
  // host memory, so they never limit a launch; the count only feeds occupancy arithmetic (cudaOccupancy*, CUB).
  void Attributes(const Function* function, int* static_shared_bytes, int* local_bytes, int* num_regs) const;
  // The architecture the function's PTX was written for (`.target sm_120` or `sm_120a`: 120); 0 if it names none.
  static int PtxVersion(const Function* function);
  // The most threads a block of `function` may have (cuFuncGetAttribute's MAX_THREADS_PER_BLOCK): the device's
  // limit, the kernel's __launch_bounds__ (.maxntid, .reqntid) and what the emulator holds for one block
  // (kMaxBlockFootprintBytes: registers, local and parameter stacks, static shared memory), whole warps where one
  // fits. A launch of a larger block is refused with kLaunchOutOfResources; of this one, it is not for its size.
  int MaxThreadsPerBlock(const Function* function) const;

  // ---- Launch (asynchronous, in stream order). ----
  // `params` as cuLaunchKernel's kernelParams: one pointer per parameter, read now (copied before returning).
  CallStatus Launch(Function* function, const LaunchConfig& config, void** params);
  // Same with the parameter buffer already packed at Params() offsets.
  CallStatus LaunchPacked(Function* function, const LaunchConfig& config, const void* buffer, size_t bytes);
  // Runs `callback` on the stream's worker once earlier work is done (cuLaunchHostFunc).
  CallStatus LaunchHostFunc(Stream* stream, std::function<void()> callback);
  // Runs `callback` once the work queued on `stream` so far has run (with one queue for every stream: all work
  // queued so far): at once, on the calling thread, when it already has; else on the stream's worker, which counts
  // it as done before it runs it. For a caller's own waits (no thread hop when nothing is queued); a
  // program's host function goes through LaunchHostFunc, which never runs it on the caller's thread.
  CallStatus WhenReached(Stream* stream, std::function<void()> callback);
  // Runs `soon` once the work queued on `stream` so far is expected to have run within `lead`, judging by how long
  // recent pieces of work took: a waiter that sleeps until WhenReached's callback can be woken that much ahead of
  // it, so that its wakeup (tens of microseconds on a virtual machine) overlaps the last of the work instead of
  // following it. Runs it on the stream's worker as a piece of work starts (no later than `lead` before the end, at
  // most one piece earlier), or at once on this thread when the end is that near already; drops it, never run,
  // where nothing is queued or the work runs first.
  void WhenNearlyReached(Stream* stream, std::chrono::nanoseconds lead, std::function<void()> soon);

  // ---- Streams and events. ----
  CallStatus CreateStream(Stream** stream);
  CallStatus DestroyStream(Stream* stream);  // Pending work still completes.
  CallStatus StreamSynchronize(Stream* stream);
  CallStatus StreamQuery(Stream* stream);     // kSuccess when idle, kNotReady otherwise.
  CallStatus StreamWaitEvent(Stream* stream, Event* event);
  // cuStreamWaitValue32/64: later work of `stream` waits until the `width` (4 or 8) bytes at `address` satisfy
  // `condition` (0 GEQ, 1 EQ, 2 AND, 3 NOR) against `value`. Every stream of this device runs in one order, so
  // nothing queued after the wait can ever satisfy it: a condition that does not hold once the work before it has
  // run is a deadlock, reported as a sticky kLaunchTimeout (as a barrier that can never complete), not a hang.
  CallStatus WaitValue(Stream* stream, uint64_t address, uint64_t value, unsigned width, uint32_t condition);
  CallStatus CreateEvent(Event** event);
  CallStatus DestroyEvent(Event* event);
  CallStatus RecordEvent(Event* event, Stream* stream);
  CallStatus EventSynchronize(Event* event);
  CallStatus EventQuery(Event* event);
  CallStatus ElapsedMs(Event* start, Event* end, float* ms);
  // Waits for all work on all streams.
  CallStatus Synchronize();

  // A kernel fault (illegal address, trap, assert) is sticky, as on a GPU: every later call returns it until
  // ResetContext(), which frees all memory and modules.
  CallStatus StickyError() const;
  // Whether every stream's work has run and the context has not faulted.
  bool Idle() const;
  void ResetContext();

  // Dynamic PTX thread-instructions executed by all launches so far (for benchmarks and telemetry).
  uint64_t InstructionsExecuted() const;
  // NVML's utilisation rates of this device since the previous call (the first call answers 0 and starts the
  // window): percent of the time a kernel was running, and percent of the time a copy or memset was.
  void Utilization(unsigned* gpu_percent, unsigned* memory_percent);

  // Where device printf output goes; default: this process's stdout, flushed at the end of each launch.
  void SetPrintfSink(std::function<void(std::string_view)> sink);

  struct Impl;  // Internal to lib/emu.

 private:
  CallStatus LoadPtxPlaced(std::string_view ptx, const std::vector<uint64_t>* placements, Module** module,
                           bool memory_kept = false);
  CallStatus MakeTextureObject(const TextureDesc& desc, bool at_handle, uint64_t* handle);

  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_DEVICE_H_
