// Context management: primary contexts and the per-thread context stack. A context lives in the client and names
// a device (a slice). Explicit contexts (cuCtxCreate) are mapped onto the device's primary context: the handle
// cuCtxCreate returns IS the primary context (retained once more), cuCtxDestroy releases it. Programs that create
// two contexts on one device therefore share allocations and modules between them, which real CUDA keeps apart.
#include <fmt/format.h>

#include "api.h"
#include "driver.h"
#include "host_functions.h"
#include "managed.h"
#include "remote.h"

namespace gpupool::interpose {
namespace {

// The flags cuDevicePrimaryCtxSetFlags accepts (everything else is CUDA_ERROR_INVALID_VALUE, as in the driver).
constexpr unsigned int kPrimaryContextFlags = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                                              CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS;

// Resolves `dev` to its primary context.
CUresult PrimaryOf(CUdevice dev, Context** ctx) {
  Driver& driver = Driver::Get();
  const DeviceInfo* device;
  if (CUresult r = driver.GetDevice(dev, &device); r != CUDA_SUCCESS) return r;
  *ctx = driver.PrimaryContext(dev);
  return CUDA_SUCCESS;
}

// Resolves `handle` (NULL: the current context) to a context.
CUresult ContextOf(CUcontext handle, Context** ctx) {
  Driver& driver = Driver::Get();
  if (CUresult r = driver.CheckInitialized(); r != CUDA_SUCCESS) return r;
  *ctx = handle == nullptr ? Driver::Current() : driver.FromHandle(handle);
  return *ctx != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

std::string DevArg(CUdevice dev) { return fmt::format("dev={}", dev); }
std::string CtxArg(CUcontext ctx) { return fmt::format("ctx={}", static_cast<void*>(ctx)); }

CUresult PrimaryRelease(const char* name, CUdevice dev) {
  return ApiCall(
      name,
      [&] {
        Context* ctx;
        if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
        return Driver::Get().Release(ctx);
      },
      [&](CUresult) { return DevArg(dev); });
}

CUresult PrimarySetFlags(const char* name, CUdevice dev, unsigned int flags) {
  return ApiCall(
      name,
      [&] {
        Context* ctx;
        if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
        if ((flags & ~kPrimaryContextFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
        std::lock_guard<std::mutex> lock(Driver::Get().mu());
        ctx->flags = flags;
        return CUDA_SUCCESS;
      },
      [&](CUresult) { return fmt::format("dev={}, flags={:#x}", dev, flags); });
}

CUresult PrimaryReset(const char* name, CUdevice dev) {
  return ApiCall(
      name,
      [&] {
        Context* ctx;
        if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
        Driver::Get().Reset(ctx);
        return CUDA_SUCCESS;
      },
      [&](CUresult) { return DevArg(dev); });
}

CUresult PushCurrent(const char* name, CUcontext handle) {
  return ApiCall(
      name,
      [&] {
        if (handle == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
        Context* ctx;
        if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
        return Driver::Push(ctx);
      },
      [&](CUresult) { return CtxArg(handle); });
}

CUresult PopCurrent(const char* name, CUcontext* pctx) {
  return ApiCall(name, [&] {
    if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
    Context* ctx = Driver::Pop();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx != nullptr) *pctx = Driver::Handle(ctx);
    return CUDA_SUCCESS;
  });
}

CUresult GetDevice(const char* name, CUdevice* device, CUcontext handle) {
  return ApiCall(
      name,
      [&] {
        if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
        Context* ctx;
        if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
        *device = ctx->device;
        return CUDA_SUCCESS;
      },
      [&](CUresult r) { return r == CUDA_SUCCESS ? fmt::format("dev={}", *device) : CtxArg(handle); });
}

CUresult Synchronize(const char* name, CUcontext handle) {
  return ApiCall(
      name,
      [&] {
        Context* ctx;
        if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
        // Every slice, not only the context's: cudaDeviceSynchronize is also how programs wait for copies staged
        // between slices, and a slice with nothing queued answers at once.
        Remote& remote = Remote::Get();
        CUresult first = CUDA_SUCCESS;
        for (size_t dev = 0; dev < remote.device_count(); ++dev) {
          HostFunctions::Get().WaitDevice(static_cast<int>(dev));
          const uint64_t managed_epoch = ManagedMemory::Get().WorkEpoch(static_cast<int>(dev));
          int code = remote.session(static_cast<int>(dev))->Synchronize();
          // Managed memory the device wrote before the wait is the host's to fetch without waiting again.
          if (code == 0) ManagedMemory::Get().Synchronized(static_cast<int>(dev), managed_epoch);
          if (code != 0 && first == CUDA_SUCCESS) first = remote.Fail(static_cast<int>(dev), code, "work on the device");
        }
        return first;
      },
      [&](CUresult) { return CtxArg(handle); });
}

}  // namespace
}  // namespace gpupool::interpose

using gpupool::interpose::ApiCall;
using gpupool::interpose::Context;
using gpupool::interpose::Driver;

extern "C" {

// --- Primary contexts. ------------------------------------------------------------------------------------------

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return ApiCall(
      "cuDevicePrimaryCtxRetain",
      [&] {
        if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
        Context* ctx;
        if (CUresult r = gpupool::interpose::PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
        Driver::Get().Retain(ctx);
        *pctx = Driver::Handle(ctx);
        return CUDA_SUCCESS;
      },
      [&](CUresult) { return gpupool::interpose::DevArg(dev); });
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return gpupool::interpose::PrimaryRelease("cuDevicePrimaryCtxRelease", dev);
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return gpupool::interpose::PrimaryRelease("cuDevicePrimaryCtxRelease_v2", dev);
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return gpupool::interpose::PrimarySetFlags("cuDevicePrimaryCtxSetFlags", dev, flags);
}
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return gpupool::interpose::PrimarySetFlags("cuDevicePrimaryCtxSetFlags_v2", dev, flags);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  return ApiCall(
      "cuDevicePrimaryCtxGetState",
      [&] {
        if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
        Context* ctx;
        if (CUresult r = gpupool::interpose::PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
        std::lock_guard<std::mutex> lock(Driver::Get().mu());
        *flags = ctx->flags;
        *active = ctx->active ? 1 : 0;
        return CUDA_SUCCESS;
      },
      [&](CUresult) { return gpupool::interpose::DevArg(dev); });
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return gpupool::interpose::PrimaryReset("cuDevicePrimaryCtxReset", dev);
}
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return gpupool::interpose::PrimaryReset("cuDevicePrimaryCtxReset_v2", dev);
}

// --- The current context. ---------------------------------------------------------------------------------------

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  return ApiCall(
      "cuCtxGetCurrent",
      [&] {
        if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
        if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
        *pctx = Driver::Handle(Driver::Current());
        return CUDA_SUCCESS;
      },
      [&](CUresult r) { return r == CUDA_SUCCESS ? fmt::format("-> {}", static_cast<void*>(*pctx)) : ""; });
}

CUresult cuCtxSetCurrent(CUcontext handle) {
  return ApiCall(
      "cuCtxSetCurrent",
      [&] {
        Driver& driver = Driver::Get();
        if (CUresult r = driver.CheckInitialized(); r != CUDA_SUCCESS) return r;
        Context* ctx = nullptr;
        if (handle != nullptr && (ctx = driver.FromHandle(handle)) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
        Driver::SetCurrent(ctx);
        return CUDA_SUCCESS;
      },
      [&](CUresult) { return gpupool::interpose::CtxArg(handle); });
}

CUresult cuCtxPushCurrent(CUcontext ctx) { return gpupool::interpose::PushCurrent("cuCtxPushCurrent", ctx); }
CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return gpupool::interpose::PushCurrent("cuCtxPushCurrent_v2", ctx); }
CUresult cuCtxPopCurrent(CUcontext* pctx) { return gpupool::interpose::PopCurrent("cuCtxPopCurrent", pctx); }
CUresult cuCtxPopCurrent_v2(CUcontext* pctx) { return gpupool::interpose::PopCurrent("cuCtxPopCurrent_v2", pctx); }

// cuCtxGetDevice acts on the current context; its CUDA 13 form (_v2) takes the context, NULL meaning current.
CUresult cuCtxGetDevice(CUdevice* device) { return gpupool::interpose::GetDevice("cuCtxGetDevice", device, nullptr); }
CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  return gpupool::interpose::GetDevice("cuCtxGetDevice_v2", device, ctx);
}

CUresult cuCtxSynchronize(void) { return gpupool::interpose::Synchronize("cuCtxSynchronize", nullptr); }
CUresult cuCtxSynchronize_v2(CUcontext ctx) { return gpupool::interpose::Synchronize("cuCtxSynchronize_v2", ctx); }

CUresult cuCtxGetFlags(unsigned int* flags) {
  return ApiCall("cuCtxGetFlags", [&] {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx;
    if (CUresult r = gpupool::interpose::ContextOf(nullptr, &ctx); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::mutex> lock(Driver::Get().mu());
    *flags = ctx->flags;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetId(CUcontext handle, unsigned long long* ctx_id) {
  return ApiCall(
      "cuCtxGetId",
      [&] {
        if (ctx_id == nullptr) return CUDA_ERROR_INVALID_VALUE;
        Context* ctx;
        if (CUresult r = gpupool::interpose::ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
        *ctx_id = ctx->id;
        return CUDA_SUCCESS;
      },
      [&](CUresult) { return gpupool::interpose::CtxArg(handle); });
}

// cudart asks this before cudaDeviceReset. The driver answers 3020 for every context (the context ABI version,
// unchanged since CUDA 3.2; not the driver version).
CUresult cuCtxGetApiVersion(CUcontext handle, unsigned int* version) {
  return ApiCall(
      "cuCtxGetApiVersion",
      [&] {
        if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
        Context* ctx;
        if (CUresult r = gpupool::interpose::ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
        *version = 3020;
        return CUDA_SUCCESS;
      },
      [&](CUresult) { return gpupool::interpose::CtxArg(handle); });
}

}  // extern "C"

// --- Explicit contexts, limits, cache configuration, peers. -------------------------------------------------------

namespace gpupool::interpose {
namespace {

CUresult CtxCreate(const char* name, CUcontext* pctx, CUdevice dev) {
  return ApiCall(name, [&] {
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx;
    if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
    Driver::Get().Retain(ctx);
    if (CUresult r = Driver::Push(ctx); r != CUDA_SUCCESS) return r;
    *pctx = Driver::Handle(ctx);
    return CUDA_SUCCESS;
  });
}

CUresult CtxDestroy(const char* name, CUcontext handle) {
  return ApiCall(name, [&] {
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx;
    if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
    if (Driver::Current() == ctx) Driver::Pop();
    Driver& driver = Driver::Get();
    // The primary context's own retain (cudart's) must survive a cuCtxDestroy of the alias.
    std::unique_lock<std::mutex> lock(driver.mu());
    bool last = ctx->retain_count <= 1;
    lock.unlock();
    return last ? CUDA_SUCCESS : driver.Release(ctx);
  });
}

// Accepted and recorded; the slice enforces its own limits.
std::mutex limits_mu;
std::map<int, size_t> limits = {{CU_LIMIT_STACK_SIZE, 1024},
                                {CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 20},
                                {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20},
                                {CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 2},
                                {CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 2048},
                                {CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 32},
                                {CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0},
                                {CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED, 1}};
CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;

CUresult NeedContext() {
  Context* ctx;
  return ContextOf(nullptr, &ctx);
}

}  // namespace
}  // namespace gpupool::interpose

extern "C" {

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return gpupool::interpose::CtxCreate("cuCtxCreate_v2", pctx, dev);
}
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n, unsigned int flags, CUdevice dev) {
  return gpupool::interpose::CtxCreate("cuCtxCreate_v3", pctx, dev);
}
CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  return gpupool::interpose::CtxCreate("cuCtxCreate_v4", pctx, dev);
}
CUresult cuCtxDestroy_v2(CUcontext ctx) { return gpupool::interpose::CtxDestroy("cuCtxDestroy_v2", ctx); }

CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  return ApiCall("cuCtxGetLimit", [&] {
    using namespace gpupool::interpose;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
    // Query-only limits of CIG (graphics-interop) contexts, which a slice's context never is: not CIG, and the
    // whole of an SM's shared memory available to kernels.
    if (limit == CU_LIMIT_CIG_ENABLED) {
      *value = 0;
      return CUDA_SUCCESS;
    }
    if (limit == CU_LIMIT_SHMEM_SIZE) {
      int dev;
      if (CUresult r = Remote::Get().CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
      *value = static_cast<size_t>(DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 0));
      return CUDA_SUCCESS;
    }
    std::lock_guard<std::mutex> lock(limits_mu);
    auto it = limits.find(limit);
    if (it == limits.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *value = it->second;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  return ApiCall("cuCtxSetLimit", [&] {
    using namespace gpupool::interpose;
    if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::mutex> lock(limits_mu);
    auto it = limits.find(limit);
    if (it == limits.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
    it->second = value;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  return ApiCall("cuCtxGetCacheConfig", [&] {
    using namespace gpupool::interpose;
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::mutex> lock(limits_mu);
    *config = cache_config;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  return ApiCall("cuCtxSetCacheConfig", [&] {
    using namespace gpupool::interpose;
    if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::mutex> lock(limits_mu);
    cache_config = config;
    return CUDA_SUCCESS;
  });
}

// Slices never reach each other's memory (they may sit on different servers): no peer access, copies between
// them are staged through the client.
CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  return ApiCall("cuDeviceCanAccessPeer", [&] {
    const gpupool::interpose::DeviceInfo* info;
    if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = Driver::Get().GetDevice(dev, &info); r != CUDA_SUCCESS) return r;
    if (CUresult r = Driver::Get().GetDevice(peer, &info); r != CUDA_SUCCESS) return r;
    *can = 0;
    return CUDA_SUCCESS;
  });
}

CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst) {
  return ApiCall("cuDeviceGetP2PAttribute", [&] {
    const gpupool::interpose::DeviceInfo* info;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = Driver::Get().GetDevice(src, &info); r != CUDA_SUCCESS) return r;
    if (CUresult r = Driver::Get().GetDevice(dst, &info); r != CUDA_SUCCESS) return r;
    *value = 0;
    return CUDA_SUCCESS;
  });
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  return ApiCall("cuCtxEnablePeerAccess", [&] { return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED; });
}

}  // extern "C"
