// The client-side objects behind the handles the forwarded entry points give out, and the routing rules they
// share (ARCHITECTURE.md section 4):
//   - device pointers route by address: every slice owns a disjoint window (RemoteSession::Owns), so a pointer
//     alone names the slice, whatever the current context is;
//   - streams, events and explicit work route by the handle's device; the NULL stream, CU_STREAM_LEGACY and
//     CU_STREAM_PER_THREAD are remote stream 0 of the current context's slice;
//   - code (CUlibrary/CUmodule) keeps a copy of its image and is loaded on a slice the first time it is used
//     there, so one cudart library serves every device of a multi-slice program.
// Handles are pointers to the structures below, never freed while the process lives (a stale handle is
// recognised as destroyed instead of being dereferenced after free).
#ifndef GPUPOOL_INTERPOSE_REMOTE_H_
#define GPUPOOL_INTERPOSE_REMOTE_H_

#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <set>
#include <string>
#include <vector>

#include "api.h"
#include "client/session_client.h"

namespace gpupool::interpose {

using internal::RemoteFunctionInfo;
using internal::RemoteSession;

struct Stream {
  int device = 0;
  uint64_t remote = 0;  // Stream id on the slice; 0 = its default stream.
  unsigned int flags = 0;
  int priority = 0;
  bool alive = true;
};

struct Event {
  int device = 0;
  uint64_t remote = 0;
  unsigned int flags = 0;
  bool alive = true;
};

struct Module;

// A CUkernel and a CUfunction are the same object: cudart passes the CUkernel of cuLibraryGetKernel straight to
// cuLaunchKernel, so both must resolve alike.
struct Kernel {
  Module* module = nullptr;
  std::string name;
  // cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); -1 until set (the driver's default then:
  // 48 KiB less the static shared memory). Launches are checked against it, as the driver does.
  std::atomic<int> max_dynamic_shared{-1};
  // Every cuFuncSetAttribute the program made, replayed on each slice where the function is resolved.
  // Guarded by Remote::mu_.
  std::map<int, int> attributes;
  std::map<int, RemoteFunctionInfo> per_device;  // Filled on first use on a device. Guarded by Remote::mu_.
};

// A CUlibrary and a CUmodule (cuLibraryGetModule returns the same object).
// The dynamic shared memory a launch of `kernel` on `dev` may ask for: its cuFuncSetAttribute opt-in, else the
// driver's default (48 KiB less the function's static shared memory). Defined in launch.cc.
int MaxDynamicShared(const Kernel& kernel, int dev, const RemoteFunctionInfo& info);
// The most dynamic shared memory a function may opt into on `dev`: the device's opt-in limit less its static shared
// memory. In launch.cc.
int MaxOptInDynamicShared(int dev, const RemoteFunctionInfo& info);
// Device attribute `attribute` of slice `dev`, or `fallback` where the slice reports none (or zero). In launch.cc.
int DeviceAttribute(int dev, int attribute, int fallback);

struct Module {
  std::vector<uint8_t> image;                       // A fatbin container or PTX text (NUL-terminated).
  std::string library;  // The shared library whose embedded image this is (SharedLibraryAt), or "".
  std::map<int, uint64_t> per_device;               // Remote module id, per device where loaded.
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
  bool alive = true;
};

struct Allocation {
  uint64_t size = 0;
  int device = 0;
};

// A CUarray (array.cc): pitched memory of its slice, never handed to the program as a pointer, reached only by
// array copies (cuMemcpy2D/3D, cuMemcpyHtoA...). Rows are `pitch` bytes apart, slices `pitch * rows` bytes.
struct Array {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  int device = 0;
  uint64_t memory = 0;
  size_t row_bytes = 0;  // Width times the element's bytes.
  size_t pitch = 0;
  size_t rows = 1;       // Rows per slice: max(Height, 1).
  size_t slices = 1;     // max(Depth, 1).
  bool alive = true;
};
// The array behind a handle, or CUDA_ERROR_INVALID_HANDLE (never created, or destroyed). Defined in array.cc.
CUresult ResolveArray(CUarray handle, Array* out);

// 1D copies as cuMemcpyHtoD(Async), DtoH and DtoD take them: each device side must lie in a slice's window
// (CUDA_ERROR_INVALID_VALUE otherwise), captured into a graph when the stream captures. Defined in memory.cc.
CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t n, CUstream stream);
CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t n, CUstream stream);
CUresult CopyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream);

// Virtual memory management (vmm.cc). A CUmemGenericAllocationHandle points at a PhysicalMemory; reservations
// lie in one slice's window (the slice current when they were made), and only that slice's memory maps there.
struct PhysicalMemory {
  int device = 0;
  uint64_t remote = 0;  // The session's handle.
  uint64_t bytes = 0;
  CUmemAllocationProp prop{};
  int references = 1;  // cuMemCreate and each cuMemRetainAllocationHandle; cuMemRelease drops one.
  bool alive = true;
};

struct Reservation {
  uint64_t bytes = 0;
  int device = 0;
};

struct Mapping {
  uint64_t bytes = 0;
  PhysicalMemory* memory = nullptr;
  uint64_t offset = 0;
};

class Remote {
 public:
  static Remote& Get();

  // Called once by Driver::Init with the sessions of the attached slices (device i = sessions[i]); empty for
  // fake devices, where every forwarded call answers CUDA_ERROR_NOT_SUPPORTED.
  void Attach(std::vector<std::unique_ptr<RemoteSession>> sessions);
  bool attached() const { return !sessions_.empty(); }
  size_t device_count() const { return sessions_.size(); }
  RemoteSession* session(int device) const { return sessions_[device].get(); }

  // The device whose window (or one of whose module variables) holds `address`, or -1 (host memory, or no
  // pointer of ours).
  int DeviceOf(uint64_t address) const;
  // A module variable of `module` that `device` placed outside its window (a GPU's driver puts module variables
  // where it likes): its address routes to `device` until the module is unloaded.
  void AddOutsideGlobal(uint64_t address, uint64_t bytes, int device, const Module* module);
  void ForgetGlobalsOf(const Module* module);
  // Checks init and the current context; *device = its device.
  CUresult CurrentDevice(int* device) const;
  // Resolves a stream handle (default streams: the current context's device, remote 0). Unless told otherwise,
  // first waits for the host functions that work on the stream must follow (host_functions.h).
  CUresult ResolveStream(CUstream handle, int* device, uint64_t* remote, bool after_host_functions = true);
  CUresult ResolveEvent(CUevent handle, Event** event);
  CUresult ResolveModule(CUmodule handle, Module** module);
  CUresult ResolveKernel(CUfunction handle, Kernel** kernel);

  // Module code on `device`: loads it there on first use. Logs the slice's reason when loading fails.
  CUresult ModuleOn(Module* module, int device, uint64_t* remote);
  // The remote function (handle and parameter layout) of `kernel` on `device`, loading as needed.
  CUresult FunctionOn(Kernel* kernel, int device, RemoteFunctionInfo* info);
  // Records a function attribute and sets it on every slice where the function is already resolved.
  CUresult SetFunctionAttribute(Kernel* kernel, int attribute, int value);

  // The remote error of a failed call, as a CUresult; logs the session's message, then `hint` if any, once per
  // distinct message.
  CUresult Fail(int device, int code, const char* what, const std::string& hint = "");

  std::mutex& mu() { return mu_; }
  std::map<uint64_t, Allocation> allocations;  // Device allocations by base. Guarded by mu().
  std::map<uint64_t, uint64_t> host_allocations;  // cuMemAllocHost/HostAlloc/HostRegister: base -> size.
  std::map<uint64_t, Reservation> reservations;    // Virtual memory, by start. Guarded by mu().
  std::map<uint64_t, Mapping> mappings;            // By start. Guarded by mu().
  std::set<PhysicalMemory*> physical;              // Every handle ever given out. Guarded by mu().
  std::set<Array*> arrays;                         // Every CUarray ever given out. Guarded by mu().
  std::set<Stream*> streams;
  std::set<Event*> events;
  std::set<Module*> modules;
  std::set<Kernel*> kernels;

 private:
  Remote() = default;
  std::vector<std::unique_ptr<RemoteSession>> sessions_;  // Written once at init, then read-only.
  std::mutex mu_;
  struct OutsideGlobal {
    uint64_t bytes = 0;
    int device = 0;
    const Module* module = nullptr;
  };
  mutable std::shared_mutex globals_mu_;
  std::map<uint64_t, OutsideGlobal> outside_globals_;  // By address. Guarded by globals_mu_.
  std::atomic<bool> any_outside_globals_{false};       // Spares DeviceOf the lock where there are none.
};

inline CUresult ToResult(int code) { return static_cast<CUresult>(code); }

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_REMOTE_H_
