// Texture and surface objects (kernel_texture_test.cc): each kernel fetches at coordinates the host gives and
// writes what it got, so the host can check every fetch against the Programming Guide's formulas. nvcc turns these
// into tex.{1d,2d,3d,a1d,a2d}.v4.{f32,s32,u32}.{f32,s32}, tld4.{r,g,b,a}.2d, suld.b.* and sust.b.*.
#include <cuda_runtime.h>

// GP_TEX_KERNEL(name, T, fetch, inputs...): a kernel `name(t, inputs..., T* out, n)` whose thread i writes `fetch`
// (an expression of t and the inputs at i) to out[i].
#define GP_TEX_KERNEL(name, T, fetch, ...)                                             \
  extern "C" __global__ void name(cudaTextureObject_t t, __VA_ARGS__, T* out, int n) { \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                     \
    if (i < n) out[i] = fetch;                                                         \
  }

// Float results: tex1D/2D/3D, layered, tex1Dfetch (linear memory), with a float4 texture type.
GP_TEX_KERNEL(tex1d_f4, float4, tex1D<float4>(t, x[i]), const float* x)
GP_TEX_KERNEL(tex2d_f4, float4, tex2D<float4>(t, x[i], y[i]), const float* x, const float* y)
// A single-channel read (the .x of the same .v4 instruction): what most programs write.
GP_TEX_KERNEL(tex2d_f1, float, tex2D<float>(t, x[i], y[i]), const float* x, const float* y)
GP_TEX_KERNEL(tex3d_f4, float4, tex3D<float4>(t, x[i], y[i], z[i]), const float* x, const float* y, const float* z)
GP_TEX_KERNEL(tex1d_layered_f4, float4, tex1DLayered<float4>(t, x[i], layer[i]), const float* x, const int* layer)
GP_TEX_KERNEL(tex2d_layered_f4, float4, tex2DLayered<float4>(t, x[i], y[i], layer[i]), const float* x, const float* y,
              const int* layer)
GP_TEX_KERNEL(fetch_f4, float4, tex1Dfetch<float4>(t, index[i]), const int* index)

// Integer results (cudaReadModeElementType on integer formats): tex.*.v4.s32 / .u32.
GP_TEX_KERNEL(tex2d_i4, int4, tex2D<int4>(t, x[i], y[i]), const float* x, const float* y)
GP_TEX_KERNEL(tex2d_u4, uint4, tex2D<uint4>(t, x[i], y[i]), const float* x, const float* y)
GP_TEX_KERNEL(fetch_i4, int4, tex1Dfetch<int4>(t, index[i]), const int* index)

// tex2Dgather: the four components, one tld4 each; out[4 * i + c] holds component c's four texels.
#define GP_GATHER_KERNEL(name, T)                                                                         \
  extern "C" __global__ void name(cudaTextureObject_t t, const float* x, const float* y, T* out, int n) { \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                                        \
    if (i >= n) return;                                                                                   \
    out[4 * i + 0] = tex2Dgather<T>(t, x[i], y[i], 0);                                                    \
    out[4 * i + 1] = tex2Dgather<T>(t, x[i], y[i], 1);                                                    \
    out[4 * i + 2] = tex2Dgather<T>(t, x[i], y[i], 2);                                                    \
    out[4 * i + 3] = tex2Dgather<T>(t, x[i], y[i], 3);                                                    \
  }
GP_GATHER_KERNEL(gather_f4, float4)
GP_GATHER_KERNEL(gather_i4, int4)

// tex2DLod on a texture with one level: level 0 whatever the level asked for.
GP_TEX_KERNEL(tex2d_lod_f4, float4, tex2DLod<float4>(t, x[i], y[i], lod), const float* x, const float* y, float lod)

// Surfaces. x coordinates are in bytes. One kernel per out-of-range mode (the mode is part of the instruction).
#define SURF2D_READ_WRITE(mode, Mode)                                                                             \
  extern "C" __global__ void surf2d_read_##mode(cudaSurfaceObject_t s, const int* x, const int* y, unsigned* out, \
                                                int n) {                                                          \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                                                \
    if (i < n) out[i] = surf2Dread<unsigned>(s, x[i], y[i], Mode);                                                \
  }                                                                                                               \
  extern "C" __global__ void surf2d_write_##mode(cudaSurfaceObject_t s, const int* x, const int* y,               \
                                                 const unsigned* value, int n) {                                  \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                                                \
    if (i < n) surf2Dwrite(value[i], s, x[i], y[i], Mode);                                                        \
  }
SURF2D_READ_WRITE(trap, cudaBoundaryModeTrap)
SURF2D_READ_WRITE(clamp, cudaBoundaryModeClamp)
SURF2D_READ_WRITE(zero, cudaBoundaryModeZero)

// Wider and narrower accesses: float4 in 1D (sust.b.1d.v4.b32), uchar4 in 3D (v4.b8), short in layered 1D and
// 2D (b16), long long in 2D (b64). Each reads element i, adds one to every part, and writes it to the next slot.
extern "C" __global__ void surf1d_float4_bump(cudaSurfaceObject_t s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 v = surf1Dread<float4>(s, i * 16);
  surf1Dwrite(make_float4(v.x + 1, v.y + 1, v.z + 1, v.w + 1), s, (i + n) * 16);
}

extern "C" __global__ void surf3d_uchar4_bump(cudaSurfaceObject_t s, int w, int h, int d) {
  int x = threadIdx.x, y = threadIdx.y, z = blockIdx.x;
  if (x >= w || y >= h || z >= d) return;
  uchar4 v = surf3Dread<uchar4>(s, x * 4, y, z);
  surf3Dwrite(make_uchar4(v.x + 1, v.y + 1, v.z + 1, v.w + 1), s, (x + w) * 4, y, z);
}

extern "C" __global__ void surf1d_layered_short_bump(cudaSurfaceObject_t s, int w, int layers) {
  int x = threadIdx.x, layer = blockIdx.x;
  if (x >= w || layer >= layers) return;
  short v = surf1DLayeredread<short>(s, x * 2, layer);
  surf1DLayeredwrite<short>(v + 1, s, (x + w) * 2, layer);
}

extern "C" __global__ void surf2d_layered_short_bump(cudaSurfaceObject_t s, int w, int h, int layers) {
  int x = threadIdx.x, y = threadIdx.y, layer = blockIdx.x;
  if (x >= w || y >= h || layer >= layers) return;
  short v = surf2DLayeredread<short>(s, x * 2, y, layer);
  surf2DLayeredwrite<short>(v + 1, s, (x + w) * 2, y, layer);
}

extern "C" __global__ void surf2d_int64_bump(cudaSurfaceObject_t s, int w, int h) {
  int x = threadIdx.x, y = threadIdx.y;
  if (x >= w || y >= h) return;
  long long v = surf2Dread<long long>(s, x * 8, y);
  surf2Dwrite<long long>(v + 1, s, (x + w) * 8, y);
}
