// Parser test input: shared-memory block reduction finished with warp shuffles.
extern "C" __global__ void __launch_bounds__(256) reduce_sum(const float* __restrict__ in, float* out, int n) {
  __shared__ float partial[32];
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (blockDim.x + warpSize - 1) / warpSize ? partial[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    unsigned ballot = __ballot_sync(0xffffffffu, v != 0.0f);
    if (lane == 0 && ballot) atomicAdd(out, v);
  }
}
