// gp-agent's configuration: agent.toml, overridden by command-line flags.
#ifndef GPUPOOL_AGENT_AGENT_CONFIG_H_
#define GPUPOOL_AGENT_AGENT_CONFIG_H_

#include <chrono>
#include <optional>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/lease_table.h"
#include "client/directory.h"
#include "agent/policy.h"
#include "agent/worker_sandbox.h"
#include "gpupool/status.h"

namespace gpupool::agent {

inline constexpr const char* kDefaultListen = "*:7450";
// The most sessions a device's turns table (backend/device_turns.h) and a slice's quota table
// (backend/slice_quota.h) hold: the ceilings of [limits].
inline constexpr int kMaxSessionsPerDevice = 128;
inline constexpr int kMaxSessionsPerLease = 64;

//   name = "gpu-a"                 # default: the host name
//   listen = "*:7450"              # "host:port" or "unix:/path"; port 0 picks a free one
//   class = "a100"                 # tag clients select with --class; default none
//   nvml = true                    # look for physical GPUs; default true
//   [emulated]
//   count = 8                      # default 0
//   memory = "16GiB"               # per device; default 16GiB
//   [leases]
//   ttl = "20s"                    # a lease not renewed for this long is freed
//   renew_interval = "5s"          # advised to clients
//   reservation_ttl = "5s"         # an uncommitted reservation is freed after this
//   [drain]
//   timeout = "5m"                 # after SIGTERM, exit once leases are gone or this passes
//   [metrics]
//   listen = "*:9450"              # serve Prometheus metrics at http://ADDRESS/metrics; default: not served
//   [limits]
//   sessions_per_device = 128      # sessions open at once on one device, 1..128; default 128
//   sessions_per_lease = 64        # sessions one lease holds open at once on one device, 1..64; default 64
//   session_bytes_in_flight = "64MiB"  # what one session holds for calls not yet done before it stops reading its
//                                      # client's calls (back-pressure); 1MiB..4GiB
//   hello_timeout = "30s"          # a connection that has not said hello (the first call of every client) within
//                                  # this is closed; 1s..1h; default 30s
//   [telemetry]
//   idle_after = "10m"             # flag a lease whose sessions made no call for this long
//   suspend_idle_after = "30m"     # suspend a lease idle this long (its GPUs go back to the pool; its next call
//                                  # resumes it); default: never
//   suspend_memory = "4GiB"        # suspended leases' images kept in the agent's memory, at most; default 4GiB
//   suspend_spill_dir = "/var/lib/gpupool/suspended"  # where images beyond that go (files of mode 0600); default:
//                                  # none (a suspension that would pass suspend_memory is refused)
//   [moves]
//   agents = ["gpu2:7450"]         # where a personality's on_change = "migrate" moves the leases that break its rules
//                                  # (the first that takes each, as clients reach it; this agent must administer them),
//                                  # before suspending them here; default: none (they are suspended)
//   directory = "etcd:http://10.0.0.2:2379,http://10.0.0.3:2379"  # register in the pool's directory; default: none
//   [etcd]
//   prefix = "/gpupool"            # the pool's keys: this agent registers at PREFIX/agents/INSTANCE-ID
//   ttl = "10s"                    # its etcd lease: the entry goes this long after the agent stops renewing it
//   advertise = "gpu1:7450"        # where clients reach it; default: the listen address, the host name for "*"
//   user = "gpupool"               # etcd's authentication; password_file (mode 0600) holds the password
//   password_file = "/etc/gpupool/etcd.password"
//   ca = "/etc/gpupool/etcd-ca.crt"  # for https:// endpoints: whom to trust, and the agent's client cert and key
//   [auth]
//   require = false                # refuse clients the agent cannot authenticate
//   tokens = "/etc/gpupool/tokens.toml"  # TCP clients' per-user tokens ([tokens] user = "token"; mode 0600)
//   admins = ["alice"]             # may cordon, uncordon and revoke (besides root and the agent's own user)
//   [tls]                          # serve a TCP listen address over TLS (sessions then go through the agent)
//   cert = "/etc/gpupool/agent.crt"
//   key = "/etc/gpupool/agent.key"
//   ca = "/etc/gpupool/ca.crt"     # require client certificates signed by it; their common name is the user
//   [workers]                      # session workers (agent/worker_sandbox.h)
//   user = "gpupool"               # who they run as under a root agent; "root" only if said; default gpupool
//   seccomp = true                 # their syscall allow-list; false only to debug; default true
//   memory_limit = "8GiB"          # address space besides an emulated device's window; "0": none; default 8GiB
//   cgroup = "auto"                # a cgroup v2 group per worker, memory.max its cap: "auto", "off" or a group's path
struct AgentConfig {
  std::string name;
  std::string listen = kDefaultListen;
  std::string device_class;
  bool nvml = true;
  std::string cuda_driver;  // The CUDA driver library session workers load ("" = the system's libcuda.so.1).
  int emulated_count = 0;
  uint64_t emulated_memory = 16ull << 30;
  // Compute capability the emulated devices report and pick PTX by, major * 10 + minor ([emulated]
  // compute_capability = "8.0", --emu-cc, $GPUPOOL_EMU_CC). Default 121 (12.1): the newest GPU the emulator
  // implements. 130 (13.0) is no product: newer than CUDA 13's libraries, so that they take their PTX over SASS.
  int emulated_compute_capability = 121;
  LeaseTiming timing;
  std::chrono::milliseconds drain_timeout{300000};
  std::chrono::milliseconds sweep_interval{250};  // How often expiry is checked.
  std::string metrics_listen;                     // "host:port" for /metrics; empty: none.
  std::chrono::milliseconds idle_after{600000};
  std::chrono::milliseconds suspend_idle_after{0};  // 0: leases are never suspended for idling.
  uint64_t suspend_memory = uint64_t{4} << 30;      // Suspended images held in memory, at most.
  std::string suspend_spill_dir;                    // Where the rest go; "": nowhere (refused past the memory).
  // directory = "etcd:..." and [etcd]: where the agent registers (ARCHITECTURE.md, section 3); unset: nowhere.
  std::optional<internal::EtcdConfig> directory;
  std::optional<internal::EtcdConfig> etcd_settings;  // [etcd] without directory: for --directory to use.
  std::chrono::milliseconds directory_ttl{10000};
  std::string directory_advertise;  // Empty: from the listen address.
  std::vector<std::string> move_agents;  // [moves] agents: where on_change = "migrate" sends leases first.
  // [limits]: a session beyond either is refused before its worker starts, with a message naming the limit. At
  // most what a device's turns table and a slice's quota table hold (kMaxSessionsPerDevice, kMaxSessionsPerLease).
  int sessions_per_device = kMaxSessionsPerDevice;
  int sessions_per_lease = kMaxSessionsPerLease;
  bool require_auth = false;
  std::string tokens_file;  // Empty: no TCP client can authenticate.
  std::vector<std::string> admins;  // Authenticated users who may administer the agent (root and its own user too).
  Policy policy;            // [groups] and [[personality]] (agent/policy.h); empty: nothing restricted.
  std::string tls_cert, tls_key, tls_ca;  // [tls]; no cert: plain TCP.
  // [limits] session_bytes_in_flight: see backend::SessionLimits::bytes_in_flight.
  uint64_t session_bytes_in_flight = 64ull << 20;
  // [limits] hello_timeout: how long a client's connection may stay without completing hello (silent, or stopped
  // mid-message) before the agent closes it, so that idle connections hold nothing for ever. Clients say hello as
  // they connect, and their connections are left alone from then on (leases and sessions have their own timeouts).
  std::chrono::milliseconds hello_timeout{30000};
  WorkersConfig workers;                  // [workers]: who session workers run as, their filter and memory cap.
  std::string config_path;  // The agent.toml it came from, re-read on SIGHUP; empty: none.
  // A private agent (gp-run's, libcuda's, gp-bench's: --exit-with-parent): a signal that finds the process that
  // started it gone ends it at once. Its leases were that process's; no one is left to end them, so it does not drain.
  bool exit_with_parent = false;
  // A private agent whose Unix socket sits in a directory made for it (gp-run's, --remove-socket-dir): on exit it also
  // removes that directory once it is empty, as the process that made it cannot after a SIGKILL.
  bool remove_socket_dir = false;

  // Checks ranges and relations (ttl > renew interval ...): kInvalidArgument naming the field.
  Status Validate() const;
};

// Reads `path` into *config (fields absent from the file keep their values).
Status LoadAgentConfig(const std::string& path, AgentConfig* config);

// "8.0" -> 80: a compute capability an emulated device may report (one NVIDIA has shipped, 5.0 to 9.0).
Result<int> ParseComputeCapability(std::string_view text);
Status ParseAgentConfig(std::string_view text, const std::string& name, AgentConfig* config);

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_AGENT_CONFIG_H_
