#include "client/placement.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gpupool::internal
