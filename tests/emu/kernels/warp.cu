// Warp-level primitives: votes, ballots, active masks (with partial warps and divergence), every shuffle
// variant including sub-warp widths and 64-bit values, and __syncwarp.

// Records per thread (8 words): ballot, any, all, popc(ballot), activemask at entry, activemask inside a
// divergent branch, ballot of a half warp inside `if (lane < 16)`, lanes expected in the warp.
extern "C" __global__ void warp_vote(const int* in, unsigned* out, int n) {
  int tid = threadIdx.x;
  int i = blockIdx.x * blockDim.x + tid;
  int lane = tid & 31;
  int warp_base = tid & ~31;
  int lanes = min(32, (int)blockDim.x - warp_base);
  unsigned full = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
  unsigned entry_mask = __activemask();
  int v = i < n ? in[i] : 0;
  bool pred = v > 0;
  unsigned ballot = __ballot_sync(full, pred);
  int any = __any_sync(full, pred);
  int all = __all_sync(full, pred);
  unsigned divergent = 0;
  if (v & 1) {
    divergent = __activemask();
  } else {
    divergent = __activemask();
  }
  unsigned half = 0;
  if (lane < 16) half = __ballot_sync(full & 0xffffu, pred);
  unsigned* rec = out + 8ull * i;
  rec[0] = ballot;
  rec[1] = any;
  rec[2] = all;
  rec[3] = __popc(ballot);
  rec[4] = entry_mask;
  rec[5] = divergent;
  rec[6] = half;
  rec[7] = full;
}

// Records per thread (10 words). REQUIRES: blockDim.x a multiple of 32.
extern "C" __global__ void warp_shuffle(const int* in, const double* din, int* out, double* dout) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x & 31;
  int v = in[i];
  const unsigned full = 0xffffffffu;
  int* rec = out + 10ll * i;
  rec[0] = __shfl_sync(full, v, (lane * 7 + 3) & 31);
  rec[1] = __shfl_up_sync(full, v, 5);
  rec[2] = __shfl_down_sync(full, v, 3);
  rec[3] = __shfl_xor_sync(full, v, 9);
  rec[4] = __shfl_sync(full, v, lane + 3, 8);  // Source lane taken modulo the width, within each group.
  rec[5] = __shfl_up_sync(full, v, 2, 16);     // Lanes 0-1 of each 16-lane group keep their own value.
  rec[6] = __shfl_down_sync(full, v, 1, 4);    // Lane 3 of each 4-lane group keeps its own value.
  rec[7] = __shfl_sync(full, v, 0);            // Broadcast.
  // Exchange through shared memory, ordered by __syncwarp.
  __shared__ int scratch[1024];
  scratch[threadIdx.x] = v;
  __syncwarp();
  rec[8] = scratch[(threadIdx.x & ~31) | ((lane + 1) & 31)];
  __syncwarp();
  long long wide = ((long long)v << 32) | (unsigned)(v * 3 + 1);
  rec[9] = (int)(__shfl_down_sync(full, wide, 2) >> 32) ^ (int)__shfl_down_sync(full, wide, 2);
  double d = din[i];
  dout[2 * i] = __shfl_xor_sync(full, d, 1);
  dout[2 * i + 1] = __shfl_up_sync(full, d, 31);
}
