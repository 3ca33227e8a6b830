// Parameters passed by value (structs with mixed field types and padding, doubles, chars, bools, a struct holding
// a pointer, a struct larger than 64 bytes) and dynamic shared memory sized at launch.
#include "kernel_types.h"

using kt::Grid2D;
using kt::Mixed;
using kt::Poly;
using kt::Span;
using kt::Vec2;

// Echoes every field so the host can compare them one by one.
extern "C" __global__ void struct_params(Mixed m, Vec2 p, double scale, char c, Grid2D g, bool flag, unsigned short us,
                                         float* outf, double* outd, long long* outl) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  outd[0] = m.d;
  outd[1] = m.d * scale;
  outd[2] = scale;
  outf[0] = m.f;
  outf[1] = m.v[0];
  outf[2] = m.v[1];
  outf[3] = m.v[2];
  outf[4] = p.x;
  outf[5] = p.y;
  outf[6] = g.origin.x;
  outf[7] = g.origin.y;
  outf[8] = g.step.x;
  outf[9] = g.step.y;
  outl[0] = m.c;
  outl[1] = m.i;
  outl[2] = m.s;
  outl[3] = m.tag[0];
  outl[4] = m.tag[1];
  outl[5] = m.tag[2];
  outl[6] = m.ll;
  outl[7] = c;
  outl[8] = flag ? 1 : 0;
  outl[9] = us;
  outl[10] = g.width;
  outl[11] = g.height;
}

// A 2D launch over a Grid2D: coordinates (x, y) of each point, two floats per point.
extern "C" __global__ void grid_points(Grid2D g, float* out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= g.width || y >= g.height) return;
  int idx = y * g.width + x;
  out[2 * idx] = g.origin.x + x * g.step.x;
  out[2 * idx + 1] = g.origin.y + y * g.step.y;
}

// The output array arrives inside a struct.
extern "C" __global__ void span_fill(Span s, float value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < s.n) s.data[i] = value + (float)i;
}

// Horner's rule with coefficients from a 68-byte parameter.
extern "C" __global__ void poly_eval(Poly p, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = p.c[p.degree];
  for (int k = p.degree - 1; k >= 0; --k) acc = acc * x[i] + p.c[k];
  y[i] = acc;
}

// Dynamic shared memory: blockDim.x floats followed by blockDim.x ints, size given at launch
// (shared_bytes = 8 * blockDim.x). Each block reverses its slice; indices past n come back as -1.
extern "C" __global__ void dyn_shared_reverse(const float* in, float* out, int n) {
  extern __shared__ float values[];
  int* index = reinterpret_cast<int*>(&values[blockDim.x]);
  int t = threadIdx.x;
  int gi = blockIdx.x * blockDim.x + t;
  values[t] = gi < n ? in[gi] : 0.0f;
  index[t] = gi;
  __syncthreads();
  int r = blockDim.x - 1 - t;
  if (gi < n) out[gi] = index[r] < n ? values[r] : -1.0f;
}

// Static and dynamic shared memory side by side must not overlap. REQUIRES: blockDim.x >= 64,
// shared_bytes >= 4 * blockDim.x.
extern "C" __global__ void static_and_dynamic_shared(int* out) {
  __shared__ int fixed[64];
  extern __shared__ int dynamic[];
  int t = threadIdx.x;
  if (t < 64) fixed[t] = t * 3;
  dynamic[t] = t * 5 + 1;
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = fixed[t % 64] * 100000 + dynamic[blockDim.x - 1 - t];
}
