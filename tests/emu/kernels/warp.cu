// Warp-level primitives: votes, ballots, active masks (with partial warps and divergence), every shuffle
// variant including sub-warp widths and 64-bit values, and __syncwarp.
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

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

// Every shuffle mode at every width, run by blocks of any size (partial warps included) with the full mask, as
// cooperative groups' thread_block_tile<32> does. Records per thread (kShufflePartialRecords words), in order:
// for width 32, 16, 8, 4, 2, 1: idx (lane + 1), idx 0, up 1, up width/2, down 1, down width/2, xor 1, xor width/2;
// then 64-bit down 16 (high word, low word) and double xor 16 (its bits' low word).
extern "C" __global__ void warp_shuffle_partial(const int* in, int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x & 31;
  int v = in[i];
  const unsigned full = 0xffffffffu;
  int* rec = out + 51ll * i;
  int k = 0;
  for (int width = 32; width >= 1; width /= 2) {
    int half = width > 1 ? width / 2 : 1;
    rec[k++] = __shfl_sync(full, v, lane + 1, width);
    rec[k++] = __shfl_sync(full, v, 0, width);
    rec[k++] = __shfl_up_sync(full, v, 1, width);
    rec[k++] = __shfl_up_sync(full, v, half, width);
    rec[k++] = __shfl_down_sync(full, v, 1, width);
    rec[k++] = __shfl_down_sync(full, v, half, width);
    rec[k++] = __shfl_xor_sync(full, v, 1, width);
    rec[k++] = __shfl_xor_sync(full, v, half, width);
  }
  long long wide = ((long long)v << 32) | (unsigned)(v * 3 + 1);
  long long wide_down = __shfl_down_sync(full, wide, 16);
  rec[k++] = (int)(wide_down >> 32);
  rec[k++] = (int)wide_down;
  double d = (double)v + 0.5;
  rec[k++] = (int)(__shfl_xor_sync(full, d, 16) * 2.0);
}

// The last step of NVIDIA's reduction samples: a block sums its inputs in shared memory down to one warp, then the
// warp finishes with thread_block_tile<32>::shfl_down over all 32 lanes, whatever the block size (a multi-pass
// reduction's last pass runs 1, 2 or 4 threads per block). One sum per block.
extern "C" __global__ void tile_reduce(const int* in, int* out, unsigned n) {
  cg::thread_block block = cg::this_thread_block();
  extern __shared__ int partial[];
  unsigned tid = threadIdx.x;
  unsigned i = blockIdx.x * (blockDim.x * 2) + tid;
  int sum = i < n ? in[i] : 0;
  if (i + blockDim.x < n) sum += in[i + blockDim.x];
  partial[tid] = sum;
  cg::sync(block);
  for (unsigned s = blockDim.x / 2; s > 32; s >>= 1) {
    if (tid < s) partial[tid] = sum = sum + partial[tid + s];
    cg::sync(block);
  }
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
  if (block.thread_rank() < 32) {
    if (blockDim.x >= 64) sum += partial[tid + 32];
    for (int offset = tile.size() / 2; offset > 0; offset /= 2) sum += tile.shfl_down(sum, offset);
  }
  if (block.thread_rank() == 0) out[blockIdx.x] = sum;
}

// Warps of one block hand work to each other: the first warp spins (bounded) on a flag in shared memory that the
// last warp sets after spinning on one the first sets. A GPU interleaves a block's warps, so both see their flag at
// once. Records per thread: whether it saw its flag, and the value the other warp left beside it.
extern "C" __global__ void warp_handoff(int* out, int limit) {
  __shared__ volatile int flags[2];
  __shared__ volatile int values[2];
  const int warp = threadIdx.x / 32, last = (blockDim.x - 1) / 32;
  if (threadIdx.x == 0) flags[0] = flags[1] = values[0] = values[1] = 0;
  __syncthreads();
  int seen = 0;
  if (warp == 0) {
    if (threadIdx.x == 0) {
      values[0] = 1234;
      flags[0] = 1;
    }
    for (int i = 0; i < limit && !seen; ++i) seen = flags[1];
    out[2 * threadIdx.x + 1] = values[1];
  } else if (warp == last) {
    for (int i = 0; i < limit && !seen; ++i) seen = flags[0];
    if (threadIdx.x == last * 32) {
      values[1] = 5678;
      flags[1] = 1;
    }
    out[2 * threadIdx.x + 1] = values[0];
  } else {
    seen = 1;
    out[2 * threadIdx.x + 1] = 0;
  }
  out[2 * threadIdx.x] = seen;
}

// One generic load and store whose lanes reach different memories: even lanes shared, odd lanes global (the
// pointer's space is unknown to the compiler, so it emits ld/st without a space).
extern "C" __global__ void generic_mixed(const int* in, int* out, int* global_scratch) {
  __shared__ int shared_scratch[256];
  const int t = threadIdx.x;
  shared_scratch[t] = in[t] * 3;
  global_scratch[t] = in[t] * 5;
  __syncthreads();
  int* p = (t & 1) ? global_scratch : shared_scratch;
  const int v = p[t ^ 2];  // A neighbour's value, through the generic pointer.
  __syncthreads();
  p[t] = v + 1;
  __syncthreads();
  out[t] = (t & 1) ? global_scratch[t] : shared_scratch[t];
}

// Lanes of one warp in the same function at the same instruction, reached through callers with different
// register needs (so their frames start at different registers): after __syncwarp they run together.
__device__ __noinline__ unsigned mix(unsigned x, int k) {
  __syncwarp();
  unsigned acc = x;
  for (int i = 0; i < k; ++i) acc = acc * 3 + (i ^ x);
  return acc;
}
__device__ __noinline__ unsigned through_small(unsigned x) { return mix(x, 5) + 1; }
__device__ __noinline__ unsigned through_large(unsigned x) {
  unsigned a = x * 7, b = x ^ 0x55, c = x + 11, d = x * x, e = x - 3;
  unsigned r = mix(x, 5);
  return r + a + b + c + d + e;
}
extern "C" __global__ void uneven_frames(const unsigned* in, unsigned* out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned x = in[t];
  out[t] = (threadIdx.x & 1) ? through_large(x) : through_small(x);
}
