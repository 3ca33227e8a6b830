// Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap...), as PyTorch's expandable segments and
// other allocators use it. Address space is reserved in the window of the slice current at the time (so pointers
// into it route to that slice like any other), physical memory is created on the slice the allocation properties
// name and counted against its memory, and a slice's memory maps only into that slice's reservations: slices never
// see each other's memory. Shareable handles (POSIX file descriptors, fabric) are refused: the memory lives on
// another machine. The entry points are generated from forward_spec.h.
#include <fmt/format.h>

#include <mutex>

#include "core/log.h"
#include "core/range_map.h"
#include "driver.h"
#include "forward_spec.h"
#include "remote.h"

namespace gpupool::interpose {
namespace calls = session::calls;
namespace {

bool Aligned(uint64_t v) { return v % session::kMappingGranularity == 0; }

CUresult Refuse(const char* what) {
  GP_WARN("interpose", "{}", what);
  return CUDA_ERROR_NOT_SUPPORTED;
}

// The device an allocation property names; INVALID_VALUE unless it is a device this process sees.
CUresult DeviceOfProp(const CUmemAllocationProp* prop, int* device) {
  if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.id < 0 || static_cast<size_t>(prop->location.id) >= Remote::Get().device_count()) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *device = prop->location.id;
  return CUDA_SUCCESS;
}

CUresult ResolvePhysical(CUmemGenericAllocationHandle handle, PhysicalMemory** memory) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  auto* m = reinterpret_cast<PhysicalMemory*>(handle);
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  if (m == nullptr || remote.physical.count(m) == 0 || !m->alive) return CUDA_ERROR_INVALID_VALUE;
  *memory = m;
  return CUDA_SUCCESS;
}

uint64_t MappingBytes(const Mapping& m) { return m.bytes; }

// The mapping holding `address`, or null.
const Mapping* MappingAt(const std::map<uint64_t, Mapping>& mappings, uint64_t address) {
  auto it = mappings.upper_bound(address);
  if (it == mappings.begin()) return nullptr;
  --it;
  if (address - it->first >= it->second.bytes) return nullptr;
  return &it->second;
}

// A hint outside every window: where the slice has nothing yet, its window moves so that its reservation space
// starts at the hint, as the driver honours a free hint (gp-agent's cuda backend, stacked on this library in a test
// configuration, reserves its client's window so). Otherwise the reservation goes where the window has room.
void MoveWindowTo(int dev, uint64_t hint, uint64_t size) {
  Remote& remote = Remote::Get();
  RemoteSession* session = remote.session(dev);
  if (!session->Untouched() || hint % (1ull << 30) != 0) return;
  for (size_t i = 0; i < remote.device_count(); ++i) {
    const RemoteSession* other = remote.session(static_cast<int>(i));
    // The moved window starts below the hint by the slice's memory (at most the other window's size apart).
    if (static_cast<int>(i) != dev && other->window_base() < hint + size &&
        hint < other->window_base() + other->window_bytes() + session->window_bytes()) {
      return;
    }
  }
  if (Status s = session->Relocate(hint, size); !s.ok()) {
    GP_DEBUG("interpose", "cuMemAddressReserve: the window stays where it is ({})", s.message());
  }
}

}  // namespace

CUresult MemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr hint,
                           unsigned long long flags) {
  int dev;
  Remote& remote = Remote::Get();
  if (CUresult r = remote.CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || size == 0 || !Aligned(size) || (alignment & (alignment - 1)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A hint inside another slice's window reserves there (it is where the program wants its memory).
  if (hint != 0 && remote.DeviceOf(hint) >= 0) dev = remote.DeviceOf(hint);
  if (hint != 0 && remote.DeviceOf(hint) < 0) MoveWindowTo(dev, hint, size);
  calls::AddressReserve::Results r;
  if (int code = remote.session(dev)->Invoke<calls::AddressReserve>({size, alignment, hint}, &r); code != 0) {
    if (code == CUDA_ERROR_OUT_OF_MEMORY) return CUDA_ERROR_OUT_OF_MEMORY;
    return remote.Fail(dev, code, "cuMemAddressReserve");
  }
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.reservations[r.address] = {size, dev};
  *ptr = r.address;
  return CUDA_SUCCESS;
}

// Boilerplate by nature, with MemUnmap below: find the client's record under the lock, forward one call, forget it.
CUresult MemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  Remote& remote = Remote::Get();
  int dev;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    auto it = remote.reservations.find(ptr);
    if (it == remote.reservations.end() || it->second.bytes != size) return CUDA_ERROR_INVALID_VALUE;
    auto m = remote.mappings.lower_bound(ptr);
    if (m != remote.mappings.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // Still mapped.
    dev = it->second.device;
    remote.reservations.erase(it);
  }
  remote.session(dev)->Invoke<calls::AddressFree>({ptr, size});
  return CUDA_SUCCESS;
}

CUresult MemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                   unsigned long long flags) {
  int current;
  Remote& remote = Remote::Get();
  if (CUresult r = remote.CurrentDevice(&current); r != CUDA_SUCCESS) return r;
  int dev;
  if (handle == nullptr || flags != 0 || prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = DeviceOfProp(prop, &dev); r != CUDA_SUCCESS) return r;
  if (size == 0 || !Aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  // Shareable handle types are accepted here (PyTorch asks for POSIX file descriptors by default) and refused when
  // a handle is exported: the memory is on a slice, not in this machine's driver.
  calls::MemCreate::Results r;
  if (int code = remote.session(dev)->Invoke<calls::MemCreate>({size}, &r); code != 0) {
    if (code == CUDA_ERROR_OUT_OF_MEMORY) return CUDA_ERROR_OUT_OF_MEMORY;  // The program's business: not logged.
    return remote.Fail(dev, code, "cuMemCreate");
  }
  auto* memory = new PhysicalMemory{dev, r.memory.value, size, *prop};
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.physical.insert(memory);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(memory);
  return CUDA_SUCCESS;
}

CUresult MemRelease(CUmemGenericAllocationHandle handle) {
  PhysicalMemory* memory;
  if (CUresult r = ResolvePhysical(handle, &memory); r != CUDA_SUCCESS) return r;
  Remote& remote = Remote::Get();
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    if (--memory->references > 0) return CUDA_SUCCESS;
    memory->alive = false;  // Kept: a stale handle is recognised, never freed memory.
  }
  // The slice frees it once its last mapping is unmapped, as the driver does.
  if (int code = remote.session(memory->device)->Invoke<calls::MemRelease>({session::PhysicalId{memory->remote}});
      code != 0) {
    return remote.Fail(memory->device, code, "cuMemRelease");
  }
  return CUDA_SUCCESS;
}

CUresult MemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                unsigned long long flags) {
  PhysicalMemory* memory;
  if (CUresult r = ResolvePhysical(handle, &memory); r != CUDA_SUCCESS) return r;
  if (flags != 0 || size == 0 || !Aligned(ptr) || !Aligned(size) || !Aligned(offset)) return CUDA_ERROR_INVALID_VALUE;
  if (offset > memory->bytes || size > memory->bytes - offset) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    auto it = remote.reservations.upper_bound(ptr);
    if (it == remote.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    if (ptr - it->first >= it->second.bytes || size > it->second.bytes - (ptr - it->first)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (it->second.device != memory->device) {
      return Refuse(fmt::format("cuMemMap: memory of device {} cannot be mapped into address space reserved on "
                                "device {}: each device is a slice of a different GPU, possibly on another server",
                                memory->device, it->second.device)
                        .c_str());
    }
    // Part of the range is mapped already.
    if (OverlapsAnyRange(remote.mappings, ptr, size, MappingBytes)) return CUDA_ERROR_INVALID_VALUE;
  }
  if (int code = remote.session(memory->device)->Invoke<calls::MemMap>(
          {ptr, size, offset, session::PhysicalId{memory->remote}});
      code != 0) {
    return remote.Fail(memory->device, code, "cuMemMap");
  }
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.mappings[ptr] = {size, memory, offset};
  return CUDA_SUCCESS;
}

CUresult MemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  Remote& remote = Remote::Get();
  int dev;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    std::map<uint64_t, Mapping>::iterator first, last;
    if (!WholeRangesRun(remote.mappings, ptr, size, MappingBytes, &first, &last)) return CUDA_ERROR_INVALID_VALUE;
    dev = first->second.memory->device;
    remote.mappings.erase(first, last);
  }
  if (int code = remote.session(dev)->Invoke<calls::MemUnmap>({ptr, size}); code != 0) {
    return remote.Fail(dev, code, "cuMemUnmap");
  }
  return CUDA_SUCCESS;
}

// Access is always read-write for the slice whose memory is mapped; no other device can reach it.
CUresult MemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  int dev;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    // Every byte of the range must be mapped.
    if (!InsideAdjacentRanges(remote.mappings, ptr, size, MappingBytes)) return CUDA_ERROR_INVALID_VALUE;
    dev = MappingAt(remote.mappings, ptr)->memory->device;
  }
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return Refuse("cuMemSetAccess: only devices can be given access to slice memory, not host memory");
    }
    if (desc[i].location.id != dev) {
      return Refuse(fmt::format("cuMemSetAccess: device {} cannot reach the memory of device {}: they are slices of "
                                "different GPUs",
                                desc[i].location.id, dev)
                        .c_str());
    }
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return Refuse("cuMemSetAccess: slices map memory read-write only (read-only or no access is not offered)");
    }
  }
  return CUDA_SUCCESS;
}

CUresult MemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  const Mapping* m = MappingAt(remote.mappings, ptr);
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool owner = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == m->memory->device;
  *flags = owner ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

CUresult MemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                     CUmemAllocationGranularity_flags option) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  int dev;
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!Remote::Get().attached()) return CUDA_ERROR_NOT_SUPPORTED;
  if (CUresult r = DeviceOfProp(prop, &dev); r != CUDA_SUCCESS) return r;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = session::kMappingGranularity;
  return CUDA_SUCCESS;
}

CUresult MemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  PhysicalMemory* memory;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ResolvePhysical(handle, &memory); r != CUDA_SUCCESS) return r;
  *prop = memory->prop;
  return CUDA_SUCCESS;
}

CUresult MemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* address) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  const Mapping* m = MappingAt(remote.mappings, reinterpret_cast<uint64_t>(address));
  if (m == nullptr || !m->memory->alive) return CUDA_ERROR_INVALID_VALUE;
  ++m->memory->references;
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(m->memory);
  return CUDA_SUCCESS;
}

CUresult MemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                    CUmemAllocationHandleType type, unsigned long long flags) {
  PhysicalMemory* memory;
  if (CUresult r = ResolvePhysical(handle, &memory); r != CUDA_SUCCESS) return r;
  return Refuse("cuMemExportToShareableHandle: slice memory cannot be shared with other processes through a "
                "handle (it lives on a GPU server, not in this machine's driver)");
}

CUresult MemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* shareable,
                                      CUmemAllocationHandleType type) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  return Refuse("cuMemImportFromShareableHandle: shareable memory handles are not supported on gpupool slices");
}

}  // namespace gpupool::interpose

GP_VMM_FORWARDS(GP_DEFINE_FORWARD)
