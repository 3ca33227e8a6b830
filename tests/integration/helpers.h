// Shared assertions for integration tests over a live pool.
#ifndef GPUPOOL_TESTS_INTEGRATION_HELPERS_H_
#define GPUPOOL_TESTS_INTEGRATION_HELPERS_H_

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "gpupool/gpupool.h"
#include "support/process.h"

namespace gpupool::testing {

inline Pool Connect(const std::vector<std::string>& servers) {
  PoolOptions o;
  o.servers = servers;
  auto pool = Pool::Connect(o);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(pool).value();
}

// Nothing allocated anywhere, no lease or reservation left, every server up and never over-committed.
inline void ExpectAllFree(const PoolState& state) {
  for (const auto& s : state.servers) {
    EXPECT_TRUE(s.up) << s.address << ": " << s.error;
    EXPECT_TRUE(s.leases.empty()) << s.address << " still has " << s.leases.size() << " lease(s)";
    for (const auto& d : s.devices) {
      EXPECT_EQ(d.memory_allocated, 0u) << s.name << " GPU " << d.index;
      EXPECT_EQ(d.compute_allocated, 0.0) << s.name << " GPU " << d.index;
      EXPECT_TRUE(d.slices.empty()) << s.name << " GPU " << d.index;
    }
  }
}

inline void ExpectNotOvercommitted(const PoolState& state) {
  for (const auto& s : state.servers) {
    for (const auto& d : s.devices) {
      EXPECT_LE(d.memory_allocated, d.memory_total) << s.name << " GPU " << d.index;
      EXPECT_LE(d.compute_allocated, 1.0 + 1e-9) << s.name << " GPU " << d.index;
      uint64_t sum = 0;
      for (const auto& sl : d.slices) sum += sl.memory_bytes;
      EXPECT_EQ(sum, d.memory_allocated) << s.name << " GPU " << d.index;
    }
  }
}

inline double TotalCompute(const PoolState& state) {
  double total = 0;
  for (const auto& s : state.servers)
    for (const auto& d : s.devices) total += d.compute_allocated;
  return total;
}

inline size_t LeaseCount(const PoolState& state) {
  size_t n = 0;
  for (const auto& s : state.servers) n += s.leases.size();
  return n;
}

// Polls `condition` every 50 ms until it holds or `timeout` passes.
inline bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

inline Request Slices(int count, double fraction) {
  Request r;
  r.count = count;
  r.fraction = fraction;
  return r;
}

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_INTEGRATION_HELPERS_H_
