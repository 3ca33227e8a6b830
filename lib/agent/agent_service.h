// gp-agent's server: serves the pool service (lib/schema/pool.capnp) over Cap'n Proto on TCP or a Unix socket,
// expires leases whose holders stopped renewing, and drains on SIGTERM.
#ifndef GPUPOOL_AGENT_AGENT_SERVICE_H_
#define GPUPOOL_AGENT_AGENT_SERVICE_H_

#include <vector>

#include "agent/agent_config.h"
#include "agent/inventory.h"

namespace gpupool::agent {

// Runs the agent on the calling thread until it has drained (SIGTERM, then no leases or the drain timeout) or
// is interrupted twice. Writes one line "gp-agent NAME listening on ADDRESS" to stdout once it accepts
// connections (ADDRESS has the real port when the configured one was 0). Returns the process exit code.
// REQUIRES: no other threads exist yet (signal handling is process-wide).
int RunAgent(const AgentConfig& config, std::vector<DeviceRecord> devices);

// Blocks the signals the agent's event loop waits for (SIGTERM, SIGINT, SIGCHLD) in the calling thread, so that
// threads started later inherit the mask: call it first thing, before anything may start a thread (a CUDA driver
// loaded to find devices does). RunAgent calls it too.
void CaptureAgentSignals();

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_AGENT_SERVICE_H_
