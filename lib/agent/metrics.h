// gp-agent's Prometheus endpoint: http://ADDRESS/metrics in the text exposition format, rendered from the same
// state that describe() answers (so gp-ls, gp-top and Prometheus never disagree) and the agent's event counters.
// Names follow Prometheus conventions: the gpupool_ prefix, base units, _bytes/_ratio/_seconds/_total suffixes;
// devices carry `gpu` and `gpu_uuid` labels (as DCGM's exporter, so the two join on the UUID); no PID labels.
#ifndef GPUPOOL_AGENT_METRICS_H_
#define GPUPOOL_AGENT_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <kj/async-io.h>

#include "gpupool/status.h"
#include "pool.capnp.h"

namespace gpupool::agent {

// What happened since the agent started, counted as it happened.
struct AgentCounters {
  uint64_t reservations_granted = 0;
  std::map<std::string, uint64_t> reservations_refused;  // By reason: busy, invalid, draining, ...
  std::map<std::string, uint64_t> lease_expirations;     // By reason: not_renewed, not_committed.
  uint64_t sessions_opened = 0;
  uint64_t lease_revocations = 0;  // By an administrator.
  std::map<std::string, uint64_t> sessions_refused;      // By reason.
  // Leases moved between devices (migrate), the sessions and image bytes they carried, and their pauses in total.
  uint64_t migrations = 0, migrated_sessions = 0, migrated_bytes = 0, migration_pause_ms = 0;
  // Of those, the moves to another agent; and the leases that arrived here from another agent, with their bytes.
  uint64_t migrations_away = 0, arrivals = 0, arrived_bytes = 0;
  // Leases suspended (their sessions kept as images, their slices given back) and resumed, and the images' bytes.
  uint64_t suspensions = 0, resumptions = 0, suspended_bytes = 0;
  // The pool's directory, where the agent registers one: whether it is registered now, its registrations (the first
  // and each again after etcd lost it), its entry's puts, and the calls to etcd that failed.
  bool directory_configured = false, directory_registered = false;
  uint64_t directory_registrations = 0, directory_publishes = 0, directory_failures = 0;
};

// The exposition text for `state` (describe's, with leases) and `counters`; `busy_seconds[i]`: device i's total
// busy time, where known (negative: unknown).
std::string RenderMetrics(wire::AgentState::Reader state, const AgentCounters& counters,
                          const std::vector<double>& busy_seconds);

// Serves GET /metrics on `address` ("host:port"; port 0 picks one) with the text `render` returns at each scrape.
// Returns the bound port, or why it could not listen. The server lives until the returned promise is dropped.
struct MetricsServer {
  uint16_t port = 0;
  kj::Promise<void> serving = nullptr;
  kj::Own<void> state;  // Keeps the HTTP server and its listener alive.
};
Result<MetricsServer> ServeMetrics(kj::AsyncIoContext& io, const std::string& address,
                                   std::function<std::string()> render);

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_METRICS_H_
