// The confinement of a session worker (agent/session_worker.h): the agent decides it once, at start, from its
// configuration ([workers]); every worker applies it to itself first thing, before it reads a byte the agent or a
// tenant sends. In order: its memory cap (RLIMIT_AS), its user (setgroups, setgid, setuid), its death signal again
// (setuid clears it), no new privileges, no core dumps and no same-user ptrace (not dumpable), then the seccomp
// allow-list. A tenant who takes over its worker holds an unprivileged process that cannot trace, mount, load
// programs into the kernel, enter or make namespaces, execute programs, nor open sockets other than Unix and IP.
#ifndef GPUPOOL_AGENT_WORKER_SANDBOX_H_
#define GPUPOOL_AGENT_WORKER_SANDBOX_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpupool/status.h"

namespace gpupool::agent {

// The default [workers] user: a system account the install step creates (tools/gp-agent/create-user.sh).
inline constexpr const char kDefaultWorkerUser[] = "gpupool";
// The default [workers] memory_limit: address space a worker may use besides its device's window.
inline constexpr uint64_t kDefaultWorkerMemoryLimit = 8ull << 30;
// The least [workers] memory_limit other than 0: below it a worker fails at start, not under a tenant's load.
inline constexpr uint64_t kMinWorkerMemoryLimit = 256ull << 20;

// [workers] of agent.toml.
struct WorkersConfig {
  // Who session workers run as when the agent runs as root. Default "gpupool"; "root" only when set explicitly.
  // An agent that is not root runs its workers as itself (it cannot switch users) and refuses any other name.
  std::string user = kDefaultWorkerUser;
  bool user_set = false;  // `user` came from the configuration, not the default.
  // The seccomp allow-list; false only to debug a worker (strace-like tools, new driver versions). Default true.
  bool seccomp = true;
  // Address space a worker may map besides its emulated device's window (the device memory, which lives in the
  // worker): code, heaps, thread stacks, copies in flight. Default 8GiB; 0: no cap. Workers of physical GPUs are
  // not capped this way (the CUDA driver reserves address space far beyond what it uses), but by `cgroup`.
  uint64_t memory_limit = kDefaultWorkerMemoryLimit;
  // Where each worker gets a cgroup v2 group of its own whose memory.max is its cap (memory_limit, plus the window
  // for an emulated device): "auto" (default: the agent's own group, when delegated with the memory controller),
  // "off", or the absolute path of a group made for the workers (agent/worker_cgroup.h).
  std::string cgroup = "auto";
};

// What a worker applies to itself: resolved by the agent, handed to the worker on its command line.
struct WorkerSandbox {
  bool switch_user = false;  // Whether to setgroups/setgid/setuid (the agent is root); else the worker stays as is.
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // Supplementary: the user's own and the groups owning /dev/nvidia* (except root's).
  bool seccomp = true;
  uint64_t address_space_limit = 0;  // RLIMIT_AS in bytes; 0: none.
  // The worker's door ("unix:PATH.session", see session_worker.cc) when the agent listens on a Unix socket: the
  // worker binds it before it gives up root, since the directory beside the agent's socket is the agent's. "" for
  // none or TCP.
  std::string door_listen;

  // One command-line word, and back (Parse refuses anything it would not write: kInvalidArgument).
  std::string Encode() const;
  static Result<WorkerSandbox> Parse(std::string_view word);
};

// The agent's side, at start: the user's ids and groups, the device files' groups. kInvalidArgument when the
// agent runs as root and the user does not exist (the message says how to create it), or the agent is not root
// and was told to run its workers as someone else.
Result<WorkerSandbox> ResolveWorkerSandbox(const WorkersConfig& config);

// The worker's side: applies `sandbox` to the calling process, which must have no other thread yet. Any failure
// is returned and the worker must exit: a worker half confined is not run.
Status ApplyWorkerSandbox(const WorkerSandbox& sandbox);

// The seccomp allow-list alone (ApplyWorkerSandbox installs it last). REQUIRES: no_new_privs set or CAP_SYS_ADMIN.
// Whatever it does not allow fails with EPERM: see worker_sandbox.cc for why not a kill.
Status InstallWorkerSyscallFilter();

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_WORKER_SANDBOX_H_
