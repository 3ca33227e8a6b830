// A private gp-agent for one command: what gp-run starts when no pool is configured, so that
// `gp-run -- ./app` works on a fresh machine (local NVIDIA GPUs when NVML finds any, else one emulated device).
#ifndef GPUPOOL_CLIENT_LOCAL_AGENT_H_
#define GPUPOOL_CLIENT_LOCAL_AGENT_H_

#include <sys/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gpupool/status.h"

namespace gpupool {

class LocalAgent {
 public:
  enum class Listen { kUnixSocket, kTcpLoopback };
  // The most emulated devices a private agent declares: a command asking for more needs a pool.
  static constexpr int kMaxEmulatedDevices = 8;
  // Starts `agent_binary` on a Unix socket in a private directory (or on a free TCP port of 127.0.0.1: gp-bench's
  // TCP figures) and waits (up to 10 s) until it listens. Without a GPU here it declares `emulated_devices`
  // emulated devices (at most kMaxEmulatedDevices): as many as the command asks for. The agent dies with this
  // process even if it is killed with SIGKILL (PR_SET_PDEATHSIG), and lives as long as it: whichever thread calls
  // Start may end meanwhile.
  static Result<std::unique_ptr<LocalAgent>> Start(const std::string& agent_binary,
                                                   Listen listen = Listen::kUnixSocket, int emulated_devices = 1);
  ~LocalAgent();  // SIGTERM, then SIGKILL after 2 s; removes the socket directory.

  const std::string& address() const { return address_; }  // "unix:/tmp/gpupool-XXXX/agent.sock", "127.0.0.1:N"
  // What the agent serves, in a user's words: "an emulated GPU", "this machine's 2 GPUs".
  std::string Devices() const;
  // Why a request it cannot grant cannot be granted here, and how to get more: appended to the refusal.
  std::string MoreDevicesHint() const;

 private:
  LocalAgent() = default;
  pid_t pid_ = -1;
  std::string dir_, address_;
  int devices_ = 0, emulated_ = 0;  // As the agent said when it started listening.
  // The thread that forked the agent, kept until the agent is stopped (its end would signal the agent).
  std::thread keeper_;
  std::mutex keeper_mu_;
  std::condition_variable keeper_cv_;
  bool forked_ = false;   // Guarded by keeper_mu_, as pid_ is until then.
  bool stopped_ = false;  // Guarded by keeper_mu_.
};

// The directory holding a sibling of this executable, e.g. SiblingPath("gp-agent") -> "/usr/bin/gp-agent".
std::string SiblingPath(const std::string& name);

}  // namespace gpupool

#endif  // GPUPOOL_CLIENT_LOCAL_AGENT_H_
