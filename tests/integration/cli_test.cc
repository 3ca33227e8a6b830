// gp-run, gp-ls and gp-bench as a user runs them: real processes against real agents.
#include <signal.h>

#include "integration/helpers.h"

namespace gpupool::testing {
namespace {

using std::chrono::seconds;

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    agents_ = std::make_unique<AgentGroup>(2, AgentOptions{.name = "cli", .emulated = 2});
  }
  static void TearDownTestSuite() { agents_.reset(); }
  void TearDown() override { ExpectAllFree(Connect(agents_->Addresses()).State()); }
  std::vector<std::string> GpRun(std::vector<std::string> args) {
    std::vector<std::string> argv = {ToolPath("gp-run"), "--servers", agents_->Servers()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  static inline std::unique_ptr<AgentGroup> agents_;
};

TEST_F(Cli, GpRunReturnsTheCommandsExitStatus) {
  EXPECT_EQ(RunCommand(GpRun({"--", "/bin/sh", "-c", "exit 0"})).code, 0);
  EXPECT_EQ(RunCommand(GpRun({"--", "/bin/sh", "-c", "exit 7"})).code, 7);
  EXPECT_EQ(RunCommand(GpRun({"-n", "2", "-p", "0.5", "--", "/bin/sh", "-c", "kill -TERM $$"})).code, 128 + SIGTERM);
  RunResult missing = RunCommand(GpRun({"--", "/nonexistent/program"}));
  EXPECT_EQ(missing.code, 127);
  EXPECT_NE(missing.err.find("/nonexistent/program"), std::string::npos) << missing.err;
}

TEST_F(Cli, GpRunHandsTheLeaseToTheCommand) {
  RunResult r = RunCommand(GpRun({"-n", "3", "-p", "25%", "--", "/bin/sh", "-c", "echo \"$GPUPOOL_LEASE\""}));
  ASSERT_EQ(r.code, 0) << r.err;
  std::string token = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(token.rfind("gpl1:", 0), 0u) << token;
  // The token named a lease that held 3 slices while the command ran; it is released now.
  EXPECT_EQ(Lease::Attach(token).status().code(), StatusCode::kNotFound);
}

TEST_F(Cli, GpRunForwardsSignalsAndReleases) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    Process run(GpRun({"--", "/bin/sh", "-c",
                       "trap 'echo caught; exit 42' TERM INT HUP; echo ready; while :; do sleep 0.05; done"}));
    ASSERT_EQ(run.ReadLine(seconds(10)), "ready") << run.Stderr();
    Pool pool = Connect(agents_->Addresses());
    EXPECT_EQ(LeaseCount(pool.State()), 1u);
    kill(run.pid(), sig);  // Only gp-run: it must pass the signal on.
    EXPECT_EQ(run.ReadLine(seconds(10)), "caught");
    EXPECT_EQ(run.Wait(seconds(10)), 42) << "signal " << sig << ": " << run.Stderr();
    EXPECT_EQ(LeaseCount(pool.State()), 0u);
  }
  // A command that does not catch the signal dies of it; gp-run reports 128+N.
  Process run(GpRun({"--", "/bin/sh", "-c", "echo ready; exec sleep 30"}));
  ASSERT_EQ(run.ReadLine(seconds(10)), "ready");
  kill(run.pid(), SIGINT);
  EXPECT_EQ(run.Wait(seconds(10)), 128 + SIGINT);
}

// gp-lease hold: the token on stdout, the lease held until a signal or (--watch-stdin) stdin's EOF, then released;
// gp-lease release: by the token, from stdin, idempotent; refusals and bad input with their exit statuses.
TEST_F(Cli, GpLeaseHoldsAndReleases) {
  Pool pool = Connect(agents_->Addresses());
  {
    Process hold({ToolPath("gp-lease"), "hold", "-n", "2", "-p", "0.5", "--servers", agents_->Servers()});
    std::string token = hold.ReadLine(seconds(10));
    ASSERT_EQ(token.rfind("gpl1:", 0), 0u) << hold.Stderr();
    EXPECT_EQ(LeaseCount(pool.State()), 1u);
    kill(hold.pid(), SIGTERM);
    EXPECT_EQ(hold.Wait(seconds(10)), 0) << hold.Stderr();
    EXPECT_EQ(LeaseCount(pool.State()), 0u);
  }
  {
    // Killed holder: released by its token (twice: the second finds nothing and succeeds).
    Process hold({ToolPath("gp-lease"), "hold", "-p", "0.25", "--servers", agents_->Servers()});
    std::string token = hold.ReadLine(seconds(10));
    ASSERT_EQ(token.rfind("gpl1:", 0), 0u) << hold.Stderr();
    hold.Signal(SIGKILL);
    hold.Wait(seconds(10));
    EXPECT_EQ(LeaseCount(pool.State()), 1u);
    for (int i = 0; i < 2; ++i) {
      RunResult r = RunCommand({"/bin/sh", "-c", "echo \"$T\" | \"$0\" release -", ToolPath("gp-lease")}, {"T=" + token});
      EXPECT_EQ(r.code, 0) << r.err;
    }
    EXPECT_EQ(LeaseCount(pool.State()), 0u);
  }
  {
    // --watch-stdin: the holder goes when its stdin's writer does.
    RunResult r = RunCommand({"/bin/sh", "-c", "\"$0\" hold --watch-stdin --servers \"$1\" < /dev/null",
                              ToolPath("gp-lease"), agents_->Servers()});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("gpl1:", 0), 0u) << r.out;
    EXPECT_EQ(LeaseCount(pool.State()), 0u);
  }
  RunResult never = RunCommand({ToolPath("gp-lease"), "hold", "-n", "9", "--servers", agents_->Servers()});
  EXPECT_EQ(never.code, 1);
  EXPECT_NE(never.err.find("can never be granted"), std::string::npos) << never.err;
  EXPECT_EQ(RunCommand({ToolPath("gp-lease"), "hold", "-p", "0.01", "--servers", agents_->Servers()}).code, 2);
  RunResult garbage = RunCommand({ToolPath("gp-lease"), "release"}, {"GPUPOOL_LEASE=garbage"});
  EXPECT_EQ(garbage.code, 2) << garbage.err;
  EXPECT_NE(garbage.err.find("malformed lease token"), std::string::npos) << garbage.err;
}

TEST_F(Cli, GpRunBusyFailsOrWaits) {
  Pool pool = Connect(agents_->Addresses());
  auto all = pool.Allocate(Slices(4, 1.0));
  ASSERT_TRUE(all.ok());
  RunResult busy = RunCommand(GpRun({"--", "/bin/true"}));
  EXPECT_EQ(busy.code, 125);
  EXPECT_NE(busy.err.find("busy"), std::string::npos) << busy.err;
  EXPECT_NE(busy.err.find("--wait"), std::string::npos) << busy.err;
  Process waiting(GpRun({"--wait", "20s", "--", "/bin/sh", "-c", "echo got it"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_TRUE(waiting.running());
  EXPECT_TRUE(all->Release().ok());
  EXPECT_EQ(waiting.ReadLine(seconds(20)), "got it");
  EXPECT_EQ(waiting.Wait(seconds(10)), 0) << waiting.Stderr();
}

TEST_F(Cli, GpLsShowsTheTableAndLeases) {
  Pool pool = Connect(agents_->Addresses());
  Request r = Slices(1, 0.5);
  r.label = "train.py --epochs 3";
  auto lease = pool.Allocate(r);
  ASSERT_TRUE(lease.ok());
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--servers", agents_->Servers(), "--leases"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_NE(ls.out.find("SERVER"), std::string::npos);
  EXPECT_NE(ls.out.find("cli0"), std::string::npos);
  EXPECT_NE(ls.out.find("cli1"), std::string::npos);
  EXPECT_NE(ls.out.find("8 GiB / 16 GiB"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("50%"), std::string::npos);
  EXPECT_NE(ls.out.find("shared"), std::string::npos);
  EXPECT_NE(ls.out.find(lease->id()), std::string::npos);
  EXPECT_NE(ls.out.find("train.py --epochs 3"), std::string::npos);
  // Four device rows + header, then the lease table.
  EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'), 1 + 4 + 1 + 1 + 1);
  EXPECT_TRUE(lease->Release().ok());
}

TEST_F(Cli, GpLsJsonHasSchemaVersionBaseUnitsAndNullForUnknown) {
  Pool pool = Connect(agents_->Addresses());
  auto lease = pool.Allocate(Slices(1, 0.25));
  ASSERT_TRUE(lease.ok());
  // One live server and one address where nothing listens.
  std::string servers = agents_->Servers() + ",127.0.0.1:1";
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--json", "--leases", "--servers", servers});
  ASSERT_EQ(ls.code, 0) << ls.err;
  const std::string& j = ls.out;
  EXPECT_EQ(j.rfind("{\"schema_version\":1,", 0), 0u) << j;
  EXPECT_NE(j.find("\"memory_total_bytes\":17179869184"), std::string::npos);
  EXPECT_NE(j.find("\"memory_allocated_bytes\":4294967296"), std::string::npos);
  EXPECT_NE(j.find("\"compute_allocated\":0.25"), std::string::npos);
  EXPECT_NE(j.find("\"id\":\"" + lease->id() + "\""), std::string::npos);
  EXPECT_NE(j.find("\"address\":\"127.0.0.1:1\",\"up\":false,\"name\":null"), std::string::npos) << j;
  EXPECT_EQ(std::count(j.begin(), j.end(), '{'), std::count(j.begin(), j.end(), '}'));
  EXPECT_EQ(std::count(j.begin(), j.end(), '['), std::count(j.begin(), j.end(), ']'));
  EXPECT_TRUE(lease->Release().ok());
}

TEST_F(Cli, GpLsFailsOnlyWhenNoServerAnswers) {
  RunResult none = RunCommand({ToolPath("gp-ls"), "--servers", "127.0.0.1:1,127.0.0.1:2"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.out.find("down"), std::string::npos) << none.out;
  RunResult some = RunCommand({ToolPath("gp-ls"), "--servers", agents_->Servers() + ",127.0.0.1:1"});
  EXPECT_EQ(some.code, 0);
}

// A few steps of the training-like loop, through an agent and on gp-bench's own emulated device: it ran, its results
// matched the host's (gp-bench exits 1 otherwise), and the JSON carries the figures with their baseline and target.
TEST_F(Cli, GpBenchLoopJsonReportsBothVariants) {
  RunResult bench =
      RunCommand({ToolPath("gp-bench"), "loop", "--json", "--steps", "4", "--servers", agents_->Servers()});
  ASSERT_EQ(bench.code, 0) << bench.err;
  const std::string& j = bench.out;
  EXPECT_EQ(j.rfind("{\"schema_version\":1,", 0), 0u) << j;
  EXPECT_NE(j.find("\"loop_steps\":4"), std::string::npos) << j;
  EXPECT_NE(j.find("{\"name\":\"loop_step\",\"value\":"), std::string::npos) << j;
  EXPECT_NE(j.find("{\"name\":\"loop_step_graph\",\"value\":"), std::string::npos) << j;
  EXPECT_NE(j.find("\"baseline_name\":\"the same loop on an emulated device in this process\""), std::string::npos)
      << j;
  EXPECT_NE(j.find("\"transport\":\"tcp\""), std::string::npos) << j;
  EXPECT_EQ(j.find("\"baseline\":null"), std::string::npos) << j;
}

// Eight clients at once through an agent over TCP, and the host's reference under the same load: eight raw TCP
// ping-pongs at once, its ratio that of its own p99 to its own p50, with no target.
TEST_F(Cli, GpBenchLoadJsonReportsTheClientsAndTheRawReference) {
  RunResult bench = RunCommand({ToolPath("gp-bench"), "load", "--json", "--servers", agents_->Servers()});
  ASSERT_EQ(bench.code, 0) << bench.err;
  const std::string& j = bench.out;
  EXPECT_NE(j.find("{\"name\":\"load_rtt_p99\",\"value\":"), std::string::npos) << j;
  EXPECT_NE(j.find("\"baseline_name\":\"p50 of the same 8 clients\""), std::string::npos) << j;
  const size_t raw = j.find("{\"name\":\"load_raw_rtt_p99\",\"value\":");
  ASSERT_NE(raw, std::string::npos) << j;
  const std::string figure = j.substr(raw, j.find('}', raw) - raw);
  EXPECT_NE(figure.find("\"baseline_name\":\"p50 of 8 raw TCP loopback ping-pongs at once"), std::string::npos)
      << figure;
  EXPECT_NE(figure.find("\"target\":null"), std::string::npos) << figure;
  EXPECT_NE(figure.find("\"transport\":\"tcp\""), std::string::npos) << figure;
  EXPECT_EQ(figure.find("\"baseline\":null"), std::string::npos) << figure;
}

TEST_F(Cli, LibraryExampleAllocatesAndReleases) {
  RunResult r = RunCommand({std::string(GPUPOOL_EXAMPLES_DIR) + "/allocate", "2", "0.5"},
                    {"GPUPOOL_SERVERS=" + agents_->Servers()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("released: ok"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gpupool::testing
