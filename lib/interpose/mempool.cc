// Stream-ordered allocation and memory pools (cuMemAllocAsync, cuMemFreeAsync, cuMemPool*). A pool is a client
// object over the slice's ordinary allocations: memory is taken from the slice when allocated (counted against its
// quota at once) and returned when freed, so a pool never holds memory back: its reserved memory is its used
// memory, trimming has nothing to release, and the release threshold is kept but has nothing to govern.
// Stream order: an allocation is usable from the moment it is ordered (earlier than the driver promises); a free
// reaches the slice after the work queued before it (the slice frees in order with its queued work). While a
// stream captures, both become graph memory nodes (graph.cc). The entry points are generated from forward_spec.h.
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "core/log.h"
#include "driver.h"
#include "driver_newer.h"
#include "forward_spec.h"
#include "graph.h"
#include "remote.h"

namespace gpupool::interpose {
namespace {

struct MemPool {
  int device = 0;
  CUmemPoolProps props{};
  bool is_default = false;
  bool alive = true;
  cuuint64_t release_threshold = 0;
  int reuse_follow_event_dependencies = 1, reuse_allow_opportunistic = 1, reuse_allow_internal_dependencies = 1;
  cuuint64_t used = 0, used_high = 0;
};

std::mutex mu;  // Guards everything below and every MemPool.
// Never destroyed (handles stay recognisable; late frees from atexit handlers still find their pool).
std::vector<MemPool*>& default_pools = *new std::vector<MemPool*>;  // Per device, made on first use.
std::map<int, MemPool*>& current_pools = *new std::map<int, MemPool*>;  // cuDeviceSetMemPool.
std::set<MemPool*>& pools = *new std::set<MemPool*>;                 // Every pool given out.
struct PoolAllocation {
  MemPool* pool = nullptr;
  size_t bytes = 0;
};
std::map<CUdeviceptr, PoolAllocation>& pool_allocations = *new std::map<CUdeviceptr, PoolAllocation>;

MemPool* DefaultPool(int device) {  // mu held
  if (default_pools.size() < Remote::Get().device_count()) default_pools.resize(Remote::Get().device_count());
  MemPool*& pool = default_pools[device];
  if (pool == nullptr) {
    pool = new MemPool;
    pool->device = device;
    pool->is_default = true;
    pool->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pool->props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
    pools.insert(pool);
  }
  return pool;
}

MemPool* CurrentPool(int device) {  // mu held
  auto it = current_pools.find(device);
  return it != current_pools.end() ? it->second : DefaultPool(device);
}

CUresult ResolvePool(CUmemoryPool handle, MemPool** out) {  // mu held
  auto* pool = reinterpret_cast<MemPool*>(handle);
  if (pool == nullptr || pools.count(pool) == 0 || !pool->alive) return CUDA_ERROR_INVALID_VALUE;
  *out = pool;
  return CUDA_SUCCESS;
}

CUresult CheckDevice(CUdevice dev) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (!Remote::Get().attached()) return CUDA_ERROR_NOT_SUPPORTED;
  if (dev < 0 || static_cast<size_t>(dev) >= Remote::Get().device_count()) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

// The pool's reuse policy flag `attribute` (kept and reported; nothing is cached to reuse), or null.
int* ReuseFlag(MemPool* pool, CUmemPool_attribute attribute) {
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      return &pool->reuse_follow_event_dependencies;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      return &pool->reuse_allow_opportunistic;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return &pool->reuse_allow_internal_dependencies;
    default:
      return nullptr;
  }
}

CUresult AllocFrom(MemPool* pool_handle, CUdeviceptr* out, size_t bytes, CUstream stream) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  MemPool* pool = pool_handle;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (pool == nullptr) pool = CurrentPool(dev);
  }
  if (Capturing(stream)) return CaptureMemAlloc(stream, pool->device, bytes, out);
  CUdeviceptr address;
  if (CUresult r = MemAllocOn(pool->device, &address, bytes); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu);
  pool_allocations[address] = PoolAllocation{pool, bytes};
  pool->used += bytes;
  pool->used_high = std::max(pool->used_high, pool->used);
  *out = address;
  return CUDA_SUCCESS;
}

}  // namespace

CUmemoryPool PoolOf(CUdeviceptr address) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = pool_allocations.upper_bound(address);
  if (it == pool_allocations.begin()) return nullptr;
  --it;
  return address - it->first < std::max<size_t>(it->second.bytes, 1) ? reinterpret_cast<CUmemoryPool>(it->second.pool)
                                                                     : nullptr;
}

CUresult MemAllocAsync(CUdeviceptr* out, size_t bytes, CUstream stream) {
  return AllocFrom(nullptr, out, bytes, stream);
}

CUresult MemAllocFromPoolAsync(CUdeviceptr* out, size_t bytes, CUmemoryPool handle, CUstream stream) {
  MemPool* pool;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (CUresult r = ResolvePool(handle, &pool); r != CUDA_SUCCESS) return r;
  }
  return AllocFrom(pool, out, bytes, stream);
}

CUresult MemFreeAsync(CUdeviceptr address, CUstream stream) {
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  if (address == 0) return CUDA_SUCCESS;  // As cuMemFree(0): nothing to free, and the driver says so.
  if (Capturing(stream)) return CaptureMemFree(stream, address);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = pool_allocations.find(address);
    if (it != pool_allocations.end()) {
      it->second.pool->used -= it->second.bytes;
      pool_allocations.erase(it);
    }
  }
  // The slice frees it after the work queued before (ordinary memory may be freed so too, as the driver allows).
  return MemFree(address);
}

CUresult DeviceGetDefaultMemPool(CUmemoryPool* out, CUdevice dev) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu);
  *out = reinterpret_cast<CUmemoryPool>(DefaultPool(dev));
  return CUDA_SUCCESS;
}

CUresult DeviceGetMemPool(CUmemoryPool* out, CUdevice dev) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu);
  *out = reinterpret_cast<CUmemoryPool>(CurrentPool(dev));
  return CUDA_SUCCESS;
}

CUresult DeviceSetMemPool(CUdevice dev, CUmemoryPool handle) {
  if (CUresult r = CheckDevice(dev); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu);
  MemPool* pool;
  if (CUresult r = ResolvePool(handle, &pool); r != CUDA_SUCCESS) return r;
  if (pool->device != dev) return CUDA_ERROR_INVALID_DEVICE;
  current_pools[dev] = pool;
  return CUDA_SUCCESS;
}

// The location-based forms (CUDA 13): device memory only.
CUresult LocationMemPool(CUmemoryPool* out, const CUmemLocation* location, CUmemAllocationType type, bool current) {
  if (location == nullptr || type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  return current ? DeviceGetMemPool(out, location->id) : DeviceGetDefaultMemPool(out, location->id);
}

CUresult LocationSetMemPool(const CUmemLocation* location, CUmemAllocationType type, CUmemoryPool pool) {
  if (location == nullptr || type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  return DeviceSetMemPool(location->id, pool);
}

CUresult MemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (out == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    GP_WARN("interpose", "memory pools of host memory are not supported on gpupool slices");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    GP_WARN("interpose", "shareable memory pools are not supported: a slice's memory cannot be shared");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (CUresult r = CheckDevice(props->location.id); r != CUDA_SUCCESS) return r;
  auto* pool = new MemPool;
  pool->device = props->location.id;
  pool->props = *props;
  std::lock_guard<std::mutex> lock(mu);
  pools.insert(pool);
  *out = reinterpret_cast<CUmemoryPool>(pool);
  return CUDA_SUCCESS;
}

// Allocations still out keep working and can still be freed; the pool object stays (a stale handle is refused).
CUresult MemPoolDestroy(CUmemoryPool handle) {
  std::lock_guard<std::mutex> lock(mu);
  MemPool* pool;
  if (CUresult r = ResolvePool(handle, &pool); r != CUDA_SUCCESS) return r;
  if (pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  pool->alive = false;
  for (auto it = current_pools.begin(); it != current_pools.end();) {
    it = it->second == pool ? current_pools.erase(it) : std::next(it);
  }
  return CUDA_SUCCESS;
}

// A pool holds no memory beyond its live allocations: nothing to trim.
CUresult MemPoolTrimTo(CUmemoryPool handle, size_t) {
  std::lock_guard<std::mutex> lock(mu);
  MemPool* pool;
  return ResolvePool(handle, &pool);
}

CUresult MemPoolSetAttribute(CUmemoryPool handle, CUmemPool_attribute attribute, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu);
  MemPool* pool;
  if (CUresult r = ResolvePool(handle, &pool); r != CUDA_SUCCESS) return r;
  if (int* flag = ReuseFlag(pool, attribute)) {
    *flag = *static_cast<int*>(value);
    return CUDA_SUCCESS;
  }
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:  // Only a reset to zero is allowed: the high mark restarts from now.
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->used_high = pool->used;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult MemPoolGetAttribute(CUmemoryPool handle, CUmemPool_attribute attribute, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu);
  MemPool* pool;
  if (CUresult r = ResolvePool(handle, &pool); r != CUDA_SUCCESS) return r;
  if (const int* flag = ReuseFlag(pool, attribute)) {
    *static_cast<int*>(value) = *flag;
    return CUDA_SUCCESS;
  }
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = pool->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:  // Reserved is used: the pool keeps nothing back.
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = pool->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = pool->used_high;
      return CUDA_SUCCESS;
    default:
      break;
  }
  // CUDA 13.2's read-only attributes (driver_newer.h): what the pool was made with.
  switch (static_cast<int>(attribute)) {
    case kMemPoolAttrAllocationType:
      *static_cast<CUmemAllocationType*>(value) = pool->props.allocType;
      return CUDA_SUCCESS;
    case kMemPoolAttrExportHandleTypes:
      *static_cast<CUmemAllocationHandleType*>(value) = pool->props.handleTypes;
      return CUDA_SUCCESS;
    case kMemPoolAttrLocationId:
      *static_cast<int*>(value) = pool->props.location.id;
      return CUDA_SUCCESS;
    case kMemPoolAttrLocationType:
      *static_cast<CUmemLocationType*>(value) = pool->props.location.type;
      return CUDA_SUCCESS;
    case kMemPoolAttrMaxPoolSize:
      // The pool grows as far as the slice's memory does: CUmemPoolProps::maxSize is not enforced here.
      *static_cast<cuuint64_t*>(value) = Driver::Get().devices()[pool->device].total_memory;
      return CUDA_SUCCESS;
    case kMemPoolAttrHwDecompressEnabled:
      *static_cast<int*>(value) = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// A slice's pool is readable and writable by its own device only: slices never see each other's memory.
CUresult MemPoolSetAccess(CUmemoryPool handle, const CUmemAccessDesc* map, size_t count) {
  if (count != 0 && map == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu);
  MemPool* pool;
  if (CUresult r = ResolvePool(handle, &pool); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < count; ++i) {
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    const bool own = map[i].location.id == pool->device;
    if (own && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_DEVICE;
    if (!own && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      GP_WARN("interpose", "device {} cannot access memory of device {}: slices do not see each other",
              map[i].location.id, pool->device);
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  return CUDA_SUCCESS;
}

CUresult MemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool handle, CUmemLocation* location) {
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu);
  MemPool* pool;
  if (CUresult r = ResolvePool(handle, &pool); r != CUDA_SUCCESS) return r;
  *flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == pool->device
               ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
               : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_MEMPOOL_FORWARDS(GP_DEFINE_FORWARD)
