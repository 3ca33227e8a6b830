// Administration of one agent from the shell (`gp-agent ctl`): cordon and uncordon its devices, revoke a lease, move
// a running lease to other devices.
// The agent allows these to its administrators only ([auth] admins, root and its own user), as it authenticated
// them: on its Unix socket by uid, over TCP by token.
#ifndef GPUPOOL_CLIENT_ADMIN_H_
#define GPUPOOL_CLIENT_ADMIN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpupool/status.h"

namespace gpupool::admin {

// Stops (`cordoned`) or resumes new leases on `device` of `server`, or on all its devices when `device` is empty.
Status Cordon(const std::string& server, std::optional<int> device, bool cordoned);
// Ends lease `lease_id` on `server` now; its programs' next CUDA call fails, saying the lease ended.
Status Revoke(const std::string& server, const std::string& lease_id);

// What a move did: the sessions it carried, their images' bytes, how long their programs were held, and the devices
// of `server` the lease's slices are on now.
struct Migrated {
  uint32_t sessions = 0;
  uint64_t bytes = 0;
  uint32_t pause_ms = 0;
  std::vector<uint32_t> devices;
};
// Moves running lease `lease_id` to other devices of `server` (`device`, or any other that fits): its programs go on
// where it went. On failure it stays where it was, running.
Result<Migrated> Migrate(const std::string& server, const std::string& lease_id, std::optional<int> device);

// Moves running lease `lease_id` from `server` to the agent at `to`, which places it as a new lease: its programs go
// on there. On failure it stays where it was, running.
Result<Migrated> MigrateTo(const std::string& server, const std::string& lease_id, const std::string& to);
// As MigrateTo, to the first of `targets` (in order) that takes the lease; `*to` says which. Refused everywhere:
// each agent's reason, joined by "; ", with the last one's code (kUnavailable when `targets` is empty).
Result<Migrated> MigrateToFirst(const std::string& server, const std::string& lease_id,
                                const std::vector<std::string>& targets, std::string* to);
// The agents of this client's pool (GPUPOOL_SERVERS, or the pool file) that are up, not draining, and not the agent at
// `server`: where its leases may move.
std::vector<std::string> OtherAgents(const std::string& server);

// Suspends running lease `lease_id` on `server`: its sessions are kept as images in the agent's memory and its
// slices given back; its programs' next CUDA call resumes it. Answers the sessions and bytes kept.
Result<Migrated> Suspend(const std::string& server, const std::string& lease_id);
// Resumes suspended lease `lease_id` now (kResourceExhausted: no room for it now).
Status Resume(const std::string& server, const std::string& lease_id);

}  // namespace gpupool::admin

#endif  // GPUPOOL_CLIENT_ADMIN_H_
