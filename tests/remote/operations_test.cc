// Operations end to end: the agent's telemetry of real nvcc-built programs under gp-run, gp-ls and gp-top reading
// it, gp-top's full-screen view driven through tmux as a person would, and /metrics checked by promtool and scraped
// by a real Prometheus server.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "core/util.h"
#include "admin_helpers.h"
#include "integration/helpers.h"

namespace gpupool::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;



// An agent serving /metrics; its metrics URL is read from its second line of output.
struct MetricsAgent {
  explicit MetricsAgent(std::vector<std::string> extra = {}, std::string listen = "")
      : agent(Options(std::move(extra), std::move(listen))) {
    std::string line = agent.process().ReadLine(seconds(10));
    auto at = line.find("http://");
    if (at == std::string::npos) throw std::runtime_error("no metrics line from gp-agent: '" + line + "'");
    url = line.substr(at);
  }
  static AgentOptions Options(std::vector<std::string> extra, std::string listen) {
    AgentOptions o{.name = "ops", .emulated = 2, .emulated_memory = "4GiB"};
    if (!listen.empty()) o.listen = std::move(listen);
    o.extra_args = {"--metrics", "127.0.0.1:0"};
    o.extra_args.insert(o.extra_args.end(), extra.begin(), extra.end());
    return o;
  }
  std::string Scrape() const { return RunCommand({"/usr/bin/env", "curl", "-sS", "--max-time", "5", url}).out; }
  Agent agent;
  std::string url;
};

// The value of the first sample of `series` (the metric name with its labels, as printed) in `text`; -1 if none.
double SampleOf(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

TEST(Operations, TelemetryFollowsRealProgramsAndFlagsIdleLeases) {
  MetricsAgent m({"--idle-after", "2s"});
  const std::string server = m.agent.address();
  Process busy({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("busy"), "20"});
  Process copies({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("copy_loop")});
  Process sleeper({ToolPath("gp-run"), "--servers", server, "-p", "0.25", "--", "sleep", "30"});
  Pool pool = Connect({server});
  // Within a few samples: the busy program keeps its device busy, the copier moves bytes both ways, the sleeper
  // (no CUDA at all) goes idle, and each one's memory is what it allocated.
  PoolState state;
  bool seen = Eventually(
      [&] {
        state = pool.State(seconds(30));
        const LeaseInfo* b = FindLease(state, "busy");
        const LeaseInfo* c = FindLease(state, "copy_loop");
        const LeaseInfo* s = FindLease(state, "sleep");
        return b && c && s && b->activity.utilization.value_or(0) > 0.5 && b->activity.calls_per_s > 0 &&
               c->activity.bytes_to_device_per_s > (1 << 20) && c->activity.bytes_from_device_per_s > (1 << 20) &&
               s->idle;
      },
      seconds(30));
  ASSERT_TRUE(seen) << "telemetry never showed the three programs at work";
  const LeaseInfo* b = FindLease(state, "busy");
  const LeaseInfo* c = FindLease(state, "copy_loop");
  const LeaseInfo* s = FindLease(state, "sleep");
  EXPECT_EQ(b->activity.memory_used, 8u * 64 * sizeof(unsigned long long));  // busy's one cudaMalloc.
  EXPECT_GE(c->activity.memory_used, 32u << 20);                               // copy_loop's 32 MiB buffer.
  EXPECT_EQ(b->sessions, 1u);
  ASSERT_EQ(b->session_list.size(), 1u);
  EXPECT_EQ(b->session_list[0].device, b->devices.at(0));
  EXPECT_EQ(b->session_list[0].activity.memory_used, b->activity.memory_used);
  EXPECT_GT(b->session_list[0].worker_pid, 0u);
  EXPECT_EQ(s->sessions, 0u);
  EXPECT_FALSE(b->idle);
  EXPECT_FALSE(c->idle);
  EXPECT_GE(s->idle_s, 2.0);
  EXPECT_GT(b->calls_total, 0u);
  EXPECT_GT(c->bytes_to_device_total, 32u << 20);
  EXPECT_FALSE(b->history.empty());
  EXPECT_LE(b->history.size(), 30u);
  // Per device: what its sessions hold, and how busy it is.
  uint64_t used = 0;
  for (const auto& d : state.servers[0].devices) used += d.activity.memory_used;
  EXPECT_EQ(used, b->activity.memory_used + c->activity.memory_used);
  ASSERT_EQ(b->devices.size(), 1u);
  EXPECT_GT(state.servers[0].devices[b->devices[0]].activity.utilization.value_or(0), 0.5);
  EXPECT_EQ(state.servers[0].idle_after_s, 2.0);

  // The same through /metrics.
  std::string text = m.Scrape();
  EXPECT_EQ(SampleOf(text, "gpupool_leases{state=\"idle\"}"), 1) << text;
  EXPECT_EQ(SampleOf(text, "gpupool_sessions"), 2) << text;
  EXPECT_GT(SampleOf(text, "gpupool_lease_calls_total{lease=\"" + b->id + "\",user=\"" + b->user + "\"}"), 0);
  EXPECT_EQ(text.find("pid"), std::string::npos) << "no PID labels";

  // A killed client's lease ends; its numbers go with it, and the device's memory comes back.
  copies.Signal(SIGKILL);
  kill(-copies.pid(), SIGKILL);
  ASSERT_TRUE(Eventually(
      [&] {
        state = pool.State();
        uint64_t u = 0;
        for (const auto& d : state.servers[0].devices) u += d.activity.memory_used;
        return !FindLease(state, "copy_loop") && u == 8u * 64 * sizeof(unsigned long long);
      },
      seconds(40)));
}

TEST(Operations, MetricsPassPromtoolAndARealPrometheusScrapesThem) {
  MetricsAgent m;
  Process busy({ToolPath("gp-run"), "--servers", m.agent.address(), "-p", "0.5", "--", Program("busy"), "60"});
  Pool pool = Connect({m.agent.address()});
  ASSERT_TRUE(Eventually([&] { return FindLease(pool.State(), "busy") != nullptr; }, seconds(20)));
  std::string text;
  ASSERT_TRUE(Eventually(
      [&] {
        text = m.Scrape();
        return text.find("gpupool_lease_calls_total{") != std::string::npos;
      },
      seconds(20)))
      << text;
  TempDir dir;
  std::string scraped = dir.Write("metrics.txt", text);
  RunResult check = RunCommand({"/bin/sh", "-c", "promtool check metrics < " + scraped});
  EXPECT_EQ(check.code, 0) << "promtool: " << check.out << check.err << "\n" << text;
  // Anything promtool finds worth a word (naming, units, help) is a failure too.
  EXPECT_EQ(check.out + check.err, "") << text;
  // Something else on the metrics port gets a clear 404.
  RunResult other = RunCommand({"/usr/bin/env", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                m.url.substr(0, m.url.rfind('/')) + "/other"});
  EXPECT_EQ(other.out, "404");

  // A real Prometheus server scrapes the agent every second; its query API answers with the agent's numbers.
  std::string target = m.url.substr(7, m.url.rfind('/') - 7);
  std::string config = dir.Write("prometheus.yml", "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                                   "scrape_configs:\n  - job_name: gpupool\n    static_configs:\n"
                                                   "      - targets: ['" + target + "']\n");
  int port = FreeLoopbackPort();
  Process prometheus({"/usr/bin/env", "prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/data",
                      "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"});
  auto query = [port](const std::string& promql) {
    return RunCommand({"/usr/bin/env", "curl", "-sS", "--max-time", "5", "-G", "--data-urlencode", "query=" + promql,
                       "http://127.0.0.1:" + std::to_string(port) + "/api/v1/query"})
        .out;
  };
  // {"status":"success","data":{"resultType":"vector","result":[{"metric":{...},"value":[TIME,"VALUE"]}]}}
  auto value_of = [&](const std::string& promql) {
    static const std::regex value(R"re("value":\[[0-9.]+,"([^"]+)"\])re");
    std::smatch match;
    std::string answer = query(promql);
    return std::regex_search(answer, match, value) ? std::stod(match[1]) : -1.0;
  };
  ASSERT_TRUE(Eventually([&] { return value_of("up{job=\"gpupool\"}") == 1; }, seconds(60)))
      << "Prometheus never scraped the agent: " << query("up") << prometheus.Stderr();
  EXPECT_EQ(value_of("gpupool_device_memory_total_bytes{gpu=\"0\"}"), 4.0 * (1ull << 30));
  EXPECT_EQ(value_of("sum(gpupool_device_memory_allocated_bytes)"), 2.0 * (1ull << 30));
  EXPECT_EQ(value_of("count(gpupool_device_info{emulated=\"true\"})"), 2);
  EXPECT_EQ(value_of("gpupool_leases{state=\"active\"}"), 1);
  EXPECT_GE(value_of("gpupool_reservations_granted_total"), 1);
  // Counters rise between scrapes: the busy program's calls and its device time.
  EXPECT_TRUE(Eventually([&] { return value_of("sum(rate(gpupool_lease_calls_total[5s]))") > 0; }, seconds(30)))
      << query("gpupool_lease_calls_total");
  EXPECT_TRUE(Eventually([&] { return value_of("max(rate(gpupool_device_busy_seconds_total[5s]))") > 0.3; },
                         seconds(30)))
      << query("gpupool_device_busy_seconds_total");
}

// gp-top in a real terminal (tmux, 80x24), keys sent as a person types them.
class Tmux {
 public:
  explicit Tmux(const std::string& command) : socket_("gpupool-test-" + std::to_string(getpid())) {
    RunResult r = Run({"new-session", "-d", "-s", "top", "-x", "80", "-y", "24", command});
    if (r.code != 0) throw std::runtime_error("tmux: " + r.err);
  }
  ~Tmux() { Run({"kill-server"}); }
  std::string Screen() { return Run({"capture-pane", "-p", "-t", "top"}).out; }
  void Keys(std::vector<std::string> keys) {
    std::vector<std::string> args = {"send-keys", "-t", "top"};
    args.insert(args.end(), keys.begin(), keys.end());
    Run(args);
  }
  bool Alive() { return Run({"has-session", "-t", "top"}).code == 0; }
  // Waits until the screen satisfies `pred`; the last screen in *screen.
  bool Shows(const std::function<bool(const std::string&)>& pred, std::string* screen,
             milliseconds timeout = seconds(15)) {
    return Eventually(
        [&] {
          *screen = Screen();
          return pred(*screen);
        },
        timeout);
  }

 private:
  RunResult Run(std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/env", "tmux", "-L", socket_, "-f", "/dev/null"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {}, seconds(10));
  }
  std::string socket_;
};

std::vector<std::string> Lines(const std::string& screen) {
  std::vector<std::string> lines;
  std::istringstream in(screen);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The lease rows of gp-top's screen: the lines between the lease header and the footer.
std::string LeaseRows(const std::string& screen) {
  auto at = screen.find("COMMAND");
  auto footer = screen.rfind("\n", screen.find("q quit"));
  if (at == std::string::npos) return "";
  at = screen.find('\n', at);
  return screen.substr(at, footer == std::string::npos ? std::string::npos : footer - at);
}

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(Operations, GpTopInAnEightyByTwentyFourTerminal) {
  Agent agent(AgentOptions{.name = "top", .emulated = 2, .emulated_memory = "4GiB", .extra_args = {"--idle-after", "2s"}});
  const std::string server = agent.address();
  auto worker = std::make_unique<Process>(
      std::vector<std::string>{ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("busy"), "60"});
  auto sleeper = std::make_unique<Process>(
      std::vector<std::string>{ToolPath("gp-run"), "--servers", server, "-m", "1GiB", "--", "sleep", "60"});
  Tmux tmux(ToolPath("gp-top") + " --servers " + server + ",127.0.0.1:1 --interval 0.5");
  std::string screen;
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return Has(LeaseRows(s), "busy") && Has(LeaseRows(s), "sleep"); },
                         &screen))
      << screen;
  // It fits: 80 columns, 24 lines; a bar per GPU; the down server is shown, not fatal.
  auto lines = Lines(screen);
  EXPECT_LE(lines.size(), 24u);
  for (const auto& l : lines) EXPECT_LE(l.size(), 80u) << l;
  EXPECT_TRUE(Has(screen, "127.0.0.1:1 down")) << screen;
  EXPECT_TRUE(Has(screen, "1/2 servers up")) << screen;
  // At 80 columns: every lease's whole id (what `gp-agent ctl revoke` takes), and the columns a lease row promises
  // there (the host, byte rate and expiry give way).
  for (const char* column : {"LEASE", "USER", "GPUS", "UTIL", "CALL/S", "AGE", "COMMAND"}) {
    EXPECT_TRUE(Has(screen, column)) << column << "\n" << screen;
  }
  for (const ServerInfo& s : Connect({server}).State().servers) {
    for (const LeaseInfo& l : s.leases) EXPECT_TRUE(Has(screen, l.id)) << l.id << "\n" << screen;
  }
  // The busy lease's utilisation reaches its row, and the sleeper is flagged idle.
  ASSERT_TRUE(tmux.Shows(
      [](const std::string& s) {
        std::regex busy_row(R"(run +\S*busy)"), idle_row(R"(idle +sleep)"), util(R"( (\d+)% +\d)");
        return std::regex_search(s, busy_row) && std::regex_search(s, idle_row) && Has(s, "[####");
      },
      &screen))
      << screen;

  // s: sort by the next key; r: reverse.
  tmux.Keys({"s"});
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return Has(s, "sort memory desc"); }, &screen)) << screen;
  // By memory, largest first: the busy program holds 4 KiB, the sleeper nothing.
  EXPECT_LT(LeaseRows(screen).find("busy"), LeaseRows(screen).find("sleep")) << screen;
  tmux.Keys({"r"});
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return Has(s, "sort memory asc"); }, &screen)) << screen;
  EXPECT_GT(LeaseRows(screen).find("busy"), LeaseRows(screen).find("sleep")) << screen;

  // /: a filter, typed; only matching leases remain. c clears it.
  tmux.Keys({"/"});
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return Has(s, "filter: _"); }, &screen)) << screen;
  tmux.Keys({"s", "l", "e", "e", "p", "Enter"});
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return Has(s, "filter \"sleep\""); }, &screen)) << screen;
  EXPECT_TRUE(Has(LeaseRows(screen), "sleep")) << screen;
  EXPECT_FALSE(Has(LeaseRows(screen), "busy")) << screen;
  tmux.Keys({"c"});
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return Has(LeaseRows(s), "busy") && !Has(s, "filter \""); },
                         &screen))
      << screen;
  // i: idle leases only.
  tmux.Keys({"i"});
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return Has(s, "idle only") && !Has(LeaseRows(s), "busy"); },
                         &screen))
      << screen;
  tmux.Keys({"i"});

  // Leases come and go: the sleeper is stopped (gp-run passes the signal on and releases), a new one appears.
  sleeper->Signal(SIGTERM);
  EXPECT_EQ(sleeper->Wait(seconds(10)), 128 + SIGTERM);
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return !Has(LeaseRows(s), "sleep 60") && Has(s, "busy"); },
                         &screen))
      << screen;
  Process newcomer({ToolPath("gp-run"), "--servers", server, "-p", "0.25", "--", "sleep", "45"});
  ASSERT_TRUE(tmux.Shows([](const std::string& s) { return Has(LeaseRows(s), "sleep 45"); }, &screen)) << screen;

  // q quits, and the terminal is left to the shell.
  tmux.Keys({"q"});
  EXPECT_TRUE(Eventually([&] { return !tmux.Alive(); }, seconds(5))) << tmux.Screen();
}

TEST(Operations, GpTopOnceAndJsonAgreeWithGpLs) {
  AgentGroup agents(2, AgentOptions{.name = "agree", .emulated = 2, .emulated_memory = "4GiB"});
  Process a({ToolPath("gp-run"), "--servers", agents.Servers(), "-p", "0.5", "--", Program("busy"), "30"});
  Process b({ToolPath("gp-run"), "--servers", agents.Servers(), "-n", "2", "--spread", "-m", "1GiB", "--", "sleep", "30"});
  Pool pool = Connect(agents.Addresses());
  // The spread lease is listed by both of its servers.
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 3; }, seconds(20))) << a.Stderr() << b.Stderr();
  TempDir dir;
  RunResult top = RunCommand({ToolPath("gp-top"), "--json", "--servers", agents.Servers()});
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--json", "--leases", "--servers", agents.Servers()});
  ASSERT_EQ(top.code, 0) << top.err;
  ASSERT_EQ(ls.code, 0) << ls.err;
  // The same schema and the same pool: servers, devices and their allocations, leases and their holders.
  std::string compare = dir.Write("compare.py", R"(import json, sys
top, ls = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert top["schema_version"] == ls["schema_version"] == 1
def pool(doc):
    out = []
    for s in doc["servers"]:
        devices = [(d["index"], d["uuid"], d["memory_total_bytes"], d["memory_allocated_bytes"], d["compute_allocated"])
                   for d in s["devices"]]
        leases = sorted((l["id"], l["user"], l["label"], l["memory_bytes"], tuple(l["devices"])) for l in s["leases"])
        out.append((s["address"], s["up"], s["name"], devices, leases))
    return out
assert pool(top) == pool(ls), (pool(top), pool(ls))
for s in top["servers"]:
    for d in s["devices"]:
        for key in ("memory_used_bytes", "utilization", "calls_per_s", "temperature_c"):
            assert key in d, key
    for l in s["leases"]:
        for key in ("memory_used_bytes", "utilization", "calls_per_s", "bytes_to_device_per_s", "idle", "sessions"):
            assert key in l, key
print("same")
)");
  RunResult same = RunCommand({"/usr/bin/env", "python3", compare, dir.Write("top.json", top.out), dir.Write("ls.json", ls.out)});
  EXPECT_EQ(same.out, "same\n") << same.out << same.err;
  // History only when asked for, at most what was asked.
  RunResult history = RunCommand({ToolPath("gp-top"), "--json", "--history", "5", "--servers", agents.Servers()});
  EXPECT_TRUE(Has(history.out, "\"history\":[")) << history.out;
  EXPECT_FALSE(Has(top.out, "\"history\"")) << top.out;

  // --once: one screen of text, every lease on it, no colour codes in a pipe (nor with NO_COLOR).
  RunResult once = RunCommand({ToolPath("gp-top"), "--once", "--servers", agents.Servers()});
  EXPECT_EQ(once.code, 0) << once.err;
  EXPECT_TRUE(Has(once.out, "sleep 30")) << once.out;
  EXPECT_TRUE(Has(once.out, "busy 30")) << once.out;
  EXPECT_TRUE(Has(once.out, "2/2 servers up")) << once.out;
  EXPECT_FALSE(Has(once.out, "\x1b[")) << once.out;
  // A down server is shown; only a pool with no server up is an error.
  RunResult partly = RunCommand({ToolPath("gp-top"), "--once", "--servers", agents.Servers() + ",127.0.0.1:1"});
  EXPECT_EQ(partly.code, 0);
  EXPECT_TRUE(Has(partly.out, "127.0.0.1:1 down")) << partly.out;
  RunResult none = RunCommand({ToolPath("gp-top"), "--once", "--servers", "127.0.0.1:1"});
  EXPECT_EQ(none.code, 1);
  RunResult bad = RunCommand({ToolPath("gp-top"), "--interval", "0"});
  EXPECT_EQ(bad.code, 2);
}

TEST(Admin, CordonRevokeAndDrainFromTheShell) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  Agent agent(AgentOptions{.name = "admin", .emulated = 2, .emulated_memory = "4GiB",
                           .listen = "unix:" + dir.path() + "/agent.sock", .extra_args = {"--require-auth"}});
  const std::string server = agent.address();
  Pool pool = Connect({server});

  // Cordon one GPU: shown, and placement goes around it; a request that needs it waits, then gets it on uncordon.
  RunResult c = Ctl(server, {"cordon", "0"});
  ASSERT_EQ(c.code, 0) << c.err;
  PoolState state = pool.State();
  EXPECT_TRUE(state.servers[0].devices[0].cordoned);
  EXPECT_FALSE(state.servers[0].devices[1].cordoned);
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--servers", server});
  EXPECT_NE(ls.out.find("cordoned"), std::string::npos) << ls.out;
  RunResult two = RunCommand({ToolPath("gp-run"), "--servers", server, "-n", "2", "--", "/bin/true"});
  EXPECT_EQ(two.code, 125) << two.err;
  Process waiting({ToolPath("gp-run"), "--servers", server, "-n", "2", "--wait", "20s", "--", "/bin/echo", "both"});
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_TRUE(waiting.running());
  ASSERT_EQ(Ctl(server, {"uncordon", "0"}).code, 0);
  EXPECT_EQ(waiting.ReadLine(seconds(20)), "both");
  EXPECT_EQ(waiting.Wait(seconds(10)), 0) << waiting.Stderr();

  // Revoke: the program's next CUDA call fails saying its lease ended; the slice is free again.
  Process busy({ToolPath("gp-run"), "--servers", server, "--", Program("busy"), "30"});
  ASSERT_TRUE(Eventually([&] { return !LeaseIdOf(pool, "busy").empty(); }, seconds(20)));
  std::string id = LeaseIdOf(pool, "busy");
  // Somebody else may not, with a clear reason (the socket admits every local user: the kernel says who).
  if (geteuid() == 0) {
    RunCommand({"/usr/sbin/useradd", "-M", "-r", "-s", "/usr/sbin/nologin", "gptest-auth"});
    RunResult refused = Ctl(server, {"revoke", id}, "gptest-auth");
    EXPECT_EQ(refused.code, 1);
    EXPECT_NE(refused.err.find("administrators"), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("gptest-auth is not one"), std::string::npos) << refused.err;
  }
  RunResult revoked = Ctl(server, {"revoke", id});
  ASSERT_EQ(revoked.code, 0) << revoked.err;
  EXPECT_NE(busy.Wait(seconds(20)), 0);
  EXPECT_NE(busy.Stderr().find("the lease of this session ended: revoked by"), std::string::npos) << busy.Stderr();
  EXPECT_EQ(Ctl(server, {"revoke", id}).code, 1);  // Gone already.

  // Drain: every GPU cordoned; it waits for the leases held, and reports when none is left.
  Process holder({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", "sleep", "2"});
  ASSERT_TRUE(Eventually([&] { return !LeaseIdOf(pool, "sleep").empty(); }, seconds(20)));
  RunResult drained = Ctl(server, {"drain", "--wait", "20s"});
  EXPECT_EQ(drained.code, 0) << drained.out << drained.err;
  EXPECT_NE(drained.out.find("drained"), std::string::npos) << drained.out;
  RunResult refused_run = RunCommand({ToolPath("gp-run"), "--servers", server, "--", "/bin/true"});
  EXPECT_EQ(refused_run.code, 125);
  RunResult listed = Ctl(server, {"list"});
  EXPECT_NE(listed.out.find("GPU 1  gpupool emulated GPU  cordoned"), std::string::npos) << listed.out;
  ASSERT_EQ(Ctl(server, {"uncordon"}).code, 0);
  EXPECT_EQ(RunCommand({ToolPath("gp-run"), "--servers", server, "--", "/bin/true"}).code, 0);
  EXPECT_EQ(Ctl(server, {"cordon", "7"}).code, 1);
  EXPECT_EQ(Ctl(server, {"bogus"}).code, 2);
}

std::string PolicyFile(const std::string& user, double day_fraction) {
  return fmt::format(R"(
[groups]
researchers = ["{}"]

[[personality]]
name = "day"
hours = "08:00-20:00"
max_fraction = {}
max_lease = "3s"
on_change = "1s"
[personality.classes]
a100 = ["researchers"]

[[personality]]
name = "night"
hours = "20:00-08:00"
)",
                     user, day_fraction);
}

// Atomically (a rename): the agent reads the file at any moment, and a half-written one means the wall clock.
void SetClock(const std::string& path, const std::string& local) {
  { std::ofstream(path + ".new") << local << "\n"; }
  std::rename((path + ".new").c_str(), path.c_str());
}

// Issue 43: a running lease moved between the agent's GPUs, again and again, while its program works with state of
// every kind (moving_state.cu checks it bit for bit at the end); a move that cannot be made (the other GPU is
// cordoned, or full) leaves the lease where it was and the program running; the moves are counted in /metrics.
TEST(Migrate, ARunningLeaseMovesBetweenGpusAndItsProgramFinishesExact) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  MetricsAgent m({}, "unix:" + dir.path() + "/agent.sock");  // Administrators are known by uid on a Unix socket.
  const std::string server = m.agent.address();
  Pool pool = Connect({server});
  Process program({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state"), "300"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  const std::string id = LeaseIdOf(pool, "moving_state");
  ASSERT_FALSE(id.empty());
  auto device_of_lease = [&] {
    PoolState state = pool.State();
    const LeaseInfo* l = FindLease(state, "moving_state");
    return l && l->devices.size() == 1 ? static_cast<int>(l->devices[0]) : -1;
  };
  int device = device_of_lease();
  ASSERT_GE(device, 0);
  for (int move = 0; move < 4; ++move) {
    RunResult moved = Ctl(server, {"migrate", id, "--json"});
    ASSERT_EQ(moved.code, 0) << moved.err;
    const int other = 1 - device;
    EXPECT_NE(moved.out.find(fmt::format("\"gpus\": [{}]", other)), std::string::npos) << moved.out;
    EXPECT_NE(moved.out.find("\"sessions\": 1"), std::string::npos) << moved.out;
    EXPECT_EQ(device_of_lease(), other);
    device = other;
    std::this_thread::sleep_for(milliseconds(300));
  }
  // Nowhere to go: the lease stays, and its program goes on.
  ASSERT_EQ(Ctl(server, {"cordon", std::to_string(1 - device)}).code, 0);
  RunResult refused = Ctl(server, {"migrate", id});
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("cordoned"), std::string::npos) << refused.err;
  ASSERT_EQ(Ctl(server, {"uncordon"}).code, 0);
  EXPECT_EQ(Ctl(server, {"migrate", id, "--to-gpu", std::to_string(device)}).code, 1) << "it is there already";
  EXPECT_EQ(Ctl(server, {"migrate", "no-such-lease"}).code, 1);
  EXPECT_EQ(device_of_lease(), device);

  ExpectFinishedExact(program, "ok 600");
  const std::string metrics = m.Scrape();
  EXPECT_EQ(SampleOf(metrics, "gpupool_lease_migrations_total"), 4) << metrics;
  EXPECT_EQ(SampleOf(metrics, "gpupool_migrated_sessions_total"), 4) << metrics;
  // Within one agent a session's memory (3 MiB here) stays in its memory file, handed to the next worker: the images
  // carry the rest (modules, handles), not the memory.
  EXPECT_GT(SampleOf(metrics, "gpupool_migrated_bytes_total"), 0) << metrics;
  EXPECT_LT(SampleOf(metrics, "gpupool_migrated_bytes_total"), 4 * 1.0 * (1 << 20)) << metrics;
}

// A lease moved again and again while its program idles, before its client has come back to any new worker (each
// restored worker is checkpointed without ever having been entered), then suspended: the program, waking, finds its
// session where it went last and finishes exact.
TEST(Migrate, ALeaseMovedAgainBeforeItsProgramCameBackIsFoundWhereItWentLast) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  Agent agent(AgentOptions{.name = "again", .emulated = 2, .emulated_memory = "2GiB",
                           .listen = "unix:" + dir.path() + "/agent.sock"});
  const std::string server = agent.address();
  Pool pool = Connect({server});
  Process program(
      {ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state"), "60", "4000"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  ASSERT_EQ(program.ReadLine(seconds(60)), "idle") << program.Stderr();
  const std::string id = LeaseIdOf(pool, "moving_state");
  ASSERT_FALSE(id.empty());
  for (int move = 0; move < 3; ++move) {
    RunResult moved = Ctl(server, {"migrate", id});
    ASSERT_EQ(moved.code, 0) << "move " << move << ": " << moved.err << agent.process().Stderr();
  }
  RunResult suspended = Ctl(server, {"suspend", id});
  ASSERT_EQ(suspended.code, 0) << suspended.err;
  ExpectFinishedExact(program, "ok 120");
}

// A move that fails at any of its steps (the old worker's checkpoint, the new worker's restore, the new worker dying
// as it restores) leaves the lease on its GPU and its program running to an exact end.
TEST(Migrate, AMoveThatFailsAtAnyStepLeavesTheProgramRunningWhereItWas) {
  for (const std::string fault : {"checkpoint", "restore", "restore-crash"}) {
    SCOPED_TRACE(fault);
    TempDir dir;
    chmod(dir.path().c_str(), 0755);
    Agent agent(AgentOptions{.name = "faulty", .emulated = 2, .emulated_memory = "2GiB",
                             .listen = "unix:" + dir.path() + "/agent.sock", .env = {"GPUPOOL_MOVE_FAULT=" + fault}});
    const std::string server = agent.address();
    Pool pool = Connect({server});
    Process program({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state"), "120"});
    ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
    const std::string id = LeaseIdOf(pool, "moving_state");
    ASSERT_FALSE(id.empty());
    PoolState before = pool.State();
    const std::vector<uint32_t> devices = FindLease(before, "moving_state")->devices;
    RunResult failed = Ctl(server, {"migrate", id});
    EXPECT_EQ(failed.code, 1) << failed.out;
    EXPECT_NE(failed.err.find(fault == "checkpoint" ? "could not be checkpointed" : "could not be restored"),
              std::string::npos) << failed.err;
    PoolState after = pool.State();
    ASSERT_NE(FindLease(after, "moving_state"), nullptr);
    EXPECT_EQ(FindLease(after, "moving_state")->devices, devices) << "the lease stays where it was";
    ExpectFinishedExact(program, "ok 240");
  }
}

// Issue 43 on the cuda backend (the stacked configuration: an agent whose "GPUs" are gpupool's own libcuda.so.1
// over two emulated devices of a second agent; README): a lease moves between its GPUs through the driver API (its
// memory read and written with copies, allocations mapped again at their addresses, modules loaded again and their
// variables checked to be where they were) and its program finishes exact. A suspension is refused: the program's
// module holds a variable, which a GPU's driver places itself, and a suspension ends the worker before any restore
// could say whether the driver put it back in place; the same program built without the variable is suspended and
// resumed exact.
TEST(Migrate, OnTheCudaBackendLeasesMoveAndSuspendUnlessADriverPlacedVariableCouldBeLost) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  Agent gpus(AgentOptions{.name = "gpus", .emulated = 2, .emulated_memory = "4GiB"});
  Agent agent(AgentOptions{.name = "stacked",
                           .emulated = 0,
                           .listen = "unix:" + dir.path() + "/agent.sock",
                           .extra_args = {"--cuda-driver", GPUPOOL_DRIVER_LIBRARY},
                           .launcher = {ToolPath("gp-run"), "--servers", gpus.address(), "-n", "2", "--"}});
  const std::string server = agent.address();
  Pool pool = Connect({server});
  Process program(
      {ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state"), "120", "3000"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  ASSERT_EQ(program.ReadLine(seconds(60)), "idle") << program.Stderr();
  const std::string id = LeaseIdOf(pool, "moving_state");
  ASSERT_FALSE(id.empty());
  RunResult suspended = Ctl(server, {"suspend", id});
  EXPECT_EQ(suspended.code, 1) << suspended.out;
  EXPECT_NE(suspended.err.find("holds module variables on a GPU"), std::string::npos) << suspended.err;
  PoolState state = pool.State();
  ASSERT_NE(FindLease(state, "moving_state"), nullptr);
  EXPECT_FALSE(FindLease(state, "moving_state")->suspended);
  const std::vector<uint32_t> before = FindLease(state, "moving_state")->devices;
  RunResult moved = Ctl(server, {"migrate", id});
  ASSERT_EQ(moved.code, 0) << moved.err << agent.process().Stderr();
  PoolState after = pool.State();
  ASSERT_NE(FindLease(after, "moving_state"), nullptr);
  EXPECT_NE(FindLease(after, "moving_state")->devices, before) << "the lease is on its other GPU";
  ExpectFinishedExact(program, "ok 240");

  // A program whose module has no variable: suspended through the driver API, its GPU given back, and resumed by
  // its next call at the same addresses.
  Process plain(
      {ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state_plain"), "120", "3000"});
  ASSERT_EQ(plain.ReadLine(seconds(60)), "ready") << plain.Stderr();
  ASSERT_EQ(plain.ReadLine(seconds(60)), "idle") << plain.Stderr();
  const std::string plain_id = LeaseIdOf(pool, "moving_state_plain");
  ASSERT_FALSE(plain_id.empty());
  RunResult plain_suspended = Ctl(server, {"suspend", plain_id});
  ASSERT_EQ(plain_suspended.code, 0) << plain_suspended.err << agent.process().Stderr();
  PoolState held = pool.State();
  ASSERT_NE(FindLease(held, "moving_state_plain"), nullptr);
  EXPECT_TRUE(FindLease(held, "moving_state_plain")->suspended);
  ExpectFinishedExact(plain, "ok 240");
}

// An agent of `gpus` emulated GPUs on a Unix socket in `dir` whose policy allows whole GPUs at night and half GPUs by
// day, moving the leases that break the day's rules at its change (on_change = "migrate"), with `more` in its
// agent.toml; its clock (dir/clock, GPUPOOL_POLICY_CLOCK) is set to a night.
Agent DayMigratesWholeGpus(TempDir& dir, int gpus, const std::string& more) {
  std::string config = dir.Write("agent.toml", more + R"(
[[personality]]
name = "day"
hours = "08:00-20:00"
max_fraction = 0.5
on_change = "migrate"

[[personality]]
name = "night"
hours = "20:00-08:00"
)");
  SetClock(dir.path() + "/clock", "2026-11-23 21:00");  // Night.
  return Agent(AgentOptions{.name = "policy", .emulated = gpus, .emulated_memory = "2GiB",
                            .listen = "unix:" + dir.path() + "/agent.sock", .extra_args = {"--config", config},
                            .env = {"GPUPOOL_POLICY_CLOCK=" + dir.path() + "/clock", "TZ=UTC"}});
}

// Issue 43: a change of personality with on_change = "migrate" moves what breaks the new rules off its GPUs instead
// of ending it: a whole GPU taken at night, when the day allows half GPUs, is suspended at 08:00 (its program idle
// then), keeps its state, waits while the day lasts, and resumes when night comes back, finishing exact.
TEST(Policy, OnChangeMigrateMovesWhatBreaksTheNewRulesOffItsGpusAndBringsItBack) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  Agent agent = DayMigratesWholeGpus(dir, 2, "");
  const std::string clock = dir.path() + "/clock";
  const std::string server = agent.address();
  Pool pool = Connect({server});
  Process program({ToolPath("gp-run"), "--servers", server, "-p", "1", "--wait", "60s", "--", Program("moving_state"),
                   "60", "5000"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  ASSERT_EQ(program.ReadLine(seconds(60)), "idle") << program.Stderr();
  SetClock(clock, "2026-11-24 08:00");  // Day: the whole GPU breaks its rules.
  ASSERT_TRUE(Eventually([&] {
    PoolState state = pool.State();
    const LeaseInfo* l = FindLease(state, "moving_state");
    return l != nullptr && l->suspended;
  }, seconds(10))) << agent.process().Stderr();
  EXPECT_NE(agent.process().Stderr().find("suspended by the policy"), std::string::npos) << agent.process().Stderr();
  // Its program wakes and calls: it waits, the lease kept off its GPUs while the day lasts.
  std::this_thread::sleep_for(seconds(6));
  PoolState day = pool.State();
  ASSERT_NE(FindLease(day, "moving_state"), nullptr);
  EXPECT_TRUE(FindLease(day, "moving_state")->suspended);
  EXPECT_TRUE(program.running());
  SetClock(clock, "2026-11-24 20:30");  // Night again: it resumes.
  ExpectFinishedExact(program, "ok 120");
}

// on_change = "migrate" with [moves] agents: at the change, a lease that breaks the new rules goes to another agent
// whose own rules take it (there, none), and its program goes on there to an exact end; nothing is suspended.
TEST(Policy, OnChangeMigrateMovesWhatBreaksTheNewRulesToAnotherAgent) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  Agent other(AgentOptions{.name = "other", .emulated = 1, .emulated_memory = "2GiB",
                           .listen = "unix:" + dir.path() + "/other.sock"});
  Agent agent = DayMigratesWholeGpus(dir, 1, fmt::format("[moves]\nagents = [\"{}\"]\n", other.address()));
  const std::string clock = dir.path() + "/clock";
  Process program({ToolPath("gp-run"), "--servers", agent.address(), "-p", "1", "--", Program("moving_state"), "60",
                   "3000"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  ASSERT_EQ(program.ReadLine(seconds(60)), "idle") << program.Stderr();
  SetClock(clock, "2026-11-24 08:00");  // Day: the whole GPU breaks its rules here.
  Pool here = Connect({agent.address()}), there = Connect({other.address()});
  auto holds = [](Pool& pool) { return !LeaseIdOf(pool, "moving_state").empty(); };
  ASSERT_TRUE(Eventually([&] { return holds(there) && !holds(here); }, seconds(15))) << agent.process().Stderr();
  EXPECT_TRUE(Eventually([&] {
    return agent.process().Stderr().find("moved by the policy to the agent at") != std::string::npos;
  }, seconds(5))) << agent.process().Stderr();
  ExpectFinishedExact(program, "ok 120");
}

// A program killed (with its gp-run) while its lease is being moved: the move ends, done or undone, and once the lease
// expires nothing of it is left on the agent: no session, no worker, no slice.
TEST(Migrate, AProgramKilledDuringItsMoveLeavesNothingBehind) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  MetricsAgent m({"--lease-ttl", "2s"}, "unix:" + dir.path() + "/agent.sock");
  const std::string server = m.agent.address();
  Pool pool = Connect({server});
  auto program = std::make_unique<Process>(
      std::vector<std::string>{ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state"), "300"});
  ASSERT_EQ(program->ReadLine(seconds(60)), "ready") << program->Stderr();
  const std::string id = LeaseIdOf(pool, "moving_state");
  ASSERT_FALSE(id.empty());
  Process move({ToolPath("gp-agent"), "ctl", "--server", server, "migrate", id});
  program.reset();  // SIGKILLs gp-run's process group: the program and gp-run.
  const int moved = move.Wait(seconds(60));
  EXPECT_TRUE(moved == 0 || moved == 1) << moved << " " << move.Stderr();
  auto workers = [&] {
    std::ifstream in("/proc/" + std::to_string(m.agent.process().pid()) + "/task/" +
                     std::to_string(m.agent.process().pid()) + "/children");
    size_t n = 0;
    for (pid_t child; in >> child;) ++n;
    return n;
  };
  EXPECT_TRUE(Eventually([&] {
    PoolState state = pool.State();
    bool empty = state.servers[0].leases.empty() && workers() == 0;
    for (const DeviceInfo& d : state.servers[0].devices) empty = empty && d.memory_allocated == 0;
    return empty;
  }, seconds(30))) << m.agent.process().Stderr();
  EXPECT_EQ(SampleOf(m.Scrape(), "gpupool_sessions"), 0);
  EXPECT_TRUE(m.agent.process().running());
}

// Issue 43: an idle lease suspended by an administrator gives its GPU back at once (another lease takes the whole
// pool); its program's next CUDA call waits while there is no room, says so, and resumes once there is, finishing
// exact. A lease idle past --suspend-idle-after is suspended by the agent itself, and resumes the same way.
TEST(Suspend, AnIdleLeaseGivesItsGpuBackAndResumesWhenThereIsRoom) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  MetricsAgent m({"--suspend-idle-after", "2s"}, "unix:" + dir.path() + "/agent.sock");
  const std::string server = m.agent.address();
  Pool pool = Connect({server});

  Process program({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state"), "100", "4000"});
  ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
  ASSERT_EQ(program.ReadLine(seconds(60)), "idle") << program.Stderr();
  const std::string id = LeaseIdOf(pool, "moving_state");
  ASSERT_FALSE(id.empty());
  RunResult suspended = Ctl(server, {"suspend", id});
  ASSERT_EQ(suspended.code, 0) << suspended.err;
  EXPECT_NE(suspended.out.find("1 session(s)"), std::string::npos) << suspended.out;
  PoolState state = pool.State();
  ASSERT_NE(FindLease(state, "moving_state"), nullptr);
  EXPECT_TRUE(FindLease(state, "moving_state")->suspended);
  for (const DeviceInfo& d : state.servers[0].devices) EXPECT_EQ(d.memory_allocated, 0u) << "GPU " << d.index;
  RunResult listed = RunCommand({ToolPath("gp-ls"), "--servers", server, "--leases"});
  EXPECT_NE(listed.out.find("suspended"), std::string::npos) << listed.out;
  RunResult ctl_list = Ctl(server, {"list"});
  EXPECT_NE(ctl_list.out.find("lease " + id), std::string::npos) << ctl_list.out;
  EXPECT_NE(ctl_list.out.find(" (suspended)"), std::string::npos) << ctl_list.out;
  EXPECT_EQ(Ctl(server, {"suspend", id}).code, 1) << "suspended already";
  // The whole pool, taken while the program idles by a lease kept busy (an idle one would be suspended too); the
  // program wakes before it is given back.
  Process hog({ToolPath("gp-run"), "--servers", server, "-n", "2", "-p", "1.0", "--", Program("busy"), "6"});
  ASSERT_TRUE(Eventually([&] { return !LeaseIdOf(pool, "busy").empty(); }, seconds(20))) << hog.Stderr();
  EXPECT_EQ(hog.Wait(seconds(30)), 0) << hog.Stderr();
  ExpectFinishedExact(program, "ok 200");
  EXPECT_NE(program.Stderr().find("is suspended and waits for room to resume"), std::string::npos)
      << program.Stderr();

  // Under gp-run --wait 1s it waits that long for room, no longer: its call fails saying so.
  {
    Process bounded({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--wait", "1s", "--", Program("moving_state"),
                     "60", "3000"});
    ASSERT_EQ(bounded.ReadLine(seconds(60)), "ready") << bounded.Stderr();
    ASSERT_EQ(bounded.ReadLine(seconds(60)), "idle") << bounded.Stderr();
    ASSERT_EQ(Ctl(server, {"suspend", LeaseIdOf(pool, "moving_state")}).code, 0);
    Process full({ToolPath("gp-run"), "--servers", server, "-n", "2", "-p", "1.0", "--", Program("busy"), "6"});
    ASSERT_TRUE(Eventually([&] { return !LeaseIdOf(pool, "busy").empty(); }, seconds(20))) << full.Stderr();
    EXPECT_NE(bounded.Wait(seconds(60)), 0);
    EXPECT_NE(bounded.Stderr().find("no room came within 1s (gp-run --wait)"), std::string::npos) << bounded.Stderr();
    EXPECT_EQ(full.Wait(seconds(30)), 0) << full.Stderr();
  }

  // Idle past --suspend-idle-after (2s): the agent suspends it; its next call resumes it.
  Process idler({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state"), "60", "6000"});
  ASSERT_EQ(idler.ReadLine(seconds(60)), "ready") << idler.Stderr();
  ASSERT_EQ(idler.ReadLine(seconds(60)), "idle") << idler.Stderr();
  EXPECT_TRUE(Eventually([&] {
    PoolState now = pool.State();
    const LeaseInfo* l = FindLease(now, "moving_state");
    return l != nullptr && l->suspended;
  }, seconds(10)));
  ExpectFinishedExact(idler, "ok 120");
  const std::string metrics = m.Scrape();
  EXPECT_EQ(SampleOf(metrics, "gpupool_lease_suspensions_total"), 3) << metrics;
  EXPECT_EQ(SampleOf(metrics, "gpupool_lease_resumptions_total"), 2) << metrics;
}

// Suspended images past [telemetry] suspend_memory go to the spill directory (files of mode 0600, gone once the lease
// resumes); without a spill directory such a suspension is refused, naming the limit, and the program runs on.
TEST(Suspend, ImagesPastTheAgentsMemoryGoToItsSpillDirectoryOrTheSuspensionIsRefused) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  const std::string spill = dir.path() + "/spill";
  ASSERT_EQ(mkdir(spill.c_str(), 0700), 0);
  for (const bool with_spill : {true, false}) {
    SCOPED_TRACE(with_spill ? "with a spill directory" : "without one");
    std::vector<std::string> args = {"--suspend-memory", "1MiB"};
    if (with_spill) args.insert(args.end(), {"--suspend-spill-dir", spill});
    Agent agent(AgentOptions{.name = "spill", .emulated = 1, .emulated_memory = "2GiB",
                             .listen = "unix:" + dir.path() + "/agent.sock", .extra_args = args});
    const std::string server = agent.address();
    Pool pool = Connect({server});
    Process program({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("moving_state"), "60",
                     "3000"});
    ASSERT_EQ(program.ReadLine(seconds(60)), "ready") << program.Stderr();
    ASSERT_EQ(program.ReadLine(seconds(60)), "idle") << program.Stderr();
    const std::string id = LeaseIdOf(pool, "moving_state");
    RunResult suspended = Ctl(server, {"suspend", id});
    auto spilled = [&] {
      std::vector<std::string> files;
      for (const auto& entry : std::filesystem::directory_iterator(spill)) files.push_back(entry.path());
      return files;
    };
    if (with_spill) {
      ASSERT_EQ(suspended.code, 0) << suspended.err;
      const auto files = spilled();
      ASSERT_EQ(files.size(), 1u);
      struct stat st {};
      ASSERT_EQ(stat(files[0].c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600u);
      EXPECT_GT(st.st_size, 18 << 20) << "the session's memory (18 MiB)";
    } else {
      EXPECT_EQ(suspended.code, 1);
      EXPECT_NE(suspended.err.find("past [telemetry] suspend_memory (1 MiB); give the agent a suspend_spill_dir"),
                std::string::npos) << suspended.err;
    }
    ExpectFinishedExact(program, "ok 120");
    EXPECT_TRUE(spilled().empty()) << "a resumed lease's files go";
  }
}

// Issue 41 item 5: a lease lost under a running program is reported, by gp-run and by the program's next CUDA call,
// with the reason (revoked by whom, expired, the agent restarted), and gp-run exits non-zero.
TEST(LostLease, GpRunAndItsProgramSayWhyTheLeaseEnded) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  Agent agent(AgentOptions{.name = "lost", .emulated = 1, .emulated_memory = "2GiB", .lease_ttl = "2s",
                           .listen = "unix:" + dir.path() + "/agent.sock", .extra_args = {"--require-auth"}});
  const std::string server = agent.address();
  Pool pool = Connect({server});
  const std::string me = CurrentIdentity().user;

  // Revoked by an administrator: the program's next call fails saying so, and gp-run says the same.
  {
    Process busy({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("busy"), "60"});
    ASSERT_TRUE(Eventually([&] { return !LeaseIdOf(pool, "busy").empty(); }, seconds(20))) << busy.Stderr();
    const std::string id = LeaseIdOf(pool, "busy");
    ASSERT_EQ(Ctl(server, {"revoke", id}).code, 0);
    EXPECT_NE(busy.Wait(seconds(30)), 0);
    const std::string err = busy.Stderr();
    EXPECT_NE(err.find("gp-run: " + server + ": lease " + id + " lost: revoked by " + me +
                       " (an administrator of agent lost); the command's CUDA calls fail from now on"),
              std::string::npos) << err;
    EXPECT_NE(err.find("the lease of this session ended: revoked by " + me), std::string::npos) << err;
    EXPECT_EQ(err.find("lease released"), std::string::npos) << err;
  }
  // Expired: its holder (gp-run, stopped) did not renew it in time. A command that ends well still gets a non-zero
  // status, since its slices were given back under it.
  {
    Process sleeper({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", "sleep", "5"});
    ASSERT_TRUE(Eventually([&] { return !LeaseIdOf(pool, "sleep").empty(); }, seconds(20))) << sleeper.Stderr();
    const std::string id = LeaseIdOf(pool, "sleep");
    sleeper.Signal(SIGSTOP);
    ASSERT_TRUE(Eventually([&] { return LeaseIdOf(pool, "sleep").empty(); }, seconds(20)));
    sleeper.Signal(SIGCONT);
    EXPECT_EQ(sleeper.Wait(seconds(30)), 125);
    EXPECT_NE(sleeper.Stderr().find("lease " + id + " lost: expired: agent lost had no renewal from its holder for "
                                    "2s"),
              std::string::npos) << sleeper.Stderr();
  }
  // The agent restarted: it knows nothing of the lease, and says so, to gp-run and to the program's next CUDA call
  // (whose session's worker died with the agent: the program asks the agent why once it answers again).
  {
    Process sleeper({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", "sleep", "8"});
    Process busy({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", Program("busy"), "60", "trace"});
    // Its session is open and has run kernels.
    ASSERT_NE(busy.ReadLine(seconds(30)).find("busy: at "), std::string::npos) << busy.Stderr();
    ASSERT_TRUE(Eventually([&] { return !LeaseIdOf(pool, "sleep").empty(); }, seconds(20))) << sleeper.Stderr();
    const std::string id = LeaseIdOf(pool, "sleep");
    const std::string busy_id = LeaseIdOf(pool, "busy");
    agent.Kill();
    agent.Restart();
    EXPECT_EQ(sleeper.Wait(seconds(30)), 125);
    EXPECT_NE(sleeper.Stderr().find("lease " + id + " lost: agent lost restarted and no longer knows it"),
              std::string::npos) << sleeper.Stderr();
    EXPECT_NE(busy.Wait(seconds(30)), 0);
    const std::string err = busy.Stderr();
    EXPECT_NE(err.find("gp-run: " + server + ": lease " + busy_id + " lost: agent lost restarted and no longer "
                       "knows it"),
              std::string::npos) << err;
    EXPECT_NE(err.find("the lease of this session ended: agent lost restarted and no longer knows it"),
              std::string::npos) << err;
  }
  // A lease that holds to the end is released quietly, with the command's own status.
  RunResult fine = RunCommand({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", "/bin/true"});
  EXPECT_EQ(fine.code, 0) << fine.err;
  EXPECT_EQ(fine.err.find("lost"), std::string::npos) << fine.err;
}

TEST(Policy, DayAndNightPersonalitiesWithAnInjectedClock) {
  TempDir dir;
  std::string config = dir.Write("agent.toml", PolicyFile(CurrentIdentity().user, 0.5));
  std::string clock = dir.path() + "/clock";
  SetClock(clock, "2026-11-23 10:00");  // A Monday morning: day.
  // On a Unix socket, where the kernel tells the agent who this user is: a rule naming a user applies to verified
  // clients only (over plain TCP without a token this test's user would be "anonymous").
  Agent agent(AgentOptions{.name = "policy", .emulated = 2, .emulated_memory = "4GiB", .device_class = "a100",
                           .listen = "unix:" + dir.path() + "/agent.sock", .extra_args = {"--config", config},
                           .env = {"GPUPOOL_POLICY_CLOCK=" + clock, "TZ=UTC"}});
  const std::string server = agent.address();
  Pool pool = Connect({server});
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--servers", server});
  EXPECT_NE(ls.out.find("personality day; night from Mon 20:00"), std::string::npos) << ls.out;

  // By day a whole GPU is refused, naming the rule and when it would be allowed.
  RunResult whole = RunCommand({ToolPath("gp-run"), "--servers", server, "-p", "1", "--", "/bin/true"});
  EXPECT_EQ(whole.code, 125);
  EXPECT_NE(whole.err.find("personality day allows slices of at most 0.5 of a GPU, not 1"), std::string::npos)
      << whole.err;
  EXPECT_NE(whole.err.find("from Mon 20:00 personality night would allow it"), std::string::npos) << whole.err;

  // A day lease lives 3 s at most.
  Process half({ToolPath("gp-run"), "--servers", server, "-p", "0.5", "--", "sleep", "30"});
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 1; }, seconds(10)));
  EXPECT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(10)))
      << "the day lease outlived its max_lease";
  EXPECT_NE(agent.process().Stderr().find("max_lease of 3s"), std::string::npos) << agent.process().Stderr();
  // Its holder hears why at its next renewal.
  EXPECT_TRUE(Eventually([&] { return half.Stderr().find("lost: ended by agent policy's policy at 10:00: it reached "
                                                         "personality day's max_lease of 3s") != std::string::npos; },
                         seconds(10)))
      << half.Stderr();

  // gp-run --wait queues across the change of personality: at 20:30 the whole GPU is granted.
  Process waiting({ToolPath("gp-run"), "--servers", server, "-p", "1", "--wait", "30s", "--", "/bin/echo", "whole"});
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_TRUE(waiting.running());
  SetClock(clock, "2026-11-23 20:30");
  EXPECT_EQ(waiting.ReadLine(seconds(20)), "whole") << waiting.Stderr();
  EXPECT_EQ(waiting.Wait(seconds(10)), 0);

  // A whole GPU taken at night breaks the day's rules: when day comes, it ends after the 1 s grace.
  Process night({ToolPath("gp-run"), "--servers", server, "-p", "1", "--", "sleep", "30"});
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 1; }, seconds(10)));
  // The injected clock stands still: at 08:00:00 the day has just begun and the lease is within its grace; at
  // 08:00:02 the grace is over.
  SetClock(clock, "2026-11-24 08:00:00");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_EQ(LeaseCount(pool.State()), 1u) << "ended within its grace";
  SetClock(clock, "2026-11-24 08:00:02");
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(10)));
  EXPECT_NE(agent.process().Stderr().find("after its 1s grace"), std::string::npos) << agent.process().Stderr();

  // SIGHUP re-reads the policy and keeps leases; a broken file keeps the policy in force.
  SetClock(clock, "2026-11-24 21:00");
  Process kept({ToolPath("gp-run"), "--servers", server, "-p", "1", "--", "sleep", "30"});
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 1; }, seconds(10)));
  dir.Write("agent.toml", PolicyFile(CurrentIdentity().user, 1.0) + "\n[[personality]]\nname = \"weekend\"\n"
                                                                     "days = [\"sat\", \"sun\"]\n");
  agent.process().Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return pool.State().servers[0].policy.find("weekend") != std::string::npos; },
                         seconds(10)));
  EXPECT_EQ(LeaseCount(pool.State()), 1u);
  dir.Write("agent.toml", "[[personality]\nname = broken\n");
  agent.process().Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return agent.process().Stderr().find("keeping the policy in force") != std::string::npos; },
                         seconds(10)))
      << agent.process().Stderr();
  PoolState state = pool.State();
  EXPECT_NE(state.servers[0].policy.find("weekend"), std::string::npos);
  EXPECT_EQ(LeaseCount(state), 1u);
  RunResult listed = Ctl(server, {"list"});
  EXPECT_NE(listed.out.find("personality in force: night"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("policy weekend: sat,sun"), std::string::npos) << listed.out;
}

// Policies are per agent: a request one agent's policy refuses lands on another agent's GPUs, and the client says
// every policy's reason when none allows it (at once, even with --wait, when none ever would).
TEST(Policy, PlacementGoesAroundAnAgentWhosePolicyRefuses) {
  TempDir dir;
  std::string small = dir.Write("small.toml", "[[personality]]\nname = \"small\"\nmax_fraction = 0.25\n");
  std::string closed = dir.Write("closed.toml", "[groups]\nstaff = [\"nobody-here\"]\n[[personality]]\n"
                                                "name = \"closed\"\n[personality.classes]\n\"*\" = [\"staff\"]\n");
  Agent strict(AgentOptions{.name = "strict", .emulated = 1, .emulated_memory = "2GiB", .extra_args = {"--config", small}});
  Agent open(AgentOptions{.name = "open", .emulated = 2, .emulated_memory = "4GiB"});
  Agent shut(AgentOptions{.name = "shut", .emulated = 2, .emulated_memory = "4GiB", .extra_args = {"--config", closed}});

  // The strict agent is the tightest fit (least memory left over), so placement tries it first.
  RunResult placed = RunCommand({ToolPath("gp-run"), "--servers", strict.address() + "," + open.address(), "-p", "0.5",
                                 "--", "/usr/bin/env", "sh", "-c", "echo $GPUPOOL_LEASE"});
  EXPECT_EQ(placed.code, 0) << placed.err;
  EXPECT_TRUE(Eventually([&] { return strict.process().Stderr().find("refused") != std::string::npos; }, seconds(5)))
      << "placement never tried the agent whose policy refuses, so this test proves nothing: "
      << strict.process().Stderr();
  RunResult verbose = RunCommand({ToolPath("gp-run"), "--servers", strict.address() + "," + open.address(), "-p",
                                  "0.5", "-v", "--", "/bin/true"});
  EXPECT_EQ(verbose.code, 0) << verbose.err;
  EXPECT_NE(verbose.err.find(": open GPU "), std::string::npos) << verbose.err;

  // Neither policy would ever allow it: refused at once with both reasons, even though the client would wait.
  const auto start = std::chrono::steady_clock::now();
  RunResult refused = RunCommand({ToolPath("gp-run"), "--servers", strict.address() + "," + shut.address(), "-p",
                                  "0.5", "--wait", "60s", "--", "/bin/true"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(20));
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.err.find("personality small allows slices of at most 0.25 of a GPU, not 0.5"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("agent shut"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("no personality of the week allows it"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace gpupool::testing
