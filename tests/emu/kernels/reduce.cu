// Reductions and scans: warp shuffles plus shared memory and __syncthreads, the building blocks of most real
// kernels; and a histogram with shared-memory atomics followed by global atomics.

__device__ int WarpSum(int v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__device__ float WarpMax(float v) {
  for (int mask = 16; mask > 0; mask >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
  return v;
}

// REQUIRES: blockDim.x a multiple of 32, at most 1024. One partial sum per block, grid-stride over the input.
extern "C" __global__ void block_reduce_sum(const int* in, int* block_sums, int n) {
  __shared__ int warp_sums[32];
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int sum = 0;
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) sum += in[i];
  sum = WarpSum(sum);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    int nwarps = blockDim.x / 32;
    sum = lane < nwarps ? warp_sums[lane] : 0;
    sum = WarpSum(sum);
    if (lane == 0) block_sums[blockIdx.x] = sum;
  }
}

// Same shape with floats and a butterfly (xor) shuffle: the maximum is exact whatever the order.
extern "C" __global__ void block_reduce_max(const float* in, float* block_max, int n) {
  __shared__ float warp_max[32];
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float m = -INFINITY;
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) m = fmaxf(m, in[i]);
  m = WarpMax(m);
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < (int)(blockDim.x / 32) ? warp_max[lane] : -INFINITY;
    m = WarpMax(m);
    if (lane == 0) block_max[blockIdx.x] = m;
  }
}

// Inclusive Hillis-Steele scan of each block's slice, double-buffered in shared memory. blockDim.x <= 512.
extern "C" __global__ void scan_hillis_steele(const int* in, int* out, int n) {
  __shared__ int buf[2][512];
  int tid = threadIdx.x;
  int gi = blockIdx.x * blockDim.x + tid;
  int pout = 0;
  buf[pout][tid] = gi < n ? in[gi] : 0;
  __syncthreads();
  for (int offset = 1; offset < (int)blockDim.x; offset <<= 1) {
    int pin = pout;
    pout = 1 - pout;
    int v = buf[pin][tid];
    if (tid >= offset) v += buf[pin][tid - offset];
    buf[pout][tid] = v;
    __syncthreads();
  }
  if (gi < n) out[gi] = buf[pout][tid];
}

// Exclusive Blelloch (up-sweep/down-sweep) scan of 2 * blockDim.x elements per block; blockDim.x a power of
// two <= 512. Also writes each block's total.
extern "C" __global__ void scan_blelloch(const int* in, int* out, int* block_totals, int n) {
  __shared__ int temp[1024];
  int tid = threadIdx.x;
  int m = 2 * blockDim.x;
  int base = blockIdx.x * m;
  temp[2 * tid] = base + 2 * tid < n ? in[base + 2 * tid] : 0;
  temp[2 * tid + 1] = base + 2 * tid + 1 < n ? in[base + 2 * tid + 1] : 0;
  int offset = 1;
  for (int d = m >> 1; d > 0; d >>= 1) {
    __syncthreads();
    if (tid < d) {
      int ai = offset * (2 * tid + 1) - 1;
      int bi = offset * (2 * tid + 2) - 1;
      temp[bi] += temp[ai];
    }
    offset <<= 1;
  }
  if (tid == 0) {
    block_totals[blockIdx.x] = temp[m - 1];
    temp[m - 1] = 0;
  }
  for (int d = 1; d < m; d <<= 1) {
    offset >>= 1;
    __syncthreads();
    if (tid < d) {
      int ai = offset * (2 * tid + 1) - 1;
      int bi = offset * (2 * tid + 2) - 1;
      int t = temp[ai];
      temp[ai] = temp[bi];
      temp[bi] += t;
    }
  }
  __syncthreads();
  if (base + 2 * tid < n) out[base + 2 * tid] = temp[2 * tid];
  if (base + 2 * tid + 1 < n) out[base + 2 * tid + 1] = temp[2 * tid + 1];
}

// 256-bin histogram: per-block counts with shared-memory atomics, then one global atomicAdd per non-empty bin.
extern "C" __global__ void histogram256(const unsigned char* data, int n, unsigned* hist) {
  __shared__ unsigned local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    atomicAdd(&local[data[i]], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
  }
}
