// Many clients, few GPUs: the agents, not the clients, decide; nobody is granted what another holds.
#include <atomic>
#include <barrier>
#include <thread>

#include "integration/helpers.h"

namespace gpupool::testing {
namespace {

TEST(Race, ThirtyTwoClientsForEightGpusGetExactlyEight) {
  AgentGroup agents(2, AgentOptions{.name = "race", .emulated = 4});
  constexpr int kClients = 32;
  std::vector<std::unique_ptr<Pool>> pools;
  for (int i = 0; i < kClients; ++i) pools.push_back(std::make_unique<Pool>(Connect(agents.Addresses())));
  std::vector<Result<Lease>> results;
  for (int i = 0; i < kClients; ++i) results.emplace_back(Status(StatusCode::kInternal, "not run"));
  std::barrier start(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = pools[i]->Allocate(Slices(1, 1.0));
    });
  }
  for (auto& t : threads) t.join();
  int granted = 0;
  for (auto& r : results) {
    if (r.ok()) {
      ++granted;
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
    }
  }
  EXPECT_EQ(granted, 8);
  Pool observer = Connect(agents.Addresses());
  PoolState state = observer.State();
  ExpectNotOvercommitted(state);
  EXPECT_EQ(LeaseCount(state), 8u);
  for (const auto& s : state.servers)
    for (const auto& d : s.devices) EXPECT_EQ(d.slices.size(), 1u);
  results.clear();
  ExpectAllFree(observer.State());
}

TEST(Race, WaitingClientsAreServedInTurnWithoutOvercommit) {
  AgentGroup agents(2, AgentOptions{.name = "queue", .emulated = 2});
  constexpr int kClients = 16;
  std::atomic<int> served{0}, failed{0};
  std::atomic<bool> done{false};
  std::atomic<int> violations{0};
  // An observer checks the invariant all along, not only at the end.
  std::thread observer([&] {
    Pool pool = Connect(agents.Addresses());
    while (!done) {
      PoolState state = pool.State();
      for (const auto& s : state.servers)
        for (const auto& d : s.devices)
          if (d.compute_allocated > 1.0 + 1e-9 || d.memory_allocated > d.memory_total) ++violations;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      Pool pool = Connect(agents.Addresses());
      Request r = Slices(1, 0.5);
      r.wait = std::chrono::seconds(60);
      auto lease = pool.Allocate(r);
      if (!lease.ok()) {
        ++failed;
        ADD_FAILURE() << lease.status().ToString();
        return;
      }
      ++served;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      EXPECT_TRUE(lease->Release().ok());
    });
  }
  for (auto& t : clients) t.join();
  done = true;
  observer.join();
  EXPECT_EQ(served, kClients);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(violations, 0);
  ExpectAllFree(Connect(agents.Addresses()).State());
}

TEST(Race, WaitGivesUpWithTimeout) {
  AgentGroup agents(1, AgentOptions{.name = "full", .emulated = 1});
  Pool pool = Connect(agents.Addresses());
  auto holder = pool.Allocate(Slices(1, 1.0));
  ASSERT_TRUE(holder.ok());
  Request r = Slices(1, 0.5);
  r.wait = std::chrono::milliseconds(600);
  auto start = std::chrono::steady_clock::now();
  auto lease = pool.Allocate(r);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(lease.status().code(), StatusCode::kTimeout) << lease.status().ToString();
  EXPECT_GE(waited, std::chrono::milliseconds(550));
  EXPECT_LT(waited, std::chrono::seconds(5));
}

}  // namespace
}  // namespace gpupool::testing
