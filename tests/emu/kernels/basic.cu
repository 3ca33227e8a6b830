// Elementwise kernels: one thread per element, grid-stride loops, 3D indexing, and a C++ template kernel that is
// looked up by its mangled name.
#include "kernel_types.h"

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Fewer threads than elements: every thread strides over the array.
extern "C" __global__ void grid_stride(const float* x, float* y, unsigned* visits, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
    y[i] = x[i] * 2.0f + (float)(i & 1023);
    visits[i] += 1;
  }
}

// Every special register of a 3D launch, packed into one record per thread.
extern "C" __global__ void index_3d(unsigned* out) {
  unsigned bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;
  unsigned tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  unsigned block = (bz * gridDim.y + by) * gridDim.x + bx;
  unsigned thread = (tz * blockDim.y + ty) * blockDim.x + tx;
  unsigned threads_per_block = blockDim.x * blockDim.y * blockDim.z;
  unsigned* rec = out + 8ull * (block * threads_per_block + thread);
  rec[0] = tx | (ty << 10) | (tz << 20);
  rec[1] = bx | (by << 10) | (bz << 20);
  rec[2] = blockDim.x | (blockDim.y << 10) | (blockDim.z << 20);
  rec[3] = gridDim.x | (gridDim.y << 10) | (gridDim.z << 20);
  rec[4] = thread & 31;  // Expected %laneid for a linear thread index.
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  rec[5] = lane;
  rec[6] = warpSize;
  rec[7] = thread >> 5;
}

// A template kernel: its name is C++-mangled (not extern "C").
template <typename T>
__global__ void scale_kernel(const T* in, T* out, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}

template __global__ void scale_kernel<double>(const double*, double*, double, int);
template __global__ void scale_kernel<int>(const int*, int*, int, int);
