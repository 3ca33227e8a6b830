#include "client/admin.h"

#include <chrono>

#include "client/lease_core.h"
#include "client/runtime.h"

namespace gpupool::admin {
namespace {

// Runs one call on `server` from a runtime of its own (a ctl command makes one or two), within `timeout`.
template <typename Call>
Status OnAgent(const std::string& server, const char* what, Call call,
               std::chrono::milliseconds timeout = PoolOptions().call_timeout) {
  PoolOptions options;
  options.servers = {server};
  options.call_timeout = timeout;
  internal::Runtime rt(options);
  return rt.Run([&] { return internal::WithAgent(rt, server, what, call); });
}

// A move or a suspension waits for the lease's sessions to be quiet (up to the agent's limit) and copies their
// memory: its call may take minutes.
constexpr std::chrono::milliseconds kMoveTimeout = std::chrono::minutes(5);

}  // namespace

Status Cordon(const std::string& server, std::optional<int> device, bool cordoned) {
  return OnAgent(server, "cordon", [server, device, cordoned](internal::Runtime& rt, wire::Agent::Client agent) {
    auto req = agent.cordonRequest();
    req.setDevice(device.value_or(-1));
    req.setCordoned(cordoned);
    return rt.Deadline(req.send()).then([server](capnp::Response<wire::Agent::CordonResults>&& r) {
      return internal::StatusFromOutcome(r.getOutcome(), server);
    });
  });
}

Status Revoke(const std::string& server, const std::string& lease_id) {
  return OnAgent(server, "revoke", [server, lease_id](internal::Runtime& rt, wire::Agent::Client agent) {
    auto req = agent.revokeRequest();
    req.setLeaseId(lease_id);
    return rt.Deadline(req.send()).then([server](capnp::Response<wire::Agent::RevokeResults>&& r) {
      return internal::StatusFromOutcome(r.getOutcome(), server);
    });
  });
}

namespace {

// The answer of migrate or migrateTo, read into `moved`.
template <typename Response>
Status ReadMoved(Response& r, const std::string& server, Migrated* moved) {
  moved->sessions = r.getSessions();
  moved->bytes = r.getBytes();
  moved->pause_ms = r.getPauseMs();
  for (uint32_t d : r.getDevices()) moved->devices.push_back(d);
  return internal::StatusFromOutcome(r.getOutcome(), server);
}

}  // namespace

Result<Migrated> Migrate(const std::string& server, const std::string& lease_id, std::optional<int> device) {
  Migrated moved;
  Status s = OnAgent(server, "migrate", [&](internal::Runtime& rt, wire::Agent::Client agent) {
    auto req = agent.migrateRequest();
    req.setLeaseId(lease_id);
    req.setDevice(device.value_or(-1));
    return rt.Deadline(req.send()).then([&](capnp::Response<wire::Agent::MigrateResults>&& r) {
      return ReadMoved(r, server, &moved);
    });
  }, kMoveTimeout);
  if (!s.ok()) return s;
  return moved;
}

Result<Migrated> MigrateTo(const std::string& server, const std::string& lease_id, const std::string& to) {
  Migrated moved;
  Status s = OnAgent(server, "migrate", [&](internal::Runtime& rt, wire::Agent::Client agent) {
    auto req = agent.migrateToRequest();
    req.setLeaseId(lease_id);
    req.setServer(to);
    return rt.Deadline(req.send()).then([&](capnp::Response<wire::Agent::MigrateToResults>&& r) {
      return ReadMoved(r, server, &moved);
    });
  }, kMoveTimeout);
  if (!s.ok()) return s;
  return moved;
}

Result<Migrated> MigrateToFirst(const std::string& server, const std::string& lease_id,
                                const std::vector<std::string>& targets, std::string* to) {
  Status last(StatusCode::kUnavailable, "no agent to move to");
  std::string tried;
  for (const std::string& target : targets) {
    auto moved = MigrateTo(server, lease_id, target);
    if (moved.ok()) {
      *to = target;
      return moved;
    }
    last = moved.status();
    tried += (tried.empty() ? "" : "; ") + last.message();
  }
  return Status(last.code(), tried.empty() ? last.message() : tried);
}

std::vector<std::string> OtherAgents(const std::string& server) {
  auto pool = Pool::Connect();
  if (!pool.ok()) return {};
  PoolState state = pool->State();
  std::string self;  // The agent at `server` may be listed under another of its addresses.
  for (const ServerInfo& info : state.servers) {
    if (info.address == server && info.up) self = info.instance_id;
  }
  if (self.empty()) {
    PoolOptions options;
    options.servers = {server};
    if (auto one = Pool::Connect(options); one.ok()) self = one->State().servers.at(0).instance_id;
  }
  std::vector<std::string> out;
  for (const ServerInfo& info : state.servers) {
    if (!info.up || info.draining || info.address == server || (!self.empty() && info.instance_id == self)) continue;
    out.push_back(info.address);
  }
  return out;
}

Result<Migrated> Suspend(const std::string& server, const std::string& lease_id) {
  Migrated kept;
  Status s = OnAgent(server, "suspend", [&](internal::Runtime& rt, wire::Agent::Client agent) {
    auto req = agent.suspendRequest();
    req.setLeaseId(lease_id);
    return rt.Deadline(req.send()).then([&](capnp::Response<wire::Agent::SuspendResults>&& r) {
      kept.sessions = r.getSessions();
      kept.bytes = r.getBytes();
      return internal::StatusFromOutcome(r.getOutcome(), server);
    });
  }, kMoveTimeout);
  if (!s.ok()) return s;
  return kept;
}

Status Resume(const std::string& server, const std::string& lease_id) {
  return OnAgent(server, "resume", [&](internal::Runtime& rt, wire::Agent::Client agent) {
    auto req = agent.resumeRequest();
    req.setLeaseId(lease_id);
    return rt.Deadline(req.send()).then([&](capnp::Response<wire::Agent::ResumeResults>&& r) {
      return internal::StatusFromOutcome(r.getOutcome(), server);
    });
  }, kMoveTimeout);
}

}  // namespace gpupool::admin
