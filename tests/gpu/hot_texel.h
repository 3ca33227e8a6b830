// The GPU kit's texture probes (texture_weights.cu, texture_rule.cu): a texture that measures one texel's weight.
#ifndef GPUPOOL_TESTS_GPU_HOT_TEXEL_H_
#define GPUPOOL_TESTS_GPU_HOT_TEXEL_H_

#include <cuda_runtime.h>

#include <vector>

// A 2 x 2 (x 2 when `dims` is 3) float texture, filtered linearly and clamped, whose texel `hot` (bit 0: x, bit 1: y,
// bit 2: z) is 1 and the others 0: sampled between the texels' centres it returns that texel's weight. Its array
// goes to `*array` (for cudaFreeArray). The first error, or cudaSuccess.
inline cudaError_t HotTexelTexture(int dims, int hot, cudaArray_t* array, cudaTextureObject_t* texture) {
  std::vector<float> values(dims == 3 ? 8 : 4, 0.0f);
  values[hot] = 1.0f;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  if (cudaError_t e = cudaMalloc3DArray(array, &desc, make_cudaExtent(2, 2, dims == 3 ? 2 : 0)); e != cudaSuccess) {
    return e;
  }
  cudaMemcpy3DParms copy = {};
  copy.srcPtr = make_cudaPitchedPtr(values.data(), 2 * sizeof(float), 2, 2);
  copy.dstArray = *array;
  copy.extent = make_cudaExtent(2, 2, dims == 3 ? 2 : 1);
  copy.kind = cudaMemcpyHostToDevice;
  if (cudaError_t e = cudaMemcpy3D(&copy); e != cudaSuccess) return e;
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = *array;
  cudaTextureDesc tex = {};
  tex.addressMode[0] = tex.addressMode[1] = tex.addressMode[2] = cudaAddressModeClamp;
  tex.filterMode = cudaFilterModeLinear;
  tex.readMode = cudaReadModeElementType;
  return cudaCreateTextureObject(texture, &res, &tex, nullptr);
}

#endif  // GPUPOOL_TESTS_GPU_HOT_TEXEL_H_
