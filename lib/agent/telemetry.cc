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

// What a meter counted between two readings: totals as differences (a total that went back, which cannot happen,
// counts as nothing), the memory held and the last call as they are now.
backend::MeterReading Since(const backend::MeterReading& now, const backend::MeterReading& before) {
  auto diff = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
  backend::MeterReading d = now;
  d.calls = diff(now.calls, before.calls);
  d.bytes_to_device = diff(now.bytes_to_device, before.bytes_to_device);
  d.bytes_from_device = diff(now.bytes_from_device, before.bytes_from_device);
  d.busy_nanos = diff(now.busy_nanos, before.busy_nanos);
  return d;
}

// The sample of what `delta` (Since) counted over `interval_s`, its device time shared by `spread` devices (busy on
// one of two GPUs is 50 %); utilisation unknown where device time is not measured.
ActivitySample SampleOf(int64_t unix_ms, const backend::MeterReading& delta, double interval_s, size_t spread = 1) {
  ActivitySample a;
  a.unix_ms = unix_ms;
  a.memory_used = delta.memory_bytes;
  if (interval_s <= 0) return a;
  a.calls_per_s = static_cast<double>(delta.calls) / interval_s;
  a.bytes_to_device_per_s = static_cast<double>(delta.bytes_to_device) / interval_s;
  a.bytes_from_device_per_s = static_cast<double>(delta.bytes_from_device) / interval_s;
  if (delta.busy_measured) {
    a.utilization = std::min(1.0, static_cast<double>(delta.busy_nanos) / (interval_s * 1e9 * static_cast<double>(spread)));
  }
  return a;
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
  std::vector<backend::MeterReading> device_deltas(devices_.size());
  // A device's time is known when every session on it measures its own (a device without sessions is idle).
  std::vector<bool> busy_known(devices_.size(), true);
  std::map<pid_t, backend::MeterReading> now_by_pid;
  std::map<std::string, LeaseActivity> leases;
  std::map<std::string, std::set<uint32_t>> lease_devices;
  for (const auto& s : sessions) {
    now_by_pid[s.pid] = s.reading;
    auto before = previous_.find(s.pid);
    const backend::MeterReading delta =
        Since(s.reading, before != previous_.end() ? before->second : backend::MeterReading{});
    if (s.device < devices_.size()) {
      Add(device_deltas[s.device], delta);
      busy_known[s.device] = busy_known[s.device] && delta.busy_measured;
    }
    LeaseActivity& l = leases[s.lease_id];
    Add(l.totals, s.reading);
    ++l.sessions;
    l.per_session.push_back({s.pid, s.device, SampleOf(unix_ms, delta, interval_s)});
    lease_devices[s.lease_id].insert(s.device);
  }
  previous_ = std::move(now_by_pid);
  for (size_t i = 0; i < devices_.size(); ++i) {
    DeviceActivity& d = devices_[i];
    d.busy_nanos += device_deltas[i].busy_nanos;
    device_deltas[i].busy_measured = busy_known[i];
    ActivitySample a = SampleOf(unix_ms, device_deltas[i], interval_s);
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
    backend::MeterReading delta = Since(l.totals, before);
    l.last_active_unix_ms = std::max(l.last_active_unix_ms, l.totals.last_call_unix_ms);
    if (delta.busy_nanos > 0) l.last_active_unix_ms = unix_ms;
    // Unknown where its device time is not measured (a GPU shared by MPS: its sessions take no turns).
    delta.busy_measured = l.totals.busy_measured || l.sessions == 0;
    ActivitySample a = SampleOf(unix_ms, delta, interval_s, std::max<size_t>(1, lease_devices[id].size()));
    Record(l, a);
  }
  leases_ = std::move(leases);
}

const LeaseActivity* Telemetry::lease(const std::string& id) const {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : &it->second;
}

}  // namespace gpupool::agent
