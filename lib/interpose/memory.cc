// Memory: device allocations live on the slices (tracked here by base and size, per window), host allocations
// are plain client memory (a remote slice can never address them, so pinning means nothing). Copies route each
// side by pointer: an address inside a slice's window is that slice's memory, anything else is host memory.
// The entry points are generated from forward_spec.h.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/log.h"
#include "driver.h"
#include "forward_spec.h"
#include "graph.h"
#include "managed.h"
#include "remote.h"

namespace gpupool::interpose {
namespace {

constexpr size_t kPitchAlignment = 256;
constexpr size_t kHostAlignment = 4096;

// The allocation (device or host table) containing `address`: *base and *size, or false.
bool FindRange(const std::map<uint64_t, uint64_t>& table, uint64_t address, uint64_t* base, uint64_t* size) {
  auto it = table.upper_bound(address);
  if (it == table.begin()) return false;
  --it;
  if (address - it->first >= std::max<uint64_t>(it->second, 1)) return false;
  *base = it->first;
  *size = it->second;
  return true;
}

bool FindDeviceRange(uint64_t address, uint64_t* base, uint64_t* size) {
  Remote& remote = Remote::Get();
  auto it = remote.allocations.upper_bound(address);
  if (it == remote.allocations.begin()) return false;
  --it;
  if (address - it->first >= std::max<uint64_t>(it->second.size, 1)) return false;
  *base = it->first;
  *size = it->second.size;
  return true;
}

// Refuses `bytes` at device address `p` when `p` lies in an allocation (cuMemAlloc's) that they run past, as the
// driver refuses such a copy or memset in the call. The call is posted, and the slice's own check would report
// the error only at the next synchronising call. Memory the table does not hold (pools, mappings, module
// variables) is left to the slice.
CUresult WithinItsAllocation(uint64_t p, uint64_t bytes) {
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  uint64_t base = 0, size = 0;
  if (!FindDeviceRange(p, &base, &size)) return CUDA_SUCCESS;
  return bytes <= size - (p - base) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// The stream a piece of work on `device` goes to: the given stream when it belongs to that slice, else the
// slice's default stream (a copy between slices cannot be ordered on one stream anyway).
struct Route {
  int device = -1;
  uint64_t stream = 0;
  uint64_t StreamFor(int dev) const { return dev == device ? stream : 0; }
};

CUresult RouteOf(CUstream stream, Route* route) {
  return Remote::Get().ResolveStream(stream, &route->device, &route->stream);
}

CUresult Transfer(uint64_t dst, uint64_t src, size_t n, const Route& route) {
  Remote& remote = Remote::Get();
  int dd = remote.DeviceOf(dst), sd = remote.DeviceOf(src);
  if (n == 0) return CUDA_SUCCESS;
  // Managed memory on either side: the host's writes go first, and what the copy writes is the device's now.
  if (ManagedMemory& managed = ManagedMemory::Get(); managed.Any()) {
    if (sd >= 0) {
      if (CUresult r = managed.BeforeDeviceAccess(sd, route.StreamFor(sd), src, n, false); r != CUDA_SUCCESS) return r;
    }
    if (dd >= 0) {
      if (CUresult r = managed.BeforeDeviceAccess(dd, route.StreamFor(dd), dst, n, true); r != CUDA_SUCCESS) return r;
    }
  }
  int code = 0;
  if (dd < 0 && sd < 0) {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  } else if (sd < 0) {
    code = remote.session(dd)->CopyToDevice(dst, reinterpret_cast<const void*>(src), n, route.StreamFor(dd));
    if (code != 0) return remote.Fail(dd, code, "a copy to the device");
  } else if (dd < 0) {
    code = remote.session(sd)->CopyFromDevice(reinterpret_cast<void*>(dst), src, n, route.StreamFor(sd));
    if (code != 0) return remote.Fail(sd, code, "a copy from the device");
  } else if (dd == sd) {
    code = remote.session(dd)->CopyOnDevice(dst, src, n, route.StreamFor(dd));
    if (code != 0) return remote.Fail(dd, code, "a copy on the device");
  } else {
    // Slices never see each other (they may be on different servers): staged through the client.
    // TODO(perf): pipeline in chunks instead of holding the whole buffer.
    std::vector<uint8_t> staging(n);
    code = remote.session(sd)->CopyFromDevice(staging.data(), src, n, route.StreamFor(sd));
    if (code != 0) return remote.Fail(sd, code, "a copy between devices (read)");
    code = remote.session(dd)->CopyToDevice(dst, staging.data(), n, route.StreamFor(dd));
    if (code != 0) return remote.Fail(dd, code, "a copy between devices (write)");
  }
  return CUDA_SUCCESS;
}

CUresult CaptureCopy(const CUDA_MEMCPY3D& copy, CUstream stream) {
  NodeWork work;
  work.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  work.copy = copy;
  return CaptureWork(stream, std::move(work));
}

enum Side { kHost = 1, kDevice = 2, kEither = 3 };

// A 1D copy whose sides must be of the given kinds (cuMemcpyHtoD demands a device destination...).
CUresult Copy(uint64_t dst, uint64_t src, size_t n, CUstream stream, int dst_side, int src_side) {
  Route route;
  if (CUresult r = RouteOf(stream, &route); r != CUDA_SUCCESS) return r;
  // Zero bytes copy nothing, whatever the pointers (NULL included): the driver answers CUDA_SUCCESS, and numba's
  // empty arrays and cuda.core's empty buffers rely on it. Not captured either: there is no work to order.
  if (n == 0) return CUDA_SUCCESS;
  Remote& remote = Remote::Get();
  if ((dst_side == kDevice && remote.DeviceOf(dst) < 0) || (src_side == kDevice && remote.DeviceOf(src) < 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (WithinItsAllocation(dst, n) != CUDA_SUCCESS || WithinItsAllocation(src, n) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (Capturing(stream)) {
    // Recorded with unified addressing (each side routes by its address when the graph runs, as here).
    CUDA_MEMCPY3D copy{};
    copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    copy.srcDevice = src;
    copy.dstDevice = dst;
    copy.WidthInBytes = n;
    copy.Height = copy.Depth = 1;
    return CaptureCopy(copy, stream);
  }
  return Transfer(dst, src, n, route);
}

uint64_t U(const void* p) { return reinterpret_cast<uint64_t>(p); }

// One side of a 2D/3D copy.
struct Plane {
  uint64_t base = 0;
  size_t pitch = 0, height = 0;  // height: rows per slice (3D).
  // An array side: how far the copy may reach from its start (a copy past an array's row, rows or slices would
  // land in the padding or the next row). Unbounded for linear memory, which the session checks by allocation.
  size_t array_row_bytes = SIZE_MAX, array_rows = SIZE_MAX, array_slices = SIZE_MAX;
};

CUresult PlaneOf(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t x, size_t y,
                 size_t z, size_t pitch, size_t height, Plane* plane) {
  uint64_t base;
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      base = U(host);
      break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
      base = device;
      break;
    case CU_MEMORYTYPE_ARRAY: {
      // The array's own rows and slices (array.cc), whatever pitch and height the copy names for this side.
      Array a;
      if (CUresult r = ResolveArray(array, &a); r != CUDA_SUCCESS) return r;
      if (x > a.row_bytes || y >= a.rows || z >= a.slices) return CUDA_ERROR_INVALID_VALUE;
      plane->base = a.memory + (z * a.rows + y) * a.pitch + x;
      plane->pitch = a.pitch;
      plane->height = a.rows;
      plane->array_row_bytes = a.row_bytes - x;
      plane->array_rows = a.rows - y;
      plane->array_slices = a.slices - z;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (base == 0) return CUDA_ERROR_INVALID_VALUE;
  plane->base = base + (z * height + y) * pitch + x;
  plane->pitch = pitch;
  plane->height = height;
  return CUDA_SUCCESS;
}

CUresult CopyBlock(const Plane& dst, const Plane& src, size_t width, size_t height, size_t depth, CUstream stream) {
  Route route;
  if (CUresult r = RouteOf(stream, &route); r != CUDA_SUCCESS) return r;
  if (width == 0 || height == 0 || depth == 0) return CUDA_SUCCESS;
  if ((height > 1 || depth > 1) && (dst.pitch < width || src.pitch < width)) return CUDA_ERROR_INVALID_VALUE;
  for (const Plane* p : {&dst, &src}) {
    if (width > p->array_row_bytes || height > p->array_rows || depth > p->array_slices) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // Contiguous on both sides: one copy.
  bool contiguous = (height == 1 || (dst.pitch == width && src.pitch == width)) &&
                    (depth == 1 || (dst.height == height && src.height == height));
  if (contiguous) return Transfer(dst.base, src.base, width * height * depth, route);
  for (size_t z = 0; z < depth; ++z) {
    for (size_t y = 0; y < height; ++y) {
      uint64_t d = dst.base + (z * dst.height + y) * dst.pitch, s = src.base + (z * src.height + y) * src.pitch;
      if (CUresult r = Transfer(d, s, width, route); r != CUDA_SUCCESS) return r;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult MemAlloc(CUdeviceptr* p, size_t n) {
  int dev;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Remote::Get().CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  return MemAllocOn(dev, p, n);
}

CUresult MemAllocOn(int dev, CUdeviceptr* p, size_t n) {
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  uint64_t address = 0;
  if (int code = remote.session(dev)->MemAlloc(n, &address); code != 0) {
    // Out of memory is the program's business (it may retry smaller): not logged.
    if (code == CUDA_ERROR_OUT_OF_MEMORY) return CUDA_ERROR_OUT_OF_MEMORY;
    return remote.Fail(dev, code, "an allocation");
  }
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.allocations[address] = Allocation{n, dev};
  *p = address;
  return CUDA_SUCCESS;
}

CUresult MemAllocPitch(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned int element) {
  if (pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element != 4 && element != 8 && element != 16) return CUDA_ERROR_INVALID_VALUE;
  size_t padded = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (CUresult r = MemAlloc(p, padded * height); r != CUDA_SUCCESS) return r;
  *pitch = padded;
  return CUDA_SUCCESS;
}

// cudaFree(NULL), which programs call to create the context, reaches the driver as cuMemFree(0): it works with
// fake devices too.
CUresult MemFree(CUdeviceptr p) {
  Driver& driver = Driver::Get();
  if (CUresult r = driver.CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (Driver::Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (p == 0) return CUDA_SUCCESS;
  Remote& remote = Remote::Get();
  int dev = remote.DeviceOf(p);
  if (dev < 0) return CUDA_ERROR_INVALID_VALUE;
  bool managed = false;
  if (CUresult r = ManagedMemory::Get().Free(p, &managed); managed) return r;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    if (remote.allocations.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  if (MemoryFreedOutsideGraphs(p)) return CUDA_SUCCESS;  // The graph's still: its next launch allocates it again.
  // Waited for: cuMemFree returns with the memory free (the next allocation, of any thread or process of the
  // lease, may take it).
  if (int code = remote.session(dev)->MemFree(p); code != 0) return remote.Fail(dev, code, "cuMemFree");
  return CUDA_SUCCESS;
}

CUresult MemGetInfo(size_t* free_bytes, size_t* total) {
  int dev;
  if (CUresult r = Remote::Get().CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  uint64_t f = 0, t = 0;
  if (int code = Remote::Get().session(dev)->MemGetInfo(&f, &t); code != 0) {
    return Remote::Get().Fail(dev, code, "cuMemGetInfo");
  }
  if (free_bytes != nullptr) *free_bytes = f;
  if (total != nullptr) *total = t;
  return CUDA_SUCCESS;
}

CUresult MemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  uint64_t b, s;
  if (!FindDeviceRange(p, &b, &s)) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = b;
  if (size != nullptr) *size = s;
  return CUDA_SUCCESS;
}

namespace {

CUresult OnePointerAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr p) {
  Remote& remote = Remote::Get();
  Driver& driver = Driver::Get();
  int dev = remote.DeviceOf(p);
  uint64_t base = 0, size = 0;
  bool known;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    known = dev >= 0 ? FindDeviceRange(p, &base, &size) : FindRange(remote.host_allocations, p, &base, &size);
  }
  const bool managed = dev >= 0 && ManagedMemory::Get().Find(p);
  int ordinal = dev;
  if (ordinal < 0) ordinal = Driver::Current() != nullptr ? Driver::Current()->device : 0;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = Driver::Handle(driver.PrimaryContext(ordinal));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = dev >= 0 ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (dev < 0) return CUDA_ERROR_NOT_SUPPORTED;  // Host memory has no device address on a remote slice.
      *static_cast<CUdeviceptr*>(data) = p;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (dev >= 0 && !managed) return CUDA_ERROR_INVALID_VALUE;  // Managed memory: the same address on the host.
      *static_cast<void**>(data) = reinterpret_cast<void*>(p);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = managed ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      *static_cast<int*>(data) = 0;  // bool-sized in the API; int keeps the whole word defined.
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<int*>(data) = 1;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = ordinal;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      *static_cast<unsigned long long*>(data) = known ? base : p;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      *static_cast<int*>(data) = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      *static_cast<unsigned long long*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = PoolOf(p);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

}  // namespace

CUresult PointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr p) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnePointerAttribute(data, attribute, p);
}

// Unlike cuPointerGetAttribute, never fails for a pointer it does not know: that attribute reads as zero.
CUresult PointerGetAttributes(unsigned int n, CUpointer_attribute* attributes, void** data, CUdeviceptr p) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < n; ++i) {
    if (data[i] == nullptr) continue;
    if (OnePointerAttribute(data[i], attributes[i], p) != CUDA_SUCCESS) {
      std::memset(data[i], 0, attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ? sizeof(size_t) : sizeof(int));
    }
  }
  return CUDA_SUCCESS;
}

CUresult MemHostAlloc(void** p, size_t n, unsigned int flags) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t rounded = (std::max<size_t>(n, 1) + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* memory = std::aligned_alloc(kHostAlignment, rounded);
  if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.host_allocations[U(memory)] = n;
  *p = memory;
  return CUDA_SUCCESS;
}

CUresult MemFreeHost(void* p) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_SUCCESS;
  Remote& remote = Remote::Get();
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    if (remote.host_allocations.erase(U(p)) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(p);
  return CUDA_SUCCESS;
}

// Registration only records the range (for cuPointerGetAttribute): there is nothing to pin for a remote slice.
CUresult MemHostRegister(void* p, size_t n, unsigned int flags) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (p == nullptr || n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_MEMHOSTREGISTER_DEVICEMAP) {
    // Accepted: only cuMemHostGetDevicePointer, which fails, would use the mapping.
  }
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  if (!remote.host_allocations.emplace(U(p), n).second) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  return CUDA_SUCCESS;
}

CUresult MemHostUnregister(void* p) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  return remote.host_allocations.erase(U(p)) == 1 ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

CUresult MemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned int flags) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  static std::once_flag once;
  std::call_once(once, [] {
    GP_WARN("interpose", "cuMemHostGetDevicePointer: host memory cannot be mapped into a remote GPU slice");
  });
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult MemHostGetFlags(unsigned int* flags, void* p) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  uint64_t b, s;
  if (!FindRange(remote.host_allocations, U(p), &b, &s)) return CUDA_ERROR_INVALID_VALUE;
  *flags = 0;
  return CUDA_SUCCESS;
}

CUresult CopyHtoD(CUdeviceptr d, const void* s, size_t n, CUstream st) { return Copy(d, U(s), n, st, kDevice, kHost); }
CUresult CopyDtoH(void* d, CUdeviceptr s, size_t n, CUstream st) { return Copy(U(d), s, n, st, kHost, kDevice); }
CUresult CopyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return Copy(d, s, n, st, kDevice, kDevice); }
CUresult CopyAny(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return Copy(d, s, n, st, kEither, kEither); }

CUresult Copy2D(const CUDA_MEMCPY2D* c, CUstream stream) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Capturing(stream)) {
    CUDA_MEMCPY3D copy{};
    copy.srcXInBytes = c->srcXInBytes;
    copy.srcY = c->srcY;
    copy.srcMemoryType = c->srcMemoryType;
    copy.srcHost = c->srcHost;
    copy.srcDevice = c->srcDevice;
    copy.srcArray = c->srcArray;
    copy.srcPitch = c->srcPitch;
    copy.dstXInBytes = c->dstXInBytes;
    copy.dstY = c->dstY;
    copy.dstMemoryType = c->dstMemoryType;
    copy.dstHost = c->dstHost;
    copy.dstDevice = c->dstDevice;
    copy.dstArray = c->dstArray;
    copy.dstPitch = c->dstPitch;
    copy.WidthInBytes = c->WidthInBytes;
    copy.Height = c->Height;
    copy.Depth = 1;
    return Copy3D(&copy, stream);
  }
  Plane src, dst;
  if (CUresult r = PlaneOf(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, 0,
                           c->srcPitch, 0, &src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = PlaneOf(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, 0,
                           c->dstPitch, 0, &dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  src.height = dst.height = c->Height;
  return CopyBlock(dst, src, c->WidthInBytes, c->Height, 1, stream);
}

CUresult Copy3D(const CUDA_MEMCPY3D* c, CUstream stream) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (c->srcLOD != 0 || c->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  if (Capturing(stream)) return CaptureCopy(*c, stream);
  size_t src_height = c->srcHeight != 0 ? c->srcHeight : c->Height;
  size_t dst_height = c->dstHeight != 0 ? c->dstHeight : c->Height;
  Plane src, dst;
  if (CUresult r = PlaneOf(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY,
                           c->srcZ, c->srcPitch, src_height, &src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = PlaneOf(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY,
                           c->dstZ, c->dstPitch, dst_height, &dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  return CopyBlock(dst, src, c->WidthInBytes, c->Height, c->Depth, stream);
}

// Every memset: `width` elements of `element` bytes per row, `height` rows `pitch` bytes apart.
CUresult Memset2D(CUdeviceptr d, size_t pitch, unsigned int value, int element, size_t width, size_t height,
                  CUstream stream) {
  Route route;
  if (CUresult r = RouteOf(stream, &route); r != CUDA_SUCCESS) return r;
  // Nothing to set, whatever the pointer (NULL included): the driver answers CUDA_SUCCESS, as for zero-byte copies.
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  Remote& remote = Remote::Get();
  int dev = remote.DeviceOf(d);
  if (dev < 0 || d % element != 0) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && pitch < width * element) return CUDA_ERROR_INVALID_VALUE;
  if (WithinItsAllocation(d, (height - 1) * pitch + width * element) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  if (Capturing(stream)) {
    NodeWork work;
    work.type = CU_GRAPH_NODE_TYPE_MEMSET;
    work.memset = CUDA_MEMSET_NODE_PARAMS{d, pitch, value, static_cast<unsigned int>(element), width, height};
    return CaptureWork(stream, std::move(work));
  }
  if (CUresult r = ManagedMemory::Get().BeforeDeviceAccess(dev, route.StreamFor(dev), d,
                                                           (height - 1) * pitch + width * element, true);
      r != CUDA_SUCCESS) {
    return r;
  }
  bool contiguous = height == 1 || pitch == width * element;
  size_t rows = contiguous ? 1 : height, count = contiguous ? width * height : width;
  for (size_t y = 0; y < rows; ++y) {
    int code = remote.session(dev)->Memset(d + y * pitch, value, static_cast<uint8_t>(element), count,
                                           route.StreamFor(dev));
    if (code != 0) return remote.Fail(dev, code, "a memset");
  }
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_MEMORY_FORWARDS(GP_DEFINE_FORWARD)

GP_MEMORY_ENTRIES(GP_DEFINE_ENTRY)
