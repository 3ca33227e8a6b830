#include "agent/telemetry.h"

#include <algorithm>
#include <set>

namespace gpupool::agent {
namespace {

void Add(backend::MeterReading& total, const backend::MeterReading& r) {
  total.calls += r.calls;
  total.bytes_to_device += r.bytes_to_device;
  total.bytes_from_device += r.bytes_from_device;
  total.busy_nanos += r.busy_nanos;
  total.memory_bytes += r.memory_bytes;
  total.last_call_unix_ms = std::max(total.last_call_unix_ms, r.last_call_unix_ms);
  total.busy_measured = total.busy_measured || r.busy_measured;
}

// Per second, from two totals `interval_s` apart; a total that went back (cannot happen, but a rate must never
// be negative) counts as nothing.
double Rate(uint64_t now, uint64_t before, double interval_s) {
  return now > before && interval_s > 0 ? static_cast<double>(now - before) / interval_s : 0;
}

void Record(ActivityHistory& h, const ActivitySample& s) {
  h.latest = s;
  h.samples.push_back(s);
  while (h.samples.size() > Telemetry::kHistorySamples) h.samples.pop_front();
}

}  // namespace

void Telemetry::Sample(int64_t unix_ms, double interval_s, const std::vector<SessionWorkers::SessionView>& sessions,
                       const std::map<std::string, backend::MeterReading>& retired,
                       const std::vector<std::optional<GpuGauges>>& gpus) {
  // Devices: what their running sessions did since the last sample (a session that ended meanwhile loses its
  // last partial interval here; its lease's totals keep it).
  std::vector<uint64_t> busy(devices_.size()), memory(devices_.size()), calls(devices_.size()),
      to_device(devices_.size()), from_device(devices_.size());
  // Whether a device's time is measured: by its sessions' turns (a device without sessions is idle, so known).
  std::vector<bool> busy_unknown(devices_.size(), false);
  std::map<pid_t, backend::MeterReading> now_by_pid;
  std::map<std::string, LeaseActivity> leases;
  std::map<std::string, std::set<uint32_t>> lease_devices;
  for (const auto& s : sessions) {
    now_by_pid[s.pid] = s.reading;
    auto before = previous_.find(s.pid);
    backend::MeterReading b = before != previous_.end() ? before->second : backend::MeterReading{};
    if (s.device < devices_.size()) {
      busy[s.device] += s.reading.busy_nanos - std::min(b.busy_nanos, s.reading.busy_nanos);
      calls[s.device] += s.reading.calls - std::min(b.calls, s.reading.calls);
      to_device[s.device] += s.reading.bytes_to_device - std::min(b.bytes_to_device, s.reading.bytes_to_device);
      from_device[s.device] +=
          s.reading.bytes_from_device - std::min(b.bytes_from_device, s.reading.bytes_from_device);
      memory[s.device] += s.reading.memory_bytes;
      if (!s.reading.busy_measured) busy_unknown[s.device] = true;
    }
    LeaseActivity& l = leases[s.lease_id];
    Add(l.totals, s.reading);
    ++l.sessions;
    SessionActivity one{s.pid, s.device, {}};
    one.latest.unix_ms = unix_ms;
    one.latest.memory_used = s.reading.memory_bytes;
    one.latest.calls_per_s = Rate(s.reading.calls, b.calls, interval_s);
    one.latest.bytes_to_device_per_s = Rate(s.reading.bytes_to_device, b.bytes_to_device, interval_s);
    one.latest.bytes_from_device_per_s = Rate(s.reading.bytes_from_device, b.bytes_from_device, interval_s);
    if (interval_s > 0 && s.reading.busy_measured) {
      one.latest.utilization = std::min(1.0, Rate(s.reading.busy_nanos, b.busy_nanos, interval_s) / 1e9);
    }
    l.per_session.push_back(one);
    lease_devices[s.lease_id].insert(s.device);
  }
  previous_ = std::move(now_by_pid);
  for (size_t i = 0; i < devices_.size(); ++i) {
    DeviceActivity& d = devices_[i];
    d.busy_nanos += busy[i];
    ActivitySample a;
    a.unix_ms = unix_ms;
    a.memory_used = memory[i];
    a.calls_per_s = interval_s > 0 ? calls[i] / interval_s : 0;
    a.bytes_to_device_per_s = interval_s > 0 ? to_device[i] / interval_s : 0;
    a.bytes_from_device_per_s = interval_s > 0 ? from_device[i] / interval_s : 0;
    if (interval_s > 0 && !busy_unknown[i]) a.utilization = std::min(1.0, busy[i] / (interval_s * 1e9));
    if (i < gpus.size() && gpus[i]) {  // A physical GPU: what the driver says of the whole device wins.
      const GpuGauges& g = *gpus[i];
      if (g.utilization) a.utilization = g.utilization;
      if (g.memory_used) a.memory_used = *g.memory_used;
      a.temperature_c = g.temperature_c;
      a.power_w = g.power_w;
    }
    Record(d, a);
  }
  // Leases: their totals (ended sessions' included) against the last sample's.
  for (const auto& [id, r] : retired) {
    LeaseActivity& l = leases[id];
    Add(l.totals, r);
  }
  for (auto& [id, l] : leases) {
    auto old = leases_.find(id);
    const backend::MeterReading before = old != leases_.end() ? old->second.totals : backend::MeterReading{};
    if (old != leases_.end()) {
      static_cast<ActivityHistory&>(l) = std::move(old->second);
      l.last_active_unix_ms = old->second.last_active_unix_ms;
    }
    l.last_active_unix_ms = std::max(l.last_active_unix_ms, l.totals.last_call_unix_ms);
    if (l.totals.busy_nanos > before.busy_nanos) l.last_active_unix_ms = unix_ms;
    ActivitySample a;
    a.unix_ms = unix_ms;
    a.memory_used = l.totals.memory_bytes;
    a.calls_per_s = Rate(l.totals.calls, before.calls, interval_s);
    a.bytes_to_device_per_s = Rate(l.totals.bytes_to_device, before.bytes_to_device, interval_s);
    a.bytes_from_device_per_s = Rate(l.totals.bytes_from_device, before.bytes_from_device, interval_s);
    // Of the devices it runs on: busy on one of two GPUs is 50 %.
    size_t spread = std::max<size_t>(1, lease_devices[id].size());
    // Unknown where its device time is not measured (a GPU shared by MPS: its sessions take no turns).
    if (interval_s > 0 && (l.totals.busy_measured || l.sessions == 0)) {
      a.utilization = std::min(1.0, Rate(l.totals.busy_nanos, before.busy_nanos, interval_s) / (1e9 * spread));
    }
    Record(l, a);
  }
  leases_ = std::move(leases);
}

const LeaseActivity* Telemetry::lease(const std::string& id) const {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : &it->second;
}

}  // namespace gpupool::agent
