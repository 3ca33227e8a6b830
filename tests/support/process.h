// Real processes for integration tests: gp-agent instances on real sockets, and commands whose output and exit
// status the tests check. Every process started here is killed when its handle dies.
#ifndef GPUPOOL_TESTS_SUPPORT_PROCESS_H_
#define GPUPOOL_TESTS_SUPPORT_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace gpupool::testing {

// Paths of the built tools, set by CMake.
std::string ToolPath(const std::string& name);  // "gp-agent" -> build/tools/gp-agent

// A child process with stdout captured to a pipe (read on demand) and stderr to a file.
class Process {
 public:
  // Starts argv[0] with argv and `env` added to this process's environment ("K=V"; "K" alone unsets K).
  Process(std::vector<std::string> argv, std::vector<std::string> env = {});
  ~Process();  // SIGKILLs the child's process group (its children too) and reaps the child if still running.
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Reads one stdout line, waiting up to `timeout`; empty on timeout or EOF.
  std::string ReadLine(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Appends whatever stdout has within `timeout` to the buffer; false at EOF.
  bool ReadMore(std::chrono::milliseconds timeout);
  // Everything left on stdout until EOF.
  std::string ReadAll();
  std::string Stderr() const;
  void Signal(int signum);
  // Waits for exit; returns the exit code, 128+signal if killed, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  bool running();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  std::string err_path_;
  int status_ = -1;
};

// Runs a command to completion: exit code (128+signal), stdout, stderr.
struct RunResult {
  int code = -1;
  std::string out, err;
};
RunResult RunCommand(std::vector<std::string> argv, std::vector<std::string> env = {},
              std::chrono::milliseconds timeout = std::chrono::seconds(60));

// A gp-agent on a loopback TCP port (127.0.0.1:0) or a Unix socket in a temp dir.
struct AgentOptions {
  std::string name = "agent";
  int emulated = 8;
  std::string emulated_memory = "16GiB";
  std::string device_class;
  std::string lease_ttl;  // Empty: the agent's default.
  std::string listen;     // Empty: 127.0.0.1:0.
  std::vector<std::string> extra_args;
  std::vector<std::string> env;  // "K=V" added to the agent's environment.
  // Words before gp-agent's own, e.g. gp-run and its options up to "--": the agent runs as that command's child.
  std::vector<std::string> launcher;
};

class Agent {
 public:
  explicit Agent(AgentOptions options);
  // Same name and listen address as before: restart after Kill().
  void Restart();
  void Kill(int signum = 9);
  const std::string& address() const { return address_; }
  Process& process() { return *process_; }

 private:
  void Start(const std::string& listen);
  AgentOptions options_;
  std::string address_;
  std::unique_ptr<Process> process_;
};

// N agents named prefix0..prefixN-1; Servers() is "a,b,c" for GPUPOOL_SERVERS.
class AgentGroup {
 public:
  AgentGroup(int count, AgentOptions options);
  std::vector<std::string> Addresses() const;
  std::string Servers() const;
  Agent& operator[](size_t i) { return *agents_[i]; }
  size_t size() const { return agents_.size(); }

 private:
  std::vector<std::unique_ptr<Agent>> agents_;
};

// A TCP port free on loopback now (bound to 0 and released: another process may take it before the caller does).
int FreeLoopbackPort();

// A fresh temp directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_SUPPORT_PROCESS_H_
