// The agent's lease table: the single authority over which memory and compute share of its devices are granted.
// Pure bookkeeping with an injected clock, so it is tested without sockets or sleeping.
#ifndef GPUPOOL_AGENT_LEASE_TABLE_H_
#define GPUPOOL_AGENT_LEASE_TABLE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpupool/status.h"

namespace gpupool::agent {

using Clock = std::chrono::steady_clock;

struct DeviceCapacity {
  uint64_t memory_bytes = 0;
};

struct SliceGrant {
  uint32_t device = 0;
  uint64_t memory_bytes = 0;
  uint32_t share = 0;  // Millionths of the device (see core/util.h).
};

struct LeaseOwner {
  std::string user, host, label;
  uint32_t pid = 0;
  bool verified = false;  // `user` was authenticated by the agent; else `user` is kAnonymousUser (agent/auth.h).
  std::string claimed_user;  // Unverified: the name the client gave, shown beside "anonymous" and used for nothing.
  std::string personality;  // The policy personality it was granted under; empty: none.
};

struct LeaseTiming {
  std::chrono::milliseconds reservation_ttl{5000};  // An uncommitted reservation lives this long.
  std::chrono::milliseconds lease_ttl{20000};       // A committed lease lives this long past its last renewal.
  std::chrono::milliseconds renew_interval{5000};   // Advised to clients.
};

struct LeaseEntry {
  std::string id, secret;
  LeaseOwner owner;
  std::vector<SliceGrant> slices;
  bool committed = false;
  // Suspended (Suspend): the slices are the lease's still, as it will want them again, but hold nothing of their
  // devices until Unsuspend places them.
  bool suspended = false;
  Clock::time_point created, expires;
};

struct DeviceUsage {
  uint64_t memory_bytes = 0;
  // Millionths of the device granted. 64 bits: the slices of one request are summed before they are checked, and a
  // sum of millionths in 32 bits wraps past 4,294 whole devices.
  uint64_t share = 0;
};

// Thread safety: none; the agent uses it from its event loop only.
class LeaseTable {
 public:
  LeaseTable(std::vector<DeviceCapacity> devices, LeaseTiming timing);

  // Most slices one reservation may ask of one device: each is at least 1/20 of it.
  static constexpr size_t kMaxSlicesPerDevice = 20;

  // All-or-nothing: kInvalidArgument (bad device, slice below 1/20 of a device or bigger than it, more than
  // kMaxSlicesPerDevice slices of one device, id in use), kResourceExhausted (does not fit beside what is granted
  // now), kUnavailable (draining).
  Status Reserve(const std::string& id, const std::string& secret, const LeaseOwner& owner,
                 const std::vector<SliceGrant>& slices, Clock::time_point now);
  // Turns a reservation into a lease. Committing twice is OK (idempotent for retries).
  Status Commit(const std::string& id, const std::string& secret, Clock::time_point now);
  // Extends a committed lease by the lease TTL.
  Status Renew(const std::string& id, const std::string& secret, Clock::time_point now);
  // Frees a lease or a reservation.
  Status Release(const std::string& id, const std::string& secret);
  // Frees a reservation; a committed lease is left alone (kFailedPrecondition-like kInvalidArgument).
  Status Cancel(const std::string& id, const std::string& secret);
  // Frees everything whose time is up; returns what it freed.
  struct Expired {
    std::string id;
    bool committed = false;  // A lease whose holder stopped renewing; false: a reservation never committed.
    bool operator==(const Expired&) const = default;
  };
  std::vector<Expired> Expire(Clock::time_point now);

  void SetDraining(bool draining) { draining_ = draining; }
  bool draining() const { return draining_; }
  // A cordoned device takes no new slices (kUnavailable naming it); the slices it holds go on.
  void SetCordoned(uint32_t device, bool cordoned) { cordoned_.at(device) = cordoned; }
  bool cordoned(uint32_t device) const { return cordoned_.at(device); }
  // Moves the committed lease `id`'s slices on device `from` to device `to` (a migration): kInvalidArgument (no such
  // lease or device, nothing on `from`), kUnavailable (`to` cordoned), kResourceExhausted (they do not fit beside
  // what `to` holds). All or nothing; moving back undoes it.
  Status MoveSlices(const std::string& id, uint32_t from, uint32_t to);
  // Suspends the committed lease `id`: its slices go back to their devices (the lease keeps its id, secret, TTL and
  // the slices' sizes). kInvalidArgument: no such committed lease, or it is suspended already.
  Status Suspend(const std::string& id);
  // Places a suspended lease's slices again, all or nothing: each device's slices on that device when they fit there,
  // else on the first other device that takes them and that `alike(from, to)` accepts. kResourceExhausted when some
  // fit nowhere now (the lease stays suspended).
  Status Unsuspend(const std::string& id, const std::function<bool(uint32_t from, uint32_t to)>& alike);
  // Frees a lease or a reservation without its secret: an administrator's revocation.
  Status Revoke(const std::string& id);

  const LeaseEntry* Find(const std::string& id) const;
  const std::map<std::string, LeaseEntry>& entries() const { return entries_; }
  const std::vector<DeviceUsage>& usage() const { return usage_; }
  const std::vector<DeviceCapacity>& devices() const { return devices_; }
  const LeaseTiming& timing() const { return timing_; }

 private:
  // Finds `id` and checks `secret`: kNotFound or kPermissionDenied.
  Result<LeaseEntry*> Lookup(const std::string& id, const std::string& secret);
  void Free(std::map<std::string, LeaseEntry>::iterator it);

  std::vector<DeviceCapacity> devices_;
  LeaseTiming timing_;
  std::vector<DeviceUsage> usage_;
  std::map<std::string, LeaseEntry> entries_;
  bool draining_ = false;
  std::vector<bool> cordoned_;
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_LEASE_TABLE_H_
