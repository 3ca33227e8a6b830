#include "client/local_agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

namespace gpupool {

std::string SiblingPath(const std::string& name) {
  char self[PATH_MAX] = {0};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  return (std::filesystem::path(std::string(self, static_cast<size_t>(n))).parent_path() / name).string();
}

Result<std::unique_ptr<LocalAgent>> LocalAgent::Start(const std::string& agent_binary, Listen where,
                                                      int emulated_devices) {
  if (access(agent_binary.c_str(), X_OK) != 0) {
    return Status(StatusCode::kUnavailable, fmt::format("no pool configured and {} is missing", agent_binary));
  }
  auto agent = std::unique_ptr<LocalAgent>(new LocalAgent());
  if (where == Listen::kUnixSocket) {  // A directory of its own, that only this user may enter.
    char tmpl[] = "/tmp/gpupool-local-XXXXXX";
    if (!mkdtemp(tmpl)) return Status(StatusCode::kInternal, "cannot create a directory for the local agent");
    agent->dir_ = tmpl;
  }
  std::string listen = where == Listen::kTcpLoopback ? "127.0.0.1:0" : "unix:" + agent->dir_ + "/agent.sock";
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status(StatusCode::kInternal, "pipe failed");
  const bool quiet = getenv("GPUPOOL_LOG") == nullptr;
  // In its own directory, the agent removes that directory when it ends: after a SIGKILL of this process nobody else
  // would (the destructor below does otherwise).
  const std::string emulated = std::to_string(std::clamp(emulated_devices, 1, kMaxEmulatedDevices));
  const char* argv[] = {agent_binary.c_str(), "--listen",       listen.c_str(), "--name", "local",
                        "--emu-fallback", emulated.c_str(), "--lease-ttl", "10s", "--exit-with-parent",
                        where == Listen::kUnixSocket ? "--remove-socket-dir" : nullptr, nullptr};
  // The agent must die with this process, and only then: PR_SET_PDEATHSIG fires when the *thread* that forked it
  // ends, and the caller may be any thread of the program (CUDA initialised on a worker thread that then ends). So
  // a thread of our own forks it and lives until the agent is stopped; a SIGKILL of the process ends it too.
  agent->keeper_ = std::thread([&argv, quiet, out_fd = out[1], agent = agent.get()] {
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
      // Only async-signal-safe calls until exec.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);
      dup2(out_fd, 1);
      int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0 && quiet) dup2(devnull, 2);
      execv(argv[0], const_cast<char**>(argv));
      _exit(127);
    }
    std::unique_lock<std::mutex> lock(agent->keeper_mu_);
    agent->pid_ = child;
    agent->forked_ = true;
    agent->keeper_cv_.notify_all();
    agent->keeper_cv_.wait(lock, [agent] { return agent->stopped_; });
  });
  pid_t pid;
  {
    std::unique_lock<std::mutex> lock(agent->keeper_mu_);
    agent->keeper_cv_.wait(lock, [&agent] { return agent->forked_; });
    pid = agent->pid_;
  }
  close(out[1]);
  if (pid < 0) {
    close(out[0]);
    return Status(StatusCode::kInternal, "fork failed");
  }
  // Wait for "gp-agent local listening on ADDRESS ..." on its stdout (port 0 has become a free port there).
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char buf[256];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  const std::string marker = " listening on ";
  size_t at = line.find(marker);
  if (at == std::string::npos) {
    return Status(StatusCode::kUnavailable, "the local gp-agent did not start (set GPUPOOL_LOG=info to see why)");
  }
  at += marker.size();
  agent->address_ = line.substr(at, line.find_first_of(" \n", at) - at);
  // "... with N device(s) (M emulated)"
  std::sscanf(line.c_str() + at + agent->address_.size(), " with %d device(s) (%d emulated)", &agent->devices_,
              &agent->emulated_);
  return agent;
}

std::string LocalAgent::Devices() const {
  auto count = [](int n, const char* what) {
    return n == 1 ? fmt::format("one {}", what) : fmt::format("{} {}s", n, what);
  };
  const int physical = devices_ - emulated_;
  if (physical > 0 && emulated_ > 0) {
    return fmt::format("this machine's {} and {}", count(physical, "GPU"), count(emulated_, "emulated GPU"));
  }
  if (physical > 0) return fmt::format("this machine's {}", count(physical, "GPU"));
  if (emulated_ == 1) return "an emulated GPU (no NVIDIA GPU found here)";
  return fmt::format("{} (no NVIDIA GPU found here)", count(emulated_, "emulated GPU"));
}

std::string LocalAgent::MoreDevicesHint() const {
  const int physical = devices_ - emulated_;
  const std::string serves =
      physical > 0 ? fmt::format("serves this machine's GPUs only")
                   : fmt::format("emulates at most {} GPUs", kMaxEmulatedDevices);
  return fmt::format("no pool is configured, and the private gp-agent {}: name a pool's agents for more "
                     "(--servers HOST:PORT,..., GPUPOOL_SERVERS or a pool file)",
                     serves);
}

LocalAgent::~LocalAgent() {
  if (pid_ > 0) {  // Any thread may wait for a child of the process.
    kill(pid_, SIGTERM);
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (keeper_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(keeper_mu_);
      stopped_ = true;
    }
    keeper_cv_.notify_one();
    keeper_.join();
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

}  // namespace gpupool
