// Issue 43, leases moving between agents (gp-agent ctl migrate --to, drain --migrate): real agents on Unix sockets,
// real nvcc-built programs under gp-run whose state (device memory, a module's variable, graphs replayed before and
// after, a stream-ordered pool) is checked bit for bit at their end, and the parties killed at each step of a move.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "admin_helpers.h"
#include "integration/helpers.h"

namespace gpupool::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Two agents of two emulated GPUs each, on Unix sockets in one directory (an administrator of one is one of the
// other: the same user), with `a_env` and `b_env` in their environments.
struct TwoAgents {
  explicit TwoAgents(std::vector<std::string> a_env = {}, std::vector<std::string> b_env = {},
                     std::string lease_ttl = "") {
    chmod(dir.path().c_str(), 0755);
    a = std::make_unique<Agent>(AgentOptions{.name = "leaving", .emulated = 2, .emulated_memory = "2GiB",
                                             .lease_ttl = lease_ttl, .listen = "unix:" + dir.path() + "/a.sock",
                                             .env = std::move(a_env)});
    b = std::make_unique<Agent>(AgentOptions{.name = "arriving", .emulated = 2, .emulated_memory = "2GiB",
                                             .lease_ttl = lease_ttl, .listen = "unix:" + dir.path() + "/b.sock",
                                             .env = std::move(b_env)});
  }
  // The leases `agent` holds now (none when it does not answer).
  std::vector<LeaseInfo> LeasesOn(Agent& agent) {
    PoolState state = Connect({agent.address()}).State();
    return state.servers.at(0).up ? state.servers.at(0).leases : std::vector<LeaseInfo>{};
  }
  // The session workers `agent` runs now.
  size_t WorkersOf(Agent& agent) {
    const std::string pid = std::to_string(agent.process().pid());
    std::ifstream in("/proc/" + pid + "/task/" + pid + "/children");
    size_t n = 0;
    for (pid_t child; in >> child;) ++n;
    return n;
  }
  TempDir dir;
  std::unique_ptr<Agent> a, b;
};

// A running lease moves from one agent to another and back and on again, its program never stopping: each agent
// holds it only while it is there, its program's sessions follow it (the old agent answers where it went), and when
// the program ends gp-run's release reaches the agent that holds it then (the lease is gone at once, not expired).
TEST(BetweenAgents, ALeaseMovesToAnotherAgentAndBackWhileItsProgramRunsAndFinishesExact) {
  TwoAgents agents;
  const std::string a = agents.a->address(), b = agents.b->address();
  Process program({ToolPath("gp-run"), "--servers", a, "-p", "0.5", "--", Program("moving_state"), "300"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  Pool pool = Connect({a});
  const std::string id = LeaseIdOf(pool, "moving_state");
  ASSERT_FALSE(id.empty());
  std::string from = a, to = b;
  for (int move = 0; move < 3; ++move) {
    SCOPED_TRACE(fmt::format("move {} from {} to {}", move, from, to));
    RunResult moved = Ctl(from, {"migrate", id, "--to", to, "--json"});
    ASSERT_EQ(moved.code, 0) << moved.err << agents.a->process().Stderr() << agents.b->process().Stderr();
    EXPECT_NE(moved.out.find(fmt::format("\"server\": \"{}\"", to)), std::string::npos) << moved.out;
    EXPECT_NE(moved.out.find("\"sessions\": 1"), std::string::npos) << moved.out;
    Agent& there = to == a ? *agents.a : *agents.b;
    Agent& here = to == a ? *agents.b : *agents.a;
    ASSERT_EQ(agents.LeasesOn(there).size(), 1u);
    EXPECT_EQ(agents.LeasesOn(there)[0].id, id) << "the lease keeps its id";
    EXPECT_TRUE(agents.LeasesOn(here).empty()) << "the agent it left holds nothing of it";
    // A second move at once: the old agent says where the lease went, and moving it again from there is refused.
    EXPECT_EQ(Ctl(from, {"migrate", id, "--to", to}).code, 1);
    std::swap(from, to);
    std::this_thread::sleep_for(milliseconds(300));
  }
  ExpectFinishedExact(program, "ok 600");
  // Released where it was (b, after three moves), not left to expire.
  EXPECT_TRUE(Eventually([&] { return agents.LeasesOn(*agents.b).empty() && agents.LeasesOn(*agents.a).empty(); },
                         seconds(5)));
  EXPECT_TRUE(Eventually([&] { return agents.WorkersOf(*agents.a) == 0 && agents.WorkersOf(*agents.b) == 0; },
                         seconds(10)));
}

// A move that fails at any step on the agent the lease goes to (it refuses the lease, it dies as the images come, as
// it is asked to restore them or to commit, its new worker refuses its image or dies restoring it) leaves the lease
// on the agent it was on, its program running to an exact end, and nothing of it on the other agent.
TEST(BetweenAgents, AMoveThatFailsAtAnyStepLeavesTheProgramRunningWhereItWas) {
  for (const std::string fault :
       {"arrive-refuse", "arrive-piece", "arrive-restore", "arrive-commit", "restore", "restore-crash"}) {
    SCOPED_TRACE(fault);
    TwoAgents agents({}, {"GPUPOOL_MOVE_FAULT=" + fault});
    const std::string a = agents.a->address(), b = agents.b->address();
    Process program({ToolPath("gp-run"), "--servers", a, "-p", "0.5", "--", Program("moving_state"), "120"});
    ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
    const std::vector<LeaseInfo> before = agents.LeasesOn(*agents.a);
    ASSERT_EQ(before.size(), 1u);
    RunResult failed = Ctl(a, {"migrate", before[0].id, "--to", b});
    EXPECT_EQ(failed.code, 1) << failed.out;
    EXPECT_FALSE(failed.err.empty());
    const std::vector<LeaseInfo> after = agents.LeasesOn(*agents.a);
    ASSERT_EQ(after.size(), 1u);
    EXPECT_EQ(after[0].devices, before[0].devices) << "the lease stays where it was";
    // The agent it did not go to (if alive) drops all it had of it.
    if (agents.b->process().running()) {
      EXPECT_TRUE(Eventually([&] { return agents.LeasesOn(*agents.b).empty() && agents.WorkersOf(*agents.b) == 0; },
                             seconds(10)));
    }
    ExpectFinishedExact(program, "ok 240");
  }
}

// The agent a lease leaves dies in the middle of the move (its sessions checkpointed, their images not yet sent):
// its program goes with it (its workers were that agent's), and the agent it was going to keeps nothing of it.
TEST(BetweenAgents, TheLeavingAgentDyingMidMoveLeavesNothingOnTheOther) {
  TwoAgents agents({"GPUPOOL_MOVE_FAULT=leave-restore"}, {});
  const std::string a = agents.a->address(), b = agents.b->address();
  Process program({ToolPath("gp-run"), "--servers", a, "-p", "0.5", "--", Program("moving_state"), "300"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  const std::vector<LeaseInfo> leases = agents.LeasesOn(*agents.a);
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(Ctl(a, {"migrate", leases[0].id, "--to", b}).code, 1);
  EXPECT_TRUE(Eventually([&] { return !agents.a->process().running(); }, seconds(10)));
  EXPECT_TRUE(Eventually([&] { return agents.LeasesOn(*agents.b).empty() && agents.WorkersOf(*agents.b) == 0; },
                         seconds(10)))
      << agents.b->process().Stderr();
  EXPECT_NE(program.Wait(seconds(60)), 0) << "its agent is gone";
}

// A program killed (with its gp-run) while its lease moves between agents: the move ends, done or undone, and once
// the lease expires neither agent holds anything of it.
TEST(BetweenAgents, AProgramKilledDuringItsMoveLeavesNothingOnEitherAgent) {
  TwoAgents agents({}, {}, "2s");
  const std::string a = agents.a->address(), b = agents.b->address();
  auto program = std::make_unique<Process>(std::vector<std::string>{
      ToolPath("gp-run"), "--servers", a, "-p", "0.5", "--", Program("moving_state"), "300"});
  ASSERT_EQ(program->ReadLine(seconds(60)), "ready") << program->Stderr();
  const std::vector<LeaseInfo> leases = agents.LeasesOn(*agents.a);
  ASSERT_EQ(leases.size(), 1u);
  Process move({ToolPath("gp-agent"), "ctl", "--server", a, "migrate", leases[0].id, "--to", b});
  program.reset();  // SIGKILLs gp-run's process group: the program and gp-run.
  const int moved = move.Wait(seconds(60));
  EXPECT_TRUE(moved == 0 || moved == 1) << moved << " " << move.Stderr();
  EXPECT_TRUE(Eventually([&] {
    return agents.LeasesOn(*agents.a).empty() && agents.LeasesOn(*agents.b).empty() &&
           agents.WorkersOf(*agents.a) == 0 && agents.WorkersOf(*agents.b) == 0;
  }, seconds(30)));
  EXPECT_TRUE(agents.a->process().running());
  EXPECT_TRUE(agents.b->process().running());
}

// drain --migrate: every running lease moves to the pool's other agents (GPUPOOL_SERVERS, as the administrator's
// client knows the pool), the drained agent is left with none, and the programs finish exact where they went.
TEST(BetweenAgents, DrainMigrateMovesEveryLeaseOffTheAgent) {
  TwoAgents agents;
  const std::string a = agents.a->address(), b = agents.b->address();
  Process first({ToolPath("gp-run"), "--servers", a, "-p", "0.5", "--", Program("moving_state"), "300"});
  Process second({ToolPath("gp-run"), "--servers", a, "-p", "0.5", "--", Program("moving_state"), "300", "1500"});
  ASSERT_EQ(first.ReadLine(seconds(60)), "ready") << first.Stderr();
  ASSERT_EQ(second.ReadLine(seconds(60)), "ready") << second.Stderr();
  ASSERT_EQ(agents.LeasesOn(*agents.a).size(), 2u);
  RunResult drained = RunCommand({ToolPath("gp-agent"), "ctl", "--server", a, "drain", "--migrate", "--wait", "20s"},
                                 {"GPUPOOL_SERVERS=" + a + "," + b}, seconds(120));
  EXPECT_EQ(drained.code, 0) << drained.out << drained.err;
  EXPECT_NE(drained.out.find("drained"), std::string::npos) << drained.out;
  EXPECT_TRUE(agents.LeasesOn(*agents.a).empty());
  EXPECT_EQ(agents.LeasesOn(*agents.b).size(), 2u);
  ExpectFinishedExact(first, "ok 600");
  ExpectFinishedExact(second, "ok 600");
  // With nowhere to go, drain --migrate says so and fails.
  Process third({ToolPath("gp-run"), "--servers", b, "-p", "0.5", "--", Program("moving_state"), "100"});
  ASSERT_EQ(third.ReadLine(seconds(60)), "ready") << third.Stderr();
  RunResult nowhere = RunCommand({ToolPath("gp-agent"), "ctl", "--server", b, "drain", "--migrate", "--to", a},
                                 {}, seconds(60));
  EXPECT_EQ(nowhere.code, 1) << nowhere.out << nowhere.err;
  EXPECT_NE(nowhere.out.find("could not move"), std::string::npos) << nowhere.out;
  ExpectFinishedExact(third, "ok 200");
}

}  // namespace
}  // namespace gpupool::testing
