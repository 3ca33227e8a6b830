// The device interface below the session server: what a backend (the emulated device, a physical GPU through its
// driver) does for one session, in plain C++. No Cap'n Proto or KJ type appears here. The session server
// (session_server.h) has already checked everything a client sent before a backend sees it: handles name objects
// this backend created for this session, device ranges lie inside the session's own allocations or module
// variables, sizes are sane, the session is not revoked. A backend checks only what the device itself decides
// (a fatbin without code for it, an unknown kernel name, a launch configuration it cannot run).
//
// Threading: every method is called on the session's event-loop thread, one at a time. Only the callbacks given to
// WhenReached/WhenRecorded run elsewhere (a device thread).
#ifndef GPUPOOL_BACKEND_DEVICE_BACKEND_H_
#define GPUPOOL_BACKEND_DEVICE_BACKEND_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/session_types.h"

namespace gpupool::backend {

using session::DeviceInfo;
using session::Dim3;
using session::KernelParam;
using session::kMappingGranularity;

// A backend's own objects, opaque to the server. A null StreamRef is the default stream.
template <typename Tag>
struct Ref {
  void* p = nullptr;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};
using StreamRef = Ref<struct StreamRefTag>;
using EventRef = Ref<struct EventRefTag>;
using ModuleRef = Ref<struct ModuleRefTag>;
using FunctionRef = Ref<struct FunctionRefTag>;
using PhysicalRef = Ref<struct PhysicalRefTag>;

// What the server keeps about a kernel: its parameter layout (launch buffers are checked against it) and the
// attributes the client's occupancy calculator needs.
struct KernelInfo {
  std::vector<KernelParam> params;
  int shared_bytes = 0, local_bytes = 0, num_regs = 0;
  int ptx_version = 0;  // The compute capability the kernel's PTX was written for (major * 10 + minor); 0: unknown.
  // The largest block the kernel may launch with (its launch bounds, registers, the backend's own limits); 0: the
  // device's limit.
  int max_threads_per_block = 0;
};

struct LaunchShape {
  Dim3 grid, block;
  uint32_t shared_bytes = 0;
  std::optional<Dim3> cluster;  // Thread block cluster dimensions, if the launch sets them.
  bool cooperative = false;     // cuLaunchCooperativeKernel: every block resident at once (grid sync).
};

// A texture or surface object over the session's memory, as the session server checked it: the texels of layer
// (or depth slice) s, row y start at address + s * slice_pitch + y * pitch and lie inside the session's own memory.
// Enumerations hold the CUDA driver's values (CUarray_format, CUaddress_mode, CUfilter_mode, CU_TRSF_* flags).
struct TextureSpec {
  enum class Resource : uint8_t { kArray, kLinear, kPitch2D };
  bool surface = false;
  Resource resource = Resource::kArray;  // What the client described: arrays are pitched memory of the slice.
  uint32_t dims = 1;                     // 1, 2 or 3 (layered: 1 or 2 with `layers` set).
  uint32_t format = 0;
  uint32_t channels = 1;
  uint64_t address = 0, pitch = 0, slice_pitch = 0;
  uint32_t width = 1, height = 1, depth = 1, layers = 0;
  uint32_t address_mode[3] = {0, 0, 0};
  uint32_t filter_mode = 0;
  uint32_t flags = 0;
  float border[4] = {0, 0, 0, 0};
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  static CallStatus CannotPlace(const char* what) {
    return CallStatus(cu::kNotSupported, std::string("this device cannot place ") + what + " at a given address");
  }

  // The device as the client sees it (total memory: the server puts the slice's quota there).
  virtual DeviceInfo Info() = 0;
  // The device's free memory as the backend counts it; the server caps it by the slice's quota.
  virtual CallStatus MemInfo(uint64_t* free_bytes, uint64_t* total_bytes) = 0;

  // `*reserved`: the bytes the allocation really takes (after the device's rounding), counted against the quota.
  virtual CallStatus Alloc(uint64_t bytes, uint64_t* address, uint64_t* reserved) = 0;
  // `address` came from Alloc and was not freed; work using it may still be queued (the backend keeps the memory
  // until that work has run, as cudaFree does).
  virtual CallStatus Free(uint64_t address, uint64_t reserved) = 0;

  // Virtual memory management. A reservation is address space inside the session's window and holds no memory;
  // physical memory is mapped into it. The server keeps the books: it frees a reservation only when nothing is
  // mapped in it, releases physical memory only when its last mapping is gone, and unmaps whole mappings only.
  // `hint`: an address the caller would like (0: any); the backend may choose another.
  virtual CallStatus ReserveAddress(uint64_t bytes, uint64_t alignment, uint64_t hint, uint64_t* address) = 0;
  virtual CallStatus FreeAddress(uint64_t address, uint64_t bytes) = 0;
  virtual CallStatus CreatePhysical(uint64_t bytes, PhysicalRef* memory) = 0;
  virtual CallStatus ReleasePhysical(PhysicalRef memory) = 0;
  // Readable and writable by the device once mapped.
  virtual CallStatus Map(uint64_t address, uint64_t bytes, PhysicalRef memory, uint64_t offset) = 0;
  // Waits for work queued before (as cuMemUnmap does) so no running kernel loses its memory.
  virtual CallStatus Unmap(uint64_t address, uint64_t bytes) = 0;

  // `src` (`dst`) stays valid until the work this call queues on `stream` has run: the server holds the message
  // until WhenReached(stream) has called back.
  virtual CallStatus CopyToDevice(uint64_t dst, const uint8_t* src, uint64_t bytes, StreamRef stream) = 0;
  virtual CallStatus CopyFromDevice(uint8_t* dst, uint64_t src, uint64_t bytes, StreamRef stream) = 0;
  virtual CallStatus CopyOnDevice(uint64_t dst, uint64_t src, uint64_t bytes, StreamRef stream) = 0;
  // element_size is 1, 2 or 4.
  virtual CallStatus Memset(uint64_t dst, uint32_t value, uint8_t element_size, uint64_t count, StreamRef stream) = 0;

  virtual CallStatus LoadModule(const uint8_t* image, size_t bytes, ModuleRef* module) = 0;
  // The server forgets the module's functions and variables first.
  virtual CallStatus UnloadModule(ModuleRef module) = 0;
  virtual CallStatus GetFunction(ModuleRef module, const std::string& name, FunctionRef* function,
                                 KernelInfo* info) = 0;
  virtual CallStatus GetGlobal(ModuleRef module, const std::string& name, uint64_t* address, uint64_t* bytes) = 0;

  // `params` holds every parameter of `info.params` (the server checked).
  virtual CallStatus Launch(FunctionRef function, const KernelInfo& info, const LaunchShape& shape, StreamRef stream,
                            const uint8_t* params, size_t param_bytes) = 0;
  virtual CallStatus SetFunctionAttribute(FunctionRef function, int attribute, int value) = 0;

  // Device memory the driver holds for the session beyond its allocations (module code and variables, local memory
  // for every thread the device can run at once, the device heap of in-kernel malloc, the printf buffer), as the
  // backend reckons it. The session server charges it to the slice's quota when the session opens and after each
  // module load or unload, and refuses what does not fit. 0 (the default): the backend holds nothing outside what
  // the server charges already.
  virtual uint64_t DriverHeldBytes() { return 0; }
  // DriverHeldBytes once a launch of `info` has run (the driver grows local memory at launch to the most any
  // launched function needs), so that the server can refuse, before it runs, a launch whose growth does not fit.
  virtual uint64_t DriverHeldBytesWithLaunch(const KernelInfo& info) { return DriverHeldBytes(); }
  // `shape.cluster` all zero: the function's own cluster dimensions.
  virtual CallStatus MaxActiveClusters(FunctionRef function, const LaunchShape& shape, int* clusters) = 0;

  virtual CallStatus CreateStream(StreamRef* stream) = 0;
  // The server forgets the handle first; work queued on the stream still completes.
  virtual CallStatus DestroyStream(StreamRef stream) = 0;
  // Success when the stream is idle, CUDA_ERROR_NOT_READY while it has work.
  virtual CallStatus QueryStream(StreamRef stream) = 0;
  virtual CallStatus StreamWaitEvent(StreamRef stream, EventRef event) = 0;
  // Later work of `stream` waits until the `width` (4 or 8) bytes at `address` satisfy the condition of `flags`
  // (CU_STREAM_WAIT_VALUE_GEQ, _EQ, _AND, _NOR, possibly | _FLUSH) against `value`. The server checked the range,
  // the alignment and the flags.
  virtual CallStatus StreamWaitValue(StreamRef stream, uint64_t address, uint64_t value, unsigned width,
                                     uint32_t flags) = 0;
  virtual CallStatus CreateEvent(EventRef* event) = 0;
  virtual CallStatus DestroyEvent(EventRef event) = 0;
  virtual CallStatus RecordEvent(EventRef event, StreamRef stream) = 0;
  virtual CallStatus QueryEvent(EventRef event) = 0;
  virtual CallStatus ElapsedMs(EventRef start, EventRef end, float* ms) = 0;

  // Calls `done` (on any thread) once the work queued on `stream` so far has run; never blocks. A non-ok status:
  // nothing was queued and `done` will not be called (a faulted device: Settled reports why).
  virtual CallStatus WhenReached(StreamRef stream, std::function<void()> done) = 0;
  // The same for the work before the event's last record.
  virtual CallStatus WhenRecorded(EventRef event, std::function<void()> done) = 0;
  // As WhenReached, for bookkeeping that may learn of it a little late but must not slow the stream (the session
  // server's submission turns): a backend may tell it more cheaply. The default is WhenReached.
  virtual CallStatus WhenRan(StreamRef stream, std::function<void()> done) {
    return WhenReached(stream, std::move(done));
  }
  // Calls `soon` (on any thread, this one included) once the work queued on `stream` so far (null: on the device) is
  // expected to have run within about `lead`: a waiter that sleeps until WhenReached's callback can be woken that
  // much ahead, so that its wakeup overlaps the work's last moments instead of following them. A hint, for backends
  // that CanTellNearlyReached: one whose work runs first drops `soon` instead.
  virtual void WhenNearlyReached(StreamRef stream, std::chrono::nanoseconds lead, std::function<void()> soon) {
    (void)stream, (void)lead, (void)soon;
  }
  virtual bool CanTellNearlyReached() const { return false; }
  // The status of the stream's work once reached (null: the whole device): a fault of an earlier kernel or copy.
  virtual CallStatus Settled(StreamRef stream) = 0;
  virtual CallStatus SettledEvent(EventRef event) = 0;

  // A texture or surface object; `*handle` is the 64-bit value kernels receive, `*reserved` the device memory
  // the object takes (counted against the quota). CUDA_ERROR_NOT_SUPPORTED where the device cannot offer it.
  virtual CallStatus CreateTexture(const TextureSpec& spec, uint64_t* handle, uint64_t* reserved) = 0;
  // `handle` came from CreateTexture and was not destroyed; kernels queued before may still use it.
  virtual CallStatus DestroyTexture(uint64_t handle) = 0;

  // NVML's utilisation rates since the previous call (percent of the time kernels ran, and copies or memsets),
  // or CUDA_ERROR_NOT_SUPPORTED where the backend cannot tell.
  virtual CallStatus Utilization(uint32_t* gpu_percent, uint32_t* memory_percent) = 0;

  // Device printf output produced since the last call, for the client's stdout.
  virtual std::string TakeOutput() = 0;

  // Whether a synchronisation now would find nothing to wait for or report: no work queued on any stream, no
  // output waiting, no fault. May answer false whenever it cannot tell cheaply (the default).
  virtual bool Quiet() { return false; }

  // Device memory [address, address + bytes) as this process can read and write it, when nothing queued on the device
  // is left to run and no fault is pending: a copy may then happen in place, as its bytes arrive or leave (an
  // emulated device's memory is the worker's own). Null otherwise, and where device memory is not host memory (a
  // GPU). REQUIRES: the range lies inside memory of the caller's.
  virtual uint8_t* IdleHostView(uint64_t address, uint64_t bytes) { return nullptr; }

  // Device memory [address, address + bytes) copied out into `out` (made that long), or in from `data`, while
  // nothing queued on the device is left to run (a checkpoint's, a restore's). In place through IdleHostView by
  // default (one copy, no zeroed buffer first); a GPU copies. REQUIRES: the range lies inside memory of the caller's.
  virtual CallStatus ReadIdle(uint64_t address, uint64_t bytes, std::vector<uint8_t>* out) {
    const uint8_t* view = IdleHostView(address, bytes);
    if (view == nullptr) return CallStatus(cu::kNotSupported, "this device's memory cannot be read in place");
    out->assign(view, view + bytes);
    return CallStatus::Ok();
  }
  virtual CallStatus WriteIdle(uint64_t address, const uint8_t* data, uint64_t bytes) {
    uint8_t* view = IdleHostView(address, bytes);
    if (view == nullptr) return CallStatus(cu::kNotSupported, "this device's memory cannot be written in place");
    std::memcpy(view, data, bytes);
    return CallStatus::Ok();
  }

  // Whether the device's memory is a memory file that a session's next worker can be given (EmuBackendConfig's
  // memory_fd), so that a checkpoint may leave the allocations' bytes where they are (SessionImage::memory_stays).
  virtual bool MemoryShareable() const { return false; }
  // Whether this device was given the memory of the session it is to restore (it holds its bytes already): a restore
  // then writes none of it, and LoadModuleAt places module variables without initializing them.
  virtual bool MemoryKept() const { return false; }
  // Whether LoadModuleAt puts a module's variables where it is told (an emulated device), or only checks where the
  // device's own loader put them (a GPU's driver).
  virtual bool PlacesModuleVariables() const { return false; }
  // Restoring a session at the addresses it had (session_image.h). An allocation at exactly `address`; a module whose
  // variables go where `placements` say (ModuleVariables of the same image, where it was loaded before); where a
  // module placed its variables, with their sizes, in the order it placed them. Backends that cannot choose
  // addresses (a GPU's driver places module variables itself) answer CUDA_ERROR_NOT_SUPPORTED.
  virtual CallStatus AllocAt(uint64_t address, uint64_t bytes, uint64_t* reserved) {
    return CannotPlace("an allocation");
  }
  virtual CallStatus LoadModuleAt(const uint8_t* image, size_t bytes, const std::vector<uint64_t>& placements,
                                  ModuleRef* module) {
    return CannotPlace("a module's variables");
  }
  // `image` is the module's as it was loaded (a GPU's driver says where a variable is only by its name, which the
  // image gives).
  virtual CallStatus ModuleVariables(ModuleRef module, const std::vector<uint8_t>& image,
                                     std::vector<std::pair<uint64_t, uint64_t>>* placed) {
    return CannotPlace("a module's variables");
  }
  // Whether CreateTextureAt can give a restored texture or surface object the handle it had (an emulated device;
  // a GPU's driver chooses its handles).
  virtual bool PlacesTextureObjects() const { return false; }
  // CreateTexture under the handle the client holds (a restored session's).
  virtual CallStatus CreateTextureAt(const TextureSpec& spec, uint64_t handle, uint64_t* reserved) {
    return CannotPlace("a texture object");
  }

  // The lease ended: free every allocation, module, stream and event now. Later calls never reach the backend.
  virtual void Reset() = 0;
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_DEVICE_BACKEND_H_
