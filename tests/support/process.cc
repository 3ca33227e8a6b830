#include "support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace gpupool::testing {

std::string ToolPath(const std::string& name) { return std::string(GPUPOOL_TOOLS_DIR) + "/" + name; }

Process::Process(std::vector<std::string> argv, std::vector<std::string> env) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  char tmpl[] = "/tmp/gpupool-test-stderr-XXXXXX";
  int err_fd = mkstemp(tmpl);
  err_path_ = tmpl;
  std::vector<std::string> env_storage;
  for (char** e = environ; *e; ++e) env_storage.emplace_back(*e);
  for (auto& e : env) env_storage.push_back(e);  // Later entries win in getenv (glibc scans from the start):
  // drop earlier duplicates so the added value is the one seen.
  // An entry without '=' unsets its variable: set but empty is a value of its own (GPUPOOL_SERVERS= is an error).
  std::vector<std::string> final_env;
  for (size_t i = 0; i < env_storage.size(); ++i) {
    auto key = env_storage[i].substr(0, env_storage[i].find('='));
    bool overridden = false;
    for (size_t j = i + 1; j < env_storage.size(); ++j) {
      overridden = overridden || env_storage[j].substr(0, env_storage[j].find('=')) == key;
    }
    if (!overridden && env_storage[i].find('=') != std::string::npos) final_env.push_back(env_storage[i]);
  }
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : final_env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], 1);
    dup2(err_fd, 2);
    setpgid(0, 0);  // Its own group: a test's SIGINT to it does not reach the test runner.
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // A crashed test must not leave agents running.
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(out[1]);
  close(err_fd);
  out_fd_ = out[0];
}

Process::~Process() {
  if (pid_ > 0 && status_ == -1) {
    kill(-pid_, SIGKILL);  // The group: an agent's session workers, a launcher's command.
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
  unlink(err_path_.c_str());
}

std::string Process::ReadLine(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
    char buf[4096];
    ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return "";
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

bool Process::ReadMore(std::chrono::milliseconds timeout) {
  pollfd p{out_fd_, POLLIN, 0};
  int ready = poll(&p, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return true;  // Nothing yet.
  char buf[4096];
  ssize_t n = read(out_fd_, buf, sizeof(buf));
  if (n <= 0) return false;
  buffer_.append(buf, static_cast<size_t>(n));
  return true;
}

std::string Process::ReadAll() {
  char buf[4096];
  ssize_t n;
  while ((n = read(out_fd_, buf, sizeof(buf))) > 0) buffer_.append(buf, static_cast<size_t>(n));
  std::string all;
  all.swap(buffer_);
  return all;
}

std::string Process::Stderr() const {
  std::ifstream f(err_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void Process::Signal(int signum) {
  if (status_ == -1) kill(pid_, signum);
}

bool Process::running() {
  if (status_ != -1) return false;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) {
    status_ = st;
    return false;
  }
  return true;
}

int Process::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (status_ == -1) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = st;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

RunResult RunCommand(std::vector<std::string> argv, std::vector<std::string> env, std::chrono::milliseconds timeout) {
  Process p(std::move(argv), std::move(env));
  RunResult r;
  // Drain stdout until EOF while waiting, so a chatty child never blocks on a full pipe.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool eof = false;
  while (!eof && std::chrono::steady_clock::now() < deadline) eof = !p.ReadMore(std::chrono::milliseconds(200));
  r.code = p.Wait(eof ? std::chrono::seconds(10) : std::chrono::milliseconds(0));
  if (r.code == -1) {
    p.Signal(SIGKILL);
    r.code = p.Wait();
    r.err = "TIMEOUT\n";
  }
  r.out = p.ReadAll();
  r.err += p.Stderr();
  return r;
}

Agent::Agent(AgentOptions options) : options_(std::move(options)) {
  Start(options_.listen.empty() ? "127.0.0.1:0" : options_.listen);
}

void Agent::Start(const std::string& listen) {
  std::vector<std::string> argv = options_.launcher;
  std::vector<std::string> own = {ToolPath("gp-agent"), "--no-nvml", "--listen", listen, "--name", options_.name,
                                  "--emu", std::to_string(options_.emulated), "--emu-memory",
                                  options_.emulated_memory};
  if (!options_.device_class.empty()) {
    own.push_back("--class");
    own.push_back(options_.device_class);
  }
  if (!options_.lease_ttl.empty()) {
    own.push_back("--lease-ttl");
    own.push_back(options_.lease_ttl);
  }
  for (auto& a : options_.extra_args) own.push_back(a);
  argv.insert(argv.end(), own.begin(), own.end());
  process_ = std::make_unique<Process>(argv, options_.env);
  std::string line = process_->ReadLine(std::chrono::seconds(20));
  auto pos = line.find(" listening on ");
  if (pos == std::string::npos) {
    throw std::runtime_error("gp-agent did not start: '" + line + "' stderr: " + process_->Stderr());
  }
  std::string rest = line.substr(pos + 14);
  address_ = rest.substr(0, rest.find(' '));
}

void Agent::Restart() {
  if (process_ && process_->running()) Kill();
  Start(address_);
}

void Agent::Kill(int signum) {
  process_->Signal(signum);
  process_->Wait();
}

AgentGroup::AgentGroup(int count, AgentOptions options) {
  for (int i = 0; i < count; ++i) {
    AgentOptions o = options;
    o.name = options.name + std::to_string(i);
    agents_.push_back(std::make_unique<Agent>(o));
  }
}

std::vector<std::string> AgentGroup::Addresses() const {
  std::vector<std::string> out;
  for (const auto& a : agents_) out.push_back(a->address());
  return out;
}

std::string AgentGroup::Servers() const {
  std::string out;
  for (const auto& a : agents_) out += (out.empty() ? "" : ",") + a->address();
  return out;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/gpupool-test-XXXXXX";
  path_ = mkdtemp(tmpl);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  std::string p = path_ + "/" + name;
  std::ofstream(p) << content;
  return p;
}

}  // namespace gpupool::testing
