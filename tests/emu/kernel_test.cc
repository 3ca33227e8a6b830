// Real CUDA kernels (tests/emu/kernels/*.cu, compiled by nvcc at build time) run on the emulated device, each
// checked against a host reference on fresh random inputs, outputs poisoned before every launch. Every test
// runs once per fatbin variant (zstd, LZ4, uncompressed, -G debug).
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "kernel_check.h"
#include "kernel_harness.h"
#include "kernel_types.h"

namespace gpupool::emu::test {
namespace {

constexpr uint32_t Blocks(uint64_t n, uint32_t block) { return static_cast<uint32_t>((n + block - 1) / block); }

using KernelsTest = KernelTest;

// ---- basic.cu ----

TEST_P(KernelsTest, VectorAdd) {
  TRACE_SEED();
  const int n = Int(20000, 40000);
  std::vector<float> a(n), b(n), want(n);
  for (int i = 0; i < n; ++i) {
    a[i] = Float(-1000, 1000);
    b[i] = Float(-1000, 1000);
    want[i] = a[i] + b[i];
  }
  uint64_t c = Output<float>(n);
  Launch(Kernel("basic", "vector_add"), {Blocks(n, 256)}, {256}, 0, Upload(a), Upload(b), c, n);
  EXPECT_TRUE(ArraysEqual(Download<float>(c, n), want, "c = a + b"));
}

TEST_P(KernelsTest, Saxpy) {
  TRACE_SEED();
  const int n = Int(20000, 40000);
  const float alpha = Float(-4, 4);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = Float(-100, 100);
    y[i] = Float(-100, 100);
  }
  uint64_t dy = Upload(y);
  Launch(Kernel("basic", "saxpy"), {Blocks(n, 128)}, {128}, 0, n, alpha, Upload(x), dy);
  std::vector<float> got = Download<float>(dy, n);
  // nvcc contracts a * x + y into one fma unless -G turns contraction off: accept either rounding.
  int bad = 0;
  for (int i = 0; i < n && bad < 10; ++i) {
    volatile float product = alpha * x[i];
    float unfused = product + y[i];
    float fused = std::fma(alpha, x[i], y[i]);
    if (!SameBits(got[i], fused) && !SameBits(got[i], unfused)) {
      ++bad;
      ADD_FAILURE() << "y[" << i << "] = " << Show(got[i]) << ", want fma " << Show(fused) << " or " << Show(unfused);
    }
  }
}

TEST_P(KernelsTest, GridStrideLoop) {
  TRACE_SEED();
  const long long n = Int(30000, 50000);
  std::vector<float> x(n), want(n);
  for (long long i = 0; i < n; ++i) {
    x[i] = Float(-1e6, 1e6);
    want[i] = x[i] * 2.0f + static_cast<float>(i & 1023);
  }
  uint64_t y = Output<float>(n);
  uint64_t visits = Zeros<unsigned>(n);
  // 5 blocks of 96 threads: each thread visits ~100 elements.
  Launch(Kernel("basic", "grid_stride"), {5}, {96}, 0, Upload(x), y, visits, n);
  EXPECT_TRUE(ArraysEqual(Download<float>(y, n), want, "y"));
  EXPECT_TRUE(ArraysEqual(Download<unsigned>(visits, n), std::vector<unsigned>(n, 1u), "visits per element"));
}

TEST_P(KernelsTest, SpecialRegisters3D) {
  const Dim3 grid{3, 2, 2}, block{8, 4, 3};
  const uint32_t threads = block.x * block.y * block.z;
  const uint32_t total = grid.x * grid.y * grid.z * threads;
  uint64_t out = Output<unsigned>(8ull * total);
  Launch(Kernel("basic", "index_3d"), grid, block, 0, out);
  std::vector<unsigned> want;
  for (uint32_t bz = 0; bz < grid.z; ++bz)
    for (uint32_t by = 0; by < grid.y; ++by)
      for (uint32_t bx = 0; bx < grid.x; ++bx)
        for (uint32_t tz = 0; tz < block.z; ++tz)
          for (uint32_t ty = 0; ty < block.y; ++ty)
            for (uint32_t tx = 0; tx < block.x; ++tx) {
              uint32_t linear = (tz * block.y + ty) * block.x + tx;
              want.insert(want.end(),
                          {tx | (ty << 10) | (tz << 20), bx | (by << 10) | (bz << 20),
                           block.x | (block.y << 10) | (block.z << 20), grid.x | (grid.y << 10) | (grid.z << 20),
                           linear & 31, linear & 31, 32, linear >> 5});
            }
  EXPECT_TRUE(ArraysEqual(Download<unsigned>(out, 8ull * total), want,
                          "records of (tid, ctaid, ntid, nctaid, lane, %laneid, warpSize, warp)"));
}

TEST_P(KernelsTest, TemplateKernelByMangledName) {
  TRACE_SEED();
  Module* module = LoadKernel("basic");
  const int n = Int(1000, 5000);
  {
    std::vector<double> in(n), want(n);
    const double factor = Double(-3, 3);
    for (int i = 0; i < n; ++i) {
      in[i] = Double(-1e10, 1e10);
      want[i] = in[i] * factor;
    }
    uint64_t out = Output<double>(n);
    Launch(Get(module, "_Z12scale_kernelIdEvPKT_PS0_S0_i"), {Blocks(n, 128)}, {128}, 0, Upload(in), out, factor, n);
    EXPECT_TRUE(ArraysEqual(Download<double>(out, n), want, "scale_kernel<double>"));
  }
  {
    std::vector<int> in(n), want(n);
    const int factor = Int(-1000, 1000);
    for (int i = 0; i < n; ++i) {
      in[i] = Int(-100000, 100000);
      want[i] = in[i] * factor;
    }
    uint64_t out = Output<int>(n);
    Launch(Get(module, "_Z12scale_kernelIiEvPKT_PS0_S0_i"), {Blocks(n, 128)}, {128}, 0, Upload(in), out, factor, n);
    EXPECT_TRUE(ArraysEqual(Download<int>(out, n), want, "scale_kernel<int>"));
  }
  Function* missing = nullptr;
  EXPECT_EQ(device().GetFunction(module, "scale_kernel", &missing).code(), cu::kNotFound)
      << "a C++ kernel is found by its mangled name only";
}

// ---- matmul.cu ----

TEST_P(KernelsTest, TiledMatmulSharedMemory) {
  TRACE_SEED();
  Function* f = Kernel("matmul", "matmul_tiled");
  auto run = [&](int M, int N, int K, bool dyadic) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K << (dyadic ? " dyadic" : " real"));
    std::vector<float> A(size_t(M) * K), B(size_t(K) * N);
    // Dyadic inputs (multiples of 1/4 in [-2, 2]) make every product and partial sum exact, so the result is
    // independent of summation order and fma contraction: compare bit for bit.
    auto gen = [&] { return dyadic ? Int(-8, 8) * 0.25f : Float(-1, 1); };
    for (float& v : A) v = gen();
    for (float& v : B) v = gen();
    uint64_t C = Output<float>(size_t(M) * N);
    Launch(f, {Blocks(N, 16), Blocks(M, 16)}, {16, 16}, 0, Upload(A), Upload(B), C, M, N, K);
    std::vector<float> got = Download<float>(C, size_t(M) * N);
    int bad = 0;
    for (int r = 0; r < M; ++r) {
      for (int c = 0; c < N; ++c) {
        double sum = 0, mag = 0;
        for (int k = 0; k < K; ++k) {
          sum += double(A[r * K + k]) * B[k * N + c];
          mag += std::fabs(double(A[r * K + k]) * B[k * N + c]);
        }
        float g = got[r * N + c];
        bool ok = dyadic ? SameBits(g, float(sum)) : std::fabs(g - sum) <= 1e-6 * K * mag + 1e-30;
        if (!ok && ++bad <= 10) ADD_FAILURE() << "C[" << r << "][" << c << "] = " << Show(g) << ", want " << sum;
      }
    }
  };
  run(Int(33, 80), Int(17, 70), Int(20, 100), /*dyadic=*/true);  // Sizes not multiples of the 16x16 tile.
  run(64, 48, 32, /*dyadic=*/true);
  run(Int(20, 64), Int(20, 64), Int(20, 64), /*dyadic=*/false);
}

// ---- reduce.cu ----

TEST_P(KernelsTest, BlockReduceWithWarpShuffles) {
  TRACE_SEED();
  Module* module = LoadKernel("reduce");
  for (uint32_t block : {256u, 96u}) {
    SCOPED_TRACE(::testing::Message() << "block " << block);
    const int n = Int(30000, 50000);
    const uint32_t grid = 24;
    std::vector<int> in(n);
    for (int& v : in) v = Int(-1000, 1000);
    std::vector<int> want(grid, 0);
    for (int i = 0; i < n; ++i) want[(i % (grid * block)) / block] += in[i];
    uint64_t sums = Output<int>(grid);
    Launch(Get(module, "block_reduce_sum"), {grid}, {block}, 0, Upload(in), sums, n);
    EXPECT_TRUE(ArraysEqual(Download<int>(sums, grid), want, "block sums"));
  }
  {
    const int n = Int(10000, 20000);
    const uint32_t grid = 16, block = 128;
    std::vector<float> in(n);
    for (float& v : in) v = Float(-1e4, 1e4);
    std::vector<float> want(grid, -INFINITY);
    for (int i = 0; i < n; ++i) {
      float& m = want[(i % (grid * block)) / block];
      m = std::max(m, in[i]);
    }
    uint64_t out = Output<float>(grid);
    Launch(Get(module, "block_reduce_max"), {grid}, {block}, 0, Upload(in), out, n);
    EXPECT_TRUE(ArraysEqual(Download<float>(out, grid), want, "block maxima"));
  }
}

TEST_P(KernelsTest, PrefixScanHillisSteele) {
  TRACE_SEED();
  Function* f = Kernel("reduce", "scan_hillis_steele");
  for (uint32_t block : {512u, 96u}) {
    SCOPED_TRACE(::testing::Message() << "block " << block);
    const int n = Int(3000, 6000);
    std::vector<int> in(n), want(n);
    for (int& v : in) v = Int(-100, 100);
    for (int i = 0; i < n; ++i) want[i] = in[i] + (i % block == 0 ? 0 : want[i - 1]);
    uint64_t out = Output<int>(n);
    Launch(f, {Blocks(n, block)}, {block}, 0, Upload(in), out, n);
    EXPECT_TRUE(ArraysEqual(Download<int>(out, n), want, "inclusive scan per block"));
  }
}

TEST_P(KernelsTest, PrefixScanBlelloch) {
  TRACE_SEED();
  const uint32_t block = 256, per_block = 2 * block;
  const int n = Int(2000, 4000);
  const uint32_t grid = Blocks(n, per_block);
  std::vector<int> in(n), want(n), totals(grid, 0);
  for (int& v : in) v = Int(-100, 100);
  for (int i = 0; i < n; ++i) {
    want[i] = i % per_block == 0 ? 0 : want[i - 1] + in[i - 1];
    totals[i / per_block] += in[i];
  }
  uint64_t out = Output<int>(n), dtotals = Output<int>(grid);
  Launch(Kernel("reduce", "scan_blelloch"), {grid}, {block}, 0, Upload(in), out, dtotals, n);
  EXPECT_TRUE(ArraysEqual(Download<int>(out, n), want, "exclusive scan per block"));
  EXPECT_TRUE(ArraysEqual(Download<int>(dtotals, grid), totals, "block totals"));
}

TEST_P(KernelsTest, HistogramSharedThenGlobalAtomics) {
  TRACE_SEED();
  const int n = Int(40000, 65536);
  std::vector<unsigned char> data(n);
  std::vector<unsigned> want(256, 0);
  for (int i = 0; i < n; ++i) {
    // Half the values land in a few bins, so many threads collide on the same counters.
    data[i] = static_cast<unsigned char>(Int(0, 1) ? Int(0, 255) : Int(7, 9));
    ++want[data[i]];
  }
  uint64_t hist = Zeros<unsigned>(256);
  Launch(Kernel("reduce", "histogram256"), {16}, {256}, 0, Upload(data), n, hist);
  EXPECT_TRUE(ArraysEqual(Download<unsigned>(hist, 256), want, "histogram"));
}

// ---- atomics.cu ----

template <typename T>
std::vector<T> Sorted(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST_P(KernelsTest, EveryGlobalAtomic) {
  TRACE_SEED();
  const int n = 4096;
  const unsigned inc_limit = 100, dec_limit = 77;
  std::vector<kt::AtomicInput> in(n);
  for (auto& x : in) {
    x.v = Int(-1000, 1000);
    x.u = U32();
    x.w = U64();
    int b = Int(0, 63);
    x.and32 = b < 32 ? ~(1u << b) : ~0u;
    b = Int(0, 63);
    x.or32 = b < 32 ? 1u << b : 0u;
    x.xor32 = U32();
    b = Int(0, 127);
    x.and64 = b < 64 ? ~(1ull << b) : ~0ull;
    b = Int(0, 127);
    x.or64 = b < 64 ? 1ull << b : 0ull;
    x.xor64 = U64();
  }
  kt::AtomicSlots init{};
  init.add_ull = U64();
  init.sub_i = Int(-1000, 1000);
  init.sub_u = U32();
  init.exch_i = -1;
  init.exch_f = -1.0f;
  init.exch_ull = 0xaaaaaaaaaaaaaaaaull;
  init.min_i = INT_MAX;
  init.max_i = INT_MIN;
  init.min_u = UINT_MAX;
  init.max_u = 0;
  init.min_ll = LLONG_MAX;
  init.max_ll = LLONG_MIN;
  init.min_ull = ULLONG_MAX;
  init.max_ull = 0;
  init.cas_sum = Int(-1000, 1000);
  init.cas_ull = U64();
  for (int w = 0; w < kt::kAtomicWords; ++w) {
    init.and32[w] = ~0u;
    init.xor32[w] = U32();
    init.and64[w] = ~0ull;
    init.xor64[w] = U64();
  }

  uint64_t slots = UploadValue(init);
  uint64_t old = Output<kt::AtomicOld>(n);
  Launch(Kernel("atomics", "atomics_all"), {n / 128}, {128}, 0, slots, Upload(in), old, n, inc_limit, dec_limit);
  const kt::AtomicSlots s = DownloadValue<kt::AtomicSlots>(slots);
  const std::vector<kt::AtomicOld> olds = Download<kt::AtomicOld>(old, n);

  kt::AtomicSlots want = init;
  for (int i = 0; i < n; ++i) {
    const auto& x = in[i];
    want.add_i += x.v;
    want.add_f += static_cast<float>(x.v);  // Integers below 2^24: exact in any order.
    want.add_d += x.v * 0.125;
    want.add_ull += x.w;
    want.sub_i -= x.v;
    want.sub_u -= x.u;
    want.min_i = std::min(want.min_i, x.v);
    want.max_i = std::max(want.max_i, x.v);
    want.min_u = std::min(want.min_u, x.u);
    want.max_u = std::max(want.max_u, x.u);
    want.min_ll = std::min(want.min_ll, static_cast<long long>(x.w));
    want.max_ll = std::max(want.max_ll, static_cast<long long>(x.w));
    want.min_ull = std::min(want.min_ull, x.w);
    want.max_ull = std::max(want.max_ull, x.w);
    want.cas_sum += x.v;
    want.cas_ull += x.w;
    want.cas_d += x.v * 0.25;
    want.add_system += x.v;
    want.generic_add += x.v;
    int w = i % kt::kAtomicWords;
    want.and32[w] &= x.and32;
    want.or32[w] |= x.or32;
    want.xor32[w] ^= x.xor32;
    want.and64[w] &= x.and64;
    want.or64[w] |= x.or64;
    want.xor64[w] ^= x.xor64;
  }
  EXPECT_EQ(s.add_i, want.add_i) << "atomicAdd(int)";
  EXPECT_EQ(s.ticket, unsigned(n)) << "atomicAdd(unsigned) final";
  EXPECT_EQ(s.add_f, want.add_f) << "atomicAdd(float)";
  EXPECT_EQ(s.fticket, float(n)) << "atomicAdd(float) with result final";
  EXPECT_EQ(s.add_d, want.add_d) << "atomicAdd(double)";
  EXPECT_EQ(s.add_ull, want.add_ull) << "atomicAdd(unsigned long long)";
  EXPECT_EQ(s.sub_i, want.sub_i) << "atomicSub(int)";
  EXPECT_EQ(s.sub_u, want.sub_u) << "atomicSub(unsigned)";
  EXPECT_EQ(s.min_i, want.min_i) << "atomicMin(int)";
  EXPECT_EQ(s.max_i, want.max_i) << "atomicMax(int)";
  EXPECT_EQ(s.min_u, want.min_u) << "atomicMin(unsigned)";
  EXPECT_EQ(s.max_u, want.max_u) << "atomicMax(unsigned)";
  EXPECT_EQ(s.min_ll, want.min_ll) << "atomicMin(long long)";
  EXPECT_EQ(s.max_ll, want.max_ll) << "atomicMax(long long)";
  EXPECT_EQ(s.min_ull, want.min_ull) << "atomicMin(unsigned long long)";
  EXPECT_EQ(s.max_ull, want.max_ull) << "atomicMax(unsigned long long)";
  EXPECT_EQ(s.cas_ticket, unsigned(n)) << "atomicCAS loop increments";
  EXPECT_EQ(s.cas_sum, want.cas_sum) << "atomicCAS(int) loop sum";
  EXPECT_EQ(s.cas_ull, want.cas_ull) << "atomicCAS(unsigned long long) loop sum";
  EXPECT_EQ(s.cas_d, want.cas_d) << "double add from 64-bit atomicCAS";
  EXPECT_EQ(s.add_block, n) << "atomicAdd_block";
  EXPECT_EQ(s.add_system, want.add_system) << "atomicAdd_system";
  EXPECT_EQ(s.generic_add, want.generic_add) << "atomicAdd through a generic pointer";
  for (int w = 0; w < kt::kAtomicWords; ++w) {
    SCOPED_TRACE(::testing::Message() << "word " << w);
    EXPECT_EQ(s.and32[w], want.and32[w]) << "atomicAnd(unsigned)";
    EXPECT_EQ(s.or32[w], want.or32[w]) << "atomicOr(unsigned)";
    EXPECT_EQ(s.xor32[w], want.xor32[w]) << "atomicXor(unsigned)";
    EXPECT_EQ(s.and64[w], want.and64[w]) << "atomicAnd(unsigned long long)";
    EXPECT_EQ(s.or64[w], want.or64[w]) << "atomicOr(unsigned long long)";
    EXPECT_EQ(s.xor64[w], want.xor64[w]) << "atomicXor(unsigned long long)";
  }

  // Returned old values.
  std::vector<unsigned> tickets, cas_tickets, incs, decs;
  std::vector<float> ftickets;
  std::vector<int> exchanged;
  for (const auto& o : olds) {
    tickets.push_back(o.ticket);
    cas_tickets.push_back(o.cas_ticket);
    ftickets.push_back(o.fticket);
    exchanged.push_back(o.exch_i);
    incs.push_back(o.inc);
    decs.push_back(o.dec);
  }
  std::vector<unsigned> iota(n);
  std::iota(iota.begin(), iota.end(), 0u);
  std::vector<float> fiota(iota.begin(), iota.end());
  EXPECT_TRUE(ArraysEqual(Sorted(tickets), iota, "atomicAdd(1u) old values, sorted"));
  EXPECT_TRUE(ArraysEqual(Sorted(cas_tickets), iota, "atomicCAS increment old values, sorted"));
  EXPECT_TRUE(ArraysEqual(Sorted(ftickets), fiota, "atomicAdd(1.0f) old values, sorted"));
  // atomicExch: the old values plus the final value are the initial value plus every thread's id.
  exchanged.push_back(s.exch_i);
  std::vector<int> ids(n + 1);
  std::iota(ids.begin(), ids.end(), -1);
  EXPECT_TRUE(ArraysEqual(Sorted(exchanged), ids, "atomicExch old values + final, sorted"));
  EXPECT_TRUE(s.exch_f >= 0 && s.exch_f < n && s.exch_f == std::floor(s.exch_f)) << "atomicExch(float): " << s.exch_f;
  EXPECT_TRUE(std::any_of(in.begin(), in.end(), [&](const kt::AtomicInput& x) { return x.w == s.exch_ull; }))
      << "atomicExch(unsigned long long) left a value no thread wrote";
  // atomicInc wraps to 0 past the limit; atomicDec wraps to the limit at 0: whatever the order, the sequence
  // of old values is the same.
  std::vector<unsigned> want_inc, want_dec;
  unsigned inc = 0, dec = 0;
  for (int i = 0; i < n; ++i) {
    want_inc.push_back(inc);
    inc = inc >= inc_limit ? 0 : inc + 1;
    want_dec.push_back(dec);
    dec = (dec == 0 || dec > dec_limit) ? dec_limit : dec - 1;
  }
  EXPECT_EQ(s.inc, inc) << "atomicInc final";
  EXPECT_EQ(s.dec, dec) << "atomicDec final";
  EXPECT_TRUE(ArraysEqual(Sorted(incs), Sorted(want_inc), "atomicInc old values, sorted"));
  EXPECT_TRUE(ArraysEqual(Sorted(decs), Sorted(want_dec), "atomicDec old values, sorted"));
}

TEST_P(KernelsTest, SharedMemoryAtomics) {
  TRACE_SEED();
  const uint32_t grid = 8, block = 256;
  std::vector<kt::AtomicInput> in(grid * block);
  for (auto& x : in) {
    x.v = Int(-100000, 100000);
    x.or32 = 1u << Int(0, 31);
    int b = Int(0, 40);
    x.and32 = b < 32 ? ~(1u << b) : ~0u;
    x.xor32 = U32();
  }
  uint64_t out = Output<kt::SharedAtomicResult>(grid);
  Launch(Kernel("atomics", "atomics_shared"), {grid}, {block}, 0, Upload(in), out);
  std::vector<kt::SharedAtomicResult> got = Download<kt::SharedAtomicResult>(out, grid);
  for (uint32_t b = 0; b < grid; ++b) {
    SCOPED_TRACE(::testing::Message() << "block " << b);
    int sum = 0, mn = INT_MAX, mx = INT_MIN;
    unsigned orb = 0, andb = ~0u, xorb = 0;
    for (uint32_t t = 0; t < block; ++t) {
      const auto& x = in[b * block + t];
      sum += x.v;
      mn = std::min(mn, x.v);
      mx = std::max(mx, x.v);
      orb |= x.or32;
      andb &= x.and32;
      xorb ^= x.xor32;
    }
    EXPECT_EQ(got[b].sum, sum);
    EXPECT_EQ(got[b].min, mn);
    EXPECT_EQ(got[b].max, mx);
    EXPECT_EQ(got[b].or_bits, orb);
    EXPECT_EQ(got[b].and_bits, andb);
    EXPECT_EQ(got[b].xor_bits, xorb);
    EXPECT_EQ(got[b].ticket_total, block * (block - 1) / 2) << "atomicInc tickets 0..block-1";
    EXPECT_EQ(got[b].cas_count, block);
    EXPECT_GE(got[b].exch_last, 0);
    EXPECT_LT(got[b].exch_last, int(block));
    EXPECT_EQ(got[b].generic_add, int(block)) << "generic atomicAdd into shared memory";
  }
}

// ---- warp.cu ----

TEST_P(KernelsTest, WarpVoteBallotActiveMask) {
  TRACE_SEED();
  const uint32_t grid = 4, block = 48;  // The second warp of each block is half full.
  const int n = grid * block;
  std::vector<int> in(n);
  for (int& v : in) v = Int(-100, 100);
  for (int t = 0; t < 32; ++t) in[1 * block + t] = Int(1, 100);    // Block 1, warp 0: all true.
  for (int t = 32; t < 48; ++t) in[2 * block + t] = Int(-100, 0);  // Block 2, warp 1: all false.
  uint64_t out = Output<unsigned>(8ull * n);
  Launch(Kernel("warp", "warp_vote"), {grid}, {block}, 0, Upload(in), out, n);
  std::vector<unsigned> got = Download<unsigned>(out, 8ull * n);
  int bad = 0;
  for (int i = 0; i < n && bad < 10; ++i) {
    int tid = i % block, lane = tid & 31, warp_base = tid & ~31;
    int lanes = std::min(32, int(block) - warp_base);
    unsigned full = lanes == 32 ? ~0u : (1u << lanes) - 1;
    unsigned ballot = 0, odd = 0;
    for (int l = 0; l < lanes; ++l) {
      int v = in[i - lane + l];
      if (v > 0) ballot |= 1u << l;
      if (v & 1) odd |= 1u << l;
    }
    const unsigned* r = &got[8ull * i];
    unsigned same_parity = (in[i] & 1) ? odd : (full & ~odd);
    std::string where = "thread " + std::to_string(i);
    bool ok = true;
    ok &= r[0] == ballot;
    ok &= (r[1] != 0) == (ballot != 0);
    ok &= (r[2] != 0) == (ballot == full);
    ok &= r[3] == unsigned(std::popcount(ballot));
    ok &= r[4] == full;
    ok &= (r[5] & ~same_parity) == 0 && ((r[5] >> lane) & 1) == 1;  // Only lanes on the same side of the branch.
    ok &= r[6] == (lane < 16 ? ballot & 0xffffu : 0u);
    ok &= r[7] == full;
    if (!ok) {
      ++bad;
      ADD_FAILURE() << where << ": got ballot " << std::hex << r[0] << " any " << r[1] << " all " << r[2] << " popc "
                    << std::dec << r[3] << std::hex << " activemask " << r[4] << " divergent " << r[5] << " half "
                    << r[6] << "; want ballot " << ballot << " activemask " << full << " divergent within "
                    << same_parity;
    }
  }
}

TEST_P(KernelsTest, WarpShuffles) {
  TRACE_SEED();
  const uint32_t grid = 3, block = 64;
  const int n = grid * block;
  std::vector<int> in(n);
  std::vector<double> din(n);
  for (int& v : in) v = Int(-1000000, 1000000);
  for (double& d : din) d = Double(-1e300, 1e300);
  uint64_t out = Output<int>(10ull * n), dout = Output<double>(2ull * n);
  Launch(Kernel("warp", "warp_shuffle"), {grid}, {block}, 0, Upload(in), Upload(din), out, dout);
  std::vector<int> want;
  std::vector<double> dwant;
  for (int i = 0; i < n; ++i) {
    int lane = i & 31, base = i - lane;
    auto at = [&](int l) { return in[base + l]; };
    auto in_group = [&](int width, int src_in_group) { return in[base + (lane & ~(width - 1)) + src_in_group]; };
    int down2 = lane + 2 < 32 ? at(lane + 2) : at(lane);
    want.insert(want.end(),
                {at((lane * 7 + 3) & 31), lane >= 5 ? at(lane - 5) : at(lane), lane + 3 < 32 ? at(lane + 3) : at(lane),
                 at(lane ^ 9), in_group(8, (lane + 3) & 7), (lane & 15) >= 2 ? at(lane - 2) : at(lane),
                 (lane & 3) + 1 < 4 ? at(lane + 1) : at(lane), at(0), at((lane + 1) & 31),
                 down2 ^ static_cast<int>(static_cast<unsigned>(down2) * 3u + 1u)});
    dwant.push_back(din[base + (lane ^ 1)]);
    dwant.push_back(lane == 31 ? din[base] : din[i]);
  }
  EXPECT_TRUE(ArraysEqual(Download<int>(out, 10ull * n), want,
                          "records (idx, up 5, down 3, xor 9, idx w8, up w16, down w4, bcast, syncwarp, 64-bit down)"));
  EXPECT_TRUE(ArraysEqual(Download<double>(dout, 2ull * n), dwant, "double shuffles (xor 1, up 31)"));
}

// What a shuffle gives lane `lane` of a warp of `lanes` threads holding `values` (lane 0 first), as the CUDA
// programming guide describes the source lane of each mode. A source lane past the end of a partial warp has no
// thread: it reads as zero, as on NVIDIA GPUs (NVIDIA's reduction samples rely on it).
enum class Shfl { kIdx, kUp, kDown, kXor };
template <typename T>
T ShuffleReference(Shfl mode, int lane, int b, int width, int lanes, const T* values) {
  const int first = lane & ~(width - 1), last = first + width - 1;
  int j = lane;
  switch (mode) {
    case Shfl::kIdx: j = first + (b % width); break;
    case Shfl::kUp: j = lane - first >= b ? lane - b : lane; break;
    case Shfl::kDown: j = lane + b <= last ? lane + b : lane; break;
    case Shfl::kXor: j = (lane ^ b) <= last ? lane ^ b : lane; break;  // Earlier groups may be read, later not.
  }
  return j < lanes ? values[j] : T{};
}

TEST_P(KernelsTest, WarpShufflesInPartialWarpsReadMissingLanesAsZero) {
  TRACE_SEED();
  constexpr int kRecords = 51;
  for (uint32_t block : {1u, 2u, 3u, 4u, 5u, 8u, 13u, 16u, 17u, 31u, 32u, 33u, 48u, 103u}) {
    const uint32_t grid = 2;
    const int n = static_cast<int>(grid * block);
    std::vector<int> in(n);
    for (int& v : in) v = Int(-1000000, 1000000);
    uint64_t out = Output<int>(kRecords * static_cast<size_t>(n));
    Launch(Kernel("warp", "warp_shuffle_partial"), {grid}, {block}, 0, Upload(in), out);
    std::vector<int> want;
    for (int i = 0; i < n; ++i) {
      int tid = i % static_cast<int>(block), lane = tid & 31, warp_first = i - lane;
      int lanes = std::min(32, static_cast<int>(block) - (tid & ~31));
      const int* v = &in[warp_first];
      for (int width = 32; width >= 1; width /= 2) {
        int half = width > 1 ? width / 2 : 1;
        for (auto [mode, b] : {std::pair{Shfl::kIdx, lane + 1}, {Shfl::kIdx, 0}, {Shfl::kUp, 1}, {Shfl::kUp, half},
                               {Shfl::kDown, 1}, {Shfl::kDown, half}, {Shfl::kXor, 1}, {Shfl::kXor, half}}) {
          want.push_back(ShuffleReference(mode, lane, b, width, lanes, v));
        }
      }
      std::vector<int64_t> wide(lanes);
      std::vector<int> twice_plus_one(lanes);
      for (int l = 0; l < lanes; ++l) {
        wide[l] = static_cast<int64_t>((static_cast<uint64_t>(v[l]) << 32) | static_cast<uint32_t>(v[l] * 3 + 1));
        twice_plus_one[l] = 2 * v[l] + 1;
      }
      int64_t down16 = ShuffleReference(Shfl::kDown, lane, 16, 32, lanes, wide.data());
      want.push_back(static_cast<int>(down16 >> 32));
      want.push_back(static_cast<int>(down16));
      want.push_back(ShuffleReference(Shfl::kXor, lane, 16, 32, lanes, twice_plus_one.data()));
    }
    EXPECT_TRUE(ArraysEqual(Download<int>(out, kRecords * static_cast<size_t>(n)), want,
                            "block of " + std::to_string(block) +
                                ": per width 32..1 (idx lane+1, idx 0, up 1, up w/2, down 1, down w/2, xor 1, "
                                "xor w/2), 64-bit down 16 (hi, lo), double xor 16"));
  }
}

// A warp spinning on a flag that another warp of its block sets sees it: a warp's turn ends after a few loop
// iterations, as a GPU interleaves a block's warps. (Before, the first warp ran its whole bounded spin alone.)
TEST_P(KernelsTest, WarpsOfABlockTakeTurnsSoASpinningWarpSeesAnotherWarpsFlag) {
  for (uint32_t block : {64u, 96u, 256u, 40u}) {
    uint64_t out = Output<int>(2 * block);
    Launch(Kernel("warp", "warp_handoff"), {1}, {block}, 0, out, 1 << 20);
    std::vector<int> got = Download<int>(out, 2 * block);
    const uint32_t last = (block - 1) / 32;
    std::vector<int> want(2 * block);
    for (uint32_t t = 0; t < block; ++t) {
      const uint32_t warp = t / 32;
      want[2 * t] = 1;
      want[2 * t + 1] = warp == 0 ? 5678 : warp == last ? 1234 : 0;
    }
    EXPECT_TRUE(ArraysEqual(got, want, "block of " + std::to_string(block) + ": (saw the flag, the other warp's value)"));
  }
}

// A generic load and store whose lanes address shared memory (even lanes) and global memory (odd lanes) at once.
TEST_P(KernelsTest, GenericAccessesOfOneWarpInstructionReachSharedAndGlobalMemory) {
  TRACE_SEED();
  const int n = 256;
  std::vector<int> in(n);
  for (int& v : in) v = Int(-100000, 100000);
  uint64_t out = Output<int>(n), scratch = Output<int>(n);
  Launch(Kernel("warp", "generic_mixed"), {1}, {n}, 0, Upload(in), out, scratch);
  std::vector<int> want(n);
  for (int t = 0; t < n; ++t) want[t] = in[t ^ 2] * ((t & 1) ? 5 : 3) + 1;
  EXPECT_TRUE(ArraysEqual(Download<int>(out, n), want, "generic load of a neighbour's value + 1"));
}

// Lanes in one function at one instruction whose frames start at different registers (reached through callers of
// different sizes) compute together correctly.
TEST_P(KernelsTest, LanesWhoseFramesStartAtDifferentRegistersRunTogether) {
  TRACE_SEED();
  const uint32_t block = 64, grid = 3, n = block * grid;
  std::vector<uint32_t> in(n);
  for (uint32_t& v : in) v = static_cast<uint32_t>(Int(0, 1 << 30));
  uint64_t out = Output<uint32_t>(n);
  Launch(Kernel("warp", "uneven_frames"), {grid}, {block}, 0, Upload(in), out);
  std::vector<uint32_t> want(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t x = in[i];
    uint32_t acc = x;
    for (uint32_t k = 0; k < 5; ++k) acc = acc * 3 + (k ^ x);
    want[i] = (i % block) & 1 ? acc + x * 7 + (x ^ 0x55) + (x + 11) + x * x + (x - 3) : acc + 1;
  }
  EXPECT_TRUE(ArraysEqual(Download<uint32_t>(out, n), want, "mix() through callers of two sizes"));
}

// NVIDIA's multi-pass reduction: each pass sums pairs per thread, then in shared memory, then in one warp by
// thread_block_tile<32>::shfl_down; the sample picks the next power of two of n/2 threads per block below 512
// elements, so the last passes run blocks of 1, 2 and 4 threads.
TEST_P(KernelsTest, TileReductionMultiPassDownToOneThreadPerBlock) {
  TRACE_SEED();
  for (int n : {Int(1, 8), Int(9, 600), Int(20000, 60000)}) {
    std::vector<int> in(n);
    for (int& v : in) v = Int(-1000, 1000);
    const int64_t want = std::accumulate(in.begin(), in.end(), int64_t{0});
    uint64_t data = Upload(in);
    int passes = 0;
    std::vector<uint32_t> threads_seen;
    for (uint32_t left = static_cast<uint32_t>(n); left > 1 || passes == 0; ++passes) {
      uint32_t threads = left < 2 * 256 ? std::bit_ceil((left + 1) / 2) : 256;
      uint32_t blocks = (left + threads * 2 - 1) / (threads * 2);
      uint64_t sums = Output<int>(blocks);
      Launch(Kernel("warp", "tile_reduce"), {blocks}, {threads}, threads * sizeof(int), data, sums, left);
      threads_seen.push_back(threads);
      data = sums;
      left = blocks;
    }
    std::vector<int> got = Download<int>(data, 1);
    EXPECT_EQ(got[0], want) << n << " elements, threads per block in each pass: "
                            << ::testing::PrintToString(threads_seen);
  }
  // One pass by blocks of 1, 2 and 4 threads, every block's sum checked.
  for (uint32_t threads : {1u, 2u, 4u}) {
    const uint32_t blocks = 37;
    std::vector<int> in(blocks * threads * 2);
    for (int& v : in) v = Int(-1000, 1000);
    uint64_t sums = Output<int>(blocks);
    Launch(Kernel("warp", "tile_reduce"), {blocks}, {threads}, threads * sizeof(int), Upload(in), sums,
           static_cast<unsigned>(in.size()));
    std::vector<int> want(blocks);
    for (uint32_t b = 0; b < blocks; ++b) {
      want[b] = std::accumulate(in.begin() + b * threads * 2, in.begin() + (b + 1) * threads * 2, 0);
    }
    EXPECT_TRUE(ArraysEqual(Download<int>(sums, blocks), want, std::to_string(threads) + " threads per block"));
  }
}

// ---- params.cu ----

TEST_P(KernelsTest, StructsAndScalarsByValue) {
  TRACE_SEED();
  kt::Mixed m{};
  m.c = static_cast<char>(Int(-100, 100));
  m.d = Double(-1e200, 1e200);
  m.f = Float(-1e30f, 1e30f);
  m.i = Int(INT_MIN, INT_MAX);
  m.s = static_cast<short>(Int(-32768, 32767));
  for (auto& t : m.tag) t = static_cast<unsigned char>(Int(0, 255));
  m.ll = static_cast<long long>(U64());
  for (auto& v : m.v) v = Float(-1, 1);
  kt::Vec2 p{Float(-5, 5), Float(-5, 5)};
  double scale = Double(-2, 2);
  char c = static_cast<char>(Int(-128, 127));
  kt::Grid2D g{Int(1, 1000), Int(1, 1000), {Float(-9, 9), Float(-9, 9)}, {Float(0, 1), Float(0, 1)}};
  bool flag = Int(0, 1) == 1;
  unsigned short us = static_cast<unsigned short>(Int(0, 65535));
  uint64_t outf = Output<float>(10), outd = Output<double>(3), outl = Output<long long>(12);
  Launch(Kernel("params", "struct_params"), {1}, {32}, 0, m, p, scale, c, g, flag, us, outf, outd, outl);
  EXPECT_TRUE(ArraysEqual(Download<double>(outd, 3), {m.d, m.d * scale, scale}, "doubles"));
  EXPECT_TRUE(ArraysEqual(Download<float>(outf, 10),
                          {m.f, m.v[0], m.v[1], m.v[2], p.x, p.y, g.origin.x, g.origin.y, g.step.x, g.step.y},
                          "floats"));
  EXPECT_TRUE(ArraysEqual(Download<long long>(outl, 12),
                          {m.c, m.i, m.s, m.tag[0], m.tag[1], m.tag[2], m.ll, c, flag ? 1 : 0, us, g.width, g.height},
                          "integers"));
}

TEST_P(KernelsTest, Struct2DLaunch) {
  TRACE_SEED();
  // Dyadic origin and power-of-two steps: origin + x * step is exact, with or without fma.
  kt::Grid2D g{Int(40, 90), Int(20, 50), {Int(-40, 40) * 0.25f, Int(-40, 40) * 0.25f}, {0.5f, 0.25f}};
  const size_t points = size_t(g.width) * g.height;
  uint64_t out = Output<float>(2 * points);
  Launch(Kernel("params", "grid_points"), {Blocks(g.width, 16), Blocks(g.height, 8)}, {16, 8}, 0, g, out);
  std::vector<float> want;
  for (int y = 0; y < g.height; ++y) {
    for (int x = 0; x < g.width; ++x) {
      want.push_back(g.origin.x + x * g.step.x);
      want.push_back(g.origin.y + y * g.step.y);
    }
  }
  EXPECT_TRUE(ArraysEqual(Download<float>(out, 2 * points), want, "grid points"));
}

TEST_P(KernelsTest, PointerInsideStruct) {
  TRACE_SEED();
  const int n = Int(500, 3000);
  uint64_t data = Output<float>(n + 64);  // Elements past n must stay poisoned.
  kt::Span span{reinterpret_cast<float*>(data), n};
  const float value = Int(-1000, 1000) * 0.5f;
  Launch(Kernel("params", "span_fill"), {Blocks(n, 128)}, {128}, 0, span, value);
  std::vector<float> got = Download<float>(data, n + 64);
  std::vector<float> want(n + 64);
  for (int i = 0; i < n; ++i) want[i] = value + float(i);
  uint32_t poison = 0xffffffffu;
  for (int i = n; i < n + 64; ++i) std::memcpy(&want[i], &poison, 4);
  EXPECT_TRUE(ArraysEqual(got, want, "span"));
}

TEST_P(KernelsTest, LargeStructParameter) {
  TRACE_SEED();
  kt::Poly p{};
  p.degree = Int(0, 6);
  for (auto& c : p.c) c = static_cast<float>(Int(-8, 8));
  const int n = Int(1000, 4000);
  std::vector<float> x(n), want(n);
  for (int i = 0; i < n; ++i) {
    x[i] = Int(-8, 8) * 0.25f;
    // Exact: dyadic values with few bits, whatever the fma contraction.
    double acc = p.c[p.degree];
    for (int k = p.degree - 1; k >= 0; --k) acc = acc * x[i] + p.c[k];
    want[i] = static_cast<float>(acc);
  }
  uint64_t y = Output<float>(n);
  Launch(Kernel("params", "poly_eval"), {Blocks(n, 256)}, {256}, 0, p, Upload(x), y, n);
  EXPECT_TRUE(ArraysEqual(Download<float>(y, n), want, "polynomial"));
}

TEST_P(KernelsTest, DynamicSharedMemory) {
  TRACE_SEED();
  Module* module = LoadKernel("params");
  {
    const uint32_t block = 128;
    const int n = Int(900, 1100);
    std::vector<float> in(n), want(n);
    for (float& v : in) v = Float(-1, 1);
    for (int i = 0; i < n; ++i) {
      int base = i - i % block, r = base + int(block) - 1 - (i - base);
      want[i] = r < n ? in[r] : -1.0f;
    }
    uint64_t out = Output<float>(n);
    Launch(Get(module, "dyn_shared_reverse"), {Blocks(n, block)}, {block}, 8 * block, Upload(in), out, n);
    EXPECT_TRUE(ArraysEqual(Download<float>(out, n), want, "reversed blocks"));
  }
  {
    const uint32_t block = 96, grid = 2;
    uint64_t out = Output<int>(grid * block);
    Launch(Get(module, "static_and_dynamic_shared"), {grid}, {block}, 4 * block, out);
    std::vector<int> want;
    for (uint32_t b = 0; b < grid; ++b)
      for (uint32_t t = 0; t < block; ++t) want.push_back(int(t % 64) * 3 * 100000 + int(block - 1 - t) * 5 + 1);
    EXPECT_TRUE(ArraysEqual(Download<int>(out, grid * block), want, "static + dynamic shared"));
  }
}

// ---- recursion.cu ----

unsigned HostFrames(int depth, unsigned seed) {
  unsigned arr[8];
  for (int k = 0; k < 8; ++k) arr[k] = seed * (k + 1) + depth;
  unsigned below = depth > 0 ? HostFrames(depth - 1, seed + arr[depth & 7]) : 0u;
  return below * 31u + arr[seed & 7];
}

TEST_P(KernelsTest, RecursiveDeviceFunctions) {
  TRACE_SEED();
  const int count = 256;
  std::vector<unsigned> in(count);
  for (unsigned& v : in) v = U32();
  uint64_t fact = Output<unsigned long long>(count), fib = Output<int>(count), parity = Output<int>(count),
           frames = Output<unsigned>(count);
  Launch(Kernel("recursion", "recursion"), {Blocks(count, 64)}, {64}, 0, Upload(in), fact, fib, parity, frames, count);
  std::vector<unsigned long long> want_fact;
  std::vector<int> want_fib, want_parity;
  std::vector<unsigned> want_frames;
  std::vector<int> fibs = {0, 1};
  while (fibs.size() < 17) fibs.push_back(fibs[fibs.size() - 1] + fibs[fibs.size() - 2]);
  for (unsigned v : in) {
    unsigned long long f = 1;
    for (unsigned k = 2; k <= v % 21; ++k) f *= k;
    want_fact.push_back(f);
    want_fib.push_back(fibs[v % 17]);
    want_parity.push_back((v % 64) & 1);
    want_frames.push_back(HostFrames(v % 12, v));
  }
  EXPECT_TRUE(ArraysEqual(Download<unsigned long long>(fact, count), want_fact, "factorial"));
  EXPECT_TRUE(ArraysEqual(Download<int>(fib, count), want_fib, "fibonacci"));
  EXPECT_TRUE(ArraysEqual(Download<int>(parity, count), want_parity, "mutual recursion"));
  EXPECT_TRUE(ArraysEqual(Download<unsigned>(frames, count), want_frames, "local arrays across recursive calls"));
}

// ---- printf.cu ----

std::vector<std::string> SortedLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

TEST_P(KernelsTest, DevicePrintf) {
  TRACE_SEED();
  const int base = Int(0, 100);
  const uint32_t grid = 2, block = 8;
  TakePrintf();
  Launch(Kernel("printf", "printf_kernel"), {grid}, {block}, 0, base);
  std::string expected;
  for (uint32_t b = 0; b < grid; ++b) {
    for (int t = 0; t < int(block); ++t) {
      float f = float(t) * 0.25f - 1.0f;
      unsigned hex = 0xdeadbeefu ^ unsigned(t * 0x01010101);
      long long big = (long long)(t + base) * -123456789012ll;
      expected +=
          Format("t=%d b=%u f=%f s=%s x=%x ll=%lld\n", t - 4 + base, b, double(f), (t & 1) ? "odd" : "even", hex, big);
    }
    expected += Format("block %d of %d: %5d|%-6s|%.3f|%e|%c|%%|%llu|%08x|%g\n", int(b), int(grid), base, "ab", 3.14159,
                       -0.000123, 'Z', 18446744073709551615ull, 0xabcu, 1.5e-7);
  }
  expected += "plain line without arguments\n";
  std::string printed = TakePrintf();
  EXPECT_EQ(SortedLines(printed), SortedLines(expected)) << "device printed:\n" << printed;
  EXPECT_TRUE(printed.empty() || printed.back() == '\n');
}

// ---- int64.cu ----

TEST_P(KernelsTest, Int64Arithmetic) {
  TRACE_SEED();
  const int n = 4096;
  auto gen = [&]() -> long long {
    switch (Int(0, 5)) {
      case 0: return Int(-1000, 1000);
      case 1: return static_cast<int>(U32());
      case 2: return static_cast<long long>(U64() >> Int(0, 63)) * (Int(0, 1) ? 1 : -1);
      case 3: {
        static const long long kEdges[] = {
            0, 1, -1, LLONG_MIN, LLONG_MAX, 1ll << 32, (1ll << 32) - 1, -(1ll << 32), 0x7fffffff, -0x80000000ll};
        return kEdges[Int(0, 9)];
      }
      default: return static_cast<long long>(U64());
    }
  };
  std::vector<long long> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = gen();
    do b[i] = gen();
    while (b[i] == 0 || (a[i] == LLONG_MIN && b[i] == -1));
  }
  constexpr int kResults = 20;
  uint64_t out = Output<unsigned long long>(size_t(kResults) * n);
  Launch(Kernel("int64", "int64_ops"), {Blocks(n, 128)}, {128}, 0, Upload(a), Upload(b), out, n);
  std::vector<unsigned long long> want;
  for (int i = 0; i < n; ++i) {
    long long x = a[i], y = b[i];
    unsigned long long ux = x, uy = y;
    unsigned s = unsigned(y) & 63;
    auto ffs = [](unsigned long long v) {
      return v == 0 ? 0ull : static_cast<unsigned long long>(std::countr_zero(v) + 1);
    };
    auto brev = [](unsigned long long v) {
      unsigned long long r = 0;
      for (int k = 0; k < 64; ++k) r |= ((v >> k) & 1) << (63 - k);
      return r;
    };
    want.insert(want.end(),
                {ux + uy,
                 ux - uy,
                 ux * uy,
                 static_cast<unsigned long long>(x / y),
                 static_cast<unsigned long long>(x % y),
                 ux / uy,
                 ux % uy,
                 ux << s,
                 static_cast<unsigned long long>(x >> s),
                 ux >> s,
                 static_cast<unsigned long long>(static_cast<long long>((__int128)x * y >> 64)),
                 static_cast<unsigned long long>((unsigned __int128)ux * uy >> 64),
                 static_cast<unsigned long long>(std::countl_zero(ux)),
                 static_cast<unsigned long long>(std::popcount(ux)),
                 brev(ux),
                 ffs(ux),
                 static_cast<unsigned long long>(std::min(x, y)),
                 std::max(ux, uy),
                 static_cast<unsigned long long>(static_cast<long long>(static_cast<int>(x)) * static_cast<int>(y)),
                 static_cast<unsigned long long>(static_cast<unsigned>(x)) * static_cast<unsigned>(y)});
  }
  std::vector<unsigned long long> got = Download<unsigned long long>(out, size_t(kResults) * n);
  static const char* kNames[kResults] = {"add",       "sub",        "mul",     "div s64",      "rem s64",
                                         "div u64",   "rem u64",    "shl",     "shr s64",      "shr u64",
                                         "__mul64hi", "__umul64hi", "__clzll", "__popcll",     "__brevll",
                                         "__ffsll",   "min s64",    "max u64", "mul.wide.s32", "mul.wide.u32"};
  int bad = 0;
  for (int i = 0; i < n && bad < 20; ++i) {
    for (int k = 0; k < kResults; ++k) {
      if (got[size_t(i) * kResults + k] != want[size_t(i) * kResults + k] && ++bad <= 20) {
        ADD_FAILURE() << kNames[k] << "(" << a[i] << ", " << b[i] << ") = " << got[size_t(i) * kResults + k]
                      << ", want " << want[size_t(i) * kResults + k];
      }
    }
  }
}

// ---- bits.cu ----

uint32_t HostBfe(uint32_t a, uint32_t pos, uint32_t len, bool is_signed) {
  // PTX ISA, bfe: bits beyond the source are filled with the sign bit (signed) or zeros.
  const uint32_t msb = 31;
  pos &= 0xff;
  len &= 0xff;
  uint32_t sbit = (!is_signed || len == 0) ? 0 : (a >> std::min(pos + len - 1, msb)) & 1;
  uint32_t d = 0;
  for (uint32_t i = 0; i <= msb; ++i) {
    uint32_t bit = (i < len && pos + i <= msb) ? (a >> (pos + i)) & 1 : sbit;
    d |= bit << i;
  }
  return d;
}

uint32_t HostBfi(uint32_t a, uint32_t b, uint32_t pos, uint32_t len) {
  uint32_t f = b;
  pos &= 0xff;
  len &= 0xff;
  for (uint32_t i = 0; i < len && pos + i <= 31; ++i) f = (f & ~(1u << (pos + i))) | (((a >> i) & 1) << (pos + i));
  return f;
}

uint32_t HostPrmt(uint32_t a, uint32_t b, uint32_t c) {
  uint64_t bytes = (uint64_t(b) << 32) | a;
  uint32_t d = 0;
  for (int n = 0; n < 4; ++n) {
    uint32_t sel = (c >> (4 * n)) & 0xf;
    uint32_t byte = (bytes >> (8 * (sel & 7))) & 0xff;
    if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
    d |= byte << (8 * n);
  }
  return d;
}

TEST_P(KernelsTest, BitManipulation) {
  TRACE_SEED();
  const int n = 4096;
  auto gen = [&]() -> uint32_t {
    switch (Int(0, 4)) {
      case 0: return 0;
      case 1: return ~0u;
      case 2: return 1u << Int(0, 31);
      case 3: return U32() >> Int(0, 31);
      default: return U32();
    }
  };
  std::vector<uint32_t> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = gen();
    b[i] = gen();
    c[i] = Int(0, 3) ? U32() : uint32_t(Int(0, 70));
  }
  constexpr int kResults = 24;
  uint64_t out = Output<uint32_t>(size_t(kResults) * n);
  Launch(Kernel("bits", "bit_ops"), {Blocks(n, 128)}, {128}, 0, Upload(a), Upload(b), Upload(c), out, n);
  std::vector<uint32_t> want;
  for (int i = 0; i < n; ++i) {
    uint32_t x = a[i], y = b[i], z = c[i];
    uint64_t hilo = (uint64_t(y) << 32) | x;
    uint32_t brev = 0;
    for (int k = 0; k < 32; ++k) brev |= ((x >> k) & 1) << (31 - k);
    uint32_t sel = z & 0x7777;
    uint32_t perm = 0;
    for (int k = 0; k < 4; ++k) perm |= uint32_t((hilo >> (8 * ((sel >> (4 * k)) & 7))) & 0xff) << (8 * k);
    uint32_t lc = std::min<uint32_t>(z & 63, 32), rc = lc;
    int32_t sa = int32_t(x << 25) >> 25, sb = int32_t(x << 12) >> 19, sc = int32_t(x) >> 20;
    uint32_t inserted = (x & ~(0x7ffu << 5)) | ((y & 0x7ffu) << 5);
    int32_t ix = int32_t(x), iy = int32_t(y);
    uint32_t sad = ix < iy ? uint32_t(iy) - uint32_t(ix) : uint32_t(ix) - uint32_t(iy);
    uint32_t s = z & 31;
    want.insert(want.end(), {brev,
                             uint32_t(std::countl_zero(x)),
                             x == 0 ? 0u : uint32_t(std::countr_zero(x) + 1),
                             uint32_t(std::popcount(x)),
                             perm,
                             uint32_t((hilo << (z & 31)) >> 32),
                             uint32_t((lc == 32 ? hilo << 32 : hilo << lc) >> 32),
                             uint32_t(hilo >> (z & 31)),
                             uint32_t(rc == 32 ? hilo >> 32 : hilo >> rc),
                             (x & 31) + ((x >> 5) & 0x7ff) * 3u + (x >> 16) * 7u,
                             uint32_t((sa * 5) ^ (sb * 3) ^ sc),
                             inserted,
                             HostBfe(x, y & 31, z % 33, false),
                             HostBfe(x, y & 31, z % 33, true),
                             HostBfi(y, x, z & 31, (z >> 8) % 33),
                             HostPrmt(x, y, z),
                             (x > y ? x - y : y - x) + z,
                             sad + z,
                             uint32_t((uint64_t(x) + y) >> 1),
                             uint32_t((uint64_t(x) + y + 1) >> 1),
                             uint32_t((uint64_t(x) * y) >> 32),
                             uint32_t((int64_t(ix) * iy) >> 32),
                             (x & 0xffffff) * (y & 0xffffff),
                             (x << s) | (x >> ((32 - s) & 31))});
  }
  std::vector<uint32_t> got = Download<uint32_t>(out, size_t(kResults) * n);
  static const char* kNames[kResults] = {"__brev",
                                         "__clz",
                                         "__ffs",
                                         "__popc",
                                         "__byte_perm",
                                         "__funnelshift_l",
                                         "__funnelshift_lc",
                                         "__funnelshift_r",
                                         "__funnelshift_rc",
                                         "unsigned bit fields",
                                         "signed bit fields",
                                         "bit field insert",
                                         "bfe.u32",
                                         "bfe.s32",
                                         "bfi.b32",
                                         "prmt.b32",
                                         "__usad",
                                         "__sad",
                                         "__uhadd",
                                         "__urhadd",
                                         "__umulhi",
                                         "__mulhi",
                                         "__umul24",
                                         "rotate"};
  int bad = 0;
  for (int i = 0; i < n && bad < 20; ++i) {
    for (int k = 0; k < kResults; ++k) {
      uint32_t g = got[size_t(i) * kResults + k], w = want[size_t(i) * kResults + k];
      if (g != w && ++bad <= 20) {
        ADD_FAILURE() << kNames[k] << "(0x" << std::hex << a[i] << ", 0x" << b[i] << ", 0x" << c[i] << ") = 0x" << g
                      << ", want 0x" << w;
      }
    }
  }
}

// ---- dot.cu ----

TEST_P(KernelsTest, DotProductInstructions) {
  TRACE_SEED();
  const int n = 2048;
  std::vector<uint32_t> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = U32();
    b[i] = U32();
    c[i] = U32();
  }
  constexpr int kResults = 6;
  uint64_t out = Output<uint32_t>(size_t(kResults) * n);
  Launch(Kernel("dot", "dot_ops"), {Blocks(n, 128)}, {128}, 0, Upload(a), Upload(b), Upload(c), out, n);
  std::vector<uint32_t> want;
  for (int i = 0; i < n; ++i) {
    // Products of bytes (dp4a) or of 16-bit halves with bytes 0-1 (.lo) or 2-3 (.hi) of b (dp2a), summed into c
    // modulo 2^32.
    auto byte = [](uint32_t v, int k, bool is_signed) -> int64_t {
      uint32_t u = (v >> (8 * k)) & 0xff;
      return is_signed ? int64_t(int8_t(u)) : int64_t(u);
    };
    auto half = [](uint32_t v, int k, bool is_signed) -> int64_t {
      uint32_t u = (v >> (16 * k)) & 0xffff;
      return is_signed ? int64_t(int16_t(u)) : int64_t(u);
    };
    for (int mode = 0; mode < 3; ++mode) {
      for (bool is_signed : {true, false}) {
        int64_t sum = is_signed ? int64_t(int32_t(c[i])) : int64_t(c[i]);
        if (mode == 0) {
          for (int k = 0; k < 4; ++k) sum += byte(a[i], k, is_signed) * byte(b[i], k, is_signed);
        } else {
          int base = mode == 1 ? 0 : 2;
          for (int k = 0; k < 2; ++k) sum += half(a[i], k, is_signed) * byte(b[i], base + k, is_signed);
        }
        want.push_back(uint32_t(sum));
      }
    }
  }
  std::vector<uint32_t> got = Download<uint32_t>(out, size_t(kResults) * n);
  static const char* kNames[kResults] = {"__dp4a(int)",         "__dp4a(unsigned)", "__dp2a_lo(int)",
                                         "__dp2a_lo(unsigned)", "__dp2a_hi(int)",   "__dp2a_hi(unsigned)"};
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < kResults; ++k) {
      uint32_t g = got[size_t(i) * kResults + k], w = want[size_t(i) * kResults + k];
      if (g != w && ++bad <= 20) {
        ADD_FAILURE() << kNames[k] << "(0x" << std::hex << a[i] << ", 0x" << b[i] << ", 0x" << c[i] << ") = 0x" << g
                      << ", want 0x" << w;
      }
    }
  }
}

// ---- barrier.cu: __syncthreads_count / _and / _or ----

TEST_P(KernelsTest, BarrierReductions) {
  TRACE_SEED();
  const uint32_t grid = 6, block = 160;
  std::vector<int> in(grid * block);
  for (int& v : in) v = Int(-100, 100);
  for (uint32_t t = 0; t < block; ++t) in[block + t] = Int(-49, 90);  // Block 1: all > -50, none > 90.
  uint64_t out = Output<int>(3 * grid);
  Launch(Kernel("barrier", "barrier_reduce"), {grid}, {block}, 0, Upload(in), out);
  std::vector<int> got = Download<int>(out, 3 * grid), want;
  for (uint32_t b = 0; b < grid; ++b) {
    int count = 0;
    bool all = true, any = false;
    for (uint32_t t = 0; t < block; ++t) {
      int v = in[b * block + t];
      count += v > 0;
      all = all && v > -50;
      any = any || v > 90;
    }
    want.insert(want.end(), {count, all ? 1 : 0, any ? 1 : 0});
  }
  // _and/_or return non-zero, not necessarily 1: normalise.
  for (size_t i = 0; i < got.size(); ++i)
    if (i % 3 != 0) got[i] = got[i] != 0;
  EXPECT_TRUE(ArraysEqual(got, want, "(count, and, or) per block"));
}

GPUPOOL_INSTANTIATE_VARIANTS(KernelsTest);

TEST_P(KernelsTest, SixteenBitAtomics) {
  // 4 blocks x 64 threads: 128 increments per half, exact in both fp16 and bf16 (bf16 has 8 significant bits).
  const uint32_t grid = 4, block = 64;
  uint64_t halves = Output<uint16_t>(2, 0);
  uint64_t bf16s = Output<uint16_t>(2, 0);
  uint64_t cas = Output<uint16_t>(2, 0);
  uint64_t winners = Output<int>(1, 0);
  Launch(Kernel("half_atomics", "half_atomics"), {grid}, {block}, 0, halves, bf16s, cas, winners);
  std::vector<uint16_t> h = Download<uint16_t>(halves, 2), b = Download<uint16_t>(bf16s, 2);
  EXPECT_EQ(h[0], 0x5800) << "fp16 128.0";
  EXPECT_EQ(h[1], 0x5800) << "fp16 128.0";
  EXPECT_EQ(b[0], 0x4300) << "bf16 128.0";
  EXPECT_EQ(b[1], 0x4300) << "bf16 128.0";
  std::vector<uint16_t> slot = Download<uint16_t>(cas, 2);
  EXPECT_GE(slot[0], 1);
  EXPECT_LE(slot[0], grid * block);
  EXPECT_EQ(slot[1], 0) << "the CAS must not touch the neighbouring half";
  EXPECT_EQ(Download<int>(winners, 1)[0], 1) << "exactly one atomicCAS wins";
}

}  // namespace
}  // namespace gpupool::emu::test
