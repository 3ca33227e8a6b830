// Issue 43, leases moving between agents (gp-agent ctl migrate --to, drain --migrate): real agents on Unix sockets,
// real nvcc-built programs under gp-run whose state (device memory, a module's variable, graphs replayed before and
// after, a stream-ordered pool) is checked bit for bit at their end, and the parties killed at each step of a move.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>

#include <capnp/ez-rpc.h>
#include <fmt/format.h>

#include "admin_helpers.h"
#include "agent/auth.h"
#include "integration/helpers.h"
#include "pool.capnp.h"

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

// A process of the lease started after the move (its token still names the agent the lease left) is sent where the
// lease went, and opens its session there; a lease spread over two agents moves its part on one of them, and its
// end releases both parts where they are.
TEST(BetweenAgents, ALaterProcessAndTheLeasesOtherPartFindItWhereItWent) {
  TwoAgents agents;
  const std::string a = agents.a->address(), b = agents.b->address();
  const std::string script = Program("moving_state") + " 200 && " + Program("busy") + " 0.3";
  Process program({ToolPath("gp-run"), "--servers", a, "-p", "0.5", "--", "/bin/sh", "-c", script});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  const std::vector<LeaseInfo> leases = agents.LeasesOn(*agents.a);
  ASSERT_EQ(leases.size(), 1u);
  RunResult moved = Ctl(a, {"migrate", leases[0].id, "--to", b});
  ASSERT_EQ(moved.code, 0) << moved.err;
  EXPECT_EQ(program.Wait(seconds(120)), 0) << program.Stderr();
  const std::string out = program.ReadAll();
  EXPECT_NE(out.find("ok 400"), std::string::npos) << out;
  EXPECT_NE(out.find("busy: "), std::string::npos) << out;
  EXPECT_EQ(out.find("busy: cuda"), std::string::npos) << out;
  EXPECT_NE(agents.b->process().Stderr().find("session on device"), std::string::npos)
      << "the later process opened its session where the lease went";

  // Two slices, one on each agent, moved from the first to a third agent.
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  Agent c(AgentOptions{.name = "third", .emulated = 2, .emulated_memory = "2GiB",
                       .listen = "unix:" + dir.path() + "/c.sock"});
  Process spread({ToolPath("gp-run"), "--servers", a + "," + b, "-n", "2", "--spread", "-p", "0.5", "--",
                  Program("moving_state"), "200"});
  ASSERT_EQ(spread.ReadLine(seconds(60)), "ready") << spread.Stderr();
  const std::vector<LeaseInfo> on_a = agents.LeasesOn(*agents.a);
  ASSERT_EQ(on_a.size(), 1u);
  RunResult part = Ctl(a, {"migrate", on_a[0].id, "--to", c.address()});
  ASSERT_EQ(part.code, 0) << part.err;
  EXPECT_EQ(agents.LeasesOn(c).size(), 1u);
  ExpectFinishedExact(spread, "ok 400");
  EXPECT_TRUE(Eventually([&] {
    return agents.LeasesOn(*agents.a).empty() && agents.LeasesOn(*agents.b).empty() && agents.LeasesOn(c).empty();
  }, seconds(5))) << "both parts released where they were";
}

// A session whose memory is mapped through virtual memory management travels whole (its physical memory is not in
// the device's memory file, which other moves hand over in place): moved to the agent's other GPU, whose worker
// writes the same bytes into the same file, then to another agent and back, its words come back exact.
TEST(BetweenAgents, ASessionMappedThroughVirtualMemoryMovesWhole) {
  TwoAgents agents;
  const std::string a = agents.a->address(), b = agents.b->address();
  Process program({ToolPath("gp-run"), "--servers", a, "-p", "0.5", "--", Program("moving_vmm"), "150"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  const std::vector<LeaseInfo> leases = agents.LeasesOn(*agents.a);
  ASSERT_EQ(leases.size(), 1u);
  const std::string id = leases[0].id;
  RunResult here = Ctl(a, {"migrate", id, "--json"});
  ASSERT_EQ(here.code, 0) << here.err;
  const size_t at = here.out.find("\"bytes\": ");
  ASSERT_NE(at, std::string::npos) << here.out;
  EXPECT_GE(std::stoull(here.out.substr(at + 9)), uint64_t{4} << 20) << "the image carried the mapped memory: "
                                                                    << here.out;
  ASSERT_EQ(Ctl(a, {"migrate", id, "--to", b}).code, 0);
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_EQ(Ctl(b, {"migrate", id, "--to", a}).code, 0);
  ExpectFinishedExact(program, "ok 150");
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

// A program on the host of the agent its lease is on shares memory with its worker for copies (it reaches the agent
// by its Unix socket). Its lease moves to an agent it reaches over TCP, whose worker cannot map that memory: the
// copies it had sent naming the memory and that had not run yet are sent with their bytes, later ones go through
// the socket, and the program finishes exact. Moved back, it goes on without sharing. Over TCP the agent the lease
// leaves proves with a token that it administers the other.
TEST(BetweenAgents, AProgramSharingMemoryWithItsWorkerFollowsItsLeaseToAnAgentOverTcp) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  const std::string token = "moving-between-agents-token-0123456789";
  const std::string tokens = dir.path() + "/tokens.toml";
  {
    std::ofstream out(tokens);
    out << "[tokens]\n" << agent::UserNameOf(geteuid()) << " = \"" << token << "\"\n";
  }
  chmod(tokens.c_str(), 0600);
  Agent a(AgentOptions{.name = "local", .emulated = 2, .emulated_memory = "2GiB",
                       .listen = "unix:" + dir.path() + "/a.sock", .env = {"GPUPOOL_TOKEN=" + token}});
  Agent b(AgentOptions{.name = "remote", .emulated = 2, .emulated_memory = "2GiB",
                       .extra_args = {"--tokens", tokens}});
  Process program({ToolPath("gp-run"), "--servers", a.address(), "-p", "0.5", "--", Program("moving_state"), "400"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  PoolState state = Connect({a.address()}).State();
  ASSERT_EQ(state.servers.at(0).leases.size(), 1u);
  const std::string id = state.servers.at(0).leases[0].id;
  RunResult there = Ctl(a.address(), {"migrate", id, "--to", b.address()});
  ASSERT_EQ(there.code, 0) << there.err << a.process().Stderr() << b.process().Stderr();
  std::this_thread::sleep_for(milliseconds(500));
  RunResult back = RunCommand({ToolPath("gp-agent"), "ctl", "--server", b.address(), "migrate", id, "--to",
                               a.address()},
                              {"GPUPOOL_TOKEN=" + token}, seconds(60));
  ASSERT_EQ(back.code, 0) << back.err << b.process().Stderr();
  ExpectFinishedExact(program, "ok 800");

  // Copies through the shared memory in flight (both ways, and a second stream's) at each move, moved back and
  // forth between the two hosts: every byte comes back as it should.
  Process copies({ToolPath("gp-run"), "--servers", a.address(), "-p", "0.5", "--", Program("copy_moves"), "150"});
  ASSERT_EQ(copies.ReadLine(seconds(60)), "ready") << copies.Stderr();
  state = Connect({a.address()}).State();
  ASSERT_EQ(state.servers.at(0).leases.size(), 1u);
  const std::string busy = state.servers.at(0).leases[0].id;
  for (int move = 0; move < 4; ++move) {
    const bool to_b = move % 2 == 0;
    RunResult moved = RunCommand({ToolPath("gp-agent"), "ctl", "--server", to_b ? a.address() : b.address(),
                                  "migrate", busy, "--to", to_b ? b.address() : a.address()},
                                 {"GPUPOOL_TOKEN=" + token}, seconds(60));
    ASSERT_EQ(moved.code, 0) << "move " << move << ": " << moved.err;
    std::this_thread::sleep_for(milliseconds(200));
  }
  ExpectFinishedExact(copies, "ok 150");
}

// What only another agent may ask (adopt), asked wrongly: a lease with no id, no slice, a session of no slice, windows
// no worker could map, tickets of the wrong size or too many, devices of another model, more memory or sessions than
// the agent has: each is refused with its reason and leaves nothing (no lease, no worker). An adoption whose images
// come out of order, whose memory comes past its slice, or that is asked to restore without its images, ends all it
// had made; one whose caller hangs up before its commit too. A client that is not an administrator is refused adopt altogether.
TEST(BetweenAgents, AnAdoptionNoAgentWouldAskForIsRefusedAndLeavesNothing) {
  TwoAgents agents;
  Agent& agent = *agents.a;
  capnp::EzRpcClient client(agent.address());
  auto& ws = client.getWaitScope();
  auto adopt = client.getMain<wire::Agent>();
  const std::string model = Connect({agent.address()}).State().servers.at(0).devices.at(0).model;
  // A well-formed adoption of one half-GPU slice and one session, which `spoil` then makes wrong.
  int serial = 0;
  auto ask = [&](const std::function<void(wire::Agent::AdoptParams::Builder)>& spoil) {
    auto req = adopt.adoptRequest();
    req.initLease().setId(fmt::format("adopted-{}", ++serial));
    req.getLease().setSecret("secret");
    req.initOwner().setUser("root");
    req.setOwnerVerified(true);
    auto slice = req.initSlices(1)[0];
    slice.setMemoryBytes(uint64_t{512} << 20);
    slice.setShareMicros(500000);
    slice.setModel(model);
    slice.setEmulated(true);
    auto session = req.initSessions(1)[0];
    session.setWindowBase(uint64_t{40} << 40);
    session.setWindowBytes(uint64_t{2} << 30);
    session.initTickets(1).set(0, kj::arrayPtr(reinterpret_cast<const kj::byte*>("0123456789abcdef"), 16));
    spoil(req);
    return req.send().wait(ws);
  };
  auto nothing_left = [&] {
    return Eventually([&] {
      ws.poll();  // A dropped arrival is released to the agent as this client's loop turns.
      return agents.LeasesOn(agent).empty() && agents.WorkersOf(agent) == 0;
    }, seconds(10));
  };
  using Code = wire::Outcome::Code;
  const std::vector<std::pair<std::string, std::function<void(wire::Agent::AdoptParams::Builder)>>> wrong = {
      {"no id", [](auto r) { r.getLease().setId(""); }},
      {"no slice", [](auto r) { r.initSlices(0); }},
      {"a session of no slice", [](auto r) { r.getSessions()[0].setSlice(7); }},
      {"a window not GiB-aligned", [](auto r) { r.getSessions()[0].setWindowBase((uint64_t{40} << 40) + 4096); }},
      {"a window past the address space", [](auto r) { r.getSessions()[0].setWindowBase(uint64_t{1} << 47); }},
      {"a window smaller than the slice", [](auto r) { r.getSessions()[0].setWindowBytes(1 << 20); }},
      {"a ticket of 3 bytes",
       [](auto r) { r.getSessions()[0].initTickets(1).set(0, kj::arrayPtr(reinterpret_cast<const kj::byte*>("abc"), 3)); }},
      {"65 tickets", [](auto r) { r.getSessions()[0].initTickets(65); }},
  };
  for (const auto& [what, spoil] : wrong) {
    SCOPED_TRACE(what);
    auto reply = ask(spoil);
    EXPECT_EQ(reply.getOutcome().getCode(), Code::INVALID_ARGUMENT) << reply.getOutcome().getMessage().cStr();
    EXPECT_FALSE(reply.hasArrival());
    EXPECT_TRUE(nothing_left());
  }
  const std::vector<std::pair<std::string, std::function<void(wire::Agent::AdoptParams::Builder)>>> no_room = {
      {"another model", [](auto r) { r.getSlices()[0].setModel("NVIDIA H100 80GB HBM3"); }},
      {"more memory than a device", [](auto r) { r.getSlices()[0].setMemoryBytes(uint64_t{1} << 40); }},
      {"more sessions than allowed", [](auto r) {
         auto sessions = r.initSessions(4096);
         for (auto s : sessions) {
           s.setWindowBase(uint64_t{40} << 40);
           s.setWindowBytes(uint64_t{2} << 30);
           s.initTickets(1).set(0, kj::arrayPtr(reinterpret_cast<const kj::byte*>("0123456789abcdef"), 16));
         }
       }},
  };
  for (const auto& [what, spoil] : no_room) {
    SCOPED_TRACE(what);
    auto reply = ask(spoil);
    EXPECT_EQ(reply.getOutcome().getCode(), Code::BUSY) << reply.getOutcome().getMessage().cStr();
    EXPECT_TRUE(nothing_left());
  }
  // An accepted adoption sent `wrong` (pieces of its image, or of its memory, as (offset, bytes) in order), then asked
  // to restore: refused (its outcome, or the stream broken), and nothing of it is left.
  using Sent = std::pair<bool, uint64_t>;  // Memory (else image), at this offset; 5 bytes each.
  auto refused_after = [&](const std::vector<Sent>& wrong) {
    auto reply = ask([](auto) {});
    EXPECT_EQ(reply.getOutcome().getCode(), Code::OK) << reply.getOutcome().getMessage().cStr();
    if (reply.getOutcome().getCode() != Code::OK) return false;
    EXPECT_EQ(agents.LeasesOn(agent).size(), 1u);
    auto arrival = reply.getArrival();
    const auto five = kj::arrayPtr(reinterpret_cast<const kj::byte*>("bytes"), 5);
    bool refused = false;
    try {
      for (const auto& [memory, offset] : wrong) {
        if (memory) {
          auto req = arrival.memoryRequest();
          req.setOffset(offset);
          req.setData(five);
          req.send().wait(ws);
        } else {
          auto req = arrival.pieceRequest();
          req.setOffset(offset);
          req.setData(five);
          req.send().wait(ws);
        }
      }
      auto restored = arrival.restoreRequest();
      restored.initConsumed(1);
      refused = restored.send().wait(ws).getOutcome().getCode() != Code::OK;
    } catch (const kj::Exception&) {
      refused = true;
    }
    return refused;
  };
  // Its image's pieces out of order.
  EXPECT_TRUE(refused_after({{false, 5}}));
  EXPECT_TRUE(nothing_left());
  // Memory (as the leaving agent sends it apart from the image) inside the slice, then past it.
  EXPECT_TRUE(refused_after({{true, 4096}, {true, uint64_t{1} << 40}}));
  EXPECT_TRUE(nothing_left());
  // Accepted, then asked to restore with no image, or with a count of frames per session that does not match.
  for (unsigned counts : {1u, 2u}) {
    auto reply = ask([](auto) {});
    ASSERT_EQ(reply.getOutcome().getCode(), Code::OK);
    auto restored = reply.getArrival().restoreRequest();
    restored.initConsumed(counts);
    EXPECT_NE(restored.send().wait(ws).getOutcome().getCode(), Code::OK);
    EXPECT_TRUE(nothing_left());
  }
  // Accepted, and its caller hangs up before the commit.
  {
    auto reply = ask([](auto) {});
    ASSERT_EQ(reply.getOutcome().getCode(), Code::OK);
    EXPECT_EQ(agents.WorkersOf(agent), 1u) << "a worker waits for the image";
  }
  EXPECT_TRUE(nothing_left());
  // Not an administrator: a TCP client without a token.
  Agent tcp(AgentOptions{.name = "tcp", .emulated = 1, .emulated_memory = "2GiB"});
  capnp::EzRpcClient stranger(tcp.address());
  auto req = stranger.getMain<wire::Agent>().adoptRequest();
  req.initLease().setId("x");
  req.getLease().setSecret("y");
  auto refused = req.send().wait(stranger.getWaitScope());
  EXPECT_EQ(refused.getOutcome().getCode(), Code::PERMISSION_DENIED) << refused.getOutcome().getMessage().cStr();
  EXPECT_TRUE(agent.process().running());
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
  // "drained" came once every holder had been told where its lease went: the agent may go now, and the programs
  // (idle the second, as it may be) go on without it.
  agents.a->Kill(SIGKILL);
  ExpectFinishedExact(first, "ok 600");
  ExpectFinishedExact(second, "ok 600");
  EXPECT_TRUE(Eventually([&] { return agents.LeasesOn(*agents.b).empty(); }, seconds(5))) << "released there";
  // With nowhere to go, drain --migrate says so and fails.
  Process third({ToolPath("gp-run"), "--servers", b, "-p", "0.5", "--", Program("moving_state"), "100"});
  ASSERT_EQ(third.ReadLine(seconds(60)), "ready") << third.Stderr();
  RunResult nowhere = RunCommand({ToolPath("gp-agent"), "ctl", "--server", b, "drain", "--migrate", "--to", a},
                                 {}, seconds(60));  // Gone.
  EXPECT_EQ(nowhere.code, 1) << nowhere.out << nowhere.err;
  EXPECT_NE(nowhere.out.find("could not move"), std::string::npos) << nowhere.out;
  ExpectFinishedExact(third, "ok 200");
}

}  // namespace
}  // namespace gpupool::testing
