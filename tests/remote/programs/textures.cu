// textures: texture and surface objects on a slice, through cudart. A 2D float CUDA array (cudaMallocArray,
// cudaMemcpy2DToArray) sampled with tex2D through a texture object with linear filtering and normalised
// coordinates, checked against the Programming Guide's formula (9-bit weights); tex1Dfetch on linear memory, zero
// outside; a surface written by surf2Dwrite and read back with cudaMemcpy2DFromArray; the object queries; the
// destroy calls and the slice's memory coming back; a texture over virtual memory (cuMemCreate and cuMemMap).
// Prints "textures: N failure(s): PASSED" or FAILED.
#define PROGRAM_NAME "textures"
#include <cmath>
#include <cstdio>
#include <vector>

#include <cuda.h>

#include "program_checks.h"

__global__ void Resample(cudaTextureObject_t t, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= w || y >= h) return;
  // Normalised coordinates over [-0.1, 1.1): the clamp address mode answers for the edges.
  float u = -0.1f + 1.2f * (x + 0.5f) / w, v = -0.1f + 1.2f * (y + 0.5f) / h;
  out[y * w + x] = tex2D<float>(t, u, v);
}

__global__ void Texels(cudaTextureObject_t t, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

// A driver entry point through cudart (the program links no libcuda of its own).
template <typename F>
F DriverEntry(const char* name) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion(name, &entry, 13000, cudaEnableDefault, &found) != cudaSuccess) return nullptr;
  return reinterpret_cast<F>(entry);
}

// A 2D texture over virtual memory (cuMemAddressReserve, cuMemCreate, cuMemMap: as PyTorch's expandable segments
// make device memory), point-sampled at every texel's centre: a GPU takes it as over cudaMalloc's memory. Returns the
// number of texels read wrong, or -1 when a call failed.
int TextureOverVirtualMemory() {
  auto reserve = DriverEntry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  auto create = DriverEntry<decltype(&cuMemCreate)>("cuMemCreate");
  auto map = DriverEntry<decltype(&cuMemMap)>("cuMemMap");
  auto access = DriverEntry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  auto granularity = DriverEntry<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  auto unmap = DriverEntry<decltype(&cuMemUnmap)>("cuMemUnmap");
  auto release = DriverEntry<decltype(&cuMemRelease)>("cuMemRelease");
  auto free_address = DriverEntry<decltype(&cuMemAddressFree)>("cuMemAddressFree");
  if (!reserve || !create || !map || !access || !granularity || !unmap || !release || !free_address) return -1;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t bytes = 0;
  if (granularity(&bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || bytes == 0) return -1;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle memory = 0;
  if (reserve(&va, bytes, 0, 0, 0) != CUDA_SUCCESS) return -1;
  if (create(&memory, bytes, &prop, 0) != CUDA_SUCCESS || map(va, bytes, 0, memory, 0) != CUDA_SUCCESS) return -1;
  CUmemAccessDesc rw = {};
  rw.location = prop.location;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (access(va, bytes, &rw, 1) != CUDA_SUCCESS) return -1;
  const int w = 64, h = 32;
  const size_t pitch = 512;  // Rows aligned as the driver's CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT asks.
  std::vector<float> host(w * h);
  for (int i = 0; i < w * h; ++i) host[i] = static_cast<float>(i % 97) * 0.5f;
  CHECK(cudaMemcpy2D(reinterpret_cast<void*>(va), pitch, host.data(), w * sizeof(float), w * sizeof(float), h,
                     cudaMemcpyHostToDevice));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypePitch2D;
  res.res.pitch2D.devPtr = reinterpret_cast<void*>(va);
  res.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  res.res.pitch2D.width = w;
  res.res.pitch2D.height = h;
  res.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc tex = {};
  tex.addressMode[0] = tex.addressMode[1] = cudaAddressModeClamp;
  tex.filterMode = cudaFilterModePoint;
  tex.readMode = cudaReadModeElementType;
  cudaTextureObject_t texture = 0;
  int wrong = -1;
  if (cudaCreateTextureObject(&texture, &res, &tex, nullptr) == cudaSuccess) {
    float* out = nullptr;
    CHECK(cudaMalloc(&out, w * h * sizeof(float)));
    Texels<<<dim3(1, h), w>>>(texture, out, w, h);
    CHECK(cudaGetLastError());
    std::vector<float> got(w * h);
    CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    wrong = 0;
    for (int i = 0; i < w * h; ++i) wrong += got[i] != host[i];
    CHECK(cudaDestroyTextureObject(texture));
    CHECK(cudaFree(out));
  } else {
    std::printf("textures: a texture over virtual memory: %s\n", cudaGetErrorString(cudaGetLastError()));
  }
  unmap(va, bytes);
  release(memory);
  free_address(va, bytes);
  return wrong;
}

__global__ void Fetch(cudaTextureObject_t t, int* out, int first, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<int>(t, first + i);
}

__global__ void Paint(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) surf2Dwrite(make_uchar4(x, y, x ^ y, 255), s, x * sizeof(uchar4), y);
}

// The Guide's linear filter of texel array `t` (w x h) at normalised (u, v), clamped, 9-bit weights, each texel's
// weight formed as an H100 forms it (measured over every 2-D weight: tests/gpu/texture_rule.cu): for the texels of
// the upper x, the weight of the upper y is the product rounded to 1/256 and the lower y takes the rest of x's weight;
// for the lower x, the lower y's is rounded and the upper y takes the rest (a tie rounded up).
float Reference(const std::vector<float>& t, int w, int h, float u, float v) {
  auto axis = [](float c, int n, int* i, double* a) {
    float b = c * n - 0.5f;
    *i = static_cast<int>(std::floor(b));
    *a = std::floor((b - std::floor(b)) * 256.0 + 0.5) / 256.0;  // A tie rounded up, as an H100 does.
  };
  int i, j;
  double a, b;
  axis(u, w, &i, &a);
  axis(v, h, &j, &b);
  auto at = [&](int x, int y) {
    x = x < 0 ? 0 : x >= w ? w - 1 : x;
    y = y < 0 ? 0 : y >= h ? h - 1 : y;
    return static_cast<double>(t[y * w + x]);
  };
  auto fixed8 = [](double weight) { return std::floor(weight * 256.0 + 0.5) / 256.0; };
  const double w11 = fixed8(a * b), w00 = fixed8((1 - a) * (1 - b));
  return static_cast<float>(w00 * at(i, j) + (a - w11) * at(i + 1, j) + ((1 - a) - w00) * at(i, j + 1) +
                            w11 * at(i + 1, j + 1));
}

int main() {
  size_t free_before = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_before, &total));

  // ---- A 2D float array, linear filtering, normalised coordinates. ----
  const int tw = 37, th = 23, ow = 90, oh = 61;
  std::vector<float> texels(tw * th);
  for (int y = 0; y < th; ++y) {
    for (int x = 0; x < tw; ++x) texels[y * tw + x] = static_cast<float>((x * 7 + y * 13) % 29) * 0.25f;
  }
  cudaChannelFormatDesc float_desc = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  CHECK(cudaMallocArray(&array, &float_desc, tw, th));
  CHECK(cudaMemcpy2DToArray(array, 0, 0, texels.data(), tw * sizeof(float), tw * sizeof(float), th,
                            cudaMemcpyHostToDevice));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = array;
  cudaTextureDesc tex = {};
  tex.addressMode[0] = tex.addressMode[1] = cudaAddressModeClamp;
  tex.filterMode = cudaFilterModeLinear;
  tex.readMode = cudaReadModeElementType;
  tex.normalizedCoords = 1;
  cudaTextureObject_t texture = 0;
  CHECK(cudaCreateTextureObject(&texture, &res, &tex, nullptr));
  float* resampled = nullptr;
  CHECK(cudaMalloc(&resampled, ow * oh * sizeof(float)));
  Resample<<<dim3((ow + 63) / 64, oh), 64>>>(texture, resampled, ow, oh);
  CHECK(cudaGetLastError());
  std::vector<float> got(ow * oh);
  CHECK(cudaMemcpy(got.data(), resampled, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong_filter = 0;
  for (int y = 0; y < oh; ++y) {
    for (int x = 0; x < ow; ++x) {
      float u = -0.1f + 1.2f * (x + 0.5f) / ow, v = -0.1f + 1.2f * (y + 0.5f) / oh;
      float want = Reference(texels, tw, th, u, v);
      if (std::fabs(got[y * ow + x] - want) > 1e-5f * (1 + std::fabs(want))) {
        if (wrong_filter++ < 3) std::printf("textures: tex2D(%g, %g) = %g, want %g\n", u, v, got[y * ow + x], want);
      }
    }
  }
  EXPECT(wrong_filter == 0, "linear filtering of normalised coordinates");
  cudaTextureDesc tex_back = {};
  CHECK(cudaGetTextureObjectTextureDesc(&tex_back, texture));
  EXPECT(tex_back.normalizedCoords == 1 && tex_back.filterMode == cudaFilterModeLinear &&
             tex_back.addressMode[1] == cudaAddressModeClamp,
         "the texture descriptor reads back");
  cudaResourceDesc res_back = {};
  CHECK(cudaGetTextureObjectResourceDesc(&res_back, texture));
  EXPECT(res_back.resType == cudaResourceTypeArray && res_back.res.array.array == array,
         "the resource descriptor reads back");
  CHECK(cudaDestroyTextureObject(texture));

  // ---- tex1Dfetch on linear memory: zero outside. ----
  const int n = 1000, first = -7, count = n + 14;
  std::vector<int> ints(n);
  for (int i = 0; i < n; ++i) ints[i] = i * 37 - 5000;
  int* linear = nullptr;
  int* fetched = nullptr;
  CHECK(cudaMalloc(&linear, n * sizeof(int)));
  CHECK(cudaMalloc(&fetched, count * sizeof(int)));
  CHECK(cudaMemcpy(linear, ints.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  cudaResourceDesc lres = {};
  lres.resType = cudaResourceTypeLinear;
  lres.res.linear.devPtr = linear;
  lres.res.linear.desc = cudaCreateChannelDesc<int>();
  lres.res.linear.sizeInBytes = n * sizeof(int);
  cudaTextureDesc ltex = {};
  ltex.readMode = cudaReadModeElementType;
  cudaTextureObject_t fetch_texture = 0;
  CHECK(cudaCreateTextureObject(&fetch_texture, &lres, &ltex, nullptr));
  Fetch<<<(count + 127) / 128, 128>>>(fetch_texture, fetched, first, count);
  CHECK(cudaGetLastError());
  std::vector<int> fetched_host(count);
  CHECK(cudaMemcpy(fetched_host.data(), fetched, count * sizeof(int), cudaMemcpyDeviceToHost));
  int wrong_fetch = 0;
  for (int k = 0; k < count; ++k) {
    int i = first + k;
    wrong_fetch += fetched_host[k] != (i >= 0 && i < n ? ints[i] : 0);
  }
  EXPECT(wrong_fetch == 0, "tex1Dfetch");
  CHECK(cudaDestroyTextureObject(fetch_texture));
  const int wrong_virtual = TextureOverVirtualMemory();
  EXPECTF(wrong_virtual == 0, "a texture over virtual memory: %d texel(s) wrong (-1: a call failed)", wrong_virtual);

  // ---- A surface painted by a kernel, read back by a copy. ----
  const int sw = 70, sh = 33;
  cudaChannelFormatDesc uchar4_desc = cudaCreateChannelDesc<uchar4>();
  cudaArray_t surface_array = nullptr;
  CHECK(cudaMallocArray(&surface_array, &uchar4_desc, sw, sh, cudaArraySurfaceLoadStore));
  cudaResourceDesc sres = {};
  sres.resType = cudaResourceTypeArray;
  sres.res.array.array = surface_array;
  cudaSurfaceObject_t surface = 0;
  CHECK(cudaCreateSurfaceObject(&surface, &sres));
  Paint<<<dim3((sw + 31) / 32, sh), 32>>>(surface, sw, sh);
  CHECK(cudaGetLastError());
  std::vector<uchar4> painted(sw * sh);
  CHECK(cudaMemcpy2DFromArray(painted.data(), sw * sizeof(uchar4), surface_array, 0, 0, sw * sizeof(uchar4), sh,
                              cudaMemcpyDeviceToHost));
  int wrong_surface = 0;
  for (int y = 0; y < sh; ++y) {
    for (int x = 0; x < sw; ++x) {
      uchar4 p = painted[y * sw + x];
      wrong_surface += p.x != x || p.y != y || p.z != (x ^ y) || p.w != 255;
    }
  }
  EXPECT(wrong_surface == 0, "surf2Dwrite read back by cudaMemcpy2DFromArray");
  CHECK(cudaDestroySurfaceObject(surface));
  // An array made without cudaArraySurfaceLoadStore takes a surface too, as NVIDIA's driver takes it (an H100's,
  // driver 580), though the Programming Guide asks for the flag.
  cudaSurfaceObject_t plain_surface = 0;
  cudaResourceDesc plain = {};
  plain.resType = cudaResourceTypeArray;
  plain.res.array.array = array;
  const cudaError_t plain_made = cudaCreateSurfaceObject(&plain_surface, &plain);
  EXPECTF(plain_made == cudaSuccess, "a surface over an array without the surface flag: %s",
          cudaGetErrorString(plain_made));
  if (plain_made == cudaSuccess) CHECK(cudaDestroySurfaceObject(plain_surface));
  cudaGetLastError();
  // The driver's entry points with no place for the handle: refused on a slice, not written through. NVIDIA's
  // driver writes through (an H100's, driver 580, crashed the program): run natively, the program does not try.
  auto create_texture = DriverEntry<decltype(&cuTexObjectCreate)>("cuTexObjectCreate");
  auto create_surface = DriverEntry<decltype(&cuSurfObjectCreate)>("cuSurfObjectCreate");
  EXPECT(create_texture != nullptr && create_surface != nullptr, "the driver's object entry points are found");
  CUDA_RESOURCE_DESC driver_res = {};
  driver_res.resType = CU_RESOURCE_TYPE_ARRAY;
  driver_res.res.array.hArray = reinterpret_cast<CUarray>(surface_array);
  CUDA_TEXTURE_DESC driver_tex = {};
  if (create_texture != nullptr && create_surface != nullptr && OnSlice()) {
    EXPECT(create_texture(nullptr, &driver_res, &driver_tex, nullptr) == CUDA_ERROR_INVALID_VALUE,
           "cuTexObjectCreate(NULL, ...) is refused");
    EXPECT(create_surface(nullptr, &driver_res) == CUDA_ERROR_INVALID_VALUE,
           "cuSurfObjectCreate(NULL, ...) is refused");
  }

  CHECK(cudaFreeArray(array));
  CHECK(cudaFreeArray(surface_array));
  CHECK(cudaFree(resampled));
  CHECK(cudaFree(linear));
  CHECK(cudaFree(fetched));
  const size_t free_end = FreeMemoryWhenIdle();
  EXPECT(free_end == free_before, "the objects' and arrays' memory went back to the slice");
  std::printf("textures: %d+%d+%d wrong, %d failure(s): %s\n", wrong_filter, wrong_fetch, wrong_surface, failures,
              failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
