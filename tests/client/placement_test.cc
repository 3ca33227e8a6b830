#include "client/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "core/util.h"

namespace gpupool::internal {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

ServerView Server(size_t index, int devices, uint64_t memory = 16 * kGiB) {
  ServerView s;
  s.server = index;
  for (int d = 0; d < devices; ++d) {
    s.devices.push_back({static_cast<uint32_t>(d), "gpupool emulated GPU", "", memory, memory, kShareWhole, true});
  }
  return s;
}

void Use(ServerView& s, uint32_t device, double fraction) {
  DeviceView& d = s.devices[device];
  d.memory_free -= static_cast<uint64_t>(fraction * static_cast<double>(d.memory_total));
  d.share_free -= ShareFromFraction(fraction);
  d.whole_free = false;
}

PlacementOptions Fgd(const TargetWorkload* target = nullptr) {
  PlacementOptions o;
  o.policy = PlacementPolicy::kFragmentationAware;
  o.target = target;
  return o;
}

Request Req(int count, double fraction, Spread spread = Spread::kPack) {
  Request r;
  r.count = count;
  r.fraction = fraction;
  r.spread = spread;
  return r;
}

TEST(Placement, WholeGpusTakeWholeFreeGpus) {
  std::vector<ServerView> servers = {Server(0, 2), Server(1, 2)};
  Use(servers[0], 0, 0.25);
  auto plan = Place(Req(2, 1.0), servers);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const auto& a : *plan) {
    EXPECT_EQ(a.server, 1u);  // Server 0 has only one whole GPU left.
    EXPECT_EQ(a.share, kShareWhole);
    EXPECT_EQ(a.memory_bytes, 16 * kGiB);
  }
}

TEST(Placement, FractionsPackOntoSplitGpusFirst) {
  std::vector<ServerView> servers = {Server(0, 4)};
  Use(servers[0], 2, 0.5);
  auto plan = Place(Req(1, 0.25), servers);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].device, 2u);
  // Best fit: the device with the least room left that still fits.
  Use(servers[0], 1, 0.75);
  plan = Place(Req(1, 0.25), servers);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].device, 1u);
}

TEST(Placement, PrefersOneServerThenSpansFewest) {
  std::vector<ServerView> servers = {Server(0, 2), Server(1, 4), Server(2, 3)};
  auto plan = Place(Req(3, 1.0), servers);
  ASSERT_TRUE(plan.ok());
  std::set<size_t> used;
  for (const auto& a : *plan) used.insert(a.server);
  EXPECT_EQ(used, std::set<size_t>{2});  // The tightest server that holds all three.
  plan = Place(Req(6, 1.0), servers);
  ASSERT_TRUE(plan.ok());
  used.clear();
  for (const auto& a : *plan) used.insert(a.server);
  EXPECT_EQ(used.size(), 2u);  // 4 + 3 >= 6: two servers suffice.
}

TEST(Placement, SlicesOfOneRequestLandOnDistinctDevices) {
  std::vector<ServerView> servers = {Server(0, 4)};
  auto plan = Place(Req(4, 0.25), servers);
  ASSERT_TRUE(plan.ok());
  std::set<uint32_t> devices;
  for (const auto& a : *plan) devices.insert(a.device);
  EXPECT_EQ(devices.size(), 4u);
  EXPECT_FALSE(Place(Req(5, 0.05), servers).ok());
}

TEST(Placement, SameServerFailsRatherThanSpan) {
  std::vector<ServerView> servers = {Server(0, 2), Server(1, 2)};
  auto plan = Place(Req(3, 1.0, Spread::kSameServer), servers);
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(CheckSatisfiable(Req(3, 1.0, Spread::kSameServer), servers).code(), StatusCode::kUnsatisfiable);
  EXPECT_TRUE(Place(Req(3, 1.0), servers).ok());
}

TEST(Placement, SpreadUsesManyServers) {
  std::vector<ServerView> servers = {Server(0, 4), Server(1, 4), Server(2, 4)};
  auto plan = Place(Req(3, 0.5, Spread::kSpread), servers);
  ASSERT_TRUE(plan.ok());
  std::set<size_t> used;
  for (const auto& a : *plan) used.insert(a.server);
  EXPECT_EQ(used.size(), 3u);
}

TEST(Placement, PartialsFromDifferentServersWhenNoWholeGpuIsFree) {
  std::vector<ServerView> servers;
  for (size_t s = 0; s < 4; ++s) {
    servers.push_back(Server(s, 2));
    Use(servers[s], 0, 0.75);
    Use(servers[s], 1, 1.0);
  }
  auto plan = Place(Req(4, 0.25), servers);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::set<size_t> used;
  for (const auto& a : *plan) {
    used.insert(a.server);
    EXPECT_EQ(a.device, 0u);
  }
  EXPECT_EQ(used.size(), 4u);
}

TEST(Placement, ClassFilterAndNeverSatisfiableReasons) {
  std::vector<ServerView> servers = {Server(0, 2), Server(1, 2)};
  servers[1].devices[0].device_class = "a100";
  Request r = Req(1, 1.0);
  r.device_class = "a100";
  auto plan = Place(r, servers);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].server, 1u);
  r.device_class = "h100";
  Status s = CheckSatisfiable(r, servers);
  EXPECT_EQ(s.code(), StatusCode::kUnsatisfiable);
  EXPECT_NE(s.message().find("no device of class 'h100'"), std::string::npos) << s.message();
  s = CheckSatisfiable(Req(5, 1.0), servers);
  EXPECT_NE(s.message().find("the pool has 4"), std::string::npos) << s.message();
  Request big = Req(1, 1.0);
  big.memory_bytes = 40 * kGiB;
  EXPECT_NE(CheckSatisfiable(big, servers).message().find("more memory than any"), std::string::npos);
  // Busy is not never: with everything used, the request still passes the satisfiability check.
  for (auto& srv : servers)
    for (auto& d : srv.devices) Use(srv, d.index, 1.0);
  EXPECT_TRUE(CheckSatisfiable(Req(4, 1.0), servers).ok());
  EXPECT_EQ(Place(Req(1, 0.05), servers).status().code(), StatusCode::kResourceExhausted);
}

TEST(Placement, MemorySizedSlicesDeriveTheirShare) {
  Request r;
  r.memory_bytes = 4 * kGiB;
  uint64_t memory = 0;
  uint32_t share = 0;
  SliceSize(r, 16 * kGiB, &memory, &share);
  EXPECT_EQ(memory, 4 * kGiB);
  EXPECT_EQ(share, kShareWhole / 4);
  r.memory_bytes = 100ull << 20;  // Under 1/20: the share is the minimum slice.
  SliceSize(r, 16 * kGiB, &memory, &share);
  EXPECT_EQ(share, kShareWhole / 20);
  // Fractions that add up to a whole GPU fit together exactly.
  r = Req(1, 0.3);
  SliceSize(r, 16 * kGiB, &memory, &share);
  uint64_t m2 = 0;
  uint32_t s2 = 0;
  SliceSize(Req(1, 0.7), 16 * kGiB, &m2, &s2);
  EXPECT_LE(memory + m2, 16 * kGiB);
  EXPECT_LE(share + s2, kShareWhole);
}

TEST(Placement, BestFitIsTheDefaultPolicy) {
  EXPECT_EQ(PlacementOptions{}.policy, PlacementPolicy::kBestFit);
  EXPECT_EQ(PlacementOptions{}.target, nullptr);
}

TEST(Placement, FragmentationMeasureCountsWhatTheWorkloadCannotUse) {
  // Half the requests take half a GPU, a quarter one whole GPU, a quarter two whole GPUs on one server.
  TargetWorkload target({{1, 0.5, 2}, {1, 1.0, 1}, {2, 1.0, 1}});
  EXPECT_DOUBLE_EQ(target.smallest_fraction(), 0.5);
  ServerView s = Server(0, 4);
  EXPECT_DOUBLE_EQ(target.Fragmentation(s), 0.0);  // Everything free is usable by every shape.
  Use(s, 2, 0.5);
  Use(s, 3, 0.9);
  // Device 2 (0.5 free) is too small for the whole-GPU shapes, device 3 (0.1 free) for all:
  // 1/2 * 0.1 (half-GPU) + 1/4 * 0.6 (one GPU) + 1/4 * 0.6 (two GPUs: two whole ones left, the rest is lost).
  EXPECT_NEAR(target.Fragmentation(s), 0.05 + 0.15 + 0.15, 1e-9);
  EXPECT_NEAR(target.Stranded(s), 0.1, 1e-9);
  // With one whole GPU left the two-GPU shape cannot be placed here at all: all 1.6 free GPUs count for it.
  Use(s, 0, 1.0);
  EXPECT_NEAR(target.Fragmentation(s), 0.05 + 0.15 + 0.25 * 1.6, 1e-9);
  // The default workload: most requests are for whole GPUs, so a half-used GPU is mostly fragment.
  ServerView one = Server(0, 1);
  Use(one, 0, 0.5);
  EXPECT_GT(TargetWorkload::Default().Fragmentation(one), 0.25);
  EXPECT_LT(TargetWorkload::Default().Fragmentation(one), 0.5);
}

TEST(Placement, FragmentationAwareKeepsLeftoversUsable) {
  // Only half GPUs and whole GPUs are asked for. A 0.45 slice fits on device 0 (0.5 free) and on device 1 (0.95
  // free). Best fit takes device 0 and leaves 0.05 that nothing can use; fragmentation-aware takes device 1 and
  // leaves two halves a half-GPU request can use.
  TargetWorkload target({{1, 0.5, 1}, {1, 1.0, 1}});
  std::vector<ServerView> servers = {Server(0, 2)};
  Use(servers[0], 0, 0.5);
  Use(servers[0], 1, 0.05);
  PlacementOptions best_fit;
  best_fit.policy = PlacementPolicy::kBestFit;
  auto plan = Place(Req(1, 0.45), servers, best_fit);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].device, 0u);
  plan = Place(Req(1, 0.45), servers, Fgd(&target));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].device, 1u);
  // The same against the default (trace) workload: a 0.23 slice goes where the rest still takes a 0.47 request
  // (0.77 free -> 0.54), not where only small ones would fit (0.53 free -> 0.30).
  servers = {Server(0, 2)};
  Use(servers[0], 0, 0.47);
  Use(servers[0], 1, 0.23);
  plan = Place(Req(1, 0.23), servers, best_fit);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].device, 0u);
  plan = Place(Req(1, 0.23), servers, Fgd());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].device, 1u);
}

TEST(Placement, FragmentationAwareKeepsWholeGpusWhole) {
  // A fraction goes to the split GPU, not a whole one.
  std::vector<ServerView> servers = {Server(0, 4)};
  Use(servers[0], 2, 0.5);
  for (double fraction : {0.05, 0.16, 0.25, 0.47, 0.5}) {
    auto plan = Place(Req(1, fraction), servers, Fgd());
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ((*plan)[0].device, 2u) << fraction;
  }
  // Whole-GPU slices take whole free GPUs, from the server that is broken already: the empty one stays whole for
  // an eight-GPU request.
  servers = {Server(0, 8), Server(1, 8)};
  for (uint32_t d = 0; d < 5; ++d) Use(servers[1], d, 0.5);
  auto plan = Place(Req(1, 1.0), servers, Fgd());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].server, 1u);
  EXPECT_GE((*plan)[0].device, 5u);
  EXPECT_EQ((*plan)[0].share, kShareWhole);
  plan = Place(Req(3, 1.0), servers, Fgd());
  ASSERT_TRUE(plan.ok());
  for (const auto& a : *plan) EXPECT_EQ(a.server, 1u);
  plan = Place(Req(4, 1.0), servers, Fgd());  // Server 1 has three whole GPUs: server 0 holds it alone.
  ASSERT_TRUE(plan.ok());
  for (const auto& a : *plan) EXPECT_EQ(a.server, 0u);
}

TEST(Placement, FragmentationAwareKeepsTheRules) {
  // One server when one can hold it, fewest servers when none can.
  std::vector<ServerView> servers = {Server(0, 2), Server(1, 4), Server(2, 3)};
  auto plan = Place(Req(3, 1.0), servers, Fgd());
  ASSERT_TRUE(plan.ok());
  std::set<size_t> used;
  for (const auto& a : *plan) used.insert(a.server);
  EXPECT_EQ(used, std::set<size_t>{2});
  plan = Place(Req(6, 1.0), servers, Fgd());
  ASSERT_TRUE(plan.ok());
  used.clear();
  for (const auto& a : *plan) used.insert(a.server);
  EXPECT_EQ(used.size(), 2u);
  // Same server or nothing; spread over servers; distinct devices.
  servers = {Server(0, 2), Server(1, 2)};
  EXPECT_EQ(Place(Req(3, 1.0, Spread::kSameServer), servers, Fgd()).status().code(), StatusCode::kResourceExhausted);
  servers = {Server(0, 4), Server(1, 4), Server(2, 4)};
  plan = Place(Req(3, 0.5, Spread::kSpread), servers, Fgd());
  ASSERT_TRUE(plan.ok());
  used.clear();
  for (const auto& a : *plan) used.insert(a.server);
  EXPECT_EQ(used.size(), 3u);
  plan = Place(Req(4, 0.25), {Server(0, 4)}, Fgd());
  ASSERT_TRUE(plan.ok());
  std::set<uint32_t> devices;
  for (const auto& a : *plan) devices.insert(a.device);
  EXPECT_EQ(devices.size(), 4u);
  // Class.
  servers = {Server(0, 2), Server(1, 2)};
  servers[1].devices[0].device_class = "a100";
  Request r = Req(1, 0.5);
  r.device_class = "a100";
  plan = Place(r, servers, Fgd());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[0].server, 1u);
  EXPECT_EQ((*plan)[0].device, 0u);
  // Full is full, with the same words as best fit.
  for (auto& srv : servers)
    for (auto& d : srv.devices) Use(srv, d.index, 1.0);
  auto refused = Place(Req(1, 0.05), servers, Fgd());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(), Place(Req(1, 0.05), servers).status().message());
}

TEST(Placement, TiesAreBrokenByChance) {
  // Four equal servers: racing clients must not all pick the same one, under either policy; a seeded generator
  // makes the choices reproducible.
  std::vector<ServerView> servers = {Server(0, 2), Server(1, 2), Server(2, 2), Server(3, 2)};
  for (auto policy : {PlacementPolicy::kBestFit, PlacementPolicy::kFragmentationAware}) {
    for (int count : {1, 2}) {
      PlacementOptions o;
      o.policy = policy;
      std::map<std::pair<size_t, uint32_t>, int> picked;
      for (int i = 0; i < 400; ++i) {
        auto plan = Place(Req(count, 0.5), servers, o);
        ASSERT_TRUE(plan.ok());
        ++picked[{(*plan)[0].server, (*plan)[0].device}];
      }
      EXPECT_EQ(picked.size(), 8u);  // Every device of every server comes first some time.
      for (const auto& [where, times] : picked) EXPECT_GT(times, 10);
      std::mt19937_64 a(42), b(42);
      o.random = &a;
      std::vector<size_t> first, second;
      for (int i = 0; i < 20; ++i) first.push_back((*Place(Req(count, 0.5), servers, o))[0].server);
      o.random = &b;
      for (int i = 0; i < 20; ++i) second.push_back((*Place(Req(count, 0.5), servers, o))[0].server);
      EXPECT_EQ(first, second);
    }
  }
}

}  // namespace
}  // namespace gpupool::internal
