#include "client/admin.h"

#include "client/lease_core.h"
#include "client/runtime.h"

namespace gpupool::admin {
namespace {

// Runs one call on `server` from a runtime of its own (a ctl command makes one or two).
template <typename Call>
Status OnAgent(const std::string& server, const char* what, Call call) {
  PoolOptions options;
  options.servers = {server};
  internal::Runtime rt(options);
  return rt.Run([&] { return internal::WithAgent(rt, server, what, call); });
}

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

}  // namespace gpupool::admin
