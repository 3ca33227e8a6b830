// thrust_algorithms: Thrust's algorithms on the device, each checked against the same computation on the host.
// Radix sort of 2^20 uint32 and float keys (CUB's onesweep kernels, which opt into dynamic shared memory and are
// built with __launch_bounds__), sort_by_key, reduce, inclusive_scan and copy_if. A GPU of the reported compute
// capability runs all of them; so must the emulated device.
//   thrust_algorithms [ELEMENTS]   default 1048576
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#define PROGRAM_NAME "thrust_algorithms"
#include "program_checks.h"

namespace {

struct IsMultipleOfSeven {
  __host__ __device__ bool operator()(uint32_t v) const { return v % 7 == 0; }
};

// Thrust reports a failed launch by throwing; each step catches its own so that every step is tried and named.
template <typename Step>
void Run(const char* name, Step step) {
  try {
    bool ok = step();
    std::printf(PROGRAM_NAME ": %s: %s\n", name, ok ? "ok" : "WRONG");
    if (!ok) ++failures;
  } catch (const std::exception& e) {
    std::printf(PROGRAM_NAME ": %s: threw %s\n", name, e.what());
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : size_t{1} << 20;
  std::mt19937 rng(45);
  std::vector<uint32_t> keys(n);
  std::vector<float> floats(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = rng();
    // Negative and positive values, and -0.0 beside 0.0: the radix sort flips sign bits.
    floats[i] = static_cast<float>(static_cast<int32_t>(rng())) / 65536.0f;
  }
  floats[0] = -0.0f;
  floats[1] = 0.0f;

  Run("sort uint32", [&] {
    thrust::device_vector<uint32_t> d(keys.begin(), keys.end());
    thrust::sort(d.begin(), d.end());
    std::vector<uint32_t> want = keys, got(n);
    std::sort(want.begin(), want.end());
    thrust::copy(d.begin(), d.end(), got.begin());
    return got == want;
  });
  Run("sort float", [&] {
    thrust::device_vector<float> d(floats.begin(), floats.end());
    thrust::sort(d.begin(), d.end());
    std::vector<float> want = floats, got(n);
    std::sort(want.begin(), want.end());
    thrust::copy(d.begin(), d.end(), got.begin());
    // Compared as values: -0.0 and 0.0 are equal keys, in either order.
    return got == want;
  });
  Run("sort_by_key", [&] {
    // Keys with many duplicates; the values are the original positions, so a stable sort is checkable exactly.
    std::vector<uint32_t> k(n), v(n);
    for (size_t i = 0; i < n; ++i) {
      k[i] = keys[i] % 1000;
      v[i] = static_cast<uint32_t>(i);
    }
    thrust::device_vector<uint32_t> dk(k.begin(), k.end()), dv(v.begin(), v.end());
    thrust::sort_by_key(dk.begin(), dk.end(), dv.begin());
    std::vector<uint32_t> order(n), got_k(n), got_v(n);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return k[a] < k[b]; });
    thrust::copy(dk.begin(), dk.end(), got_k.begin());
    thrust::copy(dv.begin(), dv.end(), got_v.begin());
    for (size_t i = 0; i < n; ++i) {
      if (got_v[i] != order[i] || got_k[i] != k[order[i]]) return false;
    }
    return true;
  });
  Run("reduce", [&] {
    thrust::device_vector<uint32_t> d(keys.begin(), keys.end());
    // Modulo 2^64 of 32-bit values: exact, whatever the order of the additions.
    uint64_t got = thrust::reduce(d.begin(), d.end(), uint64_t{0}, thrust::plus<uint64_t>());
    uint64_t want = std::accumulate(keys.begin(), keys.end(), uint64_t{0});
    return got == want;
  });
  Run("inclusive_scan", [&] {
    thrust::device_vector<uint32_t> d(keys.begin(), keys.end()), out(n);
    thrust::inclusive_scan(d.begin(), d.end(), out.begin());
    std::vector<uint32_t> want(n), got(n);
    std::partial_sum(keys.begin(), keys.end(), want.begin());  // Wraps modulo 2^32, as on the device.
    thrust::copy(out.begin(), out.end(), got.begin());
    return got == want;
  });
  Run("copy_if", [&] {
    thrust::device_vector<uint32_t> d(keys.begin(), keys.end()), out(n);
    auto end = thrust::copy_if(d.begin(), d.end(), out.begin(), IsMultipleOfSeven());
    std::vector<uint32_t> want;
    std::copy_if(keys.begin(), keys.end(), std::back_inserter(want), IsMultipleOfSeven());
    std::vector<uint32_t> got(static_cast<size_t>(end - out.begin()));
    thrust::copy(out.begin(), end, got.begin());
    return got == want;
  });
  std::printf(PROGRAM_NAME ": %zu elements, %d failure(s): %s\n", n, failures, failures ? "FAILED" : "PASSED");
  return failures != 0;
}
