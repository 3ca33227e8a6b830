// A snapshot of the pool: servers, their devices, and the slices and leases on them.
#ifndef GPUPOOL_STATE_H_
#define GPUPOOL_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpupool {

// What a device or a lease was doing over one of its agent's sampling intervals (one second).
struct Activity {
  double at_unix_s = 0;               // When the agent took the sample; 0: the agent reported none.
  uint64_t memory_used = 0;           // Device memory in use, bytes (a lease: what its programs allocated).
  std::optional<double> utilization;  // 0..1 of the interval the device ran this one's work; unset: unknown.
  double calls_per_s = 0;             // CUDA calls served.
  double bytes_to_device_per_s = 0;   // Host-to-device copies.
  double bytes_from_device_per_s = 0; // Device-to-host copies.
  std::optional<double> temperature_c;  // Physical GPUs only.
  std::optional<double> power_w;        // Physical GPUs only.
};

// One slice held on a device, as the agent reports it.
struct SliceInfo {
  std::string lease_id;      // Public lease id (not the secret).
  uint64_t memory_bytes = 0;
  double compute_share = 0;  // 0..1 of the device.
  bool committed = false;    // false while only reserved (a placement in flight).
};

struct DeviceInfo {
  uint32_t index = 0;           // Ordinal on its server.
  std::string uuid;             // "GPU-..." for real GPUs, "EMU-..." for emulated ones.
  std::string model;            // e.g. "NVIDIA A100-SXM4-40GB" or "gpupool emulated GPU".
  std::string device_class;     // The agent's class tag; empty if none.
  bool emulated = false;
  uint64_t memory_total = 0;
  uint64_t memory_allocated = 0;
  double compute_allocated = 0;  // 0..1.
  bool cordoned = false;         // An administrator keeps new leases off it (`gp-agent ctl cordon`).
  std::vector<SliceInfo> slices;
  Activity activity;              // The latest sample.
  std::vector<Activity> history;  // Oldest first; only when asked for (Pool::State's `history`).

  bool whole_free() const { return slices.empty() && memory_allocated == 0 && compute_allocated == 0; }
};

// One running session of a lease: one process's CUDA work on one of its slices.
struct SessionInfo {
  uint32_t device = 0;   // Device index on the lease's server.
  uint32_t worker_pid = 0;  // The session's worker process on that server.
  Activity activity;
};

struct LeaseInfo {
  std::string id;
  std::string user, host, label;
  // The agent authenticated `user` (Unix socket peer, token, TLS client certificate). Else `user` is "anonymous"
  // (policies apply to it as that user) and `user_claimed` the name the client gave, which nothing trusts.
  bool user_verified = false;
  std::string user_claimed;
  uint32_t pid = 0;
  bool committed = false;
  double expires_in_s = 0;  // Until the agent frees it unless renewed.
  double age_s = 0;
  std::vector<uint32_t> devices;  // Device indexes on this server.
  uint64_t memory_bytes = 0;      // Total on this server.
  Activity activity;              // The latest sample of all its sessions on this server.
  std::vector<Activity> history;  // Oldest first; only when asked for.
  uint32_t sessions = 0;          // Running now (one per process per slice).
  std::vector<SessionInfo> session_list;  // Each running session's latest sample.
  uint64_t calls_total = 0, bytes_to_device_total = 0, bytes_from_device_total = 0;  // Since it was granted.
  double idle_s = 0;              // Since its last call or device work (or since it was granted, if none).
  bool idle = false;              // idle_s reached the server's idle threshold (ServerInfo::idle_after_s).
  // Suspended by its agent: its sessions are kept as images and its slices hold nothing until its next call resumes
  // it (`devices` says where it was).
  bool suspended = false;
};

struct ServerInfo {
  std::string address;  // As configured: "host:port" or "unix:/path".
  bool up = false;
  std::string error;    // Why it is down; empty when up.
  std::string name;     // The agent's name; empty when down.
  // Drawn by the agent when it starts; empty when down (or from an older agent). A pool that lists one agent at two
  // addresses shows and uses it once, at the first address that answered.
  std::string instance_id;
  bool draining = false;
  // Leases this agent moved to other agents whose holders may not all have been told yet (the agent must run on
  // until none is left, for them to find where the leases went).
  uint32_t moves_untold = 0;
  uint32_t protocol_version = 0;
  double lease_ttl_s = 0;
  double idle_after_s = 0;  // A lease without a call for this long is flagged idle; 0: the agent does not say.
  std::string personality;       // The agent's policy personality in force; empty: none (nothing restricted).
  std::string personality_next;  // e.g. "night from Mon 20:00"; empty: no change ahead.
  std::string policy;            // The agent's personalities, one line each; empty: no policy.
  std::vector<DeviceInfo> devices;
  std::vector<LeaseInfo> leases;
  // Known from the pool's directory only (Pool::Summary): devices without slices or activity, no lease list, and
  // `lease_count` says how many leases the agent holds.
  bool summary = false;
  uint32_t lease_count = 0;
};

struct PoolState {
  std::vector<ServerInfo> servers;
  // Where the list came from: empty for the configured servers, else the directory ("etcd:http://...").
  std::string directory;
  // Non-empty when the pool has a directory that did not answer: why, and that the list is of the agents known.
  std::string directory_error;
  // Came from what a watch of the directory keeps current (a long-lived Pool, from its second look on), not a read.
  bool directory_watched = false;

  int servers_up() const;
  int device_count() const;  // On servers that are up.
};

}  // namespace gpupool

#endif  // GPUPOOL_STATE_H_
