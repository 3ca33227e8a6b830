// Texture and surface objects (cuTexObjectCreate/Destroy/Get*, cuSurfObjectCreate/Destroy/GetResourceDesc): what
// cudart's cudaCreateTextureObject and cudaCreateSurfaceObject call. Generated from forward_spec.h.
//
// A texture object is a 64-bit value the program passes to kernels, which resolve it on the device: so the handle
// must come from the slice, not from this library. The client resolves the resource to device memory of one slice
// (a CUDA array is pitched memory there, array.cc; linear and pitch2D memory are the program's own allocations)
// and sends the description to the slice's session (texObjectCreate), whose backend makes the object: the
// emulated device enters it in a table of its own and answers an opaque handle (emu/texture.h); a GPU's driver
// answers its own CUtexObject. The handle goes to the program as it came. The client keeps what the program
// described, for the cuTexObjectGet* queries, which never travel.
//
// Texture references (cuTexRef*, cuSurfRef*) were removed in CUDA 12 and are not offered. Mipmapped arrays are
// refused with CUDA_ERROR_NOT_SUPPORTED: cuMipmappedArrayCreate is one of the unimplemented entry points (the
// generated stub answers so and logs it), and a resource of that type is refused here, as are resource views and
// anisotropic filtering, each with a log line naming what.
#include <map>
#include <mutex>

#include "core/array_format.h"
#include "core/log.h"
#include "driver.h"
#include "forward_spec.h"
#include "remote.h"

namespace gpupool::interpose {

namespace {

using session::calls::TexObjectCreate;
using session::calls::TexObjectDestroy;

struct TextureObject {
  int device = 0;
  bool surface = false;
  CUDA_RESOURCE_DESC resource{};
  CUDA_TEXTURE_DESC texture{};
};

// Live objects by handle. Handles of different slices could only collide on GPUs (whose driver numbers its objects
// per context); such a collision is refused at creation, so a handle names one object.
struct TextureTable {
  std::mutex mu;
  std::map<uint64_t, TextureObject> objects;
};

TextureTable& Textures() {
  static TextureTable* table = new TextureTable();  // Never destroyed: programs may destroy objects at exit.
  return *table;
}

CUresult NotSupported(const char* what) {
  GP_WARN("interpose", "{}: not supported on gpupool slices", what);
  return CUDA_ERROR_NOT_SUPPORTED;
}

// Fills the session call's resource fields from `res`; `*device` is the slice that holds the memory.
CUresult DescribeResource(const CUDA_RESOURCE_DESC& res, bool surface, TexObjectCreate::Args* a, int* device) {
  Remote& remote = Remote::Get();
  CUarray_format format;
  unsigned channels;
  a->height = a->depth = 1;  // Extents of the dimensions a resource lacks (the wire's fields start at 0).
  switch (res.resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      Array array;
      if (CUresult r = ResolveArray(res.res.array.hArray, &array); r != CUDA_SUCCESS) return r;
      const CUDA_ARRAY3D_DESCRIPTOR& d = array.desc;
      if (d.Flags & CUDA_ARRAY3D_CUBEMAP) return NotSupported("textures and surfaces of cube map arrays");
      // A surface over an array made without CUDA_ARRAY3D_SURFACE_LDST is taken, as NVIDIA's driver takes it (an
      // H100's, driver 580), though the Programming Guide asks for the flag.
      a->resource = 0;
      a->address = array.memory;
      a->pitch = array.pitch;
      a->slice_pitch = array.pitch * array.rows;
      a->width = static_cast<uint32_t>(d.Width);
      const bool layered = (d.Flags & CUDA_ARRAY3D_LAYERED) != 0;
      a->dims = d.Height == 0 ? 1 : (d.Depth == 0 || layered) ? 2 : 3;
      a->height = a->dims >= 2 ? static_cast<uint32_t>(d.Height) : 1;
      a->depth = a->dims == 3 ? static_cast<uint32_t>(d.Depth) : 1;
      a->layers = layered ? static_cast<uint32_t>(d.Depth) : 0;
      format = d.Format;
      channels = d.NumChannels;
      *device = array.device;
      break;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      return NotSupported("textures and surfaces of mipmapped arrays");
    case CU_RESOURCE_TYPE_LINEAR: {
      if (surface) return CUDA_ERROR_INVALID_VALUE;  // Surfaces live in CUDA arrays only.
      format = res.res.linear.format;
      channels = res.res.linear.numChannels;
      const size_t element = ChannelBytes(format) * channels;
      if (element == 0 || res.res.linear.sizeInBytes < element) return CUDA_ERROR_INVALID_VALUE;
      const size_t width = res.res.linear.sizeInBytes / element;
      // CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH of current GPUs.
      if (width > (size_t{1} << 28)) return CUDA_ERROR_INVALID_VALUE;
      a->resource = 1;
      a->address = res.res.linear.devPtr;
      a->width = static_cast<uint32_t>(width);
      a->dims = 1;
      *device = remote.DeviceOf(res.res.linear.devPtr);
      break;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
      if (surface) return CUDA_ERROR_INVALID_VALUE;
      format = res.res.pitch2D.format;
      channels = res.res.pitch2D.numChannels;
      const CUdeviceptr base = res.res.pitch2D.devPtr;
      if (res.res.pitch2D.width == 0 || res.res.pitch2D.height == 0 || res.res.pitch2D.width > UINT32_MAX ||
          res.res.pitch2D.height > UINT32_MAX) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      a->resource = 2;
      a->address = base;
      a->pitch = res.res.pitch2D.pitchInBytes;
      a->width = static_cast<uint32_t>(res.res.pitch2D.width);
      a->height = static_cast<uint32_t>(res.res.pitch2D.height);
      a->dims = 2;
      *device = remote.DeviceOf(base);
      break;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (ChannelBytes(format) == 0) return NotSupported("textures and surfaces of packed or block-compressed formats");
  if (channels != 1 && channels != 2 && channels != 4) return CUDA_ERROR_INVALID_VALUE;
  if (*device < 0) return CUDA_ERROR_INVALID_VALUE;  // Not memory of any slice.
  a->format = static_cast<uint32_t>(format);
  a->channels = static_cast<uint8_t>(channels);
  a->surface = surface ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult Create(uint64_t* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex, bool surface) {
  if (out == nullptr || res == nullptr || (!surface && tex == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  TexObjectCreate::Args a;
  int device = -1;
  if (CUresult r = DescribeResource(*res, surface, &a, &device); r != CUDA_SUCCESS) return r;
  if (tex != nullptr && !surface) {
    for (int i = 0; i < 3; ++i) {
      if (tex->addressMode[i] > CU_TR_ADDRESS_MODE_BORDER) return CUDA_ERROR_INVALID_VALUE;
      a.address_modes |= static_cast<uint32_t>(tex->addressMode[i]) << (8 * i);
    }
    if (tex->filterMode > CU_TR_FILTER_MODE_LINEAR) return CUDA_ERROR_INVALID_VALUE;
    // Anisotropic filtering takes several samples along the footprint: not emulated. 0 and 1 both mean off.
    if (tex->maxAnisotropy > 1) return NotSupported("anisotropic texture filtering (maxAnisotropy > 1)");
    // The mipmap fields (mipmapFilterMode, level bias and clamps) only matter for mipmapped arrays, refused above.
    a.filter = static_cast<uint8_t>(tex->filterMode);
    a.flags = tex->flags;
    a.border0 = tex->borderColor[0];
    a.border1 = tex->borderColor[1];
    a.border2 = tex->borderColor[2];
    a.border3 = tex->borderColor[3];
  }
  Remote& remote = Remote::Get();
  TexObjectCreate::Results r;
  if (int code = remote.session(device)->Invoke<TexObjectCreate>(a, &r); code != 0) {
    return remote.Fail(device, code, surface ? "a surface object" : "a texture object");
  }
  TextureTable& table = Textures();
  std::lock_guard<std::mutex> lock(table.mu);
  if (table.objects.count(r.handle)) {
    remote.session(device)->Invoke<TexObjectDestroy>({r.handle});
    GP_WARN("interpose", "two slices gave the same texture object handle 0x{:x}: objects on several GPU slices "
                         "at once are not supported", r.handle);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  TextureObject object;
  object.device = device;
  object.surface = surface;
  object.resource = *res;
  if (tex != nullptr && !surface) object.texture = *tex;
  table.objects[r.handle] = object;
  *out = r.handle;
  return CUDA_SUCCESS;
}

// The live object `handle` of the kind asked for, or CUDA_ERROR_INVALID_VALUE (as the driver answers for a handle
// it does not know).
CUresult Find(uint64_t handle, bool surface, TextureObject* out) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  TextureTable& table = Textures();
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.objects.find(handle);
  if (it == table.objects.end() || it->second.surface != surface) return CUDA_ERROR_INVALID_VALUE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult Destroy(uint64_t handle, bool surface) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  int device;
  {
    TextureTable& table = Textures();
    std::lock_guard<std::mutex> lock(table.mu);
    auto it = table.objects.find(handle);
    if (it == table.objects.end() || it->second.surface != surface) return CUDA_ERROR_INVALID_VALUE;
    device = it->second.device;
    table.objects.erase(it);
  }
  // Posted: kernels queued before still sample it; the slice frees it after them.
  Remote::Get().session(device)->Invoke<TexObjectDestroy>({handle});
  return CUDA_SUCCESS;
}

}  // namespace

// Creates a texture (`surface`: a surface) object; its handle goes to *out only once it exists.
CUresult CreateInto(unsigned long long* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                    bool surface) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t handle = 0;
  CUresult r = Create(&handle, res, tex, surface);
  if (r == CUDA_SUCCESS) *out = handle;
  return r;
}

// The resource description a texture (`surface`: a surface) object was created with.
CUresult ResourceDescOf(CUDA_RESOURCE_DESC* out, uint64_t handle, bool surface) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  TextureObject object;
  if (CUresult r = Find(handle, surface, &object); r != CUDA_SUCCESS) return r;
  *out = object.resource;
  return CUDA_SUCCESS;
}

CUresult TexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                         const CUDA_RESOURCE_VIEW_DESC* view) {
  // A view reinterprets the resource (another format, a range of levels or layers): not offered. cudart passes
  // none unless the program gives one.
  if (view != nullptr) return NotSupported("texture resource views");
  return CreateInto(out, res, tex, false);
}

CUresult TexObjectDestroy(CUtexObject handle) { return Destroy(handle, false); }

CUresult TexObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUtexObject handle) {
  return ResourceDescOf(out, handle, false);
}

CUresult TexObjectGetTextureDesc(CUDA_TEXTURE_DESC* out, CUtexObject handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  TextureObject object;
  if (CUresult r = Find(handle, false, &object); r != CUDA_SUCCESS) return r;
  *out = object.texture;
  return CUDA_SUCCESS;
}

// Every object here views its whole resource in the resource's own format: the view that describes exactly that
// (format "none": the resource's; the extents of the resource).
CUresult TexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* out, CUtexObject handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  TextureObject object;
  if (CUresult r = Find(handle, false, &object); r != CUDA_SUCCESS) return r;
  *out = CUDA_RESOURCE_VIEW_DESC{};
  out->format = CU_RES_VIEW_FORMAT_NONE;
  const CUDA_RESOURCE_DESC& res = object.resource;
  if (res.resType == CU_RESOURCE_TYPE_ARRAY) {
    Array array;
    if (ResolveArray(res.res.array.hArray, &array) == CUDA_SUCCESS) {
      out->width = array.desc.Width;
      out->height = array.desc.Height;
      out->depth = array.desc.Depth;
      if (array.desc.Flags & CUDA_ARRAY3D_LAYERED) out->lastLayer = static_cast<unsigned>(array.desc.Depth - 1);
    }
  } else if (res.resType == CU_RESOURCE_TYPE_PITCH2D) {
    out->width = res.res.pitch2D.width;
    out->height = res.res.pitch2D.height;
  } else if (res.resType == CU_RESOURCE_TYPE_LINEAR) {
    out->width = res.res.linear.sizeInBytes;
  }
  return CUDA_SUCCESS;
}

CUresult SurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* res) {
  return CreateInto(out, res, nullptr, true);
}

CUresult SurfObjectDestroy(CUsurfObject handle) { return Destroy(handle, true); }

CUresult SurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUsurfObject handle) {
  return ResourceDescOf(out, handle, true);
}

}  // namespace gpupool::interpose

GP_TEXTURE_FORWARDS(GP_DEFINE_FORWARD)
