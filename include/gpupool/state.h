// A snapshot of the pool: servers, their devices, and the slices and leases on them.
#ifndef GPUPOOL_STATE_H_
#define GPUPOOL_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpupool {

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
  std::vector<SliceInfo> slices;

  bool whole_free() const { return slices.empty(); }
};

struct LeaseInfo {
  std::string id;
  std::string user, host, label;
  uint32_t pid = 0;
  bool committed = false;
  double expires_in_s = 0;  // Until the agent frees it unless renewed.
  double age_s = 0;
  std::vector<uint32_t> devices;  // Device indexes on this server.
  uint64_t memory_bytes = 0;      // Total on this server.
};

struct ServerInfo {
  std::string address;  // As configured: "host:port" or "unix:/path".
  bool up = false;
  std::string error;    // Why it is down; empty when up.
  std::string name;     // The agent's name; empty when down.
  bool draining = false;
  uint32_t protocol_version = 0;
  double lease_ttl_s = 0;
  std::vector<DeviceInfo> devices;
  std::vector<LeaseInfo> leases;
};

struct PoolState {
  std::vector<ServerInfo> servers;

  int servers_up() const;
  int device_count() const;  // On servers that are up.
};

}  // namespace gpupool

#endif  // GPUPOOL_STATE_H_
