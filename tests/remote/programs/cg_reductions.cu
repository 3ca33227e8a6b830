// cg_reductions: cooperative groups' collectives as reductions use them, each sum checked exactly (integers, and
// doubles holding integers):
//   - cg::reduce over tiles of several warps (tiled_partition<N> with N > 32 of a block given block_tile_memory),
//     whose warps meet through a barrier word in shared memory and whose last warp reduces their partial sums;
//   - cg::reduce over thread_block_tile<32> of the first warp only, after a shared-memory tree (the other warps
//     have left);
//   - cg::reduce over tiles of 16, 8, 4 and 2 threads, and tile shuffles (shfl_down, shfl_xor) within them;
//   - cg::reduce over coalesced_threads() in a divergent branch, and over labeled_partition;
//   - the final warp of NVIDIA's reduction samples (reduce7, which their cooperative-groups kernel hands its last
//     pass to): warps' sums in shared memory, then the lanes a ballot names shuffle down with the ballot as the
//     mask, reading lanes that have left the branch (the ISA leaves what they read undefined; GPUs give zero, and
//     the samples' sums rely on it). Two passes: multi-warp tiles over the input, then that warp over their sums.
// The block sizes and the input sizes include partial tiles and odd element counts.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#define PROGRAM_NAME "cg_reductions"
#include "program_checks.h"

namespace cg = cooperative_groups;

namespace {

// Each element's value: small integers of both signs, so every sum is exact in int and double.
__host__ __device__ int ValueAt(unsigned i) { return static_cast<int>((i * 2654435761u) % 1999u) - 999; }

// A warp's sum by shuffles among the lanes of `mask`, as the samples' warpReduceSum (without redux.sync, which
// compute capability 8.0 would use for int); the sum is whole in the mask's first lane.
template <typename T>
__device__ T ShuffleDownSum(unsigned mask, T value) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) value += __shfl_down_sync(mask, value, offset);
  return value;
}

// One sum per block of BlockSize threads: each warp's sum into shared memory, then the warps' sums by the lanes a
// ballot names, with the ballot as the shuffle mask (one lane for blocks of 32 threads or fewer).
template <typename T, unsigned BlockSize>
__global__ void BallotMaskedWarpSums(const T* in, T* partial, unsigned n) {
  __shared__ T warp_sums[BlockSize / 32 > 0 ? BlockSize / 32 : 1];
  const unsigned tid = threadIdx.x;
  const unsigned lanes = BlockSize < 32 ? BlockSize : 32;
  const unsigned mask = 0xffffffffu >> (32 - lanes);
  T value = 0;
  for (unsigned i = blockIdx.x * BlockSize + tid; i < n; i += BlockSize * gridDim.x) value += in[i];
  value = ShuffleDownSum(mask, value);
  if (tid % warpSize == 0) warp_sums[tid / warpSize] = value;
  __syncthreads();
  const unsigned warps = BlockSize / 32 > 0 ? BlockSize / 32 : 1;
  const unsigned ballot = __ballot_sync(mask, tid < warps);
  if (tid < warps) {
    value = warp_sums[tid];
    value = ShuffleDownSum(ballot, value);
  }
  if (tid == 0) partial[blockIdx.x] = value;
}

// One partial sum per block from tiles of TileSize threads (TileSize > 32: several warps per tile).
template <typename T, unsigned BlockSize, unsigned TileSize>
__global__ void MultiWarpTileSums(T* partial, unsigned n) {
  __shared__ cg::block_tile_memory<BlockSize> scratch;
  __shared__ T tile_sums[BlockSize / TileSize];
  cg::thread_block block = cg::this_thread_block(scratch);
  auto tile = cg::tiled_partition<TileSize>(block);
  T value = 0;
  for (unsigned i = blockIdx.x * BlockSize + threadIdx.x; i < n; i += BlockSize * gridDim.x) value += ValueAt(i);
  T sum = cg::reduce(tile, value, cg::plus<T>());
  if (tile.thread_rank() == 0) tile_sums[tile.meta_group_rank()] = sum;
  block.sync();
  if (threadIdx.x == 0) {
    T total = 0;
    for (unsigned t = 0; t < tile.meta_group_size(); ++t) total += tile_sums[t];
    partial[blockIdx.x] = total;
  }
}

// A shared-memory tree down to 32 values, then the first warp alone reduces them as a thread_block_tile<32>.
template <typename T>
__global__ void FirstWarpTileSums(T* partial, unsigned n) {
  extern __shared__ unsigned char shared_bytes[];
  T* sums = reinterpret_cast<T*>(shared_bytes);
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  const unsigned rank = block.thread_rank(), size = block.size();
  T value = 0;
  for (unsigned i = blockIdx.x * size + rank; i < n; i += size * gridDim.x) value += ValueAt(i);
  sums[rank] = value;
  for (unsigned half = size / 2; half >= 32; half /= 2) {
    block.sync();
    if (rank < half) sums[rank] = value = value + sums[rank + half];
  }
  block.sync();
  if (warp.meta_group_rank() == 0) value = cg::reduce(warp, value, cg::plus<T>());
  if (rank == 0) partial[blockIdx.x] = value;
}

// Tiles of TileSize (< 32) threads: each tile reduces with cg::reduce and again by hand with shfl_down and
// shfl_xor; a tile whose three answers differ counts an error.
template <unsigned TileSize>
__global__ void SmallTileSums(long long* partial, unsigned* disagreements, unsigned n) {
  cg::thread_block block = cg::this_thread_block();
  auto tile = cg::tiled_partition<TileSize>(block);
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  int value = i < n ? ValueAt(i) : 0;
  int reduced = cg::reduce(tile, value, cg::plus<int>());
  int down = value, butterfly = value;
  for (unsigned offset = TileSize / 2; offset > 0; offset /= 2) {
    down += tile.shfl_down(down, offset);
    butterfly += tile.shfl_xor(butterfly, offset);
  }
  // shfl_down leaves the whole sum in rank 0 only; the butterfly everywhere, as cg::reduce does.
  if (butterfly != reduced || (tile.thread_rank() == 0 && down != reduced)) atomicAdd(disagreements, 1u);
  if (tile.thread_rank() == 0) atomicAdd(reinterpret_cast<unsigned long long*>(partial),
                                         static_cast<unsigned long long>(static_cast<long long>(reduced)));
}

// The odd threads of each warp reduce as coalesced_threads(); the even ones as a labeled partition by i % 3.
__global__ void DivergentSums(long long* odd_sum, long long* labeled_sum, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;  // A partial last warp: the groups below lack its missing threads.
  const int value = ValueAt(i);
  if (i % 2 == 1) {
    cg::coalesced_group odd = cg::coalesced_threads();
    int sum = cg::reduce(odd, value, cg::plus<int>());
    if (odd.thread_rank() == 0) atomicAdd(reinterpret_cast<unsigned long long*>(odd_sum),
                                          static_cast<unsigned long long>(static_cast<long long>(sum)));
  }
  cg::coalesced_group active = cg::coalesced_threads();
  cg::coalesced_group same_label = cg::labeled_partition(active, static_cast<int>(i % 3));
  int sum = cg::reduce(same_label, value, cg::plus<int>());
  if (same_label.thread_rank() == 0) atomicAdd(reinterpret_cast<unsigned long long*>(labeled_sum),
                                               static_cast<unsigned long long>(static_cast<long long>(sum)));
}

long long HostSum(unsigned n) {
  long long sum = 0;
  for (unsigned i = 0; i < n; ++i) sum += ValueAt(i);
  return sum;
}

// Launches `kernel` over `blocks` blocks and adds up its per-block partial sums.
template <typename T, typename Kernel>
T SumOfPartials(Kernel kernel, unsigned blocks, unsigned threads, size_t shared, unsigned n) {
  T* partial = nullptr;
  CHECK(cudaMalloc(&partial, blocks * sizeof(T)));
  kernel<<<blocks, threads, shared>>>(partial, n);
  CHECK(cudaGetLastError());
  std::vector<T> host(blocks);
  CHECK(cudaMemcpy(host.data(), partial, blocks * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(partial));
  T total = 0;
  for (T t : host) total += t;
  return total;
}

// The samples' two passes: blocks of FirstBlockSize threads in multi-warp tiles of half a block over the input,
// then one block of LastBlockSize threads (ballot-masked final warp) over their sums.
template <typename T, unsigned FirstBlockSize, unsigned LastBlockSize>
void CheckTwoPasses(unsigned n, unsigned blocks) {
  T* first = nullptr;
  T* last = nullptr;
  CHECK(cudaMalloc(&first, blocks * sizeof(T)));
  CHECK(cudaMalloc(&last, sizeof(T)));
  MultiWarpTileSums<T, FirstBlockSize, FirstBlockSize / 2><<<blocks, FirstBlockSize>>>(first, n);
  BallotMaskedWarpSums<T, LastBlockSize><<<1, LastBlockSize>>>(first, last, blocks);
  CHECK(cudaGetLastError());
  T got = 0;
  CHECK(cudaMemcpy(&got, last, sizeof got, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(first));
  CHECK(cudaFree(last));
  const T want = static_cast<T>(HostSum(n));
  if (got != want) {
    std::printf(PROGRAM_NAME ": %u blocks of %u in multi-warp tiles, then a ballot-masked warp in a block of %u "
                "(%zu-byte values), %u elements: sum %lld, expected %lld\n", blocks, FirstBlockSize, LastBlockSize,
                sizeof(T), n, static_cast<long long>(got), static_cast<long long>(want));
    ++failures;
  }
}

template <typename T, unsigned BlockSize, unsigned TileSize>
void CheckMultiWarp(unsigned n) {
  T got = SumOfPartials<T>(MultiWarpTileSums<T, BlockSize, TileSize>, 7, BlockSize, 0, n);
  T want = static_cast<T>(HostSum(n));
  if (got != want) {
    std::printf(PROGRAM_NAME ": multi-warp tiles of %u in blocks of %u (%zu-byte values), %u elements: sum %lld, "
                "expected %lld\n", TileSize, BlockSize, sizeof(T), n, static_cast<long long>(got),
                static_cast<long long>(want));
    ++failures;
  }
}

template <typename T>
void CheckFirstWarp(unsigned threads, unsigned n) {
  T got = SumOfPartials<T>(FirstWarpTileSums<T>, 5, threads, threads * sizeof(T), n);
  T want = static_cast<T>(HostSum(n));
  if (got != want) {
    std::printf(PROGRAM_NAME ": first warp's tile of 32 in blocks of %u (%zu-byte values), %u elements: sum %lld, "
                "expected %lld\n", threads, sizeof(T), n, static_cast<long long>(got), static_cast<long long>(want));
    ++failures;
  }
}

template <unsigned TileSize>
void CheckSmallTiles(unsigned threads, unsigned n) {
  long long* sum = nullptr;
  unsigned* disagreements = nullptr;
  CHECK(cudaMalloc(&sum, sizeof *sum));
  CHECK(cudaMalloc(&disagreements, sizeof *disagreements));
  CHECK(cudaMemset(sum, 0, sizeof *sum));
  CHECK(cudaMemset(disagreements, 0, sizeof *disagreements));
  SmallTileSums<TileSize><<<(n + threads - 1) / threads, threads>>>(sum, disagreements, n);
  CHECK(cudaGetLastError());
  long long got = 0;
  unsigned disagreed = 0;
  CHECK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&disagreed, disagreements, sizeof disagreed, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(sum));
  CHECK(cudaFree(disagreements));
  if (got != HostSum(n) || disagreed != 0) {
    std::printf(PROGRAM_NAME ": tiles of %u in blocks of %u, %u elements: sum %lld, expected %lld; %u thread(s) "
                "saw cg::reduce and the shuffles disagree\n", TileSize, threads, n, got, HostSum(n), disagreed);
    ++failures;
  }
}

void CheckDivergent(unsigned threads, unsigned n) {
  long long* sums = nullptr;
  CHECK(cudaMalloc(&sums, 2 * sizeof *sums));
  CHECK(cudaMemset(sums, 0, 2 * sizeof *sums));
  DivergentSums<<<(n + threads - 1) / threads, threads>>>(sums, sums + 1, n);
  CHECK(cudaGetLastError());
  long long got[2] = {0, 0};
  CHECK(cudaMemcpy(got, sums, sizeof got, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(sums));
  long long odd = 0;
  for (unsigned i = 1; i < n; i += 2) odd += ValueAt(i);
  if (got[0] != odd || got[1] != HostSum(n)) {
    std::printf(PROGRAM_NAME ": coalesced groups in blocks of %u, %u elements: odd threads' sum %lld (expected "
                "%lld), labeled partitions' sum %lld (expected %lld)\n", threads, n, got[0], odd, got[1], HostSum(n));
    ++failures;
  }
}

}  // namespace

int main() {
  // The sample's choice: two tiles per block, for blocks of 64 to 1024 threads; and four tiles of 64.
  for (unsigned n : {1u << 16, 100003u}) {
    CheckMultiWarp<int, 64, 32>(n);
    CheckMultiWarp<int, 128, 64>(n);
    CheckMultiWarp<int, 256, 128>(n);
    CheckMultiWarp<int, 512, 256>(n);
    CheckMultiWarp<int, 1024, 512>(n);
    CheckMultiWarp<int, 256, 64>(n);
    CheckMultiWarp<float, 256, 128>(n);
    CheckMultiWarp<double, 512, 256>(n);
    CheckMultiWarp<double, 1024, 1024>(n);
    CheckFirstWarp<int>(256, n);
    CheckFirstWarp<double>(1024, n);
    CheckFirstWarp<float>(32, n);
  }
  // The samples' defaults: 64 blocks of 256 threads, then one block of 32 threads over their 64 sums.
  for (unsigned n : {1u << 16, 100003u}) {
    CheckTwoPasses<int, 256, 32>(n, 64);
    CheckTwoPasses<float, 256, 32>(n, 64);
    CheckTwoPasses<int, 256, 64>(n, 64);
    CheckTwoPasses<double, 512, 128>(n, 40);
  }
  for (unsigned n : {4096u, 1001u}) {
    CheckSmallTiles<16>(128, n);
    CheckSmallTiles<8>(96, n);
    CheckSmallTiles<4>(64, n);
    CheckSmallTiles<2>(32, n);
    CheckDivergent(128, n);
    CheckDivergent(48, n);
  }
  CHECK(cudaDeviceSynchronize());
  std::printf(PROGRAM_NAME ": %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures != 0;
}
