// Context management: primary contexts and the per-thread context stack. A context lives in the client and names
// a device (a slice). Explicit contexts (cuCtxCreate) are mapped onto the device's primary context: the handle
// cuCtxCreate returns IS the primary context (retained once more), cuCtxDestroy releases it. Programs that create
// two contexts on one device therefore share allocations and modules between them, which real CUDA keeps apart.
// The entry points are forward_spec.h's GP_CONTEXT_ENTRIES; this file holds their implementations.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "api.h"
#include "driver.h"
#include "forward_spec.h"
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

CUresult NeedContext() {
  Context* ctx;
  return ContextOf(nullptr, &ctx);
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

}  // namespace

// --- Primary contexts. ------------------------------------------------------------------------------------------

CUresult PrimaryRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
  Driver::Get().Retain(ctx);
  *pctx = Driver::Handle(ctx);
  return CUDA_SUCCESS;
}

CUresult PrimaryRelease(CUdevice dev) {
  Context* ctx;
  if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
  return Driver::Get().Release(ctx);
}

CUresult PrimarySetFlags(CUdevice dev, unsigned int flags) {
  Context* ctx;
  if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
  if ((flags & ~kPrimaryContextFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Driver::Get().mu());
  ctx->flags = flags;
  return CUDA_SUCCESS;
}

CUresult PrimaryGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(Driver::Get().mu());
  *flags = ctx->flags;
  *active = ctx->active ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult PrimaryReset(CUdevice dev) {
  Context* ctx;
  if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
  Driver::Get().Reset(ctx);
  return CUDA_SUCCESS;
}

// --- The current context. ---------------------------------------------------------------------------------------

CUresult GetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  *pctx = Driver::Handle(Driver::Current());
  return CUDA_SUCCESS;
}

CUresult SetCurrent(CUcontext handle) {
  Driver& driver = Driver::Get();
  if (CUresult r = driver.CheckInitialized(); r != CUDA_SUCCESS) return r;
  Context* ctx = nullptr;
  if (handle != nullptr && (ctx = driver.FromHandle(handle)) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Driver::SetCurrent(ctx);
  return CUDA_SUCCESS;
}

CUresult PushCurrent(CUcontext handle) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Context* ctx;
  if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
  return Driver::Push(ctx);
}

CUresult PopCurrent(CUcontext* pctx) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  Context* ctx = Driver::Pop();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = Driver::Handle(ctx);
  return CUDA_SUCCESS;
}

// cuCtxGetDevice acts on the current context; its CUDA 13 form (_v2) takes the context, NULL meaning current.
CUresult GetDevice(CUdevice* device, CUcontext handle) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult Synchronize(CUcontext handle) {
  Context* ctx;
  if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
  // Every slice, not only the context's: cudaDeviceSynchronize is also how programs wait for copies staged between
  // slices, and a slice with nothing queued answers at once.
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
}

CUresult GetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult r = ContextOf(nullptr, &ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(Driver::Get().mu());
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

CUresult GetId(CUcontext handle, unsigned long long* ctx_id) {
  if (ctx_id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
  *ctx_id = ctx->id;
  return CUDA_SUCCESS;
}

// cudart asks this before cudaDeviceReset. The driver answers 3020 for every context (the context ABI version,
// unchanged since CUDA 3.2; not the driver version).
CUresult GetApiVersion(CUcontext handle, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult r = ContextOf(handle, &ctx); r != CUDA_SUCCESS) return r;
  *version = 3020;
  return CUDA_SUCCESS;
}

// --- Explicit contexts, limits, cache configuration, peers. -------------------------------------------------------

CUresult CtxCreate(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult r = PrimaryOf(dev, &ctx); r != CUDA_SUCCESS) return r;
  Driver::Get().Retain(ctx);
  if (CUresult r = Driver::Push(ctx); r != CUDA_SUCCESS) return r;
  *pctx = Driver::Handle(ctx);
  return CUDA_SUCCESS;
}

CUresult CtxDestroy(CUcontext handle) {
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
}

CUresult GetLimit(size_t* value, CUlimit limit) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  // Query-only limits of CIG (graphics-interop) contexts, which a slice's context never is: not CIG, and the whole
  // of an SM's shared memory available to kernels.
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
}

CUresult SetLimit(CUlimit limit, size_t value) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(limits_mu);
  auto it = limits.find(limit);
  if (it == limits.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  it->second = value;
  return CUDA_SUCCESS;
}

CUresult GetCacheConfig(CUfunc_cache* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(limits_mu);
  *config = cache_config;
  return CUDA_SUCCESS;
}

CUresult SetCacheConfig(CUfunc_cache config) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(limits_mu);
  cache_config = config;
  return CUDA_SUCCESS;
}

// Slices never reach each other's memory (they may sit on different servers): no peer access, copies between them
// are staged through the client. `answer` (CanAccessPeer's `can`, a P2P attribute's value) is 0 for any two devices.
CUresult NoPeerBetween(int* answer, CUdevice dev, CUdevice peer) {
  const DeviceInfo* info;
  if (answer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Driver::Get().GetDevice(dev, &info); r != CUDA_SUCCESS) return r;
  if (CUresult r = Driver::Get().GetDevice(peer, &info); r != CUDA_SUCCESS) return r;
  *answer = 0;
  return CUDA_SUCCESS;
}

CUresult PeerAccessUnsupported() { return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED; }

}  // namespace gpupool::interpose

GP_CONTEXT_ENTRIES(GP_DEFINE_ENTRY)
