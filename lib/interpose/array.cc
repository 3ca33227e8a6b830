// CUDA arrays (cuArrayCreate, cuArray3DCreate, their descriptors, cuArrayDestroy) and the copies that address
// them by offset (cuMemcpyHtoA, AtoH, AtoD, DtoA, AtoA); 2D/3D copies reach arrays through memory.cc's planes.
//
// A CUDA array's layout is the driver's business: programs reach its contents only through copies, textures and
// surfaces. So an array here is pitched memory of the slice current at its creation, counted against the slice,
// every copy to or from it is an ordinary copy of rows, and a texture or surface object over it (texture.cc) is
// one over that pitched memory. Generated from forward_spec.h.
#include <mutex>

#include "core/array_format.h"
#include "core/log.h"
#include "driver.h"
#include "forward_spec.h"
#include "graph.h"
#include "remote.h"

namespace gpupool::interpose {

namespace {

constexpr size_t kArrayPitchAlignment = 512;

Array* Handle(CUarray handle) { return reinterpret_cast<Array*>(handle); }

}  // namespace

CUresult ResolveArray(CUarray handle, Array* out) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  Remote& remote = Remote::Get();
  std::lock_guard<std::mutex> lock(remote.mu());
  Array* a = Handle(handle);
  if (a == nullptr || remote.arrays.count(a) == 0 || !a->alive) return CUDA_ERROR_INVALID_HANDLE;
  *out = *a;
  return CUDA_SUCCESS;
}

CUresult Array3DCreate(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (out == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  int dev;
  if (CUresult r = remote.CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  const size_t channel = ChannelBytes(desc->Format);
  if (channel == 0 || desc->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) {
    GP_WARN("interpose", "CUDA arrays of format 0x{:x} or flags 0x{:x} are not supported on gpupool slices",
            static_cast<int>(desc->Format), desc->Flags);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (desc->NumChannels != 1 && desc->NumChannels != 2 && desc->NumChannels != 4) return CUDA_ERROR_INVALID_VALUE;
  // Far beyond any device's array limits (65536 x 65536 x 4096 for 3D on current GPUs), and no overflow below.
  constexpr size_t kMaxExtent = size_t{1} << 24;
  if (desc->Width == 0 || desc->Width > kMaxExtent || desc->Height > kMaxExtent || desc->Depth > kMaxExtent) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A layered 1D array (Height 0, Depth layers) holds one row per layer; without the flag the shape is invalid.
  if (desc->Depth != 0 && desc->Height == 0 && !(desc->Flags & CUDA_ARRAY3D_LAYERED)) return CUDA_ERROR_INVALID_VALUE;
  if ((desc->Flags & CUDA_ARRAY3D_CUBEMAP) && (desc->Width != desc->Height || desc->Depth % 6 != 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto array = std::make_unique<Array>();
  array->desc = *desc;
  array->device = dev;
  array->row_bytes = desc->Width * channel * desc->NumChannels;
  array->pitch = (array->row_bytes + kArrayPitchAlignment - 1) / kArrayPitchAlignment * kArrayPitchAlignment;
  array->rows = desc->Height == 0 ? 1 : desc->Height;
  array->slices = desc->Depth == 0 ? 1 : desc->Depth;
  const unsigned __int128 bytes = static_cast<unsigned __int128>(array->pitch) * array->rows * array->slices;
  if (bytes > (uint64_t{1} << 48)) return CUDA_ERROR_INVALID_VALUE;
  // Not in remote.allocations: the program never sees this memory as a pointer, so it can neither free nor pass it.
  if (int code = remote.session(dev)->MemAlloc(static_cast<uint64_t>(bytes), &array->memory); code != 0) {
    if (code == CUDA_ERROR_OUT_OF_MEMORY) return CUDA_ERROR_OUT_OF_MEMORY;
    return remote.Fail(dev, code, "a CUDA array");
  }
  std::lock_guard<std::mutex> lock(remote.mu());
  *out = reinterpret_cast<CUarray>(array.get());
  remote.arrays.insert(array.release());
  return CUDA_SUCCESS;
}

CUresult ArrayCreate(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = desc->Width;
  d.Height = desc->Height;
  d.Depth = 0;
  d.Format = desc->Format;
  d.NumChannels = desc->NumChannels;
  return Array3DCreate(out, &d);
}

CUresult ArrayDestroy(CUarray handle) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  Remote& remote = Remote::Get();
  Array a;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    Array* live = Handle(handle);
    if (live == nullptr || remote.arrays.count(live) == 0 || !live->alive) return CUDA_ERROR_INVALID_HANDLE;
    live->alive = false;  // Kept: a stale handle is recognised, never freed memory. Once: under the same lock.
    a = *live;
  }
  remote.session(a.device)->MemFree(a.memory);  // After the work queued before, as cuMemFree.
  return CUDA_SUCCESS;
}

CUresult Array3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR* out, CUarray handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Array a;
  if (CUresult r = ResolveArray(handle, &a); r != CUDA_SUCCESS) return r;
  *out = a.desc;
  return CUDA_SUCCESS;
}

CUresult ArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR* out, CUarray handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Array a;
  if (CUresult r = ResolveArray(handle, &a); r != CUDA_SUCCESS) return r;
  if (a.desc.Depth != 0) return CUDA_ERROR_INVALID_VALUE;  // A 3D array: cuArray3DGetDescriptor describes it.
  out->Width = a.desc.Width;
  out->Height = a.desc.Height;
  out->Format = a.desc.Format;
  out->NumChannels = a.desc.NumChannels;
  return CUDA_SUCCESS;
}

// The offset copies address a 1D array's elements by byte offset.
CUresult ArrayRange(CUarray handle, size_t offset, size_t bytes, uint64_t* address) {
  Array a;
  if (CUresult r = ResolveArray(handle, &a); r != CUDA_SUCCESS) return r;
  if (a.desc.Height != 0 || offset > a.row_bytes || bytes > a.row_bytes - offset) return CUDA_ERROR_INVALID_VALUE;
  *address = a.memory + offset;
  return CUDA_SUCCESS;
}

CUresult CopyHtoA(CUarray dst, size_t offset, const void* src, size_t bytes, CUstream stream) {
  uint64_t d;
  if (CUresult r = ArrayRange(dst, offset, bytes, &d); r != CUDA_SUCCESS) return r;
  return CopyHtoD(d, src, bytes, stream);
}

CUresult CopyAtoH(void* dst, CUarray src, size_t offset, size_t bytes, CUstream stream) {
  uint64_t s;
  if (CUresult r = ArrayRange(src, offset, bytes, &s); r != CUDA_SUCCESS) return r;
  return CopyDtoH(dst, s, bytes, stream);
}

CUresult CopyAtoD(CUdeviceptr dst, CUarray src, size_t offset, size_t bytes) {
  uint64_t s;
  if (CUresult r = ArrayRange(src, offset, bytes, &s); r != CUDA_SUCCESS) return r;
  return CopyDtoD(dst, s, bytes, nullptr);
}

CUresult CopyDtoA(CUarray dst, size_t offset, CUdeviceptr src, size_t bytes) {
  uint64_t d;
  if (CUresult r = ArrayRange(dst, offset, bytes, &d); r != CUDA_SUCCESS) return r;
  return CopyDtoD(d, src, bytes, nullptr);
}

CUresult CopyAtoA(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset, size_t bytes) {
  uint64_t d, s;
  if (CUresult r = ArrayRange(dst, dst_offset, bytes, &d); r != CUDA_SUCCESS) return r;
  if (CUresult r = ArrayRange(src, src_offset, bytes, &s); r != CUDA_SUCCESS) return r;
  return CopyDtoD(d, s, bytes, nullptr);
}

}  // namespace gpupool::interpose

GP_ARRAY_FORWARDS(GP_DEFINE_FORWARD)
