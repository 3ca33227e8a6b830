// A Lease: the grant of a Request, held while the program uses the slices.
#ifndef GPUPOOL_LEASE_H_
#define GPUPOOL_LEASE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpupool/status.h"

namespace gpupool {

class Lease;
namespace internal {
class LeaseCore;
Lease WrapLease(std::shared_ptr<LeaseCore> core);
}

struct PoolOptions;

// One granted slice: a share of one device on one server.
struct Slice {
  std::string server;        // Address of the agent that owns the device.
  std::string server_name;   // The agent's name.
  uint32_t device = 0;       // Device index on that server.
  std::string device_uuid;
  std::string model;
  uint64_t memory_bytes = 0;
  double compute_share = 0;  // 0..1 of the device.
};

// An end of a lease that an agent's policy announced (Lease::PolicyEnd).
struct LeaseEnd {
  std::chrono::milliseconds in{0};  // From now; 0 when due.
  std::string why;                  // "agent A's policy: personality day allows ..., and its grace of 10m ...".
};

// A move-only RAII handle. While it lives, a background heartbeat renews it on every agent involved; its
// destructor releases it. If the holder dies without releasing, the agents free it when the lease TTL passes.
// Thread safety: all methods may be called from any thread.
class Lease {
 public:
  Lease();  // An empty (invalid) lease.
  ~Lease();
  Lease(Lease&&) noexcept;
  Lease& operator=(Lease&&) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  // Re-opens a lease from Token() in another process (gp-run hands it to its child in GPUPOOL_LEASE).
  // The attached handle renews the lease too; destroying it does NOT release the lease (the process that
  // allocated it owns the release), unless `take_ownership` is true.
  static Result<Lease> Attach(const std::string& token, bool take_ownership = false);
  // Releases the lease a token names on every agent involved, without attaching to it (a holder that died, or one
  // that cannot be reached any more). A lease some agent no longer knows (released, expired) counts as released there;
  // an error names the agents that did not answer, whose slices are freed when the lease expires.
  static Status ReleaseToken(const std::string& token);

  bool valid() const { return core_ != nullptr; }
  // Public id, as gp-ls shows it.
  const std::string& id() const;
  const std::vector<Slice>& slices() const;
  // Serialises the lease (id, secret, agents) for a child process. Treat it as a credential.
  std::string Token() const;
  // OK while every agent renewed the lease at the last heartbeat; otherwise why not (e.g. kNotFound when an
  // agent restarted and forgot it, kUnavailable while an agent does not answer).
  Status Health() const;
  // Renews the lease on every agent now and returns what Health() then says: a lease an agent ended says why, as
  // kNotFound "lease ID lost: revoked by alice (...)", "... expired: ...", "... ended by agent A's policy at 20:00:
  // ..." or "... agent A restarted and no longer knows it".
  Status CheckNow();
  // When an agent's policy is to end the lease, as the last renewal said (the soonest, if several agents did): its
  // personality's max_lease, or the end of a grace period after a change of personality whose rules the lease
  // breaks. Nullopt when none is announced. Its holder warns with it before the lease is lost (gp-run, gp-lease).
  std::optional<LeaseEnd> PolicyEnd() const;
  // Releases the slices on every agent. Idempotent; the lease is invalid afterwards.
  Status Release();

 private:
  friend Lease internal::WrapLease(std::shared_ptr<internal::LeaseCore> core);
  explicit Lease(std::shared_ptr<internal::LeaseCore> core);
  std::shared_ptr<internal::LeaseCore> core_;
};

}  // namespace gpupool

#endif  // GPUPOOL_LEASE_H_
