// What one session has done, for the agent's telemetry (gp-top, gp-ls, /metrics): calls served, bytes copied each
// way, device time used, device memory held, and when it was last called.
//
// The counters live in a small shared memory segment that the agent creates for each session worker
// (CreateSegment) and keeps mapped (Map): the worker adds to them on its hot path with relaxed atomic adds, no lock
// and no message; the agent reads them whenever it samples. A worker that dies (SIGKILL, a crash) leaves its last
// counts readable to the agent, which folds them into its lease's totals, so a lease's counters never go back.
#ifndef GPUPOOL_BACKEND_SESSION_METER_H_
#define GPUPOOL_BACKEND_SESSION_METER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "gpupool/status.h"

namespace gpupool::backend {

// One reading of a session's counters. All totals since the session opened.
struct MeterReading {
  uint64_t calls = 0;              // Calls served (each call of a batch counts).
  uint64_t bytes_to_device = 0;    // Host-to-device copies.
  uint64_t bytes_from_device = 0;  // Device-to-host copies.
  uint64_t busy_nanos = 0;         // Device time the session's work ran (emulated device: kernels executing).
  uint64_t memory_bytes = 0;       // Device memory the session holds now (not a total).
  int64_t last_call_unix_ms = 0;   // Wall clock of the last call; 0: none yet.
  bool busy_measured = false;      // Something counts busy_nanos (the device turns table); false: unknown, not 0.
};

struct MeterCounters;  // The shared layout, internal to session_meter.cc.

class SessionMeter {
 public:
  // A new, zeroed segment: returns its descriptor (close-on-exec).
  static Result<int> CreateSegment();
  // Maps the segment behind `fd` (the agent's copy or the worker's). The descriptor may be closed afterwards.
  static Result<std::unique_ptr<SessionMeter>> Map(int fd);
  // Counters in this process's own memory (a session hosted without an agent, as in tests and gp-bench).
  static std::unique_ptr<SessionMeter> Private();
  ~SessionMeter();
  SessionMeter(const SessionMeter&) = delete;
  SessionMeter& operator=(const SessionMeter&) = delete;

  void CountCalls(uint64_t n);
  void CountBytesToDevice(uint64_t n);
  void CountBytesFromDevice(uint64_t n);
  void CountBusy(std::chrono::nanoseconds d);
  // Says that device time is being counted (CountBusy), so that a reading's 0 means idle, not unknown.
  void MeasuresBusy();
  void SetMemory(uint64_t bytes);

  MeterReading Read() const;

 private:
  SessionMeter(MeterCounters* counters, bool shared) : counters_(counters), shared_(shared) {}

  MeterCounters* counters_;
  bool shared_;  // Mapped (unmapped at the end), or this process's own (deleted).
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_SESSION_METER_H_
