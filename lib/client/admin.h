// Administration of one agent from the shell (`gp-agent ctl`): cordon and uncordon its devices, revoke a lease.
// The agent allows these to its administrators only ([auth] admins, root and its own user), as it authenticated
// them: on its Unix socket by uid, over TCP by token.
#ifndef GPUPOOL_CLIENT_ADMIN_H_
#define GPUPOOL_CLIENT_ADMIN_H_

#include <optional>
#include <string>

#include "gpupool/status.h"

namespace gpupool::admin {

// Stops (`cordoned`) or resumes new leases on `device` of `server`, or on all its devices when `device` is empty.
Status Cordon(const std::string& server, std::optional<int> device, bool cordoned);
// Ends lease `lease_id` on `server` now; its programs' next CUDA call fails, saying the lease ended.
Status Revoke(const std::string& server, const std::string& lease_id);

}  // namespace gpupool::admin

#endif  // GPUPOOL_CLIENT_ADMIN_H_
