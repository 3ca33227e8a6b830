// A lease's move to another agent, as the agent it leaves makes it (gp-agent ctl migrate --to): the calls to the
// agent it goes to (adopt, the images' pieces, restore, commit) run on a client runtime's thread of their own, so
// that this agent's loop never waits on another agent. Each call is made from the agent's loop and resolves there.
// The agent reaches the other one as any client does (its Unix socket by uid, TCP with GPUPOOL_TOKEN), and must be
// one of its administrators.
#ifndef GPUPOOL_AGENT_LEASE_TRANSFER_H_
#define GPUPOOL_AGENT_LEASE_TRANSFER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kj/async.h>
#include <kj/io.h>

#include "agent/lease_table.h"
#include "gpupool/status.h"

namespace gpupool::internal {
class Runtime;
}

namespace gpupool::agent {

// What the agent it goes to is told of a leaving lease.
struct LeavingLease {
  std::string id, secret;
  LeaseOwner owner;
  struct Slice {
    uint64_t memory_bytes = 0;
    uint32_t share = 0;
    std::string model, device_class;
    bool emulated = true;
    uint32_t from_device = 0;
  };
  std::vector<Slice> slices;
  struct Session {
    uint32_t slice = 0;  // Index in `slices`.
    uint64_t window_base = 0, window_bytes = 0;
    std::vector<std::string> tickets;  // The door tickets its client may ask with (wire::ArrivingSession).
  };
  std::vector<Session> sessions;
};

class LeaseTransfers {
 public:
  LeaseTransfers();
  ~LeaseTransfers();
  LeaseTransfers(const LeaseTransfers&) = delete;
  LeaseTransfers& operator=(const LeaseTransfers&) = delete;

  // Asks agent `server` to adopt `lease` (its slices placed, a worker started per session): the devices there, by
  // slice, or why not.
  kj::Promise<Result<std::vector<uint32_t>>> Adopt(const std::string& server, const LeavingLease& lease);
  // A session's image as it leaves, and, when the image leaves the memory out (SessionImage::memory_stays), where
  // its bytes are: its worker's memory file (owned here: a dup) and the ranges to send, as offsets from the window.
  struct LeavingImage {
    std::shared_ptr<const std::vector<uint8_t>> image;
    uint64_t consumed = 0;
    std::shared_ptr<kj::AutoCloseFd> memory;  // Null: the image holds the memory.
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
  };
  // Sends each session's image and memory (in `Adopt`'s session order) and asks for the restore: ok once every
  // session is open there.
  kj::Promise<Status> Restore(const std::string& lease_id, std::vector<LeavingImage> images);
  // The lease is the other agent's from now on.
  kj::Promise<Status> Commit(const std::string& lease_id);
  // The move is given up: the other agent ends what it holds of the lease (its adoption is dropped).
  void Abandon(const std::string& lease_id);

 private:
  struct Arrivals;  // The adoptions under way: the runtime's thread only.
  std::unique_ptr<internal::Runtime> runtime_;
  Arrivals* arrivals_ = nullptr;  // Made and destroyed on the runtime's thread.
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_LEASE_TRANSFER_H_
