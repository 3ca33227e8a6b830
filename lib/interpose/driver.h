// The interposer's process-wide state: initialisation, the cached device list, contexts and their
// context-local storage. The entry points in device.cc, context.cc and export_tables.cc are thin layers over it.
#ifndef GPUPOOL_INTERPOSE_DRIVER_H_
#define GPUPOOL_INTERPOSE_DRIVER_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "api.h"
#include "devices.h"

namespace gpupool::interpose {

// Called by the driver when a context that holds context-local storage is destroyed (cudart registers one to
// drop its per-context state when cudaDeviceReset resets the primary context).
using ClsDestructor = void (*)(CUcontext ctx, void* key, void* value);

// A CUcontext handle points at one of these. Only primary contexts exist so far: one per device, created at
// cuInit and never freed, so a handle stays valid (and comparable) for the life of the process.
struct Context {
  int device = 0;
  unsigned long long id = 0;  // cuCtxGetId.

  // Guarded by Driver::mu_.
  int retain_count = 0;    // cuDevicePrimaryCtxRetain minus Release.
  unsigned int flags = 0;  // cuDevicePrimaryCtxSetFlags.
  bool active = false;     // Retained at least once since the last reset.
  struct Stored {
    void* value;
    ClsDestructor destructor;
  };
  std::map<void*, Stored> storage;  // Context-local storage, by key.
};

class Driver {
 public:
  // The one instance. Leaked on purpose: cudart calls into the driver from atexit handlers, after static
  // destructors may have run.
  static Driver& Get();

  // cuInit: asks the DeviceProvider for the devices, once; later calls return the first call's result. Prints one
  // line on stderr when there is no device or the provider failed. Thread-safe.
  CUresult Init(unsigned int flags);

  // CUDA_SUCCESS after a successful Init; CUDA_ERROR_NOT_INITIALIZED before; the Init error after a failed one.
  CUresult CheckInitialized() const;
  // Why the first Init failed, in the words it logged, and the failure's kind (a gpupool::StatusCode as int; kInternal
  // where it was not a gpupool status); "" and kOk while Init has not failed.
  std::string InitError(int* status_code);

  // REQUIRES: CheckInitialized() == CUDA_SUCCESS. The list never changes after Init.
  const std::vector<DeviceInfo>& devices() const { return devices_; }

  // The device `dev`, or CUDA_ERROR_INVALID_DEVICE (CUDA_ERROR_NOT_INITIALIZED before Init).
  CUresult GetDevice(CUdevice dev, const DeviceInfo** device) const;

  // REQUIRES: GetDevice(dev) succeeded.
  Context* PrimaryContext(CUdevice dev) const { return primary_contexts_[dev].get(); }
  static CUcontext Handle(Context* ctx) { return reinterpret_cast<CUcontext>(ctx); }

  // The context behind a handle, or nullptr for NULL and for handles this driver never gave out.
  Context* FromHandle(CUcontext handle) const;

  // The calling thread's current context (top of its context stack), or nullptr.
  static Context* Current();
  // cuCtxSetCurrent: replaces the top of the stack; nullptr pops it.
  static void SetCurrent(Context* ctx);
  // cuCtxPushCurrent / cuCtxPopCurrent. Push fails with CUDA_ERROR_INVALID_VALUE past a depth no program needs;
  // Pop returns nullptr on an empty stack.
  static CUresult Push(Context* ctx);
  static Context* Pop();

  // Primary context reference counting (cuDevicePrimaryCtxRetain/Release/Reset). Deactivation (the last Release,
  // or Reset, which also drops the retain count to 0) destroys the context-local storage, running its destructors
  // without holding mu_.
  void Retain(Context* ctx);
  CUresult Release(Context* ctx);
  void Reset(Context* ctx);

  // Context-local storage (private export table c693336e). A NULL handle means the current context.
  CUresult StoragePut(CUcontext handle, void* key, void* value, ClsDestructor destructor);
  CUresult StorageGet(CUcontext handle, void* key, void** value);
  CUresult StorageDelete(CUcontext handle, void* key);

  std::mutex& mu() { return mu_; }

 private:
  Driver() = default;
  CUresult Resolve(CUcontext handle, Context** ctx) const;
  void Deactivate(Context* ctx, std::unique_lock<std::mutex>& lock);

  std::mutex init_mu_;
  std::atomic<CUresult> init_result_{CUDA_ERROR_NOT_INITIALIZED};
  bool init_attempted_ = false;                             // Guarded by init_mu_.
  std::string init_error_;                                  // Same: why Init failed (InitError).
  int init_error_code_ = 0;                                 // Same.
  std::vector<DeviceInfo> devices_;                         // Written once under init_mu_, then read-only.
  std::vector<std::unique_ptr<Context>> primary_contexts_;  // Same.
  std::unique_ptr<DeviceProvider> provider_;                // Same; owns the lease (released at exit).

  std::mutex mu_;
};

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_DRIVER_H_
