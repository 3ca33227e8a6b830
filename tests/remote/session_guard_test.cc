// The agent never trusts its clients, and its processes show it: raw sessions (internal::RemoteSession passes handles
// and addresses to the agent unchecked) open windows no worker could map, knock at a worker's door with the wrong
// ticket, go on after their lease ended, and flood their workers and the agent. Each attack must get its specific
// CUDA error, and afterwards the agent must still run, a second tenant on the same GPU (opened before the attack)
// must still compute correctly, and the attacker's own session must still work where the error was not fatal for
// it. What a session server refuses whatever process it runs in (stale and foreign handles, pointers outside the
// window, absurd sizes, hostile batches, corrupt frames...) is tested in-process: session_protocol_test.cc.
#include <cuda.h>

#include <capnp/ez-rpc.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "client/lease_core.h"
#include "client/session_channel.h"
#include "client/session_client.h"
#include "integration/helpers.h"
#include "pool.capnp.h"
#include "remote/session_checks.h"
#include "session.capnp.h"
#include "schema/session_wire.h"

namespace gpupool::testing {
namespace {

constexpr int kRevoked = CUDA_ERROR_INVALID_CONTEXT;  // The emulated device's answer after revocation.

// One tenant: a lease of half the GPU and a raw session on it, with the test kernels loaded.
struct Tenant : GuardKernels {
  Lease lease;
  std::unique_ptr<RemoteSession> session;

  RemoteSession& s() { return *session; }
};

std::unique_ptr<Tenant> OpenTenant(Pool& pool) {
  auto lease = pool.Allocate(Slices(1, 0.5));
  EXPECT_TRUE(lease.ok()) << lease.status().ToString();
  if (!lease.ok()) return nullptr;
  auto sessions = RemoteSession::OpenLease(lease->Token());
  EXPECT_TRUE(sessions.ok()) << sessions.status().ToString();
  if (!sessions.ok()) return nullptr;
  auto t = std::unique_ptr<Tenant>(new Tenant{{}, std::move(lease).value(), std::move(sessions->front())});
  LoadGuardKernels(t->s(), t.get());
  return t;
}

// The number of session workers (children) of the agent `pid`.
size_t SessionWorkersOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  size_t n = 0;
  for (pid_t child; in >> child;) ++n;
  return n;
}

class SessionGuard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    agent_ = new Agent(AgentOptions{.name = "guard", .emulated = 1, .emulated_memory = "2GiB"});
  }
  static void TearDownTestSuite() {
    delete agent_;
    agent_ = nullptr;
  }

  void SetUp() override {
    pool_.emplace(Connect({agent_->address()}));
    victim_ = OpenTenant(*pool_);
    attacker_ = OpenTenant(*pool_);
    ASSERT_TRUE(victim_ && attacker_);
    ASSERT_EQ(victim_->lease.slices()[0].device, attacker_->lease.slices()[0].device) << "one GPU, two tenants";
    ASSERT_TRUE(Computes(victim_->s(), victim_->add_one));
    ASSERT_TRUE(Computes(attacker_->s(), attacker_->add_one));
  }

  void TearDown() override {
    attacker_.reset();
    victim_.reset();
    pool_.reset();
  }

  // After an attack: the agent runs and the other tenant computes correctly.
  void ExpectOthersUnharmed() {
    EXPECT_TRUE(agent_->process().running()) << agent_->process().Stderr();
    EXPECT_TRUE(Computes(victim_->s(), victim_->add_one)) << "the other tenant";
  }

  // ... and the attacker's own session still does good work.
  void ExpectAllUnharmed() {
    ExpectOthersUnharmed();
    EXPECT_TRUE(Computes(attacker_->s(), attacker_->add_one)) << "the attacker's own session";
  }

  RemoteSession& a() { return attacker_->s(); }

  // A second session on the attacker's lease, opened by hand over `client` (a connection of its own): the first
  // free window from 40 TiB. Empty if none could be opened.
  std::optional<capnp::Response<wire::Agent::OpenSessionResults>> OpenRawSession(capnp::EzRpcClient& client) {
    auto fields = internal::DecodeToken(attacker_->lease.Token());
    EXPECT_TRUE(fields.ok());
    if (!fields.ok()) return std::nullopt;
    auto agent = client.getMain<wire::Agent>();
    for (uint64_t base = uint64_t{40} << 40; base < (uint64_t{44} << 40); base += uint64_t{64} << 30) {
      auto req = agent.openSessionRequest();
      req.initLease().setId(fields->id);
      req.getLease().setSecret(fields->secret);
      req.setDevice(attacker_->lease.slices()[0].device);
      req.setWindowBase(base);
      req.setWindowBytes(uint64_t{2} << 30);
      auto reply = req.send().wait(client.getWaitScope());
      if (reply.getOutcome().getCode() == wire::Outcome::Code::OK) return kj::mv(reply);
    }
    return std::nullopt;
  }

  static Agent* agent_;
  std::optional<Pool> pool_;
  std::unique_ptr<Tenant> victim_, attacker_;
};

Agent* SessionGuard::agent_ = nullptr;

// A window the session's worker could not map (past the end of the user address space, or wrapping past 2^64) is
// refused by the agent, naming the limit, before a worker starts (one used to start, fail to map it, and be killed
// and logged as if it had crashed).
TEST_F(SessionGuard, WindowsBeyondTheUserAddressSpaceAreRefusedBeforeAWorkerStarts) {
  auto fields = internal::DecodeToken(attacker_->lease.Token());
  ASSERT_TRUE(fields.ok());
  capnp::EzRpcClient client(agent_->address());
  auto agent = client.getMain<wire::Agent>();
  const size_t workers_before = SessionWorkersOf(agent_->process().pid());
  for (auto [base, bytes] : {std::pair{uint64_t{1} << 47, uint64_t{2} << 30},
                             std::pair{(uint64_t{1} << 47) - (uint64_t{1} << 30), uint64_t{2} << 30},
                             std::pair{~uint64_t{0} << 30, uint64_t{2} << 30}}) {
    SCOPED_TRACE(fmt::format("window 0x{:x} of 0x{:x} bytes", base, bytes));
    auto req = agent.openSessionRequest();
    req.initLease().setId(fields->id);
    req.getLease().setSecret(fields->secret);
    req.setDevice(attacker_->lease.slices()[0].device);
    req.setWindowBase(base);
    req.setWindowBytes(bytes);
    auto reply = req.send().wait(client.getWaitScope());
    EXPECT_EQ(reply.getOutcome().getCode(), wire::Outcome::Code::INVALID_ARGUMENT);
    EXPECT_NE(std::string(reply.getOutcome().getMessage()).find("must end below 0x800000000000"), std::string::npos)
        << reply.getOutcome().getMessage().cStr();
    EXPECT_EQ(SessionWorkersOf(agent_->process().pid()), workers_before) << "no worker started for it";
  }
  EXPECT_EQ(agent_->process().Stderr().find("killed by signal"), std::string::npos) << agent_->process().Stderr();
  ExpectAllUnharmed();
}

// Issue 43: a client asks where its moved session went with the ticket it entered its old worker with. A ticket
// that names no moved session of the caller's own lease (made up, empty of meaning, a megabyte long) is answered
// "did not move" before anything starts; a lease key that is not the caller's is refused as for any session. And an
// administrator's move, suspension and resumption are refused to a tenant.
TEST_F(SessionGuard, ResumeTicketsThatNameNoMovedSessionOfTheLeaseAreRefused) {
  auto fields = internal::DecodeToken(attacker_->lease.Token());
  ASSERT_TRUE(fields.ok());
  capnp::EzRpcClient client(agent_->address());
  auto agent = client.getMain<wire::Agent>();
  const size_t workers_before = SessionWorkersOf(agent_->process().pid());
  for (const std::string& ticket : {std::string(16, 'x'), std::string(1, '\0'), std::string(1 << 20, 'T')}) {
    SCOPED_TRACE(fmt::format("a ticket of {} bytes", ticket.size()));
    auto req = agent.openSessionRequest();
    req.initLease().setId(fields->id);
    req.getLease().setSecret(fields->secret);
    req.setDevice(attacker_->lease.slices()[0].device);
    req.setWindowBase(uint64_t{40} << 40);
    req.setWindowBytes(uint64_t{2} << 30);
    req.setResumeTicket(kj::arrayPtr(reinterpret_cast<const kj::byte*>(ticket.data()), ticket.size()));
    auto reply = req.send().wait(client.getWaitScope());
    EXPECT_EQ(reply.getOutcome().getCode(), wire::Outcome::Code::NOT_FOUND);
    EXPECT_NE(std::string(reply.getOutcome().getMessage()).find("did not move"), std::string::npos)
        << reply.getOutcome().getMessage().cStr();
    EXPECT_FALSE(reply.hasDirect());
  }
  {
    auto req = agent.openSessionRequest();
    req.initLease().setId(fields->id);
    req.getLease().setSecret("not the secret");
    req.setResumeTicket(kj::arrayPtr(reinterpret_cast<const kj::byte*>("0123456789abcdef"), 16));
    auto reply = req.send().wait(client.getWaitScope());
    EXPECT_EQ(reply.getOutcome().getCode(), wire::Outcome::Code::PERMISSION_DENIED);
  }
  EXPECT_EQ(SessionWorkersOf(agent_->process().pid()), workers_before) << "no worker started for them";
  auto migrate = agent.migrateRequest();
  migrate.setLeaseId(internal::DecodeToken(victim_->lease.Token())->id);
  migrate.setDevice(-1);
  EXPECT_EQ(migrate.send().wait(client.getWaitScope()).getOutcome().getCode(), wire::Outcome::Code::PERMISSION_DENIED);
  auto suspend = agent.suspendRequest();
  suspend.setLeaseId(internal::DecodeToken(victim_->lease.Token())->id);
  EXPECT_EQ(suspend.send().wait(client.getWaitScope()).getOutcome().getCode(), wire::Outcome::Code::PERMISSION_DENIED);
  ExpectAllUnharmed();
}

TEST_F(SessionGuard, EveryCallAfterTheLeaseIsReleasedAnswersInvalidContext) {
  // Objects of every kind, so that no call fails merely for want of a valid handle.
  uint64_t buffer = 0, stream = 0, event = 0, global = 0, global_bytes = 0;
  ASSERT_EQ(a().MemAlloc(4096, &buffer), kOk);
  ASSERT_EQ(a().StreamCreate(&stream), kOk);
  ASSERT_EQ(a().EventCreate(&event), kOk);
  ASSERT_EQ(a().GetGlobal(attacker_->module, "guard_counter", &global, &global_bytes), kOk);
  a().EventRecord(event, stream);
  ASSERT_EQ(a().Synchronize(), kOk);
  std::vector<uint8_t> params = AddOneParams(attacker_->add_one, buffer, 1024);
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};

  // The lease ends through the pool while its session is still open.
  ASSERT_TRUE(attacker_->lease.Release().ok());

  std::vector<uint8_t> data(4096, 7);
  uint64_t out = 0, free_bytes = 0, total = 0;
  float ms = 0;
  RemoteFunctionInfo f;
  std::vector<uint8_t> image = KernelImage();
  EXPECT_EQ(a().MemGetInfo(&free_bytes, &total), kRevoked);
  EXPECT_EQ(a().MemAlloc(4096, &out), kRevoked);
  EXPECT_EQ(a().CopyFromDevice(data.data(), buffer, data.size(), 0), kRevoked);
  EXPECT_EQ(data, std::vector<uint8_t>(4096, 7));
  EXPECT_EQ(a().ModuleLoad(image.data(), image.size(), &out), kRevoked);
  EXPECT_EQ(a().GetFunction(attacker_->module, "add_one", &f), kRevoked);
  EXPECT_EQ(a().GetGlobal(attacker_->module, "guard_counter", &global, &global_bytes), kRevoked);
  EXPECT_EQ(a().StreamCreate(&out), kRevoked);
  EXPECT_EQ(a().StreamSynchronize(stream), kRevoked);
  EXPECT_EQ(a().StreamQuery(stream), kRevoked);
  EXPECT_EQ(a().EventCreate(&out), kRevoked);
  EXPECT_EQ(a().EventSynchronize(event), kRevoked);
  EXPECT_EQ(a().EventQuery(event), kRevoked);
  EXPECT_EQ(a().EventElapsed(event, event, &ms), kRevoked);
  EXPECT_EQ(a().Synchronize(), kRevoked);
  // The calls sent without waiting, one at a time, each with its own error.
  a().CopyToDevice(buffer, data.data(), data.size(), 0);
  EXPECT_EQ(AsyncError(a()), kRevoked) << "copyToDevice";
  a().CopyOnDevice(buffer, buffer + 2048, 1024, 0);
  EXPECT_EQ(AsyncError(a()), kRevoked) << "copyOnDevice";
  a().Memset(buffer, 0, 4, 1024, 0);
  EXPECT_EQ(AsyncError(a()), kRevoked) << "memset";
  a().Launch(attacker_->add_one.handle, grid, block, 0, stream, params.data(), params.size());
  EXPECT_EQ(AsyncError(a()), kRevoked) << "launch";
  a().StreamWaitEvent(stream, event);
  EXPECT_EQ(AsyncError(a()), kRevoked) << "streamWaitEvent";
  a().EventRecord(event, stream);
  EXPECT_EQ(AsyncError(a()), kRevoked) << "eventRecord";
  a().ModuleUnload(attacker_->module);
  EXPECT_EQ(AsyncError(a()), kRevoked) << "moduleUnload";
  a().StreamDestroy(stream);
  EXPECT_EQ(AsyncError(a()), kRevoked) << "streamDestroy";
  a().EventDestroy(event);
  EXPECT_EQ(AsyncError(a()), kRevoked) << "eventDestroy";
  EXPECT_EQ(a().MemFree(buffer), kRevoked) << "memFree";
  EXPECT_EQ(AsyncError(a()), 0) << "every error was taken";
  // The device (the attacker's session is the only one that failed) still serves its other tenant.
  ExpectOthersUnharmed();
  // The attacker's slice is free again: a new tenant gets it and computes.
  auto next = OpenTenant(*pool_);
  ASSERT_TRUE(next);
  EXPECT_TRUE(Computes(next->s(), next->add_one));
}

// The worker's direct door (openSession's `direct`) opens for the ticket the agent handed out, and only once: a
// guessed ticket fails, the right one gives a working session, and then the door is shut.
TEST_F(SessionGuard, TheWorkersDoorOpensOnceAndOnlyForItsTicket) {
  capnp::EzRpcClient client(agent_->address());
  auto opened = OpenRawSession(client);
  ASSERT_TRUE(opened) << "no window could be opened";
  ASSERT_TRUE(opened->hasDirect()) << "the agent offered no direct connection";
  auto direct = opened->getDirect();
  ASSERT_NE(direct.getPort(), 0u);
  std::string ticket(reinterpret_cast<const char*>(direct.getTicket().begin()), direct.getTicket().size());
  ASSERT_EQ(ticket.size(), 16u);
  std::string door = "127.0.0.1:" + std::to_string(direct.getPort());
  auto enter = [&](const std::string& t) {
    return internal::SessionChannel::Enter(door, t, std::chrono::seconds(5), nullptr);
  };
  std::string guess = ticket;
  guess[7] ^= 1;
  EXPECT_FALSE(enter(guess).ok()) << "a wrong ticket opened the door";
  EXPECT_FALSE(enter(std::string(16, '\0')).ok()) << "a zero ticket opened the door";
  auto entered = enter(ticket);
  ASSERT_TRUE(entered.ok()) << entered.status().message();
  capnp::MallocMessageBuilder ask;
  ask.initRoot<wire::Session::MemGetInfoParams>();
  internal::SessionChannel::Reply reply;
  ASSERT_TRUE((*entered)->Wait((*entered)->Send(session::calls::MemGetInfo::kOrdinal, ask), &reply))
      << (*entered)->lost();
  auto info = reply.message->getRoot<wire::Session::MemGetInfoResults>();
  EXPECT_EQ(info.getStatus().getCode(), kOk);
  EXPECT_GT(info.getTotal(), 0u);
  EXPECT_FALSE(enter(ticket).ok()) << "the ticket opened the door twice";
  ExpectAllUnharmed();
}


// The agent's session workers (its child processes) now.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children");
  std::vector<pid_t> out;
  for (pid_t pid; in >> pid;) out.push_back(pid);
  return out;
}

// The peak resident memory of process `pid` (VmHWM), in bytes; 0 if it cannot be read.
uint64_t PeakResident(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmHWM:   1234 kB".
  }
  return 0;
}

// A tenant that queues far more host-to-device copies than its device can take at once (200 copies of 8 MiB,
// 1.6 GB, behind a kernel that runs for seconds) is held back where it posts them, as a GPU's driver holds a thread
// whose queue is full, instead of its session's worker and the agent buffering them all (before: the worker grew to
// 1.65 GB, the agent to 540 MB). Every copy still lands, in order: the last one's bytes are what stays. Through the
// worker's own socket (copies in framed messages) and through the agent (Cap'n Proto calls).
TEST_F(SessionGuard, CopiesQueuedFarAheadOfTheDeviceAreHeldBackNotBuffered) {
  constexpr size_t kCopyBytes = 8u << 20;
  constexpr int kCopies = 200;
  // Far below what 200 copies would take: the worker's own memory (the device's arena included) and the 64 MiB in
  // flight that it may hold, with room to spare.
  constexpr uint64_t kMostResident = 384ull << 20;
  const pid_t agent_pid = agent_->process().pid();
  for (const char* path : {"GPUPOOL_SHARED_MEMORY", "GPUPOOL_DIRECT_SESSIONS"}) {
    SCOPED_TRACE(::testing::Message() << path << "=0");
    const std::vector<pid_t> before = ChildrenOf(agent_pid);
    setenv(path, "0", 1);
    auto sessions = RemoteSession::OpenLease(attacker_->lease.Token());
    unsetenv(path);
    ASSERT_TRUE(sessions.ok()) << sessions.status().ToString();
    RemoteSession& s = *sessions->front();
    pid_t worker = 0;
    for (pid_t pid : ChildrenOf(agent_pid)) {
      if (std::find(before.begin(), before.end(), pid) == before.end()) worker = pid;
    }
    ASSERT_NE(worker, 0) << "the new session's worker";
    std::vector<uint8_t> image = KernelImage();
    uint64_t module = 0;
    ASSERT_EQ(s.ModuleLoad(image.data(), image.size(), &module), kOk) << s.last_error();
    RemoteFunctionInfo spin;
    ASSERT_EQ(s.GetFunction(module, "spin", &spin), kOk) << s.last_error();
    uint64_t buffer = 0;
    ASSERT_EQ(s.MemAlloc(kCopyBytes, &buffer), kOk) << s.last_error();
    std::vector<uint8_t> params(spin.params.at(1).offset + 8, 0);
    const uint64_t iterations = 3'000'000;
    std::memcpy(params.data() + spin.params.at(0).offset, &iterations, sizeof(iterations));
    std::memcpy(params.data() + spin.params.at(1).offset, &buffer, sizeof(buffer));
    const uint32_t grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    s.Launch(spin.handle, grid, block, 0, 0, params.data(), params.size());
    std::vector<uint8_t> host(kCopyBytes);
    for (int i = 0; i < kCopies; ++i) {
      std::memset(host.data(), i, host.size());
      s.CopyToDevice(buffer, host.data(), host.size(), 0);
    }
    ASSERT_EQ(s.Synchronize(), kOk) << s.last_error();
    std::vector<uint8_t> back(kCopyBytes, 0);
    ASSERT_EQ(s.CopyFromDevice(back.data(), buffer, back.size(), 0), kOk) << s.last_error();
    EXPECT_EQ(FirstNot(back, static_cast<uint8_t>(kCopies - 1)), kCopyBytes) << "the last copy's bytes stay";
    const uint64_t worker_peak = PeakResident(worker), agent_peak = PeakResident(agent_pid);
    std::printf("%s=0: peak resident memory: worker %.0f MiB, agent %.0f MiB\n", path, worker_peak / 1048576.0,
                agent_peak / 1048576.0);
    EXPECT_GT(worker_peak, 0u);
    EXPECT_LT(worker_peak, kMostResident) << "the worker's peak resident memory";
    EXPECT_LT(agent_peak, kMostResident) << "the agent's peak resident memory";
    sessions->clear();
  }
  ExpectAllUnharmed();
}

// One call on a session reached by hand: sends it and waits for its reply; answers its status code.
template <typename C>
int RawCall(wire::Session::Client& s, kj::WaitScope& wait_scope, const typename C::Args& args,
            typename C::Results* results = nullptr) {
  using W = session::Wire<C>;
  auto req = W::Request(s);
  W::WriteArgs(args, req);
  auto reply = req.send().wait(wait_scope);
  typename C::Results local;
  W::ReadResults(reply, results ? *results : local);
  return reply.getStatus().getCode();
}

// The same flood from a raw client that sends every copy through the agent at once, waiting for nothing: the
// agent stops reading it once the calls it forwarded and that are not answered hold a few sessions' bytes in
// flight (Cap'n Proto's flow limit), and the worker does the same on its side, so neither buffers the flood.
TEST_F(SessionGuard, ARawClientsFloodThroughTheAgentIsHeldBackNotBuffered) {
  namespace calls = session::calls;
  constexpr size_t kCopyBytes = 8u << 20;
  constexpr int kCopies = 200;
  constexpr uint64_t kMostResident = 384ull << 20;
  capnp::EzRpcClient client(agent_->address());
  auto opened = OpenRawSession(client);
  ASSERT_TRUE(opened);
  wire::Session::Client s = opened->getSession();
  kj::WaitScope& ws = client.getWaitScope();
  std::vector<uint8_t> image = KernelImage();
  calls::ModuleLoad::Results module;
  ASSERT_EQ(RawCall<calls::ModuleLoad>(s, ws, {{image.data(), image.size()}}, &module), kOk);
  calls::ModuleGetFunction::Results spin;
  ASSERT_EQ(RawCall<calls::ModuleGetFunction>(s, ws, {module.module, "spin"}, &spin), kOk);
  calls::MemAlloc::Results buffer;
  ASSERT_EQ(RawCall<calls::MemAlloc>(s, ws, {kCopyBytes}, &buffer), kOk);
  std::vector<uint8_t> params(spin.params.at(1).offset + 8, 0);
  const uint64_t iterations = 3'000'000;
  std::memcpy(params.data() + spin.params.at(0).offset, &iterations, sizeof(iterations));
  std::memcpy(params.data() + spin.params.at(1).offset, &buffer.address, sizeof(buffer.address));
  calls::Launch::Args launch;
  launch.function = spin.function;
  launch.grid = {1, 1, 1};
  launch.block = {32, 1, 1};
  launch.params = {params.data(), params.size()};
  ASSERT_EQ(RawCall<calls::Launch>(s, ws, launch), kOk);
  std::vector<uint8_t> host(kCopyBytes, 0x3c);
  kj::Vector<kj::Promise<void>> replies;
  for (int i = 0; i < kCopies; ++i) {
    auto req = session::Wire<calls::CopyToDevice>::Request(s);
    session::Wire<calls::CopyToDevice>::WriteArgs({buffer.address, {host.data(), host.size()}, {}}, req);
    replies.add(req.send().ignoreResult());
  }
  kj::joinPromises(replies.releaseAsArray()).wait(ws);
  calls::CopyFromDevice::Results back;
  ASSERT_EQ(RawCall<calls::CopyFromDevice>(s, ws, {buffer.address, 4096, {}}, &back), kOk);
  const uint64_t agent_peak = PeakResident(agent_->process().pid());
  std::printf("a raw client's flood through the agent: the agent's peak resident memory is %.0f MiB\n",
              agent_peak / 1048576.0);
  EXPECT_LT(agent_peak, kMostResident) << "the agent's peak resident memory";
  ExpectAllUnharmed();
}

}  // namespace
}  // namespace gpupool::testing
