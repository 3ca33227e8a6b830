#include "client/state_json.h"

#include <algorithm>

#include "core/json.h"

namespace gpupool {
namespace {

void Optional(JsonWriter& w, const char* key, const std::optional<double>& v) {
  w.Key(key);
  v ? w.Double(*v) : w.Null();
}

// A telemetry sample's fields, inside an object being written.
void ActivityFields(JsonWriter& w, const Activity& a) {
  w.Key("memory_used_bytes").UInt(a.memory_used);
  Optional(w, "utilization", a.utilization);
  w.Key("calls_per_s").Double(a.calls_per_s);
  w.Key("bytes_to_device_per_s").Double(a.bytes_to_device_per_s);
  w.Key("bytes_from_device_per_s").Double(a.bytes_from_device_per_s);
}

void History(JsonWriter& w, const std::vector<Activity>& history) {
  w.Key("history").BeginArray();
  for (const Activity& a : history) {
    w.BeginObject().Key("at_unix_s").Double(a.at_unix_s);
    ActivityFields(w, a);
    Optional(w, "temperature_c", a.temperature_c);
    Optional(w, "power_w", a.power_w);
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace

// Boilerplate by nature: the pool's state field by field, each object written alike.
std::string PoolStateJson(const PoolState& state, const StateJsonOptions& options) {
  JsonWriter w;
  w.BeginObject().Key("schema_version").Int(kStateJsonSchemaVersion).Key("servers").BeginArray();
  for (const ServerInfo& s : state.servers) {
    w.BeginObject().Key("address").String(s.address).Key("up").Bool(s.up);
    w.Key("name");
    s.up ? w.String(s.name) : w.Null();
    w.Key("error");
    s.up ? w.Null() : w.String(s.error);
    w.Key("draining");
    s.up ? w.Bool(s.draining) : w.Null();
    w.Key("moves_untold");
    s.up ? w.UInt(s.moves_untold) : w.Null();
    w.Key("protocol_version");
    s.up ? w.UInt(s.protocol_version) : w.Null();
    w.Key("lease_ttl_s");
    s.up ? w.Double(s.lease_ttl_s) : w.Null();
    w.Key("idle_after_s");
    s.up && s.idle_after_s > 0 ? w.Double(s.idle_after_s) : w.Null();
    w.Key("personality");
    s.up && !s.personality.empty() ? w.String(s.personality) : w.Null();
    w.Key("personality_next");
    s.up && !s.personality_next.empty() ? w.String(s.personality_next) : w.Null();
    // From the pool's directory alone: no slices, activity or lease list; `lease_count` instead.
    w.Key("summary").Bool(s.summary);
    w.Key("lease_count");
    s.summary ? w.UInt(s.lease_count) : w.UInt(s.leases.size());
    w.Key("devices").BeginArray();
    for (const DeviceInfo& d : s.devices) {
      w.BeginObject()
          .Key("index").UInt(d.index)
          .Key("uuid").String(d.uuid)
          .Key("model").String(d.model)
          .Key("class");
      d.device_class.empty() ? w.Null() : w.String(d.device_class);
      w.Key("emulated").Bool(d.emulated)
          .Key("memory_total_bytes").UInt(d.memory_total)
          .Key("memory_allocated_bytes").UInt(d.memory_allocated)
          .Key("compute_allocated").Double(d.compute_allocated)
          .Key("cordoned").Bool(d.cordoned);
      ActivityFields(w, d.activity);
      Optional(w, "temperature_c", d.activity.temperature_c);
      Optional(w, "power_w", d.activity.power_w);
      w.Key("slices").BeginArray();
      for (const SliceInfo& sl : d.slices) {
        w.BeginObject()
            .Key("lease").String(sl.lease_id)
            .Key("memory_bytes").UInt(sl.memory_bytes)
            .Key("compute_share").Double(sl.compute_share)
            .Key("committed").Bool(sl.committed)
            .EndObject();
      }
      w.EndArray();
      if (options.history) History(w, d.history);
      w.EndObject();
    }
    w.EndArray();
    if (options.leases) {
      w.Key("leases").BeginArray();
      for (const LeaseInfo& l : s.leases) {
        w.BeginObject()
            .Key("id").String(l.id)
            .Key("user").String(l.user)
            .Key("user_verified").Bool(l.user_verified)
            .Key("user_claimed").String(l.user_claimed)
            .Key("host").String(l.host)
            .Key("pid").UInt(l.pid)
            .Key("label").String(l.label)
            .Key("committed").Bool(l.committed)
            .Key("expires_in_s").Double(l.expires_in_s)
            .Key("age_s").Double(l.age_s)
            .Key("memory_bytes").UInt(l.memory_bytes);
        ActivityFields(w, l.activity);
        w.Key("sessions").UInt(l.sessions)
            .Key("calls_total").UInt(l.calls_total)
            .Key("bytes_to_device_total").UInt(l.bytes_to_device_total)
            .Key("bytes_from_device_total").UInt(l.bytes_from_device_total)
            .Key("idle_s").Double(l.idle_s)
            .Key("idle").Bool(l.idle)
            .Key("suspended").Bool(l.suspended)
            .Key("devices").BeginArray();
        for (uint32_t d : l.devices) w.UInt(d);
        w.EndArray().Key("session_list").BeginArray();
        for (const SessionInfo& one : l.session_list) {
          w.BeginObject().Key("device").UInt(one.device).Key("worker_pid").UInt(one.worker_pid);
          ActivityFields(w, one.activity);
          w.EndObject();
        }
        w.EndArray();
        if (options.history) History(w, l.history);
        w.EndObject();
      }
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("directory");
  state.directory.empty() ? w.Null() : w.String(state.directory);
  w.Key("directory_error");
  state.directory_error.empty() ? w.Null() : w.String(state.directory_error);
  w.Key("directory_watched").Bool(state.directory_watched);
  w.EndObject();
  return w.str();
}

std::string ShownUser(const LeaseInfo& lease) {
  if (lease.user_verified) return lease.user;
  return lease.user_claimed.empty() ? lease.user + " (unverified)"
                                    : lease.user + " (claims " + lease.user_claimed + ")";
}

namespace {

void KeepOnlyAgents(PoolState* state, const std::vector<std::string>& agents) {
  if (agents.empty()) return;
  std::vector<ServerInfo> kept;
  for (ServerInfo& s : state->servers) {
    if (std::find(agents.begin(), agents.end(), s.name) != agents.end() ||
        std::find(agents.begin(), agents.end(), s.address) != agents.end()) {
      kept.push_back(std::move(s));
    }
  }
  state->servers = std::move(kept);
}

}  // namespace

PoolState ShownPool(Pool& pool, bool detail, const std::vector<std::string>& agents, std::chrono::seconds history) {
  if (!pool.has_directory()) {
    PoolState state = pool.State(history);
    KeepOnlyAgents(&state, agents);
    return state;
  }
  PoolState summary = pool.Summary();
  KeepOnlyAgents(&summary, agents);
  // A directory that did not answer: the agents known were described already (Pool::Summary's fallback).
  if (!detail || !summary.directory_error.empty()) return summary;
  std::vector<std::string> shown;
  for (const ServerInfo& s : summary.servers) shown.push_back(s.address);
  PoolState described = pool.Describe(shown, history);
  described.directory = summary.directory;
  described.directory_watched = summary.directory_watched;
  return described;
}

}  // namespace gpupool
