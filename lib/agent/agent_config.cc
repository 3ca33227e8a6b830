#include "agent/agent_config.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "agent/worker_cgroup.h"
#include "backend/device_turns.h"
#include "backend/slice_quota.h"
#include "core/toml_config.h"
#include "gpupool/units.h"

namespace gpupool::agent {

static_assert(kMaxSessionsPerDevice == backend::DeviceTurns::kMaxMembers,
              "[limits] sessions_per_device is at most what a device's turns table holds");
static_assert(kMaxSessionsPerLease == backend::SliceQuota::kMaxMembers,
              "[limits] sessions_per_lease is at most what a slice's quota table holds");
namespace {

// Boilerplate by nature: the file's sections key by key, each checked and read alike.
Status Read(const TomlFile& file, AgentConfig* c) {
  const toml::table& root = file.root();
  if (Status s = file.CheckKeys(root, {"name", "listen", "class", "nvml", "cuda_driver", "emulated", "leases", "drain",
                                       "metrics", "telemetry", "limits", "auth", "groups", "personality", "tls",
                                       "workers", "moves", "directory", "etcd"},
                                "the agent config");
      !s.ok())
    return s;
  Status s;
  if (!(s = file.GetString(root, "name", &c->name)).ok()) return s;
  if (!(s = file.GetString(root, "listen", &c->listen)).ok()) return s;
  if (!(s = file.GetString(root, "class", &c->device_class)).ok()) return s;
  if (!(s = file.GetString(root, "cuda_driver", &c->cuda_driver)).ok()) return s;
  if (!(s = file.GetBool(root, "nvml", &c->nvml)).ok()) return s;
  auto section = [&](std::string_view key, const toml::table** out) -> Status {
    *out = nullptr;
    if (const toml::node* n = root.get(key)) {
      if (!n->is_table()) return file.Error(*n, fmt::format("'{}' must be a table ([{}])", key, key));
      *out = n->as_table();
    }
    return Status::Ok();
  };
  const toml::table* t = nullptr;
  if (!(s = section("emulated", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"count", "memory", "compute_capability"}, "[emulated]")).ok()) return s;
    int64_t count = c->emulated_count;
    if (!(s = file.GetInt(*t, "count", &count)).ok()) return s;
    if (count < 0 || count > 1024) return file.Error(*t->get("count"), "[emulated] count must be within 0..1024");
    c->emulated_count = static_cast<int>(count);
    if (!(s = file.GetMemory(*t, "memory", &c->emulated_memory)).ok()) return s;
    std::string cc;
    if (!(s = file.GetString(*t, "compute_capability", &cc)).ok()) return s;
    if (!cc.empty()) {
      auto parsed = ParseComputeCapability(cc);
      if (!parsed.ok()) return file.Error(*t->get("compute_capability"), "[emulated] " + parsed.status().message());
      c->emulated_compute_capability = *parsed;
    }
  }
  if (!(s = section("leases", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"ttl", "renew_interval", "reservation_ttl"}, "[leases]")).ok()) return s;
    if (!(s = file.GetDuration(*t, "ttl", &c->timing.lease_ttl)).ok()) return s;
    if (!(s = file.GetDuration(*t, "renew_interval", &c->timing.renew_interval)).ok()) return s;
    if (!(s = file.GetDuration(*t, "reservation_ttl", &c->timing.reservation_ttl)).ok()) return s;
  }
  if (!(s = section("drain", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"timeout"}, "[drain]")).ok()) return s;
    if (!(s = file.GetDuration(*t, "timeout", &c->drain_timeout)).ok()) return s;
  }
  if (!(s = section("metrics", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"listen"}, "[metrics]")).ok()) return s;
    if (!(s = file.GetString(*t, "listen", &c->metrics_listen)).ok()) return s;
  }
  auto policy = Policy::Read(file);
  if (!policy.ok()) return policy.status();
  c->policy = std::move(policy).value();
  if (!(s = section("tls", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"cert", "key", "ca"}, "[tls]")).ok()) return s;
    if (!(s = file.GetString(*t, "cert", &c->tls_cert)).ok()) return s;
    if (!(s = file.GetString(*t, "key", &c->tls_key)).ok()) return s;
    if (!(s = file.GetString(*t, "ca", &c->tls_ca)).ok()) return s;
  }
  if (!(s = section("auth", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"require", "tokens", "admins"}, "[auth]")).ok()) return s;
    if (!(s = file.GetStringList(*t, "admins", &c->admins)).ok()) return s;
    if (!(s = file.GetBool(*t, "require", &c->require_auth)).ok()) return s;
    if (!(s = file.GetString(*t, "tokens", &c->tokens_file)).ok()) return s;
  }
  if (!(s = section("limits", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"sessions_per_device", "sessions_per_lease", "session_bytes_in_flight", "hello_timeout"},
                             "[limits]")).ok()) return s;
    struct Limit {
      const char* key;
      int ceiling;
      int* value;
    };
    for (const Limit& limit : {Limit{"sessions_per_device", kMaxSessionsPerDevice, &c->sessions_per_device},
                               Limit{"sessions_per_lease", kMaxSessionsPerLease, &c->sessions_per_lease}}) {
      int64_t v = *limit.value;
      if (!(s = file.GetInt(*t, limit.key, &v)).ok()) return s;
      if (v < 1 || v > limit.ceiling) {
        return file.Error(*t->get(limit.key),
                          fmt::format("[limits] {} must be within 1..{}", limit.key, limit.ceiling));
      }
      *limit.value = static_cast<int>(v);
    }
    if (!(s = file.GetMemory(*t, "session_bytes_in_flight", &c->session_bytes_in_flight)).ok()) return s;
    if (!(s = file.GetDuration(*t, "hello_timeout", &c->hello_timeout)).ok()) return s;
  }
  if (!(s = section("workers", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"user", "seccomp", "memory_limit", "cgroup"}, "[workers]")).ok()) return s;
    if (t->get("user")) {
      if (!(s = file.GetString(*t, "user", &c->workers.user)).ok()) return s;
      if (c->workers.user.empty()) return file.Error(*t->get("user"), "[workers] user must not be empty");
      c->workers.user_set = true;
    }
    if (!(s = file.GetBool(*t, "seccomp", &c->workers.seccomp)).ok()) return s;
    if (!(s = file.GetMemory(*t, "memory_limit", &c->workers.memory_limit)).ok()) return s;
    if (c->workers.memory_limit != 0 && c->workers.memory_limit < kMinWorkerMemoryLimit) {
      return file.Error(*t->get("memory_limit"),
                        fmt::format("[workers] memory_limit must be 0 (no cap) or at least {} MiB: a worker needs "
                                    "that much for its code, threads and buffers",
                                    kMinWorkerMemoryLimit >> 20));
    }
    if (t->get("cgroup")) {
      if (!(s = file.GetString(*t, "cgroup", &c->workers.cgroup)).ok()) return s;
      const std::string& g = c->workers.cgroup;
      if (g != kWorkerCgroupAuto && g != kWorkerCgroupOff && (g.empty() || g[0] != '/')) {
        return file.Error(*t->get("cgroup"),
                          fmt::format("[workers] cgroup must be \"{}\", \"{}\" or the absolute path of a cgroup "
                                      "(v2, or v1's memory hierarchy), not '{}'",
                                      kWorkerCgroupAuto, kWorkerCgroupOff, g));
      }
    }
  }
  if (!(s = section("telemetry", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"idle_after", "suspend_idle_after", "suspend_memory", "suspend_spill_dir"},
                             "[telemetry]")).ok()) {
      return s;
    }
    if (!(s = file.GetMemory(*t, "suspend_memory", &c->suspend_memory)).ok()) return s;
    if (!(s = file.GetString(*t, "suspend_spill_dir", &c->suspend_spill_dir)).ok()) return s;
    if (!(s = file.GetDuration(*t, "idle_after", &c->idle_after)).ok()) return s;
    if (!(s = file.GetDuration(*t, "suspend_idle_after", &c->suspend_idle_after)).ok()) return s;
  }
  if (!(s = section("moves", &t)).ok()) return s;
  if (t) {
    if (!(s = file.CheckKeys(*t, {"agents"}, "[moves]")).ok()) return s;
    if (!(s = file.GetStringList(*t, "agents", &c->move_agents)).ok()) return s;
  }
  std::string directory;
  if (!(s = file.GetString(root, "directory", &directory)).ok()) return s;
  if (!(s = section("etcd", &t)).ok()) return s;
  if (!directory.empty() || t) {
    // [etcd] alone holds the settings for gp-agent --directory.
    internal::EtcdConfig etcd;
    if (!directory.empty() && !(s = internal::ParseDirectorySpec(directory, &etcd)).ok()) {
      return file.Error(*root.get("directory"), s.message());
    }
    if (!(s = internal::ReadEtcdSettings(&file, &etcd, /*agent=*/true)).ok()) return s;
    if (directory.empty()) {
      c->etcd_settings = std::move(etcd);
    } else {
      c->directory = std::move(etcd);
    }
  }
  if (t) {
    if (!(s = file.GetDuration(*t, "ttl", &c->directory_ttl)).ok()) return s;
    if (!(s = file.GetString(*t, "advertise", &c->directory_advertise)).ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

Result<int> ParseComputeCapability(std::string_view text) {
  static constexpr int kKnown[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 120, 121, 130};
  const size_t dot = text.find('.');
  auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  if (dot != std::string_view::npos && dot <= 2 && text.size() == dot + 2 && digits(text.substr(0, dot)) &&
      digits(text.substr(dot + 1))) {
    int cc = std::stoi(std::string(text.substr(0, dot))) * 10 + (text[dot + 1] - '0');
    for (int known : kKnown) {
      if (cc == known) return cc;
    }
  }
  return Status(StatusCode::kInvalidArgument,
                fmt::format("compute capability '{}' is not one of 5.0, 5.2, 5.3, 6.0, 6.1, 6.2, 7.0, 7.2, 7.5, 8.0, "
                            "8.6, 8.7, 8.9, 9.0, 12.0, 12.1, 13.0",
                            text));
}

Status AgentConfig::Validate() const {
  auto bad = [](std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); };
  if (listen.empty()) return bad("listen address is empty");
  if (emulated_count < 0) return bad("emulated device count must not be negative");
  if (emulated_count > 0 && emulated_memory < (1ull << 20)) return bad("emulated device memory must be at least 1MiB");
  if (timing.lease_ttl.count() < 100) return bad("lease ttl must be at least 100ms");
  if (timing.reservation_ttl.count() < 100) return bad("reservation ttl must be at least 100ms");
  if (tls_cert.empty() != tls_key.empty()) return bad("[tls] needs both cert and key");
  if (directory_ttl.count() < 2000 || directory_ttl.count() > 3600000 || directory_ttl.count() % 1000 != 0) {
    return bad("[etcd] ttl must be whole seconds within 2s..1h");
  }
  if (!directory_advertise.empty()) {
    if (Status s = internal::CheckServerAddress(directory_advertise, "[etcd] advertise"); !s.ok()) return s;
  }
  if (!tls_ca.empty() && tls_cert.empty()) return bad("[tls] ca needs the agent's own cert and key");
  if (!tls_cert.empty() && listen.rfind("unix:", 0) == 0) {
    return bad("[tls] is for a TCP listen address (on a Unix socket the kernel authenticates peers)");
  }
  if (session_bytes_in_flight < (1ull << 20) || session_bytes_in_flight > (4ull << 30)) {
    return bad(fmt::format("[limits] session_bytes_in_flight must be within 1MiB..4GiB, not {} bytes",
                           session_bytes_in_flight));
  }
  if (hello_timeout < std::chrono::seconds(1) || hello_timeout > std::chrono::hours(1)) {
    return bad(fmt::format("[limits] hello_timeout must be within 1s..1h, not {}", FormatDuration(hello_timeout)));
  }
  if (sessions_per_device < 1 || sessions_per_device > kMaxSessionsPerDevice) {
    return bad(fmt::format("[limits] sessions_per_device must be within 1..{}", kMaxSessionsPerDevice));
  }
  if (sessions_per_lease < 1 || sessions_per_lease > kMaxSessionsPerLease) {
    return bad(fmt::format("[limits] sessions_per_lease must be within 1..{}", kMaxSessionsPerLease));
  }
  if (idle_after.count() < 1000) return bad("[telemetry] idle_after must be at least 1s");
  if (suspend_idle_after.count() != 0 && suspend_idle_after.count() < 1000) {
    return bad("[telemetry] suspend_idle_after must be at least 1s");
  }
  for (const std::string& agent : move_agents) {
    if (agent.empty() || agent == listen) {
      return bad("[moves] agents names other agents' addresses (host:port or unix:PATH), not '" + agent + "'");
    }
  }
  if (!suspend_spill_dir.empty() && suspend_spill_dir.front() != '/') {
    return bad("[telemetry] suspend_spill_dir must be an absolute path, not '" + suspend_spill_dir + "'");
  }
  if (!metrics_listen.empty() && metrics_listen.rfind("unix:", 0) == 0) {
    return bad("[metrics] listen must be host:port (Prometheus scrapes over TCP)");
  }
  if (timing.renew_interval.count() <= 0 || timing.renew_interval >= timing.lease_ttl) {
    return bad(fmt::format("renew interval ({} ms) must be positive and shorter than the lease ttl ({} ms)",
                           timing.renew_interval.count(), timing.lease_ttl.count()));
  }
  return Status::Ok();
}

Status LoadAgentConfig(const std::string& path, AgentConfig* config) {
  auto file = TomlFile::Load(path);
  if (!file.ok()) return file.status();
  config->config_path = path;
  return Read(*file, config);
}

Status ParseAgentConfig(std::string_view text, const std::string& name, AgentConfig* config) {
  auto file = TomlFile::Parse(text, name);
  if (!file.ok()) return file.status();
  return Read(*file, config);
}

}  // namespace gpupool::agent
