// Dead peers: a client killed with SIGKILL, an agent killed and restarted, an agent drained with SIGTERM.
#include <signal.h>

#include "integration/helpers.h"

namespace gpupool::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Failure, LeaseOfAClientKilledWithSigkillExpiresWithinTtl) {
  Agent agent(AgentOptions{.name = "ttl", .emulated = 2, .lease_ttl = "1500ms"});
  Pool pool = Connect({agent.address()});
  // gp-run holds a lease while its command sleeps; then gp-run itself dies without a chance to release.
  Process run({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.5", "--", "/bin/sleep", "60"});
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 1; }, seconds(10))) << run.Stderr();
  // The heartbeat keeps it well past one TTL while gp-run lives.
  std::this_thread::sleep_for(milliseconds(2500));
  EXPECT_EQ(LeaseCount(pool.State()), 1u);
  kill(-run.pid(), SIGKILL);  // gp-run and its command (their own process group).
  run.Wait();
  auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(5)));
  EXPECT_LT(std::chrono::steady_clock::now() - killed, milliseconds(1500 + 1000));
  ExpectAllFree(pool.State());
}

TEST(Failure, AgentKilledAndRestartedIsSeenDownThenUpWithNoStaleLeases) {
  AgentGroup agents(2, AgentOptions{.name = "phoenix", .emulated = 2, .lease_ttl = "2s"});
  Pool pool = Connect(agents.Addresses());
  Request r = Slices(2, 1.0);
  r.spread = Spread::kSameServer;
  auto lease = pool.Allocate(r);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const std::string victim = lease->slices()[0].server;
  size_t v = agents.Addresses()[0] == victim ? 0 : 1;

  agents[v].Kill(SIGKILL);
  PoolState down = pool.State();
  EXPECT_FALSE(down.servers[v].up);
  EXPECT_FALSE(down.servers[v].error.empty());
  EXPECT_TRUE(down.servers[1 - v].up);
  // The survivor still serves.
  auto other = pool.Allocate(Slices(1, 1.0));
  EXPECT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_TRUE(Eventually([&] { return !lease->Health().ok(); }, seconds(5)));

  agents[v].Restart();
  ASSERT_TRUE(Eventually([&] { return pool.State().servers[v].up; }, seconds(5)));
  PoolState up = pool.State();
  EXPECT_TRUE(up.servers[v].leases.empty()) << "a restarted agent must not remember leases";
  for (const auto& d : up.servers[v].devices) EXPECT_EQ(d.memory_allocated, 0u);
  // The old lease is gone for good: the heartbeat says so, and releasing it is harmless.
  ASSERT_TRUE(Eventually([&] { return lease->Health().code() == StatusCode::kNotFound; }, seconds(5)))
      << lease->Health().ToString();
  EXPECT_TRUE(lease->Release().ok());
  EXPECT_TRUE(other->Release().ok());
  ExpectAllFree(pool.State());
}

TEST(Failure, SigtermDrainsThenExits) {
  Agent agent(AgentOptions{.name = "drain", .emulated = 2});
  Pool pool = Connect({agent.address()});
  auto lease = pool.Allocate(Slices(1, 0.5));
  ASSERT_TRUE(lease.ok());
  agent.process().Signal(SIGTERM);
  ASSERT_TRUE(Eventually([&] { return pool.State().servers[0].draining; }, seconds(5)));
  EXPECT_TRUE(agent.process().running()) << "a draining agent keeps serving its leases";
  auto refused = pool.Allocate(Slices(1, 0.5));
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("draining"), std::string::npos) << refused.status().ToString();
  EXPECT_TRUE(lease->Health().ok());
  EXPECT_TRUE(lease->Release().ok());
  EXPECT_EQ(agent.process().Wait(seconds(5)), 0);
}

TEST(Failure, AttachedLeaseSharesTheLeaseButNotItsRelease) {
  Agent agent(AgentOptions{.name = "attach", .emulated = 2});
  Pool pool = Connect({agent.address()});
  auto lease = pool.Allocate(Slices(2, 0.5));
  ASSERT_TRUE(lease.ok());
  {
    auto attached = Lease::Attach(lease->Token());
    ASSERT_TRUE(attached.ok()) << attached.status().ToString();
    EXPECT_EQ(attached->id(), lease->id());
    ASSERT_EQ(attached->slices().size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(attached->slices()[i].device, lease->slices()[i].device);
      EXPECT_EQ(attached->slices()[i].memory_bytes, lease->slices()[i].memory_bytes);
      EXPECT_EQ(attached->slices()[i].device_uuid, lease->slices()[i].device_uuid);
    }
  }
  EXPECT_EQ(LeaseCount(pool.State()), 1u) << "dropping an attached handle must not release the lease";
  // A forged token (right id, wrong secret) is refused.
  std::string token = lease->Token();
  std::string forged = token;
  size_t secret_at = forged.find(':', 5) + 1;
  forged[secret_at] = forged[secret_at] == 'a' ? 'b' : 'a';
  auto bad = Lease::Attach(forged);
  EXPECT_EQ(bad.status().code(), StatusCode::kPermissionDenied) << bad.status().ToString();
  EXPECT_TRUE(lease->Release().ok());
  EXPECT_EQ(Lease::Attach(token).status().code(), StatusCode::kNotFound);
  ExpectAllFree(pool.State());
}

}  // namespace
}  // namespace gpupool::testing
