#include "agent/metrics.h"

#include <kj/compat/http.h>

#include <fmt/format.h>

#include "core/log.h"

namespace gpupool::agent {
namespace {

// A label value as the exposition format quotes it.
std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Exposition {
 public:
  // Starts a metric family: its HELP and TYPE lines, once.
  Exposition& Family(const char* name, const char* type, const char* help) {
    name_ = name;
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    return *this;
  }
  // One sample of the current family. `labels`: name, value pairs.
  Exposition& Sample(std::initializer_list<std::pair<const char*, std::string_view>> labels, double value) {
    text_ += name_;
    if (labels.size() > 0) {
      text_ += '{';
      bool first = true;
      for (const auto& [k, v] : labels) {
        text_ += fmt::format("{}{}=\"{}\"", first ? "" : ",", k, Escape(v));
        first = false;
      }
      text_ += '}';
    }
    text_ += fmt::format(" {}\n", value);
    return *this;
  }
  std::string Take() { return std::move(text_); }

 private:
  std::string text_;
  const char* name_ = "";
};

class MetricsService final : public kj::HttpService {
 public:
  MetricsService(const kj::HttpHeaderTable& table, std::function<std::string()> render)
      : table_(table), render_(std::move(render)) {}

  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders&,
                            kj::AsyncInputStream&, Response& response) override {
    kj::HttpHeaders headers(table_);
    std::string path(url.cStr());
    path = path.substr(0, path.find('?'));
    if (path != "/metrics") {
      return Reply(response, headers, 404, "Not Found", "gp-agent serves /metrics only\n");
    }
    if (method != kj::HttpMethod::GET && method != kj::HttpMethod::HEAD) {
      return Reply(response, headers, 405, "Method Not Allowed", "GET /metrics\n");
    }
    headers.set(kj::HttpHeaderId::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    return Reply(response, headers, 200, "OK", render_());
  }

 private:
  static kj::Promise<void> Reply(Response& response, kj::HttpHeaders& headers, unsigned code, kj::StringPtr status,
                                 std::string body) {
    if (code != 200) headers.set(kj::HttpHeaderId::CONTENT_TYPE, "text/plain; charset=utf-8");
    auto stream = response.send(code, status, headers, static_cast<uint64_t>(body.size()));
    auto bytes = kj::heapString(body.data(), body.size());
    auto written = stream->write(bytes.begin(), bytes.size());
    return written.attach(kj::mv(stream), kj::mv(bytes));
  }

  const kj::HttpHeaderTable& table_;
  std::function<std::string()> render_;
};

struct MetricsServerState {
  kj::Own<kj::HttpHeaderTable> table;
  kj::Own<MetricsService> service;
  kj::Own<kj::HttpServer> server;
  kj::Own<kj::ConnectionReceiver> receiver;
};

}  // namespace

std::string RenderMetrics(wire::AgentState::Reader state, const AgentCounters& counters,
                          const std::vector<double>& busy_seconds) {
  Exposition m;
  std::string agent = state.getName();
  m.Family("gpupool_agent_up", "gauge", "1 while the agent answers.").Sample({}, 1);
  m.Family("gpupool_agent_info", "gauge", "The agent's name and protocol version, as labels.")
      .Sample({{"agent", agent}, {"protocol", std::to_string(state.getProtocolVersion())}}, 1);
  m.Family("gpupool_agent_draining", "gauge", "1 while the agent takes no new leases (shutting down).")
      .Sample({}, state.getDraining() ? 1 : 0);
  if (state.getPolicy().size() > 0) {
    m.Family("gpupool_policy_personality_info", "gauge",
             "The policy personality in force, as a label (\"none\": no personality, nothing restricted).")
        .Sample({{"personality", state.getPersonality().size() > 0 ? state.getPersonality().cStr() : "none"}}, 1);
  }

  auto devices = state.getDevices();
  struct DeviceLabels {
    std::string gpu, uuid;
  };
  std::vector<DeviceLabels> labels;
  for (auto d : devices) labels.push_back({std::to_string(d.getIndex()), d.getUuid()});
  m.Family("gpupool_device_info", "gauge", "One series per device; its model, class and kind as labels.");
  for (size_t i = 0; i < labels.size(); ++i) {
    auto d = devices[static_cast<unsigned>(i)];
    m.Sample({{"gpu", labels[i].gpu},
              {"gpu_uuid", labels[i].uuid},
              {"model", d.getModel().cStr()},
              {"class", d.getDeviceClass().cStr()},
              {"emulated", d.getEmulated() ? "true" : "false"}},
             1);
  }
  // One family per device gauge; `value` returns a negative number where it is unknown (no sample then).
  auto per_device = [&](const char* name, const char* type, const char* help, auto value) {
    m.Family(name, type, help);
    for (size_t i = 0; i < labels.size(); ++i) {
      double v = value(devices[static_cast<unsigned>(i)], i);
      if (v >= 0) m.Sample({{"gpu", labels[i].gpu}, {"gpu_uuid", labels[i].uuid}}, v);
    }
  };
  using DeviceReader = wire::Device::Reader;
  per_device("gpupool_device_memory_total_bytes", "gauge", "Device memory.",
             [](DeviceReader d, size_t) { return static_cast<double>(d.getMemoryTotal()); });
  per_device("gpupool_device_memory_allocated_bytes", "gauge", "Device memory granted to leases.",
             [](DeviceReader d, size_t) { return static_cast<double>(d.getMemoryAllocated()); });
  per_device("gpupool_device_memory_used_bytes", "gauge", "Device memory in use (allocated by programs).",
             [](DeviceReader d, size_t) { return static_cast<double>(d.getActivity().getMemoryUsed()); });
  per_device("gpupool_device_compute_allocated_ratio", "gauge", "Compute share granted to leases (0..1).",
             [](DeviceReader d, size_t) { return d.getShareAllocatedMicros() / 1e6; });
  per_device("gpupool_device_compute_used_ratio", "gauge",
             "Share of the last second the device ran work (0..1); absent where unknown.",
             [](DeviceReader d, size_t) { return static_cast<double>(d.getActivity().getUtilization()); });
  per_device("gpupool_device_busy_seconds_total", "counter", "Time the device ran its sessions' work.",
             [&](DeviceReader, size_t i) { return i < busy_seconds.size() ? busy_seconds[i] : -1.0; });
  per_device("gpupool_device_temperature_celsius", "gauge", "GPU temperature (physical GPUs).",
             [](DeviceReader d, size_t) { return static_cast<double>(d.getActivity().getTemperatureC()); });
  per_device("gpupool_device_power_watts", "gauge", "GPU power draw (physical GPUs).",
             [](DeviceReader d, size_t) { return static_cast<double>(d.getActivity().getPowerW()); });
  per_device("gpupool_device_cordoned", "gauge", "1 while an administrator keeps new leases off the device.",
             [](DeviceReader d, size_t) { return d.getCordoned() ? 1.0 : 0.0; });

  auto leases = state.getLeases();
  uint64_t reserved = 0, active = 0, idle = 0, suspended = 0, sessions = 0;
  for (auto l : leases) {
    if (!l.getCommitted()) ++reserved;
    else if (l.getSuspended()) ++suspended;
    else if (l.getIdle()) ++idle;
    else ++active;
    sessions += l.getSessions();
  }
  m.Family("gpupool_leases", "gauge", "Leases on this agent by state (reserved: placement in flight; idle: no call "
           "for the agent's idle threshold; suspended: sessions kept as images, GPUs given back).")
      .Sample({{"state", "reserved"}}, static_cast<double>(reserved))
      .Sample({{"state", "active"}}, static_cast<double>(active))
      .Sample({{"state", "idle"}}, static_cast<double>(idle))
      .Sample({{"state", "suspended"}}, static_cast<double>(suspended));
  m.Family("gpupool_sessions", "gauge", "CUDA sessions running (one per process per slice).")
      .Sample({}, static_cast<double>(sessions));
  // Per lease, keyed by its public id and its user.
  auto per_lease = [&](const char* name, const char* type, const char* help, auto value) {
    m.Family(name, type, help);
    for (auto l : leases) {
      if (!l.getCommitted()) continue;
      double v = value(l);
      if (v >= 0) m.Sample({{"lease", l.getId().cStr()}, {"user", l.getOwner().getUser().cStr()}}, v);
    }
  };
  using LeaseReader = wire::LeaseView::Reader;
  per_lease("gpupool_lease_memory_limit_bytes", "gauge", "Device memory granted to the lease on this agent.",
            [](LeaseReader l) {
              double sum = 0;
              for (auto s : l.getSlices()) sum += static_cast<double>(s.getMemoryBytes());
              return sum;
            });
  per_lease("gpupool_lease_memory_used_bytes", "gauge", "Device memory the lease's programs hold on this agent.",
            [](LeaseReader l) { return static_cast<double>(l.getActivity().getMemoryUsed()); });
  per_lease("gpupool_lease_compute_used_ratio", "gauge",
            "Share of the last second the lease's work ran on its devices (0..1).",
            [](LeaseReader l) { return l.hasActivity() ? static_cast<double>(l.getActivity().getUtilization()) : -1; });
  per_lease("gpupool_lease_calls_total", "counter", "CUDA calls the lease's sessions made.",
            [](LeaseReader l) { return static_cast<double>(l.getCallsTotal()); });
  m.Family("gpupool_lease_copied_bytes_total", "counter", "Bytes the lease's sessions copied, by direction.");
  for (auto l : leases) {
    if (!l.getCommitted()) continue;
    std::string id = l.getId(), user = l.getOwner().getUser();
    m.Sample({{"lease", id}, {"user", user}, {"direction", "to_device"}},
             static_cast<double>(l.getBytesToDeviceTotal()));
    m.Sample({{"lease", id}, {"user", user}, {"direction", "from_device"}},
             static_cast<double>(l.getBytesFromDeviceTotal()));
  }
  per_lease("gpupool_lease_idle_seconds", "gauge", "Time since the lease's last call (or its grant).",
            [](LeaseReader l) { return l.getIdleMs() / 1000.0; });
  per_lease("gpupool_lease_idle", "gauge", "1 when the lease made no call for the agent's idle threshold.",
            [](LeaseReader l) { return l.getIdle() ? 1.0 : 0.0; });
  m.Family("gpupool_lease_idle_threshold_seconds", "gauge", "A lease without a call for this long is idle.")
      .Sample({}, state.getIdleAfterMs() / 1000.0);

  m.Family("gpupool_reservations_granted_total", "counter", "Reservations granted.")
      .Sample({}, static_cast<double>(counters.reservations_granted));
  // A counter family with a `reason` label per entry of `counts`.
  auto by_reason = [&](const char* name, const char* help, const std::map<std::string, uint64_t>& counts) {
    m.Family(name, "counter", help);
    for (const auto& [reason, n] : counts) m.Sample({{"reason", reason}}, static_cast<double>(n));
  };
  by_reason("gpupool_reservations_refused_total", "Reservations refused, by reason.", counters.reservations_refused);
  by_reason("gpupool_lease_expirations_total",
            "Leases and reservations the agent freed because their time ran out, by reason.",
            counters.lease_expirations);
  m.Family("gpupool_lease_revocations_total", "counter", "Leases an administrator revoked.")
      .Sample({}, static_cast<double>(counters.lease_revocations));
  m.Family("gpupool_sessions_opened_total", "counter", "CUDA sessions opened.")
      .Sample({}, static_cast<double>(counters.sessions_opened));
  m.Family("gpupool_lease_migrations_total", "counter", "Leases moved to other devices while their programs ran.")
      .Sample({}, static_cast<double>(counters.migrations));
  m.Family("gpupool_lease_migrations_away_total", "counter", "Of those, the leases moved to another agent.")
      .Sample({}, static_cast<double>(counters.migrations_away));
  m.Family("gpupool_lease_arrivals_total", "counter", "Leases moved here from another agent while their programs ran.")
      .Sample({}, static_cast<double>(counters.arrivals));
  m.Family("gpupool_arrived_bytes_total", "counter", "Bytes of session images those leases brought.")
      .Sample({}, static_cast<double>(counters.arrived_bytes));
  m.Family("gpupool_migrated_sessions_total", "counter", "Sessions those moves carried.")
      .Sample({}, static_cast<double>(counters.migrated_sessions));
  m.Family("gpupool_migrated_bytes_total", "counter", "Bytes of session images those moves carried.")
      .Sample({}, static_cast<double>(counters.migrated_bytes));
  m.Family("gpupool_migration_pause_seconds_total", "counter",
           "Time the moved leases' programs were held, from the first checkpoint to the last session restored.")
      .Sample({}, static_cast<double>(counters.migration_pause_ms) / 1000.0);
  m.Family("gpupool_lease_suspensions_total", "counter", "Leases suspended: sessions kept as images, slices given back.")
      .Sample({}, static_cast<double>(counters.suspensions));
  m.Family("gpupool_lease_resumptions_total", "counter", "Suspended leases placed again and their sessions restored.")
      .Sample({}, static_cast<double>(counters.resumptions));
  m.Family("gpupool_suspended_bytes_total", "counter", "Bytes of session images that suspensions kept.")
      .Sample({}, static_cast<double>(counters.suspended_bytes));
  by_reason("gpupool_sessions_refused_total", "CUDA sessions refused, by reason.", counters.sessions_refused);
  if (counters.directory_configured) {
    m.Family("gpupool_directory_registered", "gauge", "1 while this agent's entry is in the pool's directory (etcd).")
        .Sample({}, counters.directory_registered ? 1.0 : 0.0);
    m.Family("gpupool_directory_registrations_total", "counter",
             "Registrations in the directory: the first, and each again after etcd lost the agent's lease.")
        .Sample({}, static_cast<double>(counters.directory_registrations));
    m.Family("gpupool_directory_publishes_total", "counter", "Puts of this agent's entry after a change.")
        .Sample({}, static_cast<double>(counters.directory_publishes));
    m.Family("gpupool_directory_failures_total", "counter", "Calls to etcd that failed (the agent serves on).")
        .Sample({}, static_cast<double>(counters.directory_failures));
  }
  return m.Take();
}

Result<MetricsServer> ServeMetrics(kj::AsyncIoContext& io, const std::string& address,
                                   std::function<std::string()> render) {
  auto state = kj::heap<MetricsServerState>();
  state->table = kj::heap<kj::HttpHeaderTable>();
  state->service = kj::heap<MetricsService>(*state->table, std::move(render));
  state->server = kj::heap<kj::HttpServer>(io.provider->getTimer(), *state->table, *state->service);
  try {
    auto addr = io.provider->getNetwork().parseAddress(address, 9450).wait(io.waitScope);
    state->receiver = addr->listen();
  } catch (const kj::Exception& e) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("cannot serve metrics on {}: {}", address, e.getDescription().cStr()));
  }
  MetricsServer out;
  out.port = static_cast<uint16_t>(state->receiver->getPort());
  out.serving = state->server->listenHttp(*state->receiver).eagerlyEvaluate([](kj::Exception&& e) {
    GP_ERROR("metrics", "the metrics endpoint stopped: {}", e.getDescription().cStr());
  });
  out.state = kj::mv(state);
  return out;
}

}  // namespace gpupool::agent
