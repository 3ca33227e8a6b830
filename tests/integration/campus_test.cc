// The seed's campus: 8 servers x 8 GPUs, every scenario of shared/seeds/bitfusion.txt, against 8 real gp-agent
// processes on loopback TCP.
#include <map>
#include <set>

#include "integration/helpers.h"

namespace gpupool::testing {
namespace {

class Campus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    agents_ = std::make_unique<AgentGroup>(8, AgentOptions{.name = "campus", .emulated = 8});
  }
  static void TearDownTestSuite() { agents_.reset(); }
  void SetUp() override { pool_ = std::make_unique<Pool>(Connect(agents_->Addresses())); }
  void TearDown() override {
    leases_.clear();  // RAII: destroying the handles releases them.
    ExpectAllFree(pool_->State());
  }
  Lease Take(const Request& r) {
    auto lease = pool_->Allocate(r);
    EXPECT_TRUE(lease.ok()) << DescribeRequest(r) << ": " << lease.status().ToString();
    return lease.ok() ? std::move(lease).value() : Lease();
  }
  void TakeMany(int leases, const Request& r) {
    for (int i = 0; i < leases; ++i) leases_.push_back(Take(r));
  }
  void ReleaseAll() {
    for (auto& l : leases_) EXPECT_TRUE(l.Release().ok());
    leases_.clear();
    ExpectAllFree(pool_->State());
  }

  static inline std::unique_ptr<AgentGroup> agents_;
  std::unique_ptr<Pool> pool_;
  std::vector<Lease> leases_;
};

TEST_F(Campus, SixtyFourUsersTakeOneGpuEach) {
  TakeMany(64, Slices(1, 1.0));
  PoolState state = pool_->State();
  ExpectNotOvercommitted(state);
  std::set<std::string> ids;
  for (const auto& s : state.servers) {
    for (const auto& d : s.devices) {
      ASSERT_EQ(d.slices.size(), 1u);
      EXPECT_EQ(d.compute_allocated, 1.0);
      EXPECT_EQ(d.memory_allocated, d.memory_total);
      ids.insert(d.slices[0].lease_id);
    }
  }
  EXPECT_EQ(ids.size(), 64u);
  auto extra = pool_->Allocate(Slices(1, 0.05));
  EXPECT_EQ(extra.status().code(), StatusCode::kResourceExhausted) << extra.status().ToString();
  ReleaseAll();
}

TEST_F(Campus, TwoHundredFiftySixUsersTakeAQuarterEach) {
  TakeMany(256, Slices(1, 0.25));
  PoolState state = pool_->State();
  ExpectNotOvercommitted(state);
  EXPECT_EQ(LeaseCount(state), 256u);
  for (const auto& s : state.servers) {
    for (const auto& d : s.devices) {
      EXPECT_EQ(d.slices.size(), 4u);
      EXPECT_DOUBLE_EQ(d.compute_allocated, 1.0);
    }
  }
  EXPECT_EQ(pool_->Allocate(Slices(1, 0.25)).status().code(), StatusCode::kResourceExhausted);
  ReleaseAll();
}

TEST_F(Campus, MixOfFourGpuWholeGpuAndHalfGpuUsersAtOnce) {
  TakeMany(8, Slices(4, 1.0));
  TakeMany(20, Slices(1, 1.0));
  TakeMany(24, Slices(1, 0.5));
  PoolState state = pool_->State();
  ExpectNotOvercommitted(state);
  EXPECT_DOUBLE_EQ(TotalCompute(state), 64.0);  // 32 + 20 + 12 GPUs: the campus is exactly full.
  for (size_t i = 0; i < 8; ++i) {
    std::set<std::string> servers;
    for (const Slice& s : leases_[i].slices()) servers.insert(s.server);
    EXPECT_EQ(leases_[i].slices().size(), 4u);
    EXPECT_EQ(servers.size(), 1u) << "a 4-GPU lease fits on one server and should stay there";
  }
  // Half-GPU users pair up on 12 GPUs instead of splitting 24.
  int shared = 0;
  for (const auto& s : state.servers)
    for (const auto& d : s.devices) shared += d.slices.size() == 2 ? 1 : 0;
  EXPECT_EQ(shared, 12);
  ReleaseAll();
}

TEST_F(Campus, FractionsDownToOneTwentiethPack) {
  TakeMany(20, Slices(1, 0.05));
  PoolState state = pool_->State();
  std::map<std::string, int> per_device;
  for (const auto& s : state.servers)
    for (const auto& d : s.devices)
      if (!d.slices.empty()) per_device[s.name + "/" + std::to_string(d.index)] = static_cast<int>(d.slices.size());
  ASSERT_EQ(per_device.size(), 1u) << "twenty 1/20 slices fill exactly one GPU";
  EXPECT_EQ(per_device.begin()->second, 20);
  leases_.push_back(Take(Slices(1, 0.05)));
  EXPECT_EQ(pool_->State().servers.size(), 8u);
  EXPECT_NEAR(TotalCompute(pool_->State()), 1.05, 1e-9);
  for (double f : {0.1, 0.15, 0.3, 0.45, 0.7, 0.95}) {
    Lease l = Take(Slices(1, f));
    ASSERT_EQ(l.slices().size(), 1u);
    EXPECT_NEAR(l.slices()[0].compute_share, f, 1e-6);
    EXPECT_NEAR(static_cast<double>(l.slices()[0].memory_bytes), f * 16.0 * (1ull << 30), 1.0);
    leases_.push_back(std::move(l));
  }
  ExpectNotOvercommitted(pool_->State());
  ReleaseAll();
}

TEST_F(Campus, OneProgramTakesAllSixtyFourGpus) {
  leases_.push_back(Take(Slices(64, 1.0)));
  ASSERT_EQ(leases_[0].slices().size(), 64u);
  std::set<std::pair<std::string, uint32_t>> devices;
  for (const Slice& s : leases_[0].slices()) devices.insert({s.server, s.device});
  EXPECT_EQ(devices.size(), 64u);
  PoolState state = pool_->State();
  EXPECT_DOUBLE_EQ(TotalCompute(state), 64.0);
  for (const auto& s : state.servers) EXPECT_EQ(s.leases.size(), 1u);
  EXPECT_EQ(pool_->Allocate(Slices(1, 0.05)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool_->Allocate(Slices(65, 1.0)).status().code(), StatusCode::kUnsatisfiable);
  ReleaseAll();
}

TEST_F(Campus, QuarterPartialsFromDifferentServersWhenNoWholeGpuIsFree) {
  // One 3/4 slice on four servers (spread), then every other GPU taken whole: no whole GPU is free anywhere,
  // and the only room left is a quarter GPU on each of four servers.
  Request spread = Slices(4, 0.75);
  spread.spread = Spread::kSpread;
  leases_.push_back(Take(spread));
  TakeMany(60, Slices(1, 1.0));
  PoolState before = pool_->State();
  for (const auto& s : before.servers)
    for (const auto& d : s.devices) EXPECT_FALSE(d.whole_free());
  EXPECT_EQ(pool_->Allocate(Slices(1, 1.0)).status().code(), StatusCode::kResourceExhausted);

  Lease partials = Take(Slices(4, 0.25));
  ASSERT_EQ(partials.slices().size(), 4u);
  std::set<std::string> servers;
  for (const Slice& s : partials.slices()) servers.insert(s.server);
  EXPECT_EQ(servers.size(), 4u);
  PoolState after = pool_->State();
  ExpectNotOvercommitted(after);
  EXPECT_DOUBLE_EQ(TotalCompute(after), 64.0);
  leases_.push_back(std::move(partials));
  ReleaseAll();
}

}  // namespace
}  // namespace gpupool::testing
