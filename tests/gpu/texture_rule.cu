// The texture unit's rule for each texel's weight in a 2-D and a 3-D linear filter, measured over a grid of axis
// weights rather than at a few points (tests/gpu/texture_weights.cu): a texture of 2 x 2 (x 2) float texels, one of
// them 1 and the others 0, sampled at x = 0.5 + a/256 (so the axis weight is exactly a/256), returns that texel's
// weight. Writes DIR/texture_rule_2d.bin (4 texels x 256 b x 256 a) and DIR/texture_rule_3d.bin (8 texels x 64 c x 64 b
// x 64 a, a, b, c in steps of 4/256), each value the weight in 256ths as a little-endian uint16 (0xffff: not a
// multiple of 1/256), so that the GPU's answers and an emulated slice's can be compared byte for byte.
//
//   texture_rule DIR
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "hot_texel.h"

__global__ void Sample2D(cudaTextureObject_t t, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int a = i % 256, b = i / 256;
  out[i] = tex2D<float>(t, 0.5f + a / 256.0f, 0.5f + b / 256.0f);
}

__global__ void Sample3D(cudaTextureObject_t t, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int a = i % 64, b = (i / 64) % 64, c = i / 4096;
  out[i] = tex3D<float>(t, 0.5f + 4 * a / 256.0f, 0.5f + 4 * b / 256.0f, 0.5f + 4 * c / 256.0f);
}

static bool Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::printf("texture_rule: %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// The weights of texel `hot` of a 2 x 2 (x 2 when dims is 3) texture at the kernel's points, in 256ths.
static bool Weights(int dims, int hot, std::vector<uint16_t>* weights) {
  const int n = dims == 2 ? 256 * 256 : 64 * 64 * 64;
  cudaArray_t array = nullptr;
  cudaTextureObject_t t = 0;
  bool ok = Check(HotTexelTexture(dims, hot, &array, &t), "the texture of one hot texel");
  float* out = nullptr;
  ok = ok && Check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc");
  if (ok) {
    if (dims == 2) {
      Sample2D<<<(n + 255) / 256, 256>>>(t, out, n);
    } else {
      Sample3D<<<(n + 255) / 256, 256>>>(t, out, n);
    }
    ok = Check(cudaGetLastError(), "launch");
  }
  std::vector<float> got(n);
  ok = ok && Check(cudaMemcpy(got.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (int i = 0; ok && i < n; ++i) {
    const float w = got[i] * 256.0f;
    weights->push_back(w == std::floor(w) && w >= 0 && w <= 256 ? static_cast<uint16_t>(w) : 0xffff);
  }
  if (t != 0) cudaDestroyTextureObject(t);
  cudaFree(out);
  cudaFreeArray(array);
  return ok;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::printf("usage: texture_rule DIR\n");
    return 2;
  }
  for (int dims = 2; dims <= 3; ++dims) {
    std::vector<uint16_t> weights;
    for (int hot = 0; hot < (dims == 2 ? 4 : 8); ++hot) {
      if (!Weights(dims, hot, &weights)) return 1;
    }
    const std::string path = std::string(argv[1]) + "/texture_rule_" + std::to_string(dims) + "d.bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(weights.data(), 2, weights.size(), f) != weights.size()) {
      std::printf("texture_rule: cannot write %s\n", path.c_str());
      return 1;
    }
    std::fclose(f);
    size_t odd = 0;
    for (uint16_t w : weights) odd += w == 0xffff;
    std::printf("texture_rule: %zu weights of %d-D texels in %s, %zu not a multiple of 1/256\n", weights.size(),
                dims, path.c_str(), odd);
  }
  return 0;
}
