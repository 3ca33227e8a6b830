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
