#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>

#include <fstream>

#include "agent/agent_config.h"
#include "gpupool/pool.h"

namespace gpupool {
namespace {

TEST(AgentConfig, ReadsEveryField) {
  agent::AgentConfig c;
  Status s = agent::ParseAgentConfig(R"(
name = "gpu-a"
listen = "127.0.0.1:9000"
class = "a100"
nvml = false
[emulated]
count = 8
memory = "40GiB"
[leases]
ttl = "30s"
renew_interval = "3s"
reservation_ttl = "2s"
[drain]
timeout = "1m"
[metrics]
listen = "*:9450"
[telemetry]
idle_after = "30m"
[limits]
session_bytes_in_flight = "16MiB"
[moves]
agents = ["gpu-b:7450", "unix:/run/gpupool/other.sock"]
)", "agent.toml", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.name, "gpu-a");
  EXPECT_EQ(c.listen, "127.0.0.1:9000");
  EXPECT_EQ(c.device_class, "a100");
  EXPECT_FALSE(c.nvml);
  EXPECT_EQ(c.emulated_count, 8);
  EXPECT_EQ(c.emulated_memory, 40ull << 30);
  EXPECT_EQ(c.metrics_listen, "*:9450");
  EXPECT_EQ(c.idle_after.count(), 30 * 60 * 1000);
  EXPECT_TRUE(c.Validate().ok());
  c.idle_after = std::chrono::milliseconds(10);
  EXPECT_NE(c.Validate().message().find("idle_after"), std::string::npos);
  c.idle_after = std::chrono::minutes(10);
  c.metrics_listen = "unix:/tmp/m.sock";
  EXPECT_NE(c.Validate().message().find("[metrics] listen"), std::string::npos);
  c.metrics_listen = "*:9450";
  EXPECT_EQ(c.timing.lease_ttl.count(), 30000);
  EXPECT_EQ(c.timing.renew_interval.count(), 3000);
  EXPECT_EQ(c.timing.reservation_ttl.count(), 2000);
  EXPECT_EQ(c.drain_timeout.count(), 60000);
  EXPECT_EQ(c.session_bytes_in_flight, 16ull << 20);
  EXPECT_EQ(c.move_agents, (std::vector<std::string>{"gpu-b:7450", "unix:/run/gpupool/other.sock"}));
  EXPECT_TRUE(c.Validate().ok());
  c.move_agents.push_back(c.listen);  // Itself: nowhere to move to.
  EXPECT_NE(c.Validate().message().find("[moves] agents"), std::string::npos);
  c.move_agents.pop_back();
  c.session_bytes_in_flight = 1024;
  EXPECT_NE(c.Validate().message().find("session_bytes_in_flight"), std::string::npos);
  c.session_bytes_in_flight = 16ull << 20;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(AgentConfig, MalformedTomlNamesFileAndLine) {
  agent::AgentConfig c;
  Status s = agent::ParseAgentConfig("name = \"a\"\n\nlisten = = 3\n", "/etc/gpupool/agent.toml", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("/etc/gpupool/agent.toml:3"), std::string::npos) << s.message();
}

TEST(AgentConfig, UnknownKeyIsAnErrorWithItsLine) {
  agent::AgentConfig c;
  Status s = agent::ParseAgentConfig("name = \"a\"\n[leases]\nttl = \"5s\"\nrenew_intervall = \"1s\"\n", "a.toml", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a.toml:4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("renew_intervall"), std::string::npos) << s.message();
}

TEST(AgentConfig, WrongTypesAndValuesAreErrors) {
  agent::AgentConfig c;
  EXPECT_FALSE(agent::ParseAgentConfig("[emulated]\ncount = \"eight\"\n", "a.toml", &c).ok());
  EXPECT_FALSE(agent::ParseAgentConfig("[emulated]\ncount = -1\n", "a.toml", &c).ok());
  EXPECT_FALSE(agent::ParseAgentConfig("[emulated]\nmemory = \"lots\"\n", "a.toml", &c).ok());
  EXPECT_FALSE(agent::ParseAgentConfig("leases = 5\n", "a.toml", &c).ok());
  EXPECT_FALSE(agent::ParseAgentConfig("[moves]\nagents = \"gpu-b:7450\"\n", "a.toml", &c).ok());
  EXPECT_FALSE(agent::ParseAgentConfig("[moves]\nagent = [\"gpu-b:7450\"]\n", "a.toml", &c).ok());
  agent::AgentConfig bad;
  bad.timing.renew_interval = bad.timing.lease_ttl;
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(AgentConfig, SessionLimitsAreReadAndKeptWithinWhatTheTablesHold) {
  agent::AgentConfig c;
  EXPECT_EQ(c.sessions_per_device, 128);
  EXPECT_EQ(c.sessions_per_lease, 64);
  ASSERT_TRUE(agent::ParseAgentConfig("[limits]\nsessions_per_device = 12\nsessions_per_lease = 3\n", "a.toml", &c)
                  .ok());
  EXPECT_EQ(c.sessions_per_device, 12);
  EXPECT_EQ(c.sessions_per_lease, 3);
  Status s = agent::ParseAgentConfig("[limits]\nsessions_per_device = 129\n", "a.toml", &c);
  EXPECT_NE(s.message().find("[limits] sessions_per_device must be within 1..128"), std::string::npos) << s.message();
  s = agent::ParseAgentConfig("[limits]\nsessions_per_lease = 0\n", "a.toml", &c);
  EXPECT_NE(s.message().find("[limits] sessions_per_lease must be within 1..64"), std::string::npos) << s.message();
  agent::AgentConfig bad;
  bad.sessions_per_lease = 65;
  EXPECT_FALSE(bad.Validate().ok());
}

class PoolFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("GPUPOOL_SERVERS");
    unsetenv("GPUPOOL_POOL");
  }
  int counter_ = 0;
  std::string Write(const std::string& text) {
    // One file per test and write: ctest runs tests in parallel processes.
    std::string path = ::testing::TempDir() + "/pool_file_test_" + std::to_string(getpid()) + "_" +
                       std::to_string(counter_++) + ".toml";
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(PoolFileTest, OptionsThenEnvironmentThenFile) {
  PoolOptions o;
  o.servers = {"a:1"};
  setenv("GPUPOOL_SERVERS", "b:2,c:3", 1);
  ASSERT_TRUE(ResolveServers(o).ok());
  EXPECT_EQ(ResolveServers(o)->size(), 1u);
  o.servers.clear();
  ASSERT_TRUE(ResolveServers(o).ok());
  EXPECT_EQ(*ResolveServers(o), (std::vector<std::string>{"b:2", "c:3"}));
  unsetenv("GPUPOOL_SERVERS");
  setenv("GPUPOOL_POOL", Write("servers = [\"gpu1:7450\", \"unix:/run/agent.sock\"]\n").c_str(), 1);
  ASSERT_TRUE(ResolveServers(o).ok()) << ResolveServers(o).status().ToString();
  EXPECT_EQ(*ResolveServers(o), (std::vector<std::string>{"gpu1:7450", "unix:/run/agent.sock"}));
}

// Set but empty is the user's choice of pool, and a mistake: never a fall-through to a pool file or a private agent.
TEST_F(PoolFileTest, SetButEmptyIsAnError) {
  PoolOptions o;
  setenv("GPUPOOL_POOL", Write("servers = [\"gpu1:7450\"]\n").c_str(), 1);
  setenv("GPUPOOL_SERVERS", "", 1);
  auto r = ResolveServers(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("GPUPOOL_SERVERS is set but empty"), std::string::npos) << r.status().message();
  unsetenv("GPUPOOL_SERVERS");
  setenv("GPUPOOL_POOL", "", 1);
  r = ResolveServers(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("GPUPOOL_POOL is set but empty"), std::string::npos) << r.status().message();
  o.pool_file = ::testing::TempDir();
  EXPECT_NE(ResolveServers(o).status().message().find("is a directory"), std::string::npos);
}

TEST_F(PoolFileTest, BadFilesAreClearErrors) {
  PoolOptions o;
  o.pool_file = Write("servers = [\"gpu1:7450\"\n");
  auto r = ResolveServers(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind(o.pool_file + ":1:", 0), 0u) << r.status().message();
  o.pool_file = Write("servers = [\"gpu1:7450\"]\nserver = \"x\"\n");
  EXPECT_NE(ResolveServers(o).status().message().find("unknown key 'server'"), std::string::npos);
  o.pool_file = Write("servers = [\"gpu1\"]\n");
  EXPECT_NE(ResolveServers(o).status().message().find("host:port"), std::string::npos);
  o.pool_file = Write("servers = [\"gpu1:99999\"]\n");
  EXPECT_FALSE(ResolveServers(o).ok());
  o.pool_file = Write("servers = []\n");
  EXPECT_NE(ResolveServers(o).status().message().find("no servers"), std::string::npos);
  o.pool_file = "/nonexistent/pool.toml";
  EXPECT_EQ(ResolveServers(o).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpupool
