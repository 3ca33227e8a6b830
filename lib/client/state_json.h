// The pool's state as gp-ls --json and gp-top --json print it: one schema for both (schema_version, base units,
// null for what is unknown or does not apply).
#ifndef GPUPOOL_CLIENT_STATE_JSON_H_
#define GPUPOOL_CLIENT_STATE_JSON_H_

#include <chrono>
#include <string>
#include <vector>

#include "gpupool/pool.h"
#include "gpupool/state.h"

namespace gpupool {

// Bumped on an incompatible change; fields are only ever added within a version.
inline constexpr int kStateJsonSchemaVersion = 1;

struct StateJsonOptions {
  bool leases = false;   // Each server's leases too.
  bool history = false;  // Each device's and lease's telemetry history (as Pool::State returned it).
};

std::string PoolStateJson(const PoolState& state, const StateJsonOptions& options);

// A lease's user as the tools print it: the verified user, or "anonymous (claims alice)" for a client its agent
// could not authenticate, so that nobody reads a claim as a fact.
std::string ShownUser(const LeaseInfo& lease);

// What gp-ls and gp-top show of `pool`: the agents `agents` names (by name or address; all when empty). With a
// directory, what it holds of them (one look, however large the pool) unless `detail`, which asks those agents, and
// only those, for their slices, leases and activity (`history` of it). Without one, every agent is asked.
PoolState ShownPool(Pool& pool, bool detail, const std::vector<std::string>& agents,
                    std::chrono::seconds history = std::chrono::seconds(0));

}  // namespace gpupool

#endif  // GPUPOOL_CLIENT_STATE_JSON_H_
