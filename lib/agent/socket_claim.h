// The Unix socket path an agent serves on. Another agent may be serving there already: replacing its socket would
// cut it and its leases off from every client (and its exit would later remove ours). So a path is taken only when
// nothing is there or a dead agent's socket is (nobody accepts on it), and on exit the agent removes the socket file
// only while it is still the one it bound.
#ifndef GPUPOOL_AGENT_SOCKET_CLAIM_H_
#define GPUPOOL_AGENT_SOCKET_CLAIM_H_

#include <sys/types.h>

#include <string>

#include "gpupool/status.h"

namespace gpupool::agent {

class UnixSocketClaim {
 public:
  UnixSocketClaim() = default;
  ~UnixSocketClaim() { Remove(); }  // Every way out of the agent, its refusals to start after the bind included.
  UnixSocketClaim(const UnixSocketClaim&) = delete;
  UnixSocketClaim& operator=(const UnixSocketClaim&) = delete;

  // Makes `path` free to bind: nothing there, or a socket nobody accepts on, which is removed. Refuses with
  // kUnavailable a socket a live process accepts on (naming it and its pid, as the kernel tells), and with
  // kInvalidArgument a directory or any other file, which are never removed.
  static Status Prepare(const std::string& path);

  // After the bind: remembers which file at `path` is this agent's socket.
  void Bound(const std::string& path);
  // Removes the socket file if it is still the one Bound() saw (the same device and inode); a file that replaced it
  // (another agent's socket) stays. Safe to call twice.
  void Remove();

 private:
  std::string path_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_SOCKET_CLAIM_H_
