// The shared state behind a Lease handle, and the RPC helpers that allocation and release share.
#ifndef GPUPOOL_CLIENT_LEASE_CORE_H_
#define GPUPOOL_CLIENT_LEASE_CORE_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/runtime.h"
#include "gpupool/lease.h"

namespace gpupool::internal {

// What Token() carries: enough to find and prove the lease, nothing more. Slices are re-read from the agents.
struct TokenFields {
  std::string id, secret;
  std::vector<std::string> servers;
};
std::string EncodeToken(const TokenFields& fields);
Result<TokenFields> DecodeToken(const std::string& token);

// Heartbeat results, shared with the loop thread (which never touches LeaseCore itself, so a LeaseCore is never
// destroyed on the loop thread).
struct LeaseHealth {
  std::mutex mu;
  Status status;
  // The soonest end an agent's policy announced at the last renewal, and when (steady clock) it is due.
  std::optional<std::chrono::steady_clock::time_point> policy_end_at;
  std::string policy_end;
};

// What a renewal says of an end the agent's policy announced (renew's policyEnd).
struct RenewedEnd {
  std::optional<std::chrono::milliseconds> in;
  std::string why;
};

class LeaseCore {
 public:
  LeaseCore(std::shared_ptr<Runtime> runtime, TokenFields fields, std::vector<Slice> slices, bool owner,
            std::chrono::milliseconds renew_interval);
  ~LeaseCore();

  const std::string& id() const { return fields_.id; }
  const std::vector<Slice>& slices() const { return slices_; }
  std::string Token() const { return EncodeToken(fields_); }
  Status Health() const;
  Status CheckNow();
  std::optional<LeaseEnd> PolicyEnd() const;
  Status Release();

 private:
  void StartHeartbeat();

  std::shared_ptr<Runtime> runtime_;
  TokenFields fields_;
  std::vector<Slice> slices_;
  bool owner_;
  std::chrono::milliseconds renew_interval_;
  std::shared_ptr<LeaseHealth> health_;
  std::mutex mu_;
  bool released_ = false;
};

// --- RPC helpers; loop thread only. Each resolves to a Status and never throws. ---

// Runs `call(rt, agent)` (returning kj::Promise<Status>) on `server`, turning every failure, thrown or reported,
// into a Status. A timed-out connection is dropped so the next call reconnects.
template <typename Call>
kj::Promise<Status> WithAgent(Runtime& rt, const std::string& server, std::string_view what, Call call) {
  std::string addr = server;
  std::string op(what);
  return rt.Agent(server)
      .then([&rt, call = kj::mv(call)](wire::Agent::Client agent) mutable { return call(rt, agent); })
      .catch_([&rt, addr, op](kj::Exception&& e) {
        Status s = StatusFromException(e, addr, op);
        if (s.code() == StatusCode::kTimeout) rt.Forget(addr);
        return s;
      });
}

// The status of a call about lease `id` that agent `at` answered with `outcome`; notes where the lease went when
// the agent says it moved (Runtime::NoteLeaseMoved).
inline Status LeaseStatus(Runtime& rt, const std::string& id, const std::string& at, wire::Outcome::Reader outcome) {
  rt.NoteLeaseMoved(id, at, outcome);
  return StatusFromOutcome(outcome, at);
}

// As WithAgent, for a call about lease `id` that agent `server` held: made on the agent that holds it now
// (Runtime::LeaseAgent), and again on the next one when that agent answers that it moved on (the call reads its
// answer with LeaseStatus). `call(rt, agent, at)` (copyable): `at` is the agent asked.
template <typename Call>
kj::Promise<Status> WithLeaseAgent(Runtime& rt, const std::string& id, const std::string& server, std::string_view what,
                                   Call call, int hops = 0) {
  std::string at = rt.LeaseAgent(id, server);
  std::string op(what);
  return WithAgent(rt, at, what, [call, at](Runtime& rt, wire::Agent::Client agent) mutable { return call(rt, agent, at); })
      .then([&rt, id, server, at, op, call, hops](Status s) mutable -> kj::Promise<Status> {
        if (hops < 4 && rt.LeaseAgent(id, server) != at) return WithLeaseAgent(rt, id, server, op, kj::mv(call), hops + 1);
        return s;
      });
}

inline void SetKey(wire::LeaseKey::Builder key, const std::string& id, const std::string& secret) {
  key.setId(id);
  key.setSecret(secret);
}

struct RemoteSlice {
  uint32_t device = 0;
  uint64_t memory_bytes = 0;
  uint32_t share = 0;
};
// `slices` may be null; otherwise it receives the lease's slices on `server`. `end` may be null; otherwise it
// receives the end the agent's policy announced, if any.
kj::Promise<Status> CallRenew(Runtime& rt, const std::string& server, const std::string& id,
                              const std::string& secret, std::shared_ptr<std::vector<RemoteSlice>> slices,
                              std::shared_ptr<RenewedEnd> end = nullptr);
kj::Promise<Status> CallRelease(Runtime& rt, const std::string& server, const std::string& id,
                                const std::string& secret);
kj::Promise<Status> CallCancel(Runtime& rt, const std::string& server, const std::string& id,
                               const std::string& secret);

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_LEASE_CORE_H_
