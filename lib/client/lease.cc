#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "client/lease_core.h"
#include "core/log.h"
#include "core/util.h"

namespace gpupool {
namespace internal {
namespace {

// The first failure of one renewal on each server, or OK.
Status Combined(const kj::Array<Status>& results) {
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// Renews the lease on every server; resolves to each one's answer, having put the soonest end their policies
// announced (if any) in `health`.
kj::Promise<kj::Array<Status>> RenewEverywhere(Runtime& rt, std::shared_ptr<LeaseHealth> health,
                                               const TokenFields& fields) {
  kj::Vector<kj::Promise<Status>> calls;
  std::vector<std::shared_ptr<RenewedEnd>> ends;
  for (const auto& server : fields.servers) {
    ends.push_back(std::make_shared<RenewedEnd>());
    calls.add(CallRenew(rt, server, fields.id, fields.secret, nullptr, ends.back()));
  }
  return kj::joinPromises(calls.releaseAsArray()).then([health, ends](kj::Array<Status> results) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(health->mu);
    health->policy_end_at.reset();
    health->policy_end.clear();
    for (const auto& end : ends) {
      if (!end->in || (health->policy_end_at && now + *end->in >= *health->policy_end_at)) continue;
      health->policy_end_at = now + *end->in;
      health->policy_end = end->why;
    }
    return results;
  });
}

kj::Promise<void> HeartbeatLoop(Runtime& rt, std::shared_ptr<LeaseHealth> health, TokenFields fields,
                                std::chrono::milliseconds interval) {
  return rt.timer().afterDelay(interval.count() * kj::MILLISECONDS).then([&rt, health, fields, interval]() {
    return RenewEverywhere(rt, health, fields).then([&rt, health, fields, interval](kj::Array<Status> results) {
      Status combined = Combined(results);
      {
        std::lock_guard<std::mutex> lock(health->mu);
        // A lost lease (kNotFound) is its holder's to report, with the agent's reason (gp-run, gp-lease do).
        if (!combined.ok() && health->status.ok() && combined.code() != StatusCode::kNotFound) {
          GP_WARN("client", "lease {} was not renewed: {}", fields.id, combined.message());
        }
        health->status = combined;
      }
      return HeartbeatLoop(rt, health, fields, interval);
    });
  });
}

}  // namespace

kj::Promise<Status> CallRenew(Runtime& rt, const std::string& server, const std::string& id,
                              const std::string& secret, std::shared_ptr<std::vector<RemoteSlice>> slices,
                              std::shared_ptr<RenewedEnd> end) {
  return WithLeaseAgent(rt, id, server, "renew", [id, secret, slices, end](Runtime& rt, wire::Agent::Client agent,
                                                                           const std::string& at) {
    auto req = agent.renewRequest();
    SetKey(req.initLease(), id, secret);
    return rt.Deadline(req.send()).then([&rt, id, at, slices, end](capnp::Response<wire::Agent::RenewResults>&& r) {
      Status s = LeaseStatus(rt, id, at, r.getOutcome());
      if (s.ok() && slices) {
        for (auto x : r.getSlices()) slices->push_back({x.getDevice(), x.getMemoryBytes(), x.getShareMicros()});
      }
      if (s.ok() && end && r.getPolicyEnd().size() > 0) {
        end->in = std::chrono::milliseconds(std::min<uint64_t>(r.getPolicyEndsInMs(), uint64_t{1} << 40));
        end->why = r.getPolicyEnd().cStr();
      }
      return s;
    });
  });
}

// A call of the agent's on the lease named by its key, answered by an Outcome: `request` makes it on `agent`.
template <typename MakeRequest>
kj::Promise<Status> CallOnLease(Runtime& rt, const std::string& server, const char* what, const std::string& id,
                                const std::string& secret, MakeRequest request) {
  return WithLeaseAgent(rt, id, server, what, [id, secret, request](Runtime& rt, wire::Agent::Client agent,
                                                                    const std::string& at) {
    auto req = request(agent);
    SetKey(req.initLease(), id, secret);
    return rt.Deadline(req.send()).then([&rt, id, at](auto&& r) { return LeaseStatus(rt, id, at, r.getOutcome()); });
  });
}

kj::Promise<Status> CallRelease(Runtime& rt, const std::string& server, const std::string& id,
                                const std::string& secret) {
  return CallOnLease(rt, server, "release", id, secret, [](wire::Agent::Client& a) { return a.releaseRequest(); });
}

kj::Promise<Status> CallCancel(Runtime& rt, const std::string& server, const std::string& id,
                               const std::string& secret) {
  return CallOnLease(rt, server, "cancel", id, secret, [](wire::Agent::Client& a) { return a.cancelRequest(); });
}

LeaseCore::LeaseCore(std::shared_ptr<Runtime> runtime, TokenFields fields, std::vector<Slice> slices, bool owner,
                     std::chrono::milliseconds renew_interval)
    : runtime_(std::move(runtime)),
      fields_(std::move(fields)),
      slices_(std::move(slices)),
      owner_(owner),
      renew_interval_(renew_interval),
      health_(std::make_shared<LeaseHealth>()) {
  StartHeartbeat();
}

LeaseCore::~LeaseCore() {
  if (owner_) {
    Status s = Release();
    if (!s.ok()) GP_WARN("client", "releasing lease {} on destruction: {}", fields_.id, s.ToString());
  } else {
    runtime_->Run([this] { runtime_->StopTask("heartbeat/" + fields_.id); });
  }
}

void LeaseCore::StartHeartbeat() {
  runtime_->Run([this] {
    runtime_->StartTask("heartbeat/" + fields_.id, HeartbeatLoop(*runtime_, health_, fields_, renew_interval_));
  });
}

Status LeaseCore::Health() const {
  std::lock_guard<std::mutex> lock(health_->mu);
  return health_->status;
}

std::optional<LeaseEnd> LeaseCore::PolicyEnd() const {
  std::lock_guard<std::mutex> lock(health_->mu);
  if (!health_->policy_end_at) return std::nullopt;
  auto in = std::chrono::duration_cast<std::chrono::milliseconds>(*health_->policy_end_at -
                                                                  std::chrono::steady_clock::now());
  return LeaseEnd{std::max(in, std::chrono::milliseconds(0)), health_->policy_end};
}

Status LeaseCore::CheckNow() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (released_) return Status(StatusCode::kNotFound, fmt::format("lease {} was released", fields_.id));
  }
  auto results = runtime_->Run([this] { return RenewEverywhere(*runtime_, health_, fields_); });
  Status combined = Combined(results);
  std::lock_guard<std::mutex> lock(health_->mu);
  health_->status = combined;
  return combined;
}

Status LeaseCore::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (released_) return Status::Ok();
    released_ = true;
  }
  auto results = runtime_->Run([this] {
    runtime_->StopTask("heartbeat/" + fields_.id);
    kj::Vector<kj::Promise<Status>> calls;
    for (const auto& server : fields_.servers) calls.add(CallRelease(*runtime_, server, fields_.id, fields_.secret));
    return kj::joinPromises(calls.releaseAsArray());
  });
  std::vector<std::string> failed;
  Status first;
  for (size_t i = 0; i < results.size(); ++i) {
    // Already gone (expired, agent restarted) is what release wanted.
    if (results[i].ok() || results[i].code() == StatusCode::kNotFound) continue;
    failed.push_back(fields_.servers[i]);
    if (first.ok()) first = results[i];
  }
  // Capacity came back: the next placement must see it. From a directory, this client's own placement snapshot
  // is corrected instead of dropped, so that a client allocating and releasing in a loop does not read the whole
  // directory for every allocation (others' changes reach it with the next read, and refusals correct it).
  if (failed.empty() && runtime_->directory()) runtime_->NoteReleased(slices_);
  else runtime_->InvalidateSnapshot();
  if (failed.empty()) return Status::Ok();
  return Status(first.code(), fmt::format("lease {} not released on {} of {} server(s) ({}); those slices are freed "
                                          "when the lease expires: {}",
                                          fields_.id, failed.size(), fields_.servers.size(), fmt::join(failed, ", "),
                                          first.message()));
}

Lease WrapLease(std::shared_ptr<LeaseCore> core) { return Lease(std::move(core)); }

}  // namespace internal

Lease::Lease() = default;
Lease::~Lease() = default;
Lease::Lease(Lease&&) noexcept = default;
Lease& Lease::operator=(Lease&&) noexcept = default;
Lease::Lease(std::shared_ptr<internal::LeaseCore> core) : core_(std::move(core)) {}

const std::string& Lease::id() const {
  static const std::string kEmpty;
  return core_ ? core_->id() : kEmpty;
}

const std::vector<Slice>& Lease::slices() const {
  static const std::vector<Slice> kEmpty;
  return core_ ? core_->slices() : kEmpty;
}

std::string Lease::Token() const { return core_ ? core_->Token() : std::string(); }

Status Lease::Health() const {
  if (!core_) return Status(StatusCode::kNotFound, "empty lease");
  return core_->Health();
}

Status Lease::CheckNow() {
  if (!core_) return Status(StatusCode::kNotFound, "empty lease");
  return core_->CheckNow();
}

std::optional<LeaseEnd> Lease::PolicyEnd() const {
  if (!core_) return std::nullopt;
  return core_->PolicyEnd();
}

Status Lease::Release() {
  if (!core_) return Status::Ok();
  Status s = core_->Release();
  core_.reset();
  return s;
}

}  // namespace gpupool
