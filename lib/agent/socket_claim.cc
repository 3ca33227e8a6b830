#include "agent/socket_claim.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace gpupool::agent {
namespace {

// "gp-agent (pid 1234)" for the process the kernel says accepted our probe, or "another process" when it does not say.
std::string ProcessName(pid_t pid) {
  if (pid <= 0) return "another process";
  std::string name;
  std::ifstream(fmt::format("/proc/{}/comm", pid)) >> name;
  return fmt::format("{} (pid {})", name.empty() ? "a process" : name, pid);
}

}  // namespace

Status UnixSocketClaim::Prepare(const std::string& path) {
  if (path.empty()) {
    return Status(StatusCode::kInvalidArgument, "unix: names no socket path; give one, e.g. unix:/run/gpupool/agent.sock");
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status(StatusCode::kInvalidArgument, fmt::format("cannot look at unix:{}: {}", path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("unix:{} is a directory; give the socket's own path inside it, e.g. --listen "
                              "unix:{}/agent.sock", path, path));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("unix:{} is a {}, not a socket; the agent removes only a dead agent's socket there: move "
                              "the file away or choose another path", path, S_ISREG(st.st_mode) ? "regular file"
                                                                                                : "special file"));
  }
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("unix:{} is longer than a socket path may be ({} bytes at most)", path,
                              sizeof(addr.sun_path) - 1));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  // Whoever accepts a connection there is alive; a socket file nobody listens on refuses it (ECONNREFUSED).
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return Status(StatusCode::kInternal, fmt::format("socket: {}", std::strerror(errno)));
  int connected = connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  int connect_errno = errno;
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (connected == 0 && getsockopt(probe, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) peer.pid = 0;
  close(probe);
  if (connected == 0) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("unix:{} is in use: {} is serving there. Stop it first (its leases go with it), or give "
                              "this agent another --listen path", path, ProcessName(peer.pid)));
  }
  if (connect_errno != ECONNREFUSED) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("cannot tell whether an agent serves on unix:{} ({}); the agent leaves it alone: remove it "
                              "yourself if nobody does", path, std::strerror(connect_errno)));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status(StatusCode::kUnavailable, fmt::format("cannot remove the dead socket unix:{}: {}", path,
                                                        std::strerror(errno)));
  }
  return Status::Ok();
}

void UnixSocketClaim::Bound(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  path_ = path;
  device_ = st.st_dev;
  inode_ = st.st_ino;
}

void UnixSocketClaim::Remove() {
  if (path_.empty()) return;
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == device_ && st.st_ino == inode_) {
    unlink(path_.c_str());
  }
  path_.clear();
}

}  // namespace gpupool::agent
