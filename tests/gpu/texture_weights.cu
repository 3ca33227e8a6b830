// How a GPU's texture unit weighs the two texels of a linear filter: prints what it returns where the answer is the
// weight itself (a 2-texel texture holding 0 and 1) and where it is the coordinate the unit used (a 37-texel texture
// holding each texel's index), for the emulator's filter to be checked against. Checks nothing.
//   texture_weights      lines "unnormalized k/1024: value*256" and "normalized u: value, model"
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "hot_texel.h"

__global__ void Sample(cudaTextureObject_t t, const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1D<float>(t, x[i]);
}

cudaTextureObject_t Texture(const std::vector<float>& texels, bool normalized, cudaArray_t* array) {
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaMallocArray(array, &desc, texels.size(), 0);
  cudaMemcpy2DToArray(*array, 0, 0, texels.data(), texels.size() * sizeof(float), texels.size() * sizeof(float), 1,
                      cudaMemcpyHostToDevice);
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = *array;
  cudaTextureDesc tex = {};
  tex.addressMode[0] = cudaAddressModeClamp;
  tex.filterMode = cudaFilterModeLinear;
  tex.readMode = cudaReadModeElementType;
  tex.normalizedCoords = normalized;
  cudaTextureObject_t t = 0;
  cudaCreateTextureObject(&t, &res, &tex, nullptr);
  return t;
}

std::vector<float> Run(cudaTextureObject_t t, const std::vector<float>& x) {
  float *dx = nullptr, *dout = nullptr;
  cudaMalloc(&dx, x.size() * sizeof(float));
  cudaMalloc(&dout, x.size() * sizeof(float));
  cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice);
  Sample<<<(x.size() + 255) / 256, 256>>>(t, dx, dout, static_cast<int>(x.size()));
  std::vector<float> out(x.size());
  cudaMemcpy(out.data(), dout, out.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dout);
  return out;
}

__global__ void Sample3D(cudaTextureObject_t t, const float* x, const float* y, const float* z, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex3D<float>(t, x[i], y[i], z[i]);
}

__global__ void Sample2D(cudaTextureObject_t t, const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float>(t, x[i], y[i]);
}

// Each texel's own weight in a 2-D and a 3-D filter: a texture of 2 x 2 (x 2) texels, one of them 1 and the others 0,
// sampled at points between their centres, returns exactly that texel's weight. Printed as multiples of 1/256
// beside the per-axis model (products of the axes' weights, unrounded), one line per texel and point.
void Corners() {
  const float points[][3] = {{0.5f + 118 / 256.0f, 0.5f + 36 / 256.0f, 0.5f + 77 / 256.0f},
                             {0.5f + 3 / 256.0f, 0.5f + 5 / 256.0f, 0.5f + 7 / 256.0f},
                             {0.5f + 129 / 256.0f, 0.5f + 131 / 256.0f, 0.5f + 250 / 256.0f}};
  const int n = 3;
  for (int dims = 2; dims <= 3; ++dims) {
    const int texels = dims == 2 ? 4 : 8;
    for (int hot = 0; hot < texels; ++hot) {
      cudaArray_t array = nullptr;
      cudaTextureObject_t t = 0;
      HotTexelTexture(dims, hot, &array, &t);  // Errors show at the end (cudaGetLastError), as the kernels' do.
      std::vector<float> x(n), y(n), z(n);
      for (int i = 0; i < n; ++i) x[i] = points[i][0], y[i] = points[i][1], z[i] = points[i][2];
      float *dx, *dy, *dz, *dout;
      cudaMalloc(&dx, n * sizeof(float));
      cudaMalloc(&dy, n * sizeof(float));
      cudaMalloc(&dz, n * sizeof(float));
      cudaMalloc(&dout, n * sizeof(float));
      cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemcpy(dz, z.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      if (dims == 2) {
        Sample2D<<<1, 32>>>(t, dx, dy, dout, n);
      } else {
        Sample3D<<<1, 32>>>(t, dx, dy, dz, dout, n);
      }
      std::vector<float> out(n);
      cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost);
      for (int i = 0; i < n; ++i) {
        double model = 1;
        for (int k = 0; k < dims; ++k) {
          const double a = (points[i][k] - 0.5) ;
          model *= ((hot >> k) & 1) ? a : 1 - a;
        }
        std::printf("%dD texel %d at point %d: %.4f/256 (product of the axes' weights %.4f/256)\n", dims, hot, i,
                    out[i] * 256.0, model * 256.0);
      }
      cudaDestroyTextureObject(t);
      cudaFreeArray(array);
      cudaFree(dx);
      cudaFree(dy);
      cudaFree(dz);
      cudaFree(dout);
    }
  }
}

int main() {
  cudaArray_t a1 = nullptr, a2 = nullptr;
  // The weight itself: x = 0.5 + k/1024 between the centres of texels 0 and 1.
  std::vector<float> x(1025);
  for (int k = 0; k <= 1024; ++k) x[k] = 0.5f + k / 1024.0f;
  std::vector<float> w = Run(Texture({0.0f, 1.0f}, false, &a1), x);
  int rounded = 0, truncated = 0;
  for (int k = 0; k <= 1024; ++k) {
    rounded += w[k] == std::nearbyint(k / 4.0) / 256.0f;
    truncated += w[k] == std::floor(k / 4.0) / 256.0f;
  }
  std::printf("unnormalized: %d of 1025 weights are round(f*256)/256, %d floor(f*256)/256\n", rounded, truncated);
  for (int k = 0; k < 24; ++k) std::printf("unnormalized %d/1024: %.4f/256\n", k, w[k] * 256);
  for (int k = 1000; k <= 1024; k += 4) std::printf("unnormalized %d/1024: %.4f/256\n", k, w[k] * 256);
  // The coordinate used: texel i holds i, so a filter at texel coordinate c returns c - 0.5 (inside the texture).
  std::vector<float> texels(37);
  for (int i = 0; i < 37; ++i) texels[i] = static_cast<float>(i);
  std::vector<float> u(90);
  for (int i = 0; i < 90; ++i) u[i] = -0.1f + 1.2f * (i + 0.5f) / 90;
  std::vector<float> c = Run(Texture(texels, true, &a2), u);
  for (int i = 8; i < 40; ++i) {
    const double model = static_cast<double>(u[i]) * 37 - 0.5;
    std::printf("normalized u=%.9g: %.6f (u*37-0.5 = %.6f, *256 %.3f; got *256 %.3f)\n", u[i], c[i], model,
                model * 256, c[i] * 256.0);
  }
  Corners();
  std::printf("texture_weights: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
