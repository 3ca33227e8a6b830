// The agent's side of systemd's readiness protocol (sd_notify(3)), without libsystemd: datagrams of "KEY=VALUE"
// lines to the socket named by $NOTIFY_SOCKET. Under `Type=notify` the unit is started once the agent listens,
// reloading while it re-reads its policy on SIGHUP, and stopping while it drains.
#ifndef GPUPOOL_AGENT_SYSTEMD_NOTIFY_H_
#define GPUPOOL_AGENT_SYSTEMD_NOTIFY_H_

#include <string>

namespace gpupool::agent {

class SystemdNotifier {
 public:
  // Takes $NOTIFY_SOCKET ("/path", or "@name" for the abstract namespace) and removes it from the environment, so
  // that the agent's children (session workers) never speak for it. Without it every Notify() does nothing.
  static SystemdNotifier FromEnvironment();

  bool enabled() const { return !address_.empty(); }
  // Sends `state` ("READY=1\nSTATUS=..."); a failure is logged once, never fatal.
  void Notify(const std::string& state);

 private:
  std::string address_;
  bool warned_ = false;
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_SYSTEMD_NOTIFY_H_
