#include "agent/systemd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/log.h"

namespace gpupool::agent {

SystemdNotifier SystemdNotifier::FromEnvironment() {
  SystemdNotifier notifier;
  if (const char* env = std::getenv("NOTIFY_SOCKET"); env != nullptr && (env[0] == '/' || env[0] == '@')) {
    notifier.address_ = env;
  }
  unsetenv("NOTIFY_SOCKET");
  return notifier;
}

void SystemdNotifier::Notify(const std::string& state) {
  if (address_.empty()) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (address_.size() >= sizeof(addr.sun_path)) {
    if (!warned_) GP_WARN("agent", "NOTIFY_SOCKET {} is too long; systemd is not told the agent's state", address_);
    warned_ = true;
    return;
  }
  std::memcpy(addr.sun_path, address_.data(), address_.size());
  if (address_[0] == '@') addr.sun_path[0] = '\0';  // The abstract namespace.
  socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ssize_t sent = -1;
  if (fd >= 0) {
    sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), length);
  }
  int error = errno;
  if (fd >= 0) close(fd);
  if (sent < 0 && !warned_) {
    GP_WARN("agent", "cannot notify systemd at {}: {}", address_, std::strerror(error));
    warned_ = true;
  }
}

}  // namespace gpupool::agent
