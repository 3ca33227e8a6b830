// alloc_bench: how fast the pool grants and releases leases, measured against real gp-agent processes.
//
// One run starts its own agents on loopback, measures the cheapest RPC (a describe, through Pool::State()) as the
// baseline, then lets C client threads, each with its own Pool, loop Allocate() + Release() for a fixed time and
// reports latency percentiles, throughput and every failure. Targets are printed with the verdict, but a missed
// target still exits 0: this is a measurement, not a test. Non-zero means the benchmark could not run.
//
//   build-bench/bench/alloc_bench                 # 8 agents, 4 clients, 1 x 25% of a GPU, 1 s + 5 s
//   build-bench/bench/alloc_bench --clients 8 --json
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <latch>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpupool/gpupool.h"

#ifndef GPUPOOL_TOOLS_DIR
#define GPUPOOL_TOOLS_DIR ""
#endif

namespace {

using Clock = std::chrono::steady_clock;
using gpupool::Result;
using gpupool::Status;
using gpupool::StatusCode;

// Targets from the design: an allocation should cost a few round trips, not a scheduler tick.
constexpr double kTargetP99AllocateMs = 10.0;
constexpr double kTargetPairsPerSecond = 1000.0;
constexpr int kTargetAgents = 8;  // The throughput target is stated for a pool of this many agents.

struct Options {
  int agents = 8;
  int clients = 4;
  std::string duration = "5s";
  std::string warmup = "1s";
  int count = 1;
  std::string fraction = "0.25";
  int emu = 8;
  std::string emu_memory = "16GiB";
  int baseline_samples = 1000;
  std::string tools_dir = GPUPOOL_TOOLS_DIR;
  std::string agent_log_level;  // Empty: the agent's own default (info).
  bool keep_logs = false;
  bool json = false;
  // --directory etcd: a local etcd is started, agents register there, clients place from it; measured at each of
  // `scales` agents in one run.
  std::string directory;
  std::vector<int> scales = {8, 128};
  std::string etcd_binary = "etcd";
  std::string directory_spec;  // Set by the run: "etcd:http://127.0.0.1:PORT".
};

Status Error(std::string message) { return Status(StatusCode::kInternal, std::move(message)); }

int64_t ElapsedNs(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
}

// ---------------------------------------------------------------------------------------------------------------
// Agent processes.

// The last `max_bytes` of a file, for error messages that quote an agent's log.
std::string FileTail(const std::string& path, size_t max_bytes = 1500) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > max_bytes) text = "..." + text.substr(text.size() - max_bytes);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("wait status {:#x}", status);
}

// CPU time (user + system) a process has used so far, in seconds; nullopt if /proc cannot tell.
std::optional<double> ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/stat") : fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // The command name (field 2) may contain spaces; fields are counted from the closing parenthesis.
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) {
      stime = std::strtoull(field.c_str(), nullptr, 10);
      return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  return std::nullopt;
}

// The 1-minute load average, to tell a quiet host from one shared with a compiler.
std::optional<double> LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

// The gp-agent processes of one run. The destructor stops and reaps them, so every exit path, error paths
// included, leaves no agent behind.
class AgentFleet {
 public:
  struct Agent {
    pid_t pid = -1;
    std::string name;
    std::string address;  // "127.0.0.1:PORT", from the agent's banner.
    std::string log_path;
  };

  AgentFleet() = default;
  AgentFleet(const AgentFleet&) = delete;
  AgentFleet& operator=(const AgentFleet&) = delete;
  ~AgentFleet() { Stop(); }

  // Starts `opt.agents` agents and waits until each has printed the address it listens on.
  Status Start(const Options& opt) {
    binary_ = opt.tools_dir + "/gp-agent";
    if (access(binary_.c_str(), X_OK) != 0) {
      return Error(fmt::format("cannot run {}: {} (build the gp_agent target, or pass --tools-dir)", binary_,
                               std::strerror(errno)));
    }
    char dir_template[] = "/tmp/alloc_bench.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return Error(fmt::format("mkdtemp: {}", std::strerror(errno)));
    log_dir_ = dir_template;
    // Spawn all first, then read the banners: the agents start up in parallel.
    for (int i = 0; i < opt.agents; ++i) {
      Agent agent;
      agent.name = fmt::format("{}bench{}", name_prefix_, i);
      agent.log_path = fmt::format("{}/{}.log", log_dir_, agent.name);
      int stdout_fd = -1;
      if (Status s = Spawn(opt, &agent, &stdout_fd); !s.ok()) return s;
      agents_.push_back(agent);
      stdout_fds_.push_back(stdout_fd);
    }
    Status result;
    for (size_t i = 0; i < agents_.size(); ++i) {
      if (result.ok()) result = ReadBanner(&agents_[i], stdout_fds_[i]);
      // The agent prints nothing else to stdout; a closed pipe costs it at most an EPIPE, never a block.
      close(stdout_fds_[i]);
    }
    stdout_fds_.clear();
    return result;
  }

  // SIGTERM (the agent drains, and has nothing to drain once the clients released), then SIGKILL whatever is
  // still alive after a grace period; reaps every child. Idempotent.
  void Stop() {
    for (int fd : stdout_fds_) close(fd);
    stdout_fds_.clear();
    std::vector<bool> reaped(agents_.size(), false);
    size_t left = agents_.size();
    for (size_t i = 0; i < agents_.size(); ++i) {
      if (agents_[i].pid > 0) {
        kill(agents_[i].pid, SIGTERM);
      } else {
        reaped[i] = true;
        --left;
      }
    }
    const auto grace_end = Clock::now() + std::chrono::seconds(3);
    while (left > 0 && Clock::now() < grace_end) {
      for (size_t i = 0; i < agents_.size(); ++i) {
        if (reaped[i]) continue;
        int status = 0;
        pid_t r = waitpid(agents_[i].pid, &status, WNOHANG);
        if (r == agents_[i].pid || (r < 0 && errno == ECHILD)) {
          reaped[i] = true;
          --left;
        }
      }
      if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (size_t i = 0; i < agents_.size(); ++i) {
      if (reaped[i]) continue;
      fmt::print(stderr, "alloc_bench: agent {} (pid {}) ignored SIGTERM; killing it\n", agents_[i].name,
                 agents_[i].pid);
      kill(agents_[i].pid, SIGKILL);
      int status = 0;
      while (waitpid(agents_[i].pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    agents_.clear();
    if (!log_dir_.empty() && remove_logs_) {
      for (const auto& path : log_paths_) unlink(path.c_str());
      rmdir(log_dir_.c_str());
    }
  }

  // Names agents PREFIXbenchN: fleets of one run in one directory stay apart.
  void set_name_prefix(std::string prefix) { name_prefix_ = std::move(prefix); }
  // Whether Stop() deletes the agents' logs. The caller keeps them when something went wrong.
  void set_remove_logs(bool remove) { remove_logs_ = remove; }
  const std::string& log_dir() const { return log_dir_; }
  const std::vector<Agent>& agents() const { return agents_; }
  std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (const Agent& a : agents_) out.push_back(a.address);
    return out;
  }
  // Total CPU seconds of all agents so far; nullopt if any cannot be read.
  std::optional<double> CpuSeconds() const {
    double total = 0;
    for (const Agent& a : agents_) {
      auto s = ProcessCpuSeconds(a.pid);
      if (!s) return std::nullopt;
      total += *s;
    }
    return total;
  }

 private:
  // fork/exec rather than posix_spawn for PR_SET_PDEATHSIG: agents must not outlive a benchmark killed with
  // SIGKILL. Called before any Pool (and so any KJ thread) exists; the child only makes async-signal-safe calls.
  Status Spawn(const Options& opt, Agent* agent, int* stdout_fd) {
    std::vector<std::string> args = {binary_,        "--no-nvml",   "--listen", "127.0.0.1:0",
                                     "--name",       agent->name,   "--emu",    std::to_string(opt.emu),
                                     "--emu-memory", opt.emu_memory};
    if (!opt.directory_spec.empty()) {
      args.push_back("--directory");
      args.push_back(opt.directory_spec);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The environment is built before fork(): the child may only make async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!opt.agent_log_level.empty() && std::strncmp(*e, "GPUPOOL_LOG=", 12) == 0) continue;
      env_strings.emplace_back(*e);
    }
    if (!opt.agent_log_level.empty()) env_strings.push_back("GPUPOOL_LOG=" + opt.agent_log_level);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);

    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Error(fmt::format("pipe2: {}", std::strerror(errno)));
    // Never leave stderr on a pipe nobody reads: the agent logs every grant and release and would block.
    int log_fd = open(agent->log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      close(pipe_fds[0]);
      close(pipe_fds[1]);
      return Error(fmt::format("cannot create {}: {}", agent->log_path, std::strerror(errno)));
    }
    log_paths_.push_back(agent->log_path);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // The parent died before prctl took effect.
      dup2(pipe_fds[1], STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      const char msg[] = "alloc_bench: execve gp-agent failed\n";
      (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(127);
    }
    int fork_errno = errno;
    close(pipe_fds[1]);
    close(log_fd);
    if (pid < 0) {
      close(pipe_fds[0]);
      return Error(fmt::format("fork: {}", std::strerror(fork_errno)));
    }
    agent->pid = pid;
    *stdout_fd = pipe_fds[0];
    return Status::Ok();
  }

  // Reads "gp-agent NAME listening on ADDRESS with N device(s) (M emulated)".
  Status ReadBanner(Agent* agent, int fd) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    std::string line;
    while (line.find('\n') == std::string::npos) {
      int left_ms =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left_ms <= 0) {
        return Error(fmt::format("agent {} printed no address within 10 s; its log ({}):\n{}", agent->name,
                                 agent->log_path, FileTail(agent->log_path)));
      }
      pollfd p{fd, POLLIN, 0};
      int r = poll(&p, 1, left_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Error(fmt::format("poll: {}", std::strerror(errno)));
      if (r == 0) continue;
      char buf[512];
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int status = 0;
        std::string how = "closed stdout";
        if (waitpid(agent->pid, &status, 0) == agent->pid) {
          how = DescribeWaitStatus(status);
          agent->pid = -1;  // Reaped: Stop() must not signal a pid the kernel may hand to someone else.
        }
        return Error(fmt::format("agent {} {} before printing its address; its log ({}):\n{}", agent->name, how,
                                 agent->log_path, FileTail(agent->log_path)));
      }
      line.append(buf, static_cast<size_t>(n));
    }
    line.resize(line.find('\n'));
    const std::string marker = " listening on ";
    auto at = line.find(marker);
    if (at == std::string::npos) {
      return Error(fmt::format("agent {} printed an unexpected banner: \"{}\"", agent->name, line));
    }
    auto start = at + marker.size();
    auto end = line.find(' ', start);
    agent->address = line.substr(start, end == std::string::npos ? std::string::npos : end - start);
    return Status::Ok();
  }

  std::string binary_;
  std::string log_dir_;
  std::vector<std::string> log_paths_;
  std::vector<Agent> agents_;
  std::vector<int> stdout_fds_;
  bool remove_logs_ = true;
  std::string name_prefix_;
};

// A one-member etcd cluster on loopback for --directory etcd, in a directory of its own; stopped and removed with
// this object.
class LocalEtcd {
 public:
  ~LocalEtcd() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  Status Start(const std::string& binary) {
    char dir_template[] = "/tmp/alloc_bench_etcd.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return Error(fmt::format("mkdtemp: {}", std::strerror(errno)));
    dir_ = dir_template;
    client_port_ = FreePort();
    const int peer_port = FreePort();
    if (client_port_ == 0 || peer_port == 0) return Error("no free loopback port for etcd");
    const std::string client = fmt::format("http://127.0.0.1:{}", client_port_);
    const std::string peer = fmt::format("http://127.0.0.1:{}", peer_port);
    std::vector<std::string> args = {binary, "--name", "bench", "--data-dir", dir_ + "/data",
                                     "--listen-client-urls", client, "--advertise-client-urls", client,
                                     "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                     "--initial-cluster", "bench=" + peer, "--log-level", "warn"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = dir_ + "/etcd.log";
    int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return Error(fmt::format("cannot create {}: {}", log, std::strerror(errno)));
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    close(log_fd);
    if (pid_ < 0) return Error(fmt::format("fork: {}", std::strerror(errno)));
    // Up once its client port accepts; an etcd that exits (not installed: 127) says so in its log.
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return Error(fmt::format("etcd ({}) {}: {}", binary,
                                 WIFEXITED(status) && WEXITSTATUS(status) == 127
                                     ? "could not be started (install the etcd-server package, or pass --etcd)"
                                     : DescribeWaitStatus(status),
                                 FileTail(log)));
      }
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(client_port_));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      bool up = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      close(fd);
      if (up) return Status::Ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Error(fmt::format("etcd did not accept connections within 20 s: {}", FileTail(log)));
  }

  std::string spec() const { return fmt::format("etcd:http://127.0.0.1:{}", client_port_); }
  std::optional<double> CpuSeconds() const { return ProcessCpuSeconds(pid_); }

 private:
  static int FreePort() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    close(fd);
    return port;
  }

  pid_t pid_ = -1;
  std::string dir_;
  int client_port_ = 0;
};

// ---------------------------------------------------------------------------------------------------------------
// Statistics.

struct LatencyStats {
  size_t n = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0, mean_ms = 0;
};

// Nearest-rank percentiles: every reported value is one that was actually measured.
LatencyStats Summarize(std::vector<int64_t> ns) {
  LatencyStats s;
  s.n = ns.size();
  if (ns.empty()) return s;
  std::sort(ns.begin(), ns.end());
  auto pct = [&ns](double p) {
    size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(ns.size())));
    return static_cast<double>(ns[std::clamp<size_t>(rank, 1, ns.size()) - 1]) / 1e6;
  };
  s.p50_ms = pct(0.50);
  s.p90_ms = pct(0.90);
  s.p99_ms = pct(0.99);
  s.p999_ms = pct(0.999);
  s.max_ms = static_cast<double>(ns.back()) / 1e6;
  double sum = 0;
  for (int64_t v : ns) sum += static_cast<double>(v);
  s.mean_ms = sum / static_cast<double>(ns.size()) / 1e6;
  return s;
}

struct FailureCount {
  uint64_t count = 0;
  std::string first_message;
};
using FailureTable = std::map<StatusCode, FailureCount>;

void AddFailure(FailureTable* table, const Status& s) {
  FailureCount& f = (*table)[s.code()];
  if (f.count++ == 0) f.first_message = s.message();
}

void MergeFailures(FailureTable* into, const FailureTable& from) {
  for (const auto& [code, f] : from) {
    FailureCount& g = (*into)[code];
    if (g.count == 0) g.first_message = f.first_message;
    g.count += f.count;
  }
}

uint64_t TotalFailures(const FailureTable& table) {
  uint64_t n = 0;
  for (const auto& [code, f] : table) n += f.count;
  return n;
}

// ---------------------------------------------------------------------------------------------------------------
// Baseline: the cheapest RPC.

// Times Pool::State() against `servers`: one describe RPC per server, in parallel. The first calls connect and
// are not counted.
Result<LatencyStats> TimeDescribe(const std::vector<std::string>& servers, int samples) {
  gpupool::PoolOptions options;
  options.servers = servers;
  auto pool = gpupool::Pool::Connect(options);
  if (!pool.ok()) return pool.status();
  for (int i = 0; i < 20; ++i) {
    gpupool::PoolState state = pool->State();
    for (const auto& server : state.servers) {
      if (!server.up) return Error(fmt::format("agent {} does not answer: {}", server.address, server.error));
    }
  }
  std::vector<int64_t> ns;
  ns.reserve(static_cast<size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    auto t0 = Clock::now();
    gpupool::PoolState state = pool->State();
    ns.push_back(ElapsedNs(t0, Clock::now()));
    if (state.servers_up() != static_cast<int>(servers.size())) {
      return Error("an agent stopped answering during the baseline");
    }
  }
  return Summarize(std::move(ns));
}

// ---------------------------------------------------------------------------------------------------------------
// The measurement.

// What one client thread saw inside the measurement window (warm-up excluded).
struct ClientResult {
  std::vector<int64_t> allocate_ns;         // Successful Allocate() calls.
  std::vector<int64_t> failed_allocate_ns;  // Failed ones, kept apart so they neither hide nor flatter.
  std::vector<int64_t> release_ns;
  std::vector<int64_t> pair_ns;  // Allocate() + Release(), for successful allocations.
  FailureTable allocate_failures, release_failures;
  std::map<std::string, uint64_t> placement;  // Agent name of each lease's first slice.
  Clock::time_point last_end{};
  std::string fatal;  // Set when the thread could not run at all.
};

struct Window {
  Clock::time_point measure_start, measure_end;
};

void RunClient(const gpupool::PoolOptions& options, const gpupool::Request& request, std::latch* ready,
               const std::latch* go, const Window* window, ClientResult* out) {
  auto pool = gpupool::Pool::Connect(options);
  if (!pool.ok()) out->fatal = pool.status().ToString();
  ready->count_down();
  go->wait();  // `window` is written before `go` opens.
  if (!pool.ok()) return;
  out->allocate_ns.reserve(1 << 16);
  out->release_ns.reserve(1 << 16);
  out->pair_ns.reserve(1 << 16);
  while (true) {
    const auto t0 = Clock::now();
    if (t0 >= window->measure_end) break;
    const bool measured = t0 >= window->measure_start;
    Result<gpupool::Lease> lease = pool->Allocate(request);
    const auto t1 = Clock::now();
    if (!lease.ok()) {
      if (measured) {
        out->failed_allocate_ns.push_back(ElapsedNs(t0, t1));
        AddFailure(&out->allocate_failures, lease.status());
        out->last_end = t1;
      }
      continue;
    }
    std::string server_name = lease->slices().empty() ? "?" : lease->slices().front().server_name;
    Status released = lease->Release();
    const auto t2 = Clock::now();
    if (!measured) continue;
    out->allocate_ns.push_back(ElapsedNs(t0, t1));
    out->release_ns.push_back(ElapsedNs(t1, t2));
    out->pair_ns.push_back(ElapsedNs(t0, t2));
    if (!released.ok()) AddFailure(&out->release_failures, released);
    ++out->placement[server_name];
    out->last_end = t2;
  }
}

// What the clients measured in one window.
struct Measured {
  LatencyStats alloc, failed, release, pair;
  double window_s = 0, pairs_per_s = 0;
  uint64_t pairs = 0;
  FailureTable allocate_failures, release_failures;
  std::map<std::string, uint64_t> placement;
  std::optional<double> self_cores, agent_cores;
};

// `opt.clients` threads, each with its own Pool of `pool_options`, loop Allocate + Release for `warmup` then
// `duration`.
Result<Measured> MeasureClients(const Options& opt, const gpupool::PoolOptions& pool_options,
                                const gpupool::Request& request, const AgentFleet& fleet,
                                std::chrono::milliseconds warmup, std::chrono::milliseconds duration) {
  fmt::print(stderr, "alloc_bench: {} client(s), {} warm-up then {} measured...\n", opt.clients, opt.warmup,
             opt.duration);
  std::vector<ClientResult> results(static_cast<size_t>(opt.clients));
  std::latch ready(opt.clients);
  std::latch go(1);
  Window window;
  std::vector<std::thread> threads;
  for (int i = 0; i < opt.clients; ++i) {
    threads.emplace_back(RunClient, std::cref(pool_options), std::cref(request), &ready, &go, &window, &results[i]);
  }
  ready.wait();
  window.measure_start = Clock::now() + warmup;
  window.measure_end = window.measure_start + duration;
  go.count_down();
  // CPU use over the measured window tells whether the host, not the protocol, was the limit.
  std::this_thread::sleep_until(window.measure_start);
  auto self_cpu0 = ProcessCpuSeconds(0);
  auto agents_cpu0 = fleet.CpuSeconds();
  std::this_thread::sleep_until(window.measure_end);
  auto self_cpu1 = ProcessCpuSeconds(0);
  auto agents_cpu1 = fleet.CpuSeconds();
  for (auto& t : threads) t.join();

  Measured m;
  std::vector<int64_t> allocate_ns, failed_ns, release_ns, pair_ns;
  Clock::time_point last_end = window.measure_end;
  for (const ClientResult& r : results) {
    if (!r.fatal.empty()) return Error(fmt::format("a client could not connect: {}", r.fatal));
    allocate_ns.insert(allocate_ns.end(), r.allocate_ns.begin(), r.allocate_ns.end());
    failed_ns.insert(failed_ns.end(), r.failed_allocate_ns.begin(), r.failed_allocate_ns.end());
    release_ns.insert(release_ns.end(), r.release_ns.begin(), r.release_ns.end());
    pair_ns.insert(pair_ns.end(), r.pair_ns.begin(), r.pair_ns.end());
    MergeFailures(&m.allocate_failures, r.allocate_failures);
    MergeFailures(&m.release_failures, r.release_failures);
    for (const auto& [name, n] : r.placement) m.placement[name] += n;
    last_end = std::max(last_end, r.last_end);
  }
  // The window ends when the last pair started inside it finished.
  m.window_s = static_cast<double>(ElapsedNs(window.measure_start, last_end)) / 1e9;
  m.pairs = pair_ns.size();
  m.pairs_per_s = static_cast<double>(m.pairs) / m.window_s;
  m.alloc = Summarize(allocate_ns);
  m.failed = Summarize(failed_ns);
  m.release = Summarize(release_ns);
  m.pair = Summarize(pair_ns);
  const double measured_cpu_s = static_cast<double>(duration.count()) / 1000.0;
  if (self_cpu0 && self_cpu1) m.self_cores = (*self_cpu1 - *self_cpu0) / measured_cpu_s;
  if (agents_cpu0 && agents_cpu1) m.agent_cores = (*agents_cpu1 - *agents_cpu0) / measured_cpu_s;
  return m;
}

// ---------------------------------------------------------------------------------------------------------------
// Reporting.

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonStats(const LatencyStats& s) {
  return fmt::format(
      "{{\"n\": {}, \"p50_ms\": {:.4f}, \"p90_ms\": {:.4f}, \"p99_ms\": {:.4f}, \"p999_ms\": {:.4f}, "
      "\"max_ms\": {:.4f}, \"mean_ms\": {:.4f}}}",
      s.n, s.p50_ms, s.p90_ms, s.p99_ms, s.p999_ms, s.max_ms, s.mean_ms);
}

std::string JsonFailures(const FailureTable& table) {
  std::string out = "{";
  bool first = true;
  for (const auto& [code, f] : table) {
    out += fmt::format("{}{}: {{\"count\": {}, \"first_message\": {}}}", first ? "" : ", ",
                       JsonString(gpupool::StatusCodeName(code)), f.count, JsonString(f.first_message));
    first = false;
  }
  return out + "}";
}

std::string JsonOptional(std::optional<double> v) { return v ? fmt::format("{:.3f}", *v) : "null"; }

std::string StatsLine(const char* label, const LatencyStats& s) {
  if (s.n == 0) return fmt::format("  {:<28} n=0\n", label);
  return fmt::format(
      "  {:<28} n={:<7} p50 {:8.3f}  p90 {:8.3f}  p99 {:8.3f}  p99.9 {:8.3f}  max {:8.3f}  mean {:8.3f} ms\n", label,
      s.n, s.p50_ms, s.p90_ms, s.p99_ms, s.p999_ms, s.max_ms, s.mean_ms);
}

void PrintFailures(const char* what, const FailureTable& table) {
  fmt::print("  {} failures: {}\n", what, TotalFailures(table));
  for (const auto& [code, f] : table) {
    fmt::print("    {}: {} (first: {})\n", gpupool::StatusCodeName(code), f.count, f.first_message);
  }
}

// Times Pool::Summary() on a directory. `one_shot`: a new Pool each time (a process such as gp-run: one range read
// of etcd, connection and client thread included); else one Pool throughout (a long-lived client: from its second
// look on, what its watch of the directory keeps current).
Result<LatencyStats> TimeDirectorySummary(const std::string& spec, int samples, bool one_shot) {
  gpupool::PoolOptions options;
  options.directory = spec;
  std::optional<gpupool::Pool> kept;
  std::vector<int64_t> ns;
  for (int i = 0; i < samples + 10; ++i) {
    auto t0 = Clock::now();
    if (one_shot || !kept) {
      auto pool = gpupool::Pool::Connect(options);
      if (!pool.ok()) return pool.status();
      kept.emplace(std::move(pool).value());
    }
    gpupool::PoolState state = kept->Summary();
    if (i >= 10) ns.push_back(ElapsedNs(t0, Clock::now()));
    if (!state.directory_error.empty()) return Error(state.directory_error);
    if (!one_shot && i == 9 && !state.directory_watched) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // The watch is being set up.
    }
  }
  return Summarize(std::move(ns));
}

// The directory lists `agents` agents (all registered), or the reason it does not within 30 s.
Status AwaitRegistered(const std::string& spec, size_t agents) {
  gpupool::PoolOptions options;
  options.directory = spec;
  auto pool = gpupool::Pool::Connect(options);
  if (!pool.ok()) return pool.status();
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  size_t listed = 0;
  while (Clock::now() < deadline) {
    gpupool::PoolState state = pool->Summary();
    listed = state.servers.size();
    if (listed == agents && state.directory_error.empty()) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Error(fmt::format("the directory lists {} agents after 30 s, not {}", listed, agents));
}

// Goals of the directory (issue "A pool of thousands of GPUs"): placement that does not grow with the pool.
constexpr double kGoalP50Growth = 2.0;           // p50 Allocate at the largest scale / at the smallest, at most.
constexpr double kGoalPairsAtLargest = 500.0;    // Pairs/s at the largest scale, at least (2-core host).

// --directory etcd: a local etcd, then for each scale a fleet of agents registered there, the clients placing from
// it; the ratio of the largest scale's p50 to the smallest's is the result.
int MainDirectory(Options opt, const gpupool::Request& request, std::chrono::milliseconds warmup,
                  std::chrono::milliseconds duration) {
  LocalEtcd etcd;
  if (Status s = etcd.Start(opt.etcd_binary); !s.ok()) {
    fmt::print(stderr, "alloc_bench: {}\n", s.message());
    return 1;
  }
  opt.directory_spec = etcd.spec();
  struct Row {
    int agents = 0;
    LatencyStats read, watched, describe_all;
    Measured m;
    std::optional<double> etcd_cores;
  };
  std::vector<Row> rows;
  for (int scale : opt.scales) {
    Options o = opt;
    o.agents = scale;
    fmt::print(stderr, "alloc_bench: {} agents ({} x {} emulated devices) registering in {}...\n", scale, o.emu,
               o.emu_memory, o.directory_spec);
    AgentFleet fleet;
    fleet.set_remove_logs(false);
    fleet.set_name_prefix(fmt::format("s{}-", scale));
    Status started = fleet.Start(o);
    if (started.ok()) started = AwaitRegistered(o.directory_spec, static_cast<size_t>(scale));
    if (!started.ok()) {
      fmt::print(stderr, "alloc_bench: {}\nalloc_bench: agent logs kept in {}\n", started.message(), fleet.log_dir());
      return 1;
    }
    Row row;
    row.agents = scale;
    const int samples = std::max(20, std::min(o.baseline_samples, 200));
    auto read = TimeDirectorySummary(o.directory_spec, samples, true);
    auto watched = read.ok() ? TimeDirectorySummary(o.directory_spec, samples, false) : read;
    auto all = watched.ok() ? TimeDescribe(fleet.addresses(), samples) : watched;
    if (!all.ok()) {
      fmt::print(stderr, "alloc_bench: baseline failed: {}\n", all.status().message());
      return 1;
    }
    row.read = *read;
    row.watched = *watched;
    row.describe_all = *all;
    gpupool::PoolOptions pool_options;
    pool_options.directory = o.directory_spec;
    auto etcd_cpu0 = etcd.CpuSeconds();
    auto measured = MeasureClients(o, pool_options, request, fleet, warmup, duration);
    auto etcd_cpu1 = etcd.CpuSeconds();
    if (!measured.ok()) {
      fmt::print(stderr, "alloc_bench: {}\n", measured.status().message());
      return 1;
    }
    if (etcd_cpu0 && etcd_cpu1) {
      row.etcd_cores = (*etcd_cpu1 - *etcd_cpu0) / (static_cast<double>((warmup + duration).count()) / 1000.0);
    }
    if (measured->pairs == 0) {
      fmt::print(stderr, "alloc_bench: no allocation succeeded at {} agents; agent logs kept in {}\n", scale,
                 fleet.log_dir());
      PrintFailures("allocate", measured->allocate_failures);
      return 1;
    }
    row.m = std::move(measured).value();
    fleet.set_remove_logs(!opt.keep_logs);
    rows.push_back(std::move(row));
  }
  const Row& small = rows.front();
  const Row& large = rows.back();
  const double growth = small.m.alloc.p50_ms > 0 ? large.m.alloc.p50_ms / small.m.alloc.p50_ms : 0;
  const bool growth_met = growth > 0 && growth <= kGoalP50Growth;
  const bool rate_met = large.m.pairs_per_s >= kGoalPairsAtLargest;
  if (opt.json) {
    std::string out = "{\n  \"directory\": \"etcd (one local member)\",\n  \"scales\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out += fmt::format(
          "    {{\"agents\": {}, \"devices_per_agent\": {}, \"clients\": {}, \"directory_read\": {}, "
          "\"directory_watched\": {}, "
          "\"describe_all_agents\": {}, \"allocate\": {}, \"release\": {}, \"pairs_per_s\": {:.1f}, "
          "\"allocate_failures\": {}, \"cpu_cores_used\": {{\"bench_process\": {}, \"agents\": {}, "
          "\"etcd\": {}}}}}{}\n",
          r.agents, opt.emu, opt.clients, JsonStats(r.read), JsonStats(r.watched), JsonStats(r.describe_all), JsonStats(r.m.alloc),
          JsonStats(r.m.release), r.m.pairs_per_s, JsonFailures(r.m.allocate_failures), JsonOptional(r.m.self_cores),
          JsonOptional(r.m.agent_cores), JsonOptional(r.etcd_cores), i + 1 < rows.size() ? "," : "");
    }
    out += fmt::format(
        "  ],\n  \"ratio_p50_allocate_largest_to_smallest\": {:.3f},\n"
        "  \"goals\": {{\"p50_growth\": {{\"goal_at_most\": {}, \"measured\": {:.3f}, \"met\": {}}}, "
        "\"pairs_per_s_at_largest\": {{\"goal_at_least\": {}, \"measured\": {:.1f}, \"met\": {}}}}}\n}}\n",
        growth, kGoalP50Growth, growth, growth_met, kGoalPairsAtLargest, large.m.pairs_per_s, rate_met);
    fmt::print("{}", out);
  } else {
    fmt::print("alloc_bench --directory etcd: {} client thread(s), request {}, {} emulated devices per agent; "
               "times in ms (read dir: a new Pool's Summary(); watched: a long-lived Pool's)\n",
               opt.clients, gpupool::DescribeRequest(request), opt.emu);
    fmt::print("  {:>6}  {:>13}  {:>13}  {:>14}  {:>12}  {:>12}  {:>9}  {:>8}  {:>24}\n", "agents", "read dir p50",
               "watched p50", "describe all p50", "Allocate p50", "Allocate p99", "pairs/s", "failures",
               "cores: bench/agents/etcd");
    auto cores = [](std::optional<double> v) { return v ? fmt::format("{:.2f}", *v) : "?"; };
    for (const Row& r : rows) {
      fmt::print("  {:>6}  {:>13.3f}  {:>13.3f}  {:>14.3f}  {:>12.3f}  {:>12.3f}  {:>9.1f}  {:>8}  {:>24}\n",
                 r.agents, r.read.p50_ms, r.watched.p50_ms, r.describe_all.p50_ms, r.m.alloc.p50_ms,
                 r.m.alloc.p99_ms, r.m.pairs_per_s,
                 TotalFailures(r.m.allocate_failures),
                 fmt::format("{}/{}/{}", cores(r.m.self_cores), cores(r.m.agent_cores), cores(r.etcd_cores)));
    }
    fmt::print("goals:\n");
    fmt::print("  p50 Allocate at {} agents / at {} agents <= {}: {:.2f}x: {}\n", large.agents, small.agents,
               kGoalP50Growth, growth, growth_met ? "MET" : "MISSED");
    fmt::print("  >= {} pairs/s at {} agents: {:.1f}: {}\n", kGoalPairsAtLargest, large.agents, large.m.pairs_per_s,
               rate_met ? "MET" : "MISSED");
  }
  return 0;
}

int Main(const Options& opt) {
  auto duration = gpupool::ParseDuration(opt.duration);
  auto warmup = gpupool::ParseDuration(opt.warmup);
  auto fraction = gpupool::ParseFraction(opt.fraction);
  for (const Status* s : {&duration.status(), &warmup.status(), &fraction.status()}) {
    if (!s->ok()) {
      fmt::print(stderr, "alloc_bench: {}\n", s->message());
      return 2;
    }
  }
  if (duration->count() <= 0) {
    fmt::print(stderr, "alloc_bench: --duration must be positive\n");
    return 2;
  }
  gpupool::Request request;
  request.count = opt.count;
  request.fraction = *fraction;
  request.label = "alloc_bench";
  if (Status s = gpupool::ValidateRequest(request); !s.ok()) {
    fmt::print(stderr, "alloc_bench: {}\n", s.message());
    return 2;
  }

  if (opt.directory == "etcd") return MainDirectory(opt, request, *warmup, *duration);
  if (!opt.directory.empty()) {
    fmt::print(stderr, "alloc_bench: --directory knows only etcd\n");
    return 2;
  }
  const unsigned cpus = std::thread::hardware_concurrency();
  const std::optional<double> load_before = LoadAverage();
  fmt::print(stderr, "alloc_bench: starting {} agents ({} x {} emulated devices)...\n", opt.agents, opt.emu,
             opt.emu_memory);
  AgentFleet fleet;
  // Logs stay on disk if anything below fails, so the failure can be read in them.
  fleet.set_remove_logs(false);
  if (Status s = fleet.Start(opt); !s.ok()) {
    fmt::print(stderr, "alloc_bench: {}\n", s.message());
    if (!fleet.log_dir().empty()) fmt::print(stderr, "alloc_bench: agent logs kept in {}\n", fleet.log_dir());
    return 1;
  }
  const std::vector<std::string> servers = fleet.addresses();

  fmt::print(stderr, "alloc_bench: baseline ({} describe round trips to 1 agent, then to {})...\n",
             opt.baseline_samples, opt.agents);
  auto describe_one = TimeDescribe({servers.front()}, opt.baseline_samples);
  auto describe_all = describe_one.ok() ? TimeDescribe(servers, opt.baseline_samples) : describe_one;
  if (!describe_all.ok()) {
    fmt::print(stderr, "alloc_bench: baseline failed: {}\nalloc_bench: agent logs kept in {}\n",
               describe_all.status().ToString(), fleet.log_dir());
    return 1;
  }

  gpupool::PoolOptions pool_options;
  pool_options.servers = servers;
  auto measured = MeasureClients(opt, pool_options, request, fleet, *warmup, *duration);
  if (!measured.ok()) {
    fmt::print(stderr, "alloc_bench: {}\n", measured.status().message());
    return 1;
  }
  const double window_s = measured->window_s;
  const uint64_t pairs = measured->pairs;
  const double pairs_per_s = measured->pairs_per_s;
  const LatencyStats& alloc = measured->alloc;
  const LatencyStats& failed = measured->failed;
  const LatencyStats& release = measured->release;
  const LatencyStats& pair = measured->pair;
  const FailureTable& allocate_failures = measured->allocate_failures;
  const FailureTable& release_failures = measured->release_failures;
  const std::map<std::string, uint64_t>& placement = measured->placement;
  const std::optional<double> self_cores = measured->self_cores, agent_cores = measured->agent_cores;
  const std::optional<double> load_after = LoadAverage();
  const double ratio_one = describe_one->p50_ms > 0 ? alloc.p50_ms / describe_one->p50_ms : 0;
  const double ratio_all = describe_all->p50_ms > 0 ? alloc.p50_ms / describe_all->p50_ms : 0;
  const bool p99_met = alloc.n > 0 && alloc.p99_ms < kTargetP99AllocateMs;
  const bool rate_met = pairs_per_s >= kTargetPairsPerSecond;
  const bool rate_applies = opt.agents == kTargetAgents;

  if (opt.json) {
    std::string placement_json = "{";
    for (const auto& [name, n] : placement) {
      placement_json += fmt::format("{}{}: {}", placement_json.size() > 1 ? ", " : "", JsonString(name), n);
    }
    placement_json += "}";
    fmt::print(
        "{{\n"
        "  \"config\": {{\"agents\": {}, \"devices_per_agent\": {}, \"clients\": {}, \"count\": {}, "
        "\"fraction\": {}, \"warmup_s\": {:.3f}, \"duration_s\": {:.3f}, \"baseline_samples\": {}, \"host_cpus\": {}, "
        "\"load_average_1m_before\": {}, \"load_average_1m_after\": {}}},\n"
        "  \"baseline\": {{\"describe_1_agent\": {}, \"describe_all_agents\": {}}},\n"
        "  \"allocate\": {},\n"
        "  \"allocate_failed\": {},\n"
        "  \"release\": {},\n"
        "  \"pair\": {},\n"
        "  \"window_s\": {:.4f},\n"
        "  \"pairs\": {},\n"
        "  \"pairs_per_s\": {:.1f},\n"
        "  \"allocate_failures\": {},\n"
        "  \"release_failures\": {},\n"
        "  \"placement\": {},\n"
        "  \"ratio_p50_allocate_to_describe_1\": {:.3f},\n"
        "  \"ratio_p50_allocate_to_describe_all\": {:.3f},\n"
        "  \"cpu_cores_used\": {{\"bench_process\": {}, \"agents\": {}}},\n"
        "  \"targets\": {{\"p99_allocate_ms\": {{\"target\": {}, \"measured\": {:.4f}, \"met\": {}}}, "
        "\"pairs_per_s\": {{\"target\": {}, \"measured\": {:.1f}, \"met\": {}, \"stated_for_agents\": {}}}}}\n"
        "}}\n",
        opt.agents, opt.emu, opt.clients, opt.count, request.fraction, static_cast<double>(warmup->count()) / 1000,
        static_cast<double>(duration->count()) / 1000, opt.baseline_samples, cpus, JsonOptional(load_before),
        JsonOptional(load_after), JsonStats(*describe_one), JsonStats(*describe_all), JsonStats(alloc),
        JsonStats(failed), JsonStats(release), JsonStats(pair), window_s, pairs, pairs_per_s,
        JsonFailures(allocate_failures), JsonFailures(release_failures), placement_json, ratio_one, ratio_all,
        JsonOptional(self_cores), JsonOptional(agent_cores), kTargetP99AllocateMs, alloc.p99_ms, p99_met,
        kTargetPairsPerSecond, pairs_per_s, rate_met, kTargetAgents);
  } else {
    fmt::print("alloc_bench: {} agents x {} emulated devices, {} client thread(s) (one Pool each), request {}\n",
               opt.agents, opt.emu, opt.clients, gpupool::DescribeRequest(request));
    fmt::print(
        "  host: {} CPU(s), shared by the agents, the clients and their RPC threads; 1-min load average {} "
        "before, {} after\n",
        cpus, load_before ? fmt::format("{:.2f}", *load_before) : "?",
        load_after ? fmt::format("{:.2f}", *load_after) : "?");
    fmt::print("baseline, no load: Pool::State() = one describe RPC per agent, in parallel\n");
    fmt::print("{}", StatsLine("describe, 1 agent", *describe_one));
    fmt::print("{}", StatsLine(fmt::format("describe, {} agents", opt.agents).c_str(), *describe_all));
    fmt::print("measured: {:.3f} s after {} warm-up\n", window_s, opt.warmup);
    fmt::print("{}", StatsLine("Allocate (ok)", alloc));
    if (failed.n > 0) fmt::print("{}", StatsLine("Allocate (failed)", failed));
    fmt::print("{}", StatsLine("Release", release));
    fmt::print("{}", StatsLine("Allocate + Release", pair));
    fmt::print("  throughput: {} pairs in {:.3f} s = {:.1f} allocate+release pairs/s\n", pairs, window_s, pairs_per_s);
    PrintFailures("allocate", allocate_failures);
    PrintFailures("release", release_failures);
    fmt::print("  placement (first slice):");
    for (const auto& [name, n] : placement) {
      const double share = static_cast<double>(n) / static_cast<double>(std::max<uint64_t>(pairs, 1));
      fmt::print(" {} {:.1f}%", name, 100.0 * share);
    }
    fmt::print("\n");
    fmt::print("  ratio p50 Allocate / p50 describe: {:.2f}x (1 agent), {:.2f}x ({} agents)\n", ratio_one, ratio_all,
               opt.agents);
    fmt::print("  CPU used in the window: bench process {} cores, agents {} cores (host has {})\n",
               self_cores ? fmt::format("{:.2f}", *self_cores) : "?",
               agent_cores ? fmt::format("{:.2f}", *agent_cores) : "?", cpus);
    fmt::print("targets:\n");
    fmt::print("  p99 Allocate < {} ms: {}: {}\n", kTargetP99AllocateMs,
               alloc.n > 0 ? fmt::format("{:.3f} ms", alloc.p99_ms) : "no allocation succeeded",
               p99_met ? "MET" : "MISSED");
    fmt::print("  >= {} allocate+release pairs/s with {} agents: {:.1f} pairs/s: {}{}\n", kTargetPairsPerSecond,
               kTargetAgents, pairs_per_s, rate_met ? "MET" : "MISSED",
               rate_applies
                   ? ""
                   : fmt::format(" (this run has {} agents; the target is stated for {})", opt.agents, kTargetAgents));
  }
  std::fflush(stdout);

  if (pairs == 0) {
    // Nothing to measure is not a result; it is a broken setup (the failures above say why).
    fmt::print(stderr, "alloc_bench: no allocation succeeded; agent logs kept in {}\n", fleet.log_dir());
    return 1;
  }
  fleet.set_remove_logs(!opt.keep_logs);
  if (opt.keep_logs) fmt::print(stderr, "alloc_bench: agent logs kept in {}\n", fleet.log_dir());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"alloc_bench: Allocate + Release latency and throughput against gp-agents it starts on loopback"};
  app.add_option("--agents", opt.agents, "gp-agent processes to start (default 8)")->check(CLI::Range(1, 256));
  app.add_option("--clients", opt.clients, "client threads, each with its own Pool (default 4)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--duration", opt.duration, "measured time, e.g. 5s or 500ms (default 5s)");
  app.add_option("--warmup", opt.warmup, "unmeasured time first (default 1s)");
  app.add_option("--count", opt.count, "slices per request (default 1)")->check(CLI::Range(1, 4096));
  app.add_option("--fraction", opt.fraction, "fraction of a device per slice: 0.25, 25% or 1/4 (default 0.25)");
  app.add_option("--emu", opt.emu, "emulated devices per agent (default 8)")->check(CLI::Range(1, 1024));
  app.add_option("--emu-memory", opt.emu_memory, "memory of each emulated device (default 16GiB)");
  app.add_option("--baseline-samples", opt.baseline_samples, "describe round trips timed per baseline (default 1000)")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--tools-dir", opt.tools_dir, "directory holding gp-agent (default: this build's tools/)");
  app.add_option("--agent-log-level", opt.agent_log_level,
                 "GPUPOOL_LOG for the agents, e.g. warn (default: the agent's own, info)");
  app.add_flag("--keep-logs", opt.keep_logs, "keep the agents' logs (always kept when the run fails)");
  app.add_flag("--json", opt.json, "print the results as JSON on stdout");
  app.add_option("--directory", opt.directory,
                 "etcd: start a local etcd, register the agents there and place from it, at each of --scales");
  app.add_option("--scales", opt.scales, "with --directory: pool sizes measured in turn (default 8 128)")
      ->check(CLI::Range(1, 256));
  app.add_option("--etcd", opt.etcd_binary, "with --directory: the etcd binary (default etcd, on PATH)");
  CLI11_PARSE(app, argc, argv);
  return Main(opt);
}
