// The pool's directory: agents register in a real etcd cluster on loopback, clients place from one read of it, and
// the pool goes on when members of the cluster die, or all of them.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "integration/helpers.h"

namespace gpupool::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool HaveEtcd() { return RunCommand({"/bin/sh", "-c", "command -v etcd && command -v etcdctl"}).code == 0; }

// A real etcd cluster of `members` members on loopback, each in a data directory of its own.
class EtcdCluster {
 public:
  explicit EtcdCluster(int members, std::vector<std::string> extra = {}, std::string scheme = "http")
      : extra_(std::move(extra)), scheme_(std::move(scheme)) {
    for (int i = 0; i < members; ++i) {
      client_ports_.push_back(FreeLoopbackPort());
      peer_ports_.push_back(FreeLoopbackPort());
    }
    StartAll();
  }

  // Every member, in a new cluster when `fresh` (the data directories wiped: nothing of the old one is left).
  void StartAll(bool fresh = false) {
    if (fresh) {
      std::filesystem::remove_all(dir_.path() + "/data");
      ++generation_;
    }
    std::string initial;
    for (size_t i = 0; i < client_ports_.size(); ++i) {
      initial += fmt::format("{}m{}=http://127.0.0.1:{}", i ? "," : "", i, peer_ports_[i]);
    }
    members_.clear();
    members_.resize(client_ports_.size());
    for (size_t i = 0; i < client_ports_.size(); ++i) {
      std::string client = fmt::format("{}://127.0.0.1:{}", scheme_, client_ports_[i]);
      std::string peer = fmt::format("http://127.0.0.1:{}", peer_ports_[i]);
      std::vector<std::string> argv = {"/usr/bin/etcd", "--name", fmt::format("m{}", i), "--data-dir",
                                       fmt::format("{}/data/m{}", dir_.path(), i), "--listen-client-urls", client,
                                       "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                       "--initial-advertise-peer-urls", peer, "--initial-cluster", initial,
                                       "--initial-cluster-token", fmt::format("gpupool-test-{}", generation_),
                                       "--log-level", "error"};
      argv.insert(argv.end(), extra_.begin(), extra_.end());
      members_[i] = std::make_unique<Process>(argv);
    }
  }
  void Kill(size_t i) { members_[i].reset(); }
  void KillAll() {
    for (auto& m : members_) m.reset();
  }
  // "etcd:http://127.0.0.1:P1,http://127.0.0.1:P2,...".
  std::string Spec() const {
    std::string spec = "etcd:";
    for (size_t i = 0; i < client_ports_.size(); ++i) {
      spec += fmt::format("{}{}://127.0.0.1:{}", i ? "," : "", scheme_, client_ports_[i]);
    }
    return spec;
  }
  std::string Endpoints() const { return Spec().substr(5); }
  // etcdctl against the cluster.
  RunResult Ctl(std::vector<std::string> args) const {
    std::vector<std::string> argv = {"/usr/bin/etcdctl", "--endpoints", Endpoints()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {"ETCDCTL_API=3"}, seconds(20));
  }

 private:
  TempDir dir_;
  std::vector<std::string> extra_;
  std::string scheme_;
  std::vector<int> client_ports_, peer_ports_;
  std::vector<std::unique_ptr<Process>> members_;
  int generation_ = 0;
};

Pool DirectoryPool(const std::string& spec) {
  PoolOptions o;
  o.directory = spec;
  auto pool = Pool::Connect(o);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(pool).value();
}

// Agents registered in `spec`'s directory, `devices` emulated GPUs each.
AgentOptions Registered(const std::string& name, const std::string& spec, int devices,
                        std::vector<std::string> extra = {}) {
  AgentOptions o{.name = name, .emulated = devices, .emulated_memory = "1GiB"};
  o.extra_args = {"--directory", spec};
  o.extra_args.insert(o.extra_args.end(), extra.begin(), extra.end());
  return o;
}

// Whether the directory lists exactly the agents named `names`.
bool Lists(Pool& pool, std::vector<std::string> names) {
  PoolState state = pool.Summary();
  if (!state.directory_error.empty()) return false;
  std::vector<std::string> listed;
  for (const auto& s : state.servers) listed.push_back(s.name);
  std::sort(listed.begin(), listed.end());
  std::sort(names.begin(), names.end());
  return listed == names;
}

double AllocatedOn(const PoolState& state, const std::string& name) {
  double total = 0;
  for (const auto& s : state.servers)
    if (s.name == name)
      for (const auto& d : s.devices) total += d.compute_allocated;
  return total;
}

// `n` clients, each with its own fresh look at the directory, ask for `request` at the same moment.
std::vector<Result<Lease>> Racing(const std::string& spec, int n, const Request& request) {
  std::vector<std::unique_ptr<Pool>> pools;
  for (int i = 0; i < n; ++i) pools.push_back(std::make_unique<Pool>(DirectoryPool(spec)));
  std::vector<Result<Lease>> results;
  for (int i = 0; i < n; ++i) results.emplace_back(Status(StatusCode::kInternal, "not run"));
  std::barrier start(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = pools[i]->Allocate(request);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Not a reason to skip: scripts/setup.sh installs them, and a directory untested is a directory unknown.
#define REQUIRE_ETCD() \
  ASSERT_TRUE(HaveEtcd()) << "etcd and etcdctl are not installed (Debian: etcd-server etcd-client; scripts/setup.sh)"

TEST(Directory, AgentsRegisterAndClientsPlaceFromOneRead) {
  REQUIRE_ETCD();
  EtcdCluster etcd(3);
  Agent a(Registered("dir-a", etcd.Spec(), 2));
  Agent b(Registered("dir-b", etcd.Spec(), 2));
  Pool pool = DirectoryPool(etcd.Spec());
  ASSERT_TRUE(Eventually([&] { return Lists(pool, {"dir-a", "dir-b"}); }, seconds(20)));
  PoolState summary = pool.Summary();
  EXPECT_EQ(summary.directory, etcd.Spec());
  for (const auto& s : summary.servers) {
    EXPECT_TRUE(s.summary);
    ASSERT_EQ(s.devices.size(), 2u) << s.name;
    EXPECT_EQ(s.devices[0].memory_total, 1ull << 30);
    EXPECT_TRUE(s.address == a.address() || s.address == b.address()) << s.address;
  }
  // Placed from the directory, granted by the agents; the summaries follow within the publishing interval.
  auto lease = pool.Allocate(Slices(3, 0.5));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_TRUE(Eventually([&] { return std::abs(TotalCompute(pool.Summary()) - 1.5) < 1e-6; }, seconds(5)));
  ExpectNotOvercommitted(Connect({a.address(), b.address()}).State());
  EXPECT_EQ(LeaseCount(Connect({a.address(), b.address()}).State()), 2u);  // One lease, on both agents.
  // gp-ls reads the same directory; --detail asks the agents shown, and only those.
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--json"}, {"GPUPOOL_DIRECTORY=" + etcd.Spec(), "GPUPOOL_SERVERS"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_NE(ls.out.find("\"summary\":true"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("\"directory\":\"" + etcd.Spec() + "\""), std::string::npos) << ls.out;
  RunResult detail = RunCommand({ToolPath("gp-ls"), "--detail", "--leases", "--agent", "dir-a"},
                                {"GPUPOOL_DIRECTORY=" + etcd.Spec(), "GPUPOOL_SERVERS"});
  ASSERT_EQ(detail.code, 0) << detail.err;
  EXPECT_NE(detail.out.find("dir-a"), std::string::npos) << detail.out;
  EXPECT_EQ(detail.out.find("dir-b"), std::string::npos) << detail.out;
  // gp-top the same: the agents shown, and with --detail their leases (asked of them alone).
  RunResult top = RunCommand({ToolPath("gp-top"), "--json", "--detail", "--agent", "dir-b"},
                             {"GPUPOOL_DIRECTORY=" + etcd.Spec(), "GPUPOOL_SERVERS"});
  ASSERT_EQ(top.code, 0) << top.err;
  EXPECT_NE(top.out.find("\"name\":\"dir-b\""), std::string::npos) << top.out;
  EXPECT_EQ(top.out.find("\"name\":\"dir-a\""), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("\"summary\":false"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("\"lease_count\":1"), std::string::npos) << top.out;
  lease->Release();
  EXPECT_TRUE(Eventually([&] { return TotalCompute(pool.Summary()) == 0; }, seconds(5)));
  // An agent that stops leaves the directory at once (not a TTL later).
  b.Kill(SIGTERM);
  EXPECT_TRUE(Eventually([&] { return Lists(pool, {"dir-a"}); }, seconds(5)));
}

TEST(Directory, LongLivedClientsWatchTheDirectory) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1);
  Agent a(Registered("watch-a", etcd.Spec(), 2));
  Pool pool = DirectoryPool(etcd.Spec());
  ASSERT_TRUE(Eventually([&] { return Lists(pool, {"watch-a"}); }, seconds(20)));
  // From its second look on, a Pool watches: what it shows is kept current without reads.
  ASSERT_TRUE(Eventually([&] { return pool.Summary().directory_watched; }, seconds(5)));
  EXPECT_FALSE(DirectoryPool(etcd.Spec()).Summary().directory_watched);  // A one-look client reads.
  auto lease = DirectoryPool(etcd.Spec()).Allocate(Slices(1, 0.5));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_TRUE(Eventually([&] {
    PoolState state = pool.Summary();
    return state.directory_watched && std::abs(TotalCompute(state) - 0.5) < 1e-6;
  }, seconds(5)));
  // An agent joining and one leaving reach it too.
  auto b = std::make_unique<Agent>(Registered("watch-b", etcd.Spec(), 1));
  EXPECT_TRUE(Eventually([&] { return Lists(pool, {"watch-a", "watch-b"}) && pool.Summary().directory_watched; },
                         seconds(10)));
  b->Kill(SIGTERM);
  EXPECT_TRUE(Eventually([&] { return Lists(pool, {"watch-a"}) && pool.Summary().directory_watched; }, seconds(10)));
  // A forged entry put while it watches is refused as a read would refuse it.
  ASSERT_EQ(etcd.Ctl({"put", "/gpupool/agents/x", R"({"format":1,"instanceId":"y","address":"127.0.0.1:1"})"}).code,
            0);
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_TRUE(Lists(pool, {"watch-a"}));
  EXPECT_TRUE(pool.Summary().directory_watched);
  // Asking every agent (State, gp-top --detail) while the watch takes changes: neither waits on the other.
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (int i = 0; writing; ++i) etcd.Ctl({"put", "/gpupool/agents/noise", std::to_string(i)});
  });
  for (int i = 0; i < 30; ++i) {
    PoolState state = pool.State();
    EXPECT_TRUE(state.directory_watched);
    ASSERT_EQ(state.servers.size(), 1u);
    EXPECT_FALSE(state.servers[0].summary);  // Described by the agent itself.
  }
  writing = false;
  writer.join();
  // The cluster gone, the watch ends with it: the next look falls back, and says so.
  etcd.KillAll();
  EXPECT_TRUE(Eventually([&] { return !pool.Summary().directory_error.empty(); }, seconds(5)));
}

TEST(Directory, StaleSummariesAreCorrectedAtOnceAndRacersNeverBothWinOrBothLose) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1);
  Agent a(Registered("race-a", etcd.Spec(), 1));
  Agent b(Registered("race-b", etcd.Spec(), 1));
  Pool observer = DirectoryPool(etcd.Spec());
  ASSERT_TRUE(Eventually([&] { return Lists(observer, {"race-a", "race-b"}); }, seconds(20)));
  for (int round = 0; round < 5; ++round) {
    // Two clients, each with its own fresh read of the directory, race for the two GPUs: both win, on two GPUs.
    {
      std::vector<Result<Lease>> results = Racing(etcd.Spec(), 2, Slices(1, 1.0));
      ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
      ASSERT_TRUE(results[1].ok()) << results[1].status().ToString();
      EXPECT_NE(results[0]->slices()[0].server, results[1]->slices()[0].server);
      // A third, placing from a directory that may not show the grants yet: refused by the agents, it says busy.
      auto third = DirectoryPool(etcd.Spec()).Allocate(Slices(1, 1.0));
      ASSERT_FALSE(third.ok());
      EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted) << third.status().ToString();
    }
    // Released: the next client placing at once, before the agents publish, still finds the capacity.
    auto again = DirectoryPool(etcd.Spec()).Allocate(Slices(2, 1.0));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
  }
  // Eight racers for two GPUs: exactly two win.
  std::vector<Result<Lease>> results = Racing(etcd.Spec(), 8, Slices(1, 1.0));
  int granted = 0;
  for (auto& r : results) granted += r.ok() ? 1 : 0;
  EXPECT_EQ(granted, 2);
  ExpectNotOvercommitted(Connect({a.address(), b.address()}).State());
}

TEST(Directory, PoolKeepsWorkingWhenOneMemberDies) {
  REQUIRE_ETCD();
  EtcdCluster etcd(3);
  Agent a(Registered("one-a", etcd.Spec(), 2));
  Pool pool = DirectoryPool(etcd.Spec());
  ASSERT_TRUE(Eventually([&] { return Lists(pool, {"one-a"}); }, seconds(20)));
  std::atomic<bool> stop{false};
  std::atomic<int> granted{0}, failed{0};
  std::string first_failure;
  std::mutex mu;
  std::thread client([&] {
    while (!stop) {
      // A new Pool each time: each reads the directory afresh, through whichever member answers.
      auto lease = DirectoryPool(etcd.Spec()).Allocate(Slices(1, 0.25));
      if (lease.ok()) {
        ++granted;
      } else {
        std::lock_guard<std::mutex> lock(mu);
        if (failed++ == 0) first_failure = lease.status().ToString();
      }
    }
  });
  std::this_thread::sleep_for(milliseconds(500));
  etcd.Kill(0);  // The first endpoint every client and agent tries.
  const int before = granted;
  std::this_thread::sleep_for(seconds(3));
  stop = true;
  client.join();
  EXPECT_GT(granted - before, 5);
  EXPECT_EQ(failed, 0) << first_failure;
  // The agent's registration lives on: its keepalives reach the other members.
  std::this_thread::sleep_for(seconds(11));  // Longer than the agent's etcd lease TTL (10 s).
  EXPECT_TRUE(Lists(pool, {"one-a"}));
  PoolState state = pool.Summary();
  EXPECT_TRUE(state.directory_error.empty()) << state.directory_error;
}

TEST(Directory, ClientsFallBackWhenTheClusterIsDownAndAgentsRegisterAgainWhenItIsBack) {
  REQUIRE_ETCD();
  EtcdCluster etcd(3);
  TempDir home;
  TempDir config;
  // A short etcd lease, so that a cluster down longer than it has forgotten the agents.
  std::string toml = config.Write("agent.toml", "directory = \"" + etcd.Spec() + "\"\n[etcd]\nttl = \"3s\"\n");
  Agent a(AgentOptions{.name = "down-a", .emulated = 2, .emulated_memory = "1GiB",
                       .extra_args = {"--config", toml, "--metrics", "127.0.0.1:0"}});
  const std::string metrics_line = a.process().ReadLine(seconds(10));
  const std::string metrics_url = metrics_line.substr(std::min(metrics_line.size(), metrics_line.find("http://")));
  Agent b(AgentOptions{.name = "down-b", .emulated = 2, .emulated_memory = "1GiB", .extra_args = {"--config", toml}});
  const std::vector<std::string> env = {"GPUPOOL_DIRECTORY=" + etcd.Spec(), "GPUPOOL_SERVERS", "GPUPOOL_POOL",
                                        "HOME=" + home.path(), "XDG_CACHE_HOME"};
  Pool pool = DirectoryPool(etcd.Spec());
  ASSERT_TRUE(Eventually([&] { return Lists(pool, {"down-a", "down-b"}); }, seconds(20)));
  // A command run while the directory answers: later processes of this user remember its agents.
  RunResult first = RunCommand({ToolPath("gp-run"), "-q", "--", "true"}, env);
  ASSERT_EQ(first.code, 0) << first.err;

  etcd.KillAll();
  // This process read the directory before: it falls back to the agents it listed, with a warning.
  auto lease = pool.Allocate(Slices(2, 1.0));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  PoolState state = pool.Summary();
  EXPECT_NE(state.directory_error.find("does not answer"), std::string::npos) << state.directory_error;
  EXPECT_EQ(state.servers.size(), 2u);
  lease->Release();
  // A new process (gp-run) falls back to the agents an earlier one saw, and says so.
  RunResult fallback = RunCommand({ToolPath("gp-run"), "-n", "4", "--", "true"}, env);
  EXPECT_EQ(fallback.code, 0) << fallback.err;
  EXPECT_NE(fallback.err.find("does not answer"), std::string::npos) << fallback.err;
  // With nothing remembered, it says so rather than running on nothing.
  TempDir empty_home;
  RunResult nothing = RunCommand({ToolPath("gp-run"), "--", "true"},
                                 {"GPUPOOL_DIRECTORY=" + etcd.Spec(), "GPUPOOL_SERVERS", "GPUPOOL_POOL",
                                  "HOME=" + empty_home.path(), "XDG_CACHE_HOME"});
  EXPECT_NE(nothing.code, 0);
  EXPECT_NE(nothing.err.find("no agent is known to fall back to"), std::string::npos) << nothing.err;

  // The cluster comes back as a new one (its data lost, longer down than the agents' TTL): the agents register
  // again, and placement uses the directory again.
  std::this_thread::sleep_for(seconds(4));
  etcd.StartAll(/*fresh=*/true);
  EXPECT_TRUE(Eventually([&] { return Lists(pool, {"down-a", "down-b"}); }, seconds(30)));
  auto after = pool.Allocate(Slices(1, 0.5));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_TRUE(pool.Summary().directory_error.empty());
  EXPECT_NE(a.process().Stderr().find("registering again"), std::string::npos) << a.process().Stderr();
  // Operators see it in /metrics (and promtool finds nothing to say of the directory's families).
  RunResult scraped = RunCommand({"/usr/bin/env", "curl", "-sS", "--max-time", "5", metrics_url});
  EXPECT_NE(scraped.out.find("gpupool_directory_registered 1\n"), std::string::npos) << scraped.out;
  EXPECT_NE(scraped.out.find("gpupool_directory_registrations_total 2\n"), std::string::npos) << scraped.out;
  EXPECT_EQ(scraped.out.find("gpupool_directory_failures_total 0\n"), std::string::npos) << scraped.out;
  TempDir out;
  std::string file = out.Write("metrics.txt", scraped.out);
  RunResult check = RunCommand({"/bin/sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(check.code, 0) << check.out << check.err;
  EXPECT_EQ(check.out + check.err, "") << "promtool has something to say";
}

TEST(Directory, DeadAgentLeavesWithinItsTtlAndForgedEntriesAreIgnored) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1);
  TempDir config;
  std::string toml = config.Write("agent.toml", "directory = \"" + etcd.Spec() + "\"\n[etcd]\nttl = \"2s\"\n");
  Agent a(AgentOptions{.name = "live", .emulated = 1, .emulated_memory = "1GiB", .extra_args = {"--config", toml}});
  Agent b(AgentOptions{.name = "dies", .emulated = 1, .emulated_memory = "1GiB", .extra_args = {"--config", toml}});
  Pool pool = DirectoryPool(etcd.Spec());
  ASSERT_TRUE(Eventually([&] { return Lists(pool, {"dies", "live"}); }, seconds(20)));
  // Whatever else is under the prefix: garbage, an entry under another instance's key, an address that is no
  // address, absurd sizes. Skipped, never trusted, never a crash.
  ASSERT_EQ(etcd.Ctl({"put", "/gpupool/agents/garbage", "{not json"}).code, 0);
  ASSERT_EQ(etcd.Ctl({"put", "/gpupool/agents/x",
                      R"({"format":1,"name":"forged","instanceId":"y","address":"127.0.0.1:1","devices":[]})"})
                .code,
            0);
  ASSERT_EQ(etcd.Ctl({"put", "/gpupool/agents/z",
                      R"({"format":1,"name":"bad","instanceId":"z","address":"no port here","devices":[]})"})
                .code,
            0);
  ASSERT_EQ(etcd.Ctl({"put", "/gpupool/agents/w",
                      R"({"format":7,"name":"future","instanceId":"w","address":"127.0.0.1:2"})"})
                .code,
            0);
  EXPECT_TRUE(Lists(pool, {"dies", "live"}));
  auto lease = pool.Allocate(Slices(2, 1.0));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  lease->Release();
  b.Kill(SIGKILL);  // No withdrawal: its etcd lease expires.
  EXPECT_TRUE(Eventually([&] { return Lists(pool, {"live"}); }, seconds(6)));
}

TEST(Directory, AnAgentRestartedAtItsAddressCountsOnce) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1);
  const std::string listen = fmt::format("127.0.0.1:{}", FreeLoopbackPort());
  AgentOptions options = Registered("again", etcd.Spec(), 2);
  options.listen = listen;
  Agent agent(options);
  Pool pool = DirectoryPool(etcd.Spec());
  ASSERT_TRUE(Eventually([&] { return Lists(pool, {"again"}); }, seconds(20)));
  // Killed, restarted at once at its address: a new instance registers while the old entry lives out its TTL.
  agent.Kill(SIGKILL);
  agent.Restart();
  ASSERT_TRUE(Eventually([&] {
    return etcd.Ctl({"get", "--prefix", "--keys-only", "/gpupool/agents/"}).out.find("\n/gpupool/agents/") !=
           std::string::npos;
  }, seconds(10)));
  EXPECT_TRUE(Lists(pool, {"again"}));  // Once, at its address.
  EXPECT_EQ(pool.Summary().device_count(), 2);
  // A request for more GPUs than the agent has is one it can never grant, not one placed on it twice.
  auto three = DirectoryPool(etcd.Spec()).Allocate(Slices(3, 1.0));
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), StatusCode::kUnsatisfiable) << three.status().ToString();
  auto two = DirectoryPool(etcd.Spec()).Allocate(Slices(2, 1.0));
  EXPECT_TRUE(two.ok()) << two.status().ToString();
}

TEST(Directory, BadDirectoryConfigurationSaysWhy) {
  TempDir dir;
  struct Case {
    std::vector<std::string> env;
    std::string says;
  };
  std::string no_directory = dir.Write("no-directory.toml", "servers = [\"127.0.0.1:7450\"]\n[etcd]\nprefix = \"/p\"\n");
  std::string bad_prefix = dir.Write("bad-prefix.toml", "directory = \"etcd:http://127.0.0.1:2379\"\n[etcd]\n"
                                                        "prefix = \"nope/\"\n");
  std::string no_password = dir.Write("no-password.toml", "directory = \"etcd:http://127.0.0.1:2379\"\n[etcd]\n"
                                                          "user = \"alice\"\n");
  for (const Case& c : std::vector<Case>{
           {{"GPUPOOL_DIRECTORY=zookeeper:127.0.0.1:2181"}, "only etcd directories are known"},
           {{"GPUPOOL_DIRECTORY=etcd:"}, "names no endpoint"},
           {{"GPUPOOL_DIRECTORY=etcd:127.0.0.1:2379"}, "has no http:// or https://"},
           {{"GPUPOOL_DIRECTORY=etcd:http://127.0.0.1:99999"}, "has no valid port"},
           {{"GPUPOOL_DIRECTORY="}, "GPUPOOL_DIRECTORY is set but empty"},
           {{"GPUPOOL_DIRECTORY", "GPUPOOL_POOL=" + no_directory}, "[etcd] table without directory"},
           {{"GPUPOOL_DIRECTORY", "GPUPOOL_POOL=" + bad_prefix}, "must start with '/'"},
           {{"GPUPOOL_DIRECTORY", "GPUPOOL_POOL=" + no_password}, "needs a password_file"},
       }) {
    std::vector<std::string> env = c.env;
    env.push_back("GPUPOOL_SERVERS");
    RunResult ls = RunCommand({ToolPath("gp-ls")}, env);
    EXPECT_EQ(ls.code, 2) << c.env[0];
    EXPECT_NE(ls.err.find(c.says), std::string::npos) << c.env[0] << ": " << ls.err;
  }
  // The agent refuses a bad [etcd] before it serves.
  std::string agent_toml = dir.Write("agent.toml", "directory = \"etcd:http://127.0.0.1:2379\"\n[etcd]\nttl = \"1s\"\n");
  RunResult agent = RunCommand({ToolPath("gp-agent"), "--config", agent_toml, "--emu", "1", "--no-nvml"});
  EXPECT_EQ(agent.code, 2);
  EXPECT_NE(agent.err.find("[etcd] ttl must be whole seconds within 2s..1h"), std::string::npos) << agent.err;
}

TEST(Directory, AuthenticatedEtcdTakesTheRightPasswordOnly) {
  REQUIRE_ETCD();
  EtcdCluster etcd(1);
  TempDir dir;
  Pool probe = DirectoryPool(etcd.Spec());
  ASSERT_TRUE(Eventually([&] { return probe.Summary().directory_error.empty(); }, seconds(20)));
  ASSERT_EQ(etcd.Ctl({"user", "add", "root:rootpw"}).code, 0);
  ASSERT_EQ(etcd.Ctl({"user", "add", "gpupool:s3cret"}).code, 0);
  ASSERT_EQ(etcd.Ctl({"role", "add", "pool"}).code, 0);
  ASSERT_EQ(etcd.Ctl({"role", "grant-permission", "pool", "--prefix=true", "readwrite", "/gpupool/"}).code, 0);
  ASSERT_EQ(etcd.Ctl({"user", "grant-role", "gpupool", "pool"}).code, 0);
  RunResult enabled = etcd.Ctl({"auth", "enable"});
  ASSERT_EQ(enabled.code, 0) << enabled.err;
  std::string good = dir.Write("good.password", "s3cret\n");
  std::string bad = dir.Write("bad.password", "guess\n");
  chmod(good.c_str(), 0600);
  chmod(bad.c_str(), 0600);
  auto settings = [&](const std::string& password) {
    return "directory = \"" + etcd.Spec() + "\"\n[etcd]\nuser = \"gpupool\"\npassword_file = \"" + password + "\"\n";
  };
  std::string agent_toml = dir.Write("agent.toml", settings(good));
  Agent agent(AgentOptions{.name = "authed", .emulated = 1, .emulated_memory = "1GiB",
                           .extra_args = {"--config", agent_toml}});
  std::string pool_good = dir.Write("pool-good.toml", settings(good));
  std::string pool_bad = dir.Write("pool-bad.toml", settings(bad));
  PoolOptions options;
  options.pool_file = pool_good;
  auto pool = Pool::Connect(options);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ASSERT_TRUE(Eventually([&] { return pool->Summary().servers.size() == 1; }, seconds(20)))
      << agent.process().Stderr();
  auto lease = pool->Allocate(Slices(1, 1.0));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  lease->Release();
  // Without credentials, or with wrong ones, the directory does not answer this client, and it says why.
  EXPECT_NE(probe.Summary().directory_error.find("does not answer"), std::string::npos);
  RunResult wrong = RunCommand({ToolPath("gp-ls")}, {"GPUPOOL_POOL=" + pool_bad, "GPUPOOL_SERVERS",
                                                     "GPUPOOL_DIRECTORY", "HOME=" + dir.path()});
  EXPECT_NE(wrong.err.find("authentication as 'gpupool' refused"), std::string::npos) << wrong.err;
  // A password file others can read is refused before anything is sent.
  chmod(good.c_str(), 0644);
  RunResult open_file = RunCommand({ToolPath("gp-ls")}, {"GPUPOOL_POOL=" + pool_good, "GPUPOOL_SERVERS",
                                                         "GPUPOOL_DIRECTORY"});
  EXPECT_EQ(open_file.code, 2);
  EXPECT_NE(open_file.err.find("readable by others"), std::string::npos) << open_file.err;
}

TEST(Directory, TlsEtcdWithClientCertificates) {
  REQUIRE_ETCD();
  TempDir dir;
  std::string script = R"(set -e
cd ")" + dir.path() + R"("
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=etcd test CA" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.crt -days 2 -subj "/CN=other CA" 2>/dev/null
printf "subjectAltName=IP:127.0.0.1
" > san.ext
openssl req -newkey rsa:2048 -nodes -keyout etcd.key -out etcd.csr -subj "/CN=etcd" 2>/dev/null
openssl x509 -req -in etcd.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out etcd.crt -days 2 -extfile san.ext 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "/CN=gpupool" 2>/dev/null
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2 2>/dev/null
)";
  ASSERT_EQ(RunCommand({"/bin/sh", "-c", script}).code, 0);
  const std::string d = dir.path() + "/";
  EtcdCluster etcd(1, {"--cert-file", d + "etcd.crt", "--key-file", d + "etcd.key", "--trusted-ca-file", d + "ca.crt",
                       "--client-cert-auth"},
                   "https");
  auto settings = [&](const std::string& ca) {
    return "directory = \"" + etcd.Spec() + "\"\n[etcd]\nca = \"" + ca + "\"\ncert = \"" + d +
           "client.crt\"\nkey = \"" + d + "client.key\"\n";
  };
  std::string agent_toml = dir.Write("agent.toml", settings(d + "ca.crt"));
  Agent agent(AgentOptions{.name = "tls-dir", .emulated = 1, .emulated_memory = "1GiB",
                           .extra_args = {"--config", agent_toml}});
  PoolOptions options;
  options.pool_file = dir.Write("pool.toml", settings(d + "ca.crt"));
  auto pool = Pool::Connect(options);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ASSERT_TRUE(Eventually([&] { return pool->Summary().servers.size() == 1; }, seconds(20)))
      << agent.process().Stderr();
  auto lease = pool->Allocate(Slices(1, 1.0));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  // A client that trusts another CA does not take this etcd's word.
  PoolOptions wrong;
  wrong.pool_file = dir.Write("wrong.toml", settings(d + "other.crt"));
  auto distrusting = Pool::Connect(wrong);
  ASSERT_TRUE(distrusting.ok());
  EXPECT_NE(distrusting->Summary().directory_error.find("does not answer"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::testing
