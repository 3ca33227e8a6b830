// Suspended sessions' images beyond what the agent keeps in memory ([telemetry] suspend_memory) go to files in a
// spill directory ([telemetry] suspend_spill_dir), written and read on a thread of their own so that the agent's
// event loop (its leases' renewals, other tenants' calls) never waits on the disk.
#ifndef GPUPOOL_AGENT_IMAGE_SPILL_H_
#define GPUPOOL_AGENT_IMAGE_SPILL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kj/async.h>

#include "gpupool/status.h"

namespace gpupool::agent {

using Image = std::shared_ptr<std::vector<uint8_t>>;

// Writes each image to a new file of `dir` (mode 0600, named after `lease_id`), answering their paths in order; on
// any failure, none of them is left and the answer says why.
kj::Promise<Result<std::vector<std::string>>> SpillImages(const std::string& dir, const std::string& lease_id,
                                                          std::vector<Image> images);
// Reads back what SpillImages wrote, in order. The files stay (RemoveSpilled, once they are no longer needed).
kj::Promise<Result<std::vector<Image>>> LoadSpilledImages(std::vector<std::string> paths);
void RemoveSpilled(const std::vector<std::string>& paths);

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_IMAGE_SPILL_H_
