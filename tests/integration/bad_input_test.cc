// Bad input gets a clear error and changes nothing.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "integration/fake_agent.h"
#include "integration/helpers.h"

namespace gpupool::testing {
namespace {

class BadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { agent_ = std::make_unique<Agent>(AgentOptions{.name = "strict", .emulated = 2}); }
  static void TearDownTestSuite() { agent_.reset(); }
  void TearDown() override { ExpectAllFree(Connect({agent_->address()}).State()); }
  RunResult GpRun(std::vector<std::string> args) {
    std::vector<std::string> argv = {ToolPath("gp-run"), "--servers", agent_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  static inline std::unique_ptr<Agent> agent_;
};

TEST_F(BadInput, MalformedAgentConfigNamesFileAndLine) {
  TempDir dir;
  std::string path = dir.Write("agent.toml", "name = \"x\"\n[emulated]\ncount = 2\nmemory = [\n");
  RunResult r = RunCommand({ToolPath("gp-agent"), "--config", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path + ":"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("malformed TOML"), std::string::npos) << r.err;
}

TEST_F(BadInput, UnknownAgentConfigKeyIsRefused) {
  TempDir dir;
  std::string path = dir.Write("agent.toml", "name = \"x\"\n[emulated]\ncount = 2\nmemroy = \"8GiB\"\n");
  RunResult r = RunCommand({ToolPath("gp-agent"), "--config", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path + ":4: unknown key 'memroy'"), std::string::npos) << r.err;
}

TEST_F(BadInput, MalformedPoolFileNamesFileAndLine) {
  TempDir dir;
  std::string path = dir.Write("pool.toml", "# pool\nservers = [\"a:1\",\n  3]\n");
  RunResult r = RunCommand({ToolPath("gp-run"), "--", "/bin/true"}, {"GPUPOOL_SERVERS", "GPUPOOL_POOL=" + path});
  EXPECT_EQ(r.code, 125);
  EXPECT_NE(r.err.find(path + ":3"), std::string::npos) << r.err;
  path = dir.Write("pool2.toml", "servers = [\"a:1\"]\ntimeout = 3\n");
  r = RunCommand({ToolPath("gp-ls")}, {"GPUPOOL_SERVERS", "GPUPOOL_POOL=" + path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown key 'timeout'"), std::string::npos) << r.err;
}

TEST_F(BadInput, AbsurdRequestsAreRefusedWithTheReason) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"-p", "1.5"}, "out of range"},
      {{"-p", "0"}, "out of range"},
      {{"-p", "0.01"}, "0.05"},
      {{"-p", "lots"}, "not a fraction"},
      {{"-n", "0"}, "at least 1"},
      {{"-n", "-2"}, "at least 1"},
      {{"-m", "3 bananas"}, "unknown size unit"},
      {{"-n", "3"}, "can never be granted"},
      {{"-m", "1TiB"}, "more memory than any"},
      {{"--class", "h100"}, "no device of class 'h100'"},
      {{"--wait", "forever"}, "not a duration"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--", "/bin/true"});
    RunResult r = GpRun(args);
    EXPECT_EQ(r.code, 125) << fmt::format("{}", fmt::join(c.args, " "));
    EXPECT_NE(r.err.find(c.says), std::string::npos) << fmt::format("{}", fmt::join(c.args, " ")) << ": " << r.err;
  }
  Pool pool = Connect({agent_->address()});
  Request r = Slices(3, 1.0);
  EXPECT_EQ(pool.Allocate(r).status().code(), StatusCode::kUnsatisfiable);
  r = Slices(-1, 1.0);
  EXPECT_EQ(pool.Allocate(r).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(BadInput, UnknownOptionsGetTheToolsUsageStatus) {
  RunResult run = GpRun({"--frobnicate", "--", "/bin/true"});
  EXPECT_EQ(run.code, 125) << run.err;
  EXPECT_NE(run.err.find("frobnicate"), std::string::npos) << run.err;
  EXPECT_EQ(RunCommand({ToolPath("gp-ls"), "--frobnicate"}).code, 2);
  EXPECT_EQ(RunCommand({ToolPath("gp-agent"), "--emu", "-3"}).code, 2);
  EXPECT_EQ(RunCommand({ToolPath("gp-run"), "--help"}).code, 0);
}

TEST_F(BadInput, UnreachableServersAreReportedNotHung) {
  Pool pool = Connect({"127.0.0.1:1"});
  auto start = std::chrono::steady_clock::now();
  auto lease = pool.Allocate(Slices(1, 1.0));
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lease.status().message().find("127.0.0.1:1"), std::string::npos) << lease.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", "127.0.0.1:1", "--", "/bin/true"});
  EXPECT_EQ(r.code, 125);
  EXPECT_NE(r.err.find("no server of the pool can take a lease now: server 127.0.0.1:1 cannot be reached: it "
                       "refused the connection"), std::string::npos) << r.err;
  // A server name that does not resolve is also just "down".
  PoolState state = Connect({"no-such-host.invalid:7450", agent_->address()}).State();
  EXPECT_FALSE(state.servers[0].up);
  EXPECT_TRUE(state.servers[1].up);
}

TEST_F(BadInput, ServerOfAnotherProtocolVersionIsRefused) {
  auto future = StartAgentOfVersion(99);
  Pool pool = Connect({future->address()});
  auto lease = pool.Allocate(Slices(1, 1.0));
  EXPECT_FALSE(lease.ok());
  PoolState state = pool.State();
  ASSERT_EQ(state.servers.size(), 1u);
  EXPECT_FALSE(state.servers[0].up);
  EXPECT_NE(state.servers[0].error.find("protocol version 99"), std::string::npos) << state.servers[0].error;
  // Mixed pool: the good agent still serves.
  Pool mixed = Connect({future->address(), agent_->address()});
  auto ok = mixed.Allocate(Slices(1, 0.5));
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST_F(BadInput, ServerSpeakingAnotherProtocolEntirelyIsRefused) {
  auto http = StartHttpServer();
  Pool pool = Connect({http->address()});
  auto start = std::chrono::steady_clock::now();
  PoolState state = pool.State();
  EXPECT_FALSE(state.servers[0].up);
  EXPECT_NE(state.servers[0].error.find("handshake"), std::string::npos) << state.servers[0].error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
}

TEST_F(BadInput, MalformedLeaseTokenIsRefused) {
  EXPECT_EQ(Lease::Attach("not a token").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Lease::Attach("gpl1:00ff:00ff:" + agent_->address()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpupool::testing
