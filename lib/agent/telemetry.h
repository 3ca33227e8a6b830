// The agent's telemetry: what each device and each lease is doing, sampled once a second from the session workers'
// meters (backend/session_meter.h) and, for physical GPUs, NVML (agent/gpu_monitor.h), and kept as a short history
// (the last 10 minutes) for gp-top, gp-ls and /metrics.
#ifndef GPUPOOL_AGENT_TELEMETRY_H_
#define GPUPOOL_AGENT_TELEMETRY_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu_monitor.h"
#include "agent/session_worker.h"
#include "backend/session_meter.h"

namespace gpupool::agent {

// One sample of a device's or a lease's activity over the last sampling interval.
struct ActivitySample {
  int64_t unix_ms = 0;                // When it was taken.
  uint64_t memory_used = 0;           // Device memory in use now, bytes.
  std::optional<double> utilization;  // 0..1: the share of the interval the device ran this one's work.
  double calls_per_s = 0;
  double bytes_to_device_per_s = 0;
  double bytes_from_device_per_s = 0;
  std::optional<double> temperature_c;  // Physical GPUs (NVML) only.
  std::optional<double> power_w;        // Physical GPUs (NVML) only.
};

struct ActivityHistory {
  ActivitySample latest;
  std::deque<ActivitySample> samples;  // Oldest first; `latest` is the last one.
};

// One running session (one process's work on one slice) over the last interval.
struct SessionActivity {
  pid_t pid = 0;
  uint32_t device = 0;
  ActivitySample latest;
};

struct LeaseActivity : ActivityHistory {
  backend::MeterReading totals;  // Everything its sessions did, ended sessions included (memory: held now).
  int sessions = 0;              // Running now.
  std::vector<SessionActivity> per_session;  // The running ones, by worker process.
  // Wall clock of its last sign of life: a call, or its work running on a device (a long kernel or a wait
  // makes no calls, and is not idle); 0: none yet.
  int64_t last_active_unix_ms = 0;
};

struct DeviceActivity : ActivityHistory {
  uint64_t busy_nanos = 0;  // Device time its sessions' work ran, in total (emulated devices and shared GPUs).
};

class Telemetry {
 public:
  static constexpr size_t kHistorySamples = 600;  // 10 minutes at one sample a second.

  explicit Telemetry(size_t devices) : devices_(devices) {}

  // Takes one sample at `unix_ms`, `interval_s` after the previous one, from the running sessions, the totals of
  // ended ones, and per device what NVML says (nullopt: an emulated device, or NVML could not tell).
  void Sample(int64_t unix_ms, double interval_s, const std::vector<SessionWorkers::SessionView>& sessions,
              const std::map<std::string, backend::MeterReading>& retired,
              const std::vector<std::optional<GpuGauges>>& gpus);

  const DeviceActivity& device(size_t index) const { return devices_[index]; }
  // Null for a lease none of whose processes has opened a session yet.
  const LeaseActivity* lease(const std::string& id) const;

 private:
  std::vector<DeviceActivity> devices_;
  std::map<std::string, LeaseActivity> leases_;
  std::map<pid_t, backend::MeterReading> previous_;  // Per running session: its reading at the last sample.
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_TELEMETRY_H_
