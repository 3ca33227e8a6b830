// Kernels compiled by nvcc at build time into the fatbins the fatbin tests read (see ../fatbin.cmake).
// Kept small but not trivial: `unrolled` produces long, repetitive PTX, so the compressed payloads use long
// literal runs and long, overlapping matches.

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void unrolled(const int* in, int* out) {
  int acc = 0;
#pragma unroll
  for (int k = 0; k < 96; ++k) acc = acc * 31 + in[threadIdx.x * 96 + k] * (k + 1);
  out[threadIdx.x] = acc;
}
