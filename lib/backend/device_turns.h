// Device turns: how the sessions of one device share its compute, across their worker processes, in proportion to
// their compute shares (`gp-run -p`).
//
// The agent creates one shared table per device (CreateSegment) and hands its descriptor to every session worker
// of that device; each worker joins the table with its share and its lease (Join) and asks for a turn before each
// kernel. One session runs at a time (a kernel of the emulated device already uses every core); the next turn goes
// to the waiting session whose lease has used the least device time for its share (stride scheduling: time used /
// share), and a running kernel yields at its next checkpoint once its time slice is over and a neighbour waits. So
// two busy tenants with 0.75 and 0.25 get 3:1 of the device's time, and a tenant alone gets all of it
// (work-conserving).
//
// The weight is the lease's, not the session's: every session of one lease on the device is a member of one group
// that is charged for all their device time, so eight processes of a 0.05 lease get 0.05 together, not eight
// times that. Within a group the member that has used least goes first.
//
// A worker may die at any moment (SIGKILL mid-kernel): the table notices through a robust mutex each member holds
// for its life, and the dead member's turn and slot are taken back. Nothing of this is trusted for isolation: a
// session can only slow its own neighbours down as far as its share lets it, never read or crash them.
#ifndef GPUPOOL_BACKEND_DEVICE_TURNS_H_
#define GPUPOOL_BACKEND_DEVICE_TURNS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "backend/session_meter.h"
#include "core/execution_gate.h"
#include "gpupool/status.h"

namespace gpupool::backend {

struct TurnsTable;  // The shared memory layout, internal to device_turns.cc.

class DeviceTurns final : public ExecutionGate {
 public:
  // Longest a running kernel keeps the device while another session waits for it.
  static constexpr int64_t kSliceNanos = 10'000'000;
  // Most members one table holds (sessions on one device): the agent refuses a session beyond its
  // [limits] sessions_per_device before it starts a worker, so this is never what a tenant meets.
  static constexpr int kMaxMembers = 128;

  // A new, empty table in anonymous shared memory: returns its descriptor (close-on-exec; the caller passes it to
  // each worker of the device and closes it when the device goes).
  static Result<int> CreateSegment();
  // Joins the table behind `fd` (the worker's end) with a share of `share_micros` millionths of the device, in the
  // group `group` (the agent's number for the lease on this device: members of one group share its share; 0: a
  // group of this member alone). The group's first member sets its share. Called on the thread that lives as long
  // as the process (membership is held by that thread). kResourceExhausted when kMaxMembers live members hold the
  // table.
  static Result<std::unique_ptr<DeviceTurns>> Join(int fd, uint32_t share_micros, uint64_t group = 0);
  // Tests only: locks the table behind `fd` and never unlocks it, as a member killed while it holds the lock
  // leaves it.
  static void LockTableForTesting(int fd);
  ~DeviceTurns() override;

  void Enter(const std::atomic<bool>& cancel) override;
  void Leave(bool more_queued) override;
  void Checkpoint(const std::atomic<bool>& cancel) override;

  // The submission path, for a device whose running work cannot be paused from outside (a GPU without MPS; an
  // emulated device with GPUPOOL_EMU_SUBMISSION_TURNS=1). No turn is held while work runs: the work of several
  // sessions runs at once and the device time-slices between them (a GPU's driver between contexts), so a long
  // kernel delays its neighbours by no more than the device's own slicing. Each member is charged the time its
  // work is in flight, divided among the members with work in flight then (what a time-slicing device gives each),
  // and shares are enforced by throttling: a submission of a lease more than one time slice (kSliceNanos of its
  // own device time) ahead of a neighbouring lease that wants the device waits until it no longer is, or until
  // `cancel` is set. A lease ahead at all of a neighbour that used the device lately keeps one submission's work in
  // flight at most, its members taking turns by their own use: work cannot be paused once it runs, so a lease's
  // overrun stays one submission's work, however many processes it has. Not mixed with Enter/Leave on one table.
  //
  // Before work reaches the device: waits while this member's lease is over its share (throttled).
  void WaitForShare(const std::atomic<bool>& cancel);
  // This member has work in flight from now (its first submission since it had none), or none any more.
  void WorkStarted();
  void WorkDrained();

  // Device time this member has used, in nanoseconds (for tests and telemetry).
  uint64_t used_nanos() const;
  // Counts the device time this member uses into `meter` as well. Before the first Enter.
  void MeterInto(std::shared_ptr<SessionMeter> meter) {
    meter->MeasuresBusy();
    meter_ = std::move(meter);
  }

 private:
  DeviceTurns(TurnsTable* table, int slot) : table_(table), slot_(slot) {}
  // With the table locked: waits until this member holds the turn (or `cancel` is set).
  void AcquireLocked(const std::atomic<bool>& cancel);
  // With the table locked: charges the time since the turn began.
  void ChargeLocked(int64_t now);
  // With the table locked: charges `nanos` of device time to this member and its lease.
  void ChargeNanosLocked(int64_t nanos, int64_t now);
  // With the table locked, on the submission path: charges the share of the device this member's work in flight
  // had since its last charge.
  void ChargeInFlightLocked(int64_t now);

  TurnsTable* table_;
  int slot_;
  // Threads of this process inside a kernel: the first to find the slice over yields and takes the turn back for
  // all of them; the others wait here meanwhile.
  std::mutex local_mu_;
  std::atomic<int64_t> slice_end_{0};
  bool holding_ = false;  // Guarded by local_mu_.
  std::shared_ptr<SessionMeter> meter_;
};

// Shares a device that cannot pause running work (see NewSessionServer) by throttling one session's submissions
// through the device's turns table (DeviceTurns's submission path): the table learns when the session has work in
// flight (from its first submission until none is left) and holds a submission back while the session's lease is
// over its share.
// Thread-safe: submissions come from the session's thread, completions from the device's.
class SubmissionTurns {
 public:
  explicit SubmissionTurns(std::shared_ptr<DeviceTurns> turns) : turns_(std::move(turns)) {}

  ~SubmissionTurns() {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_ > 0) turns_->WorkDrained();
  }

  // Before work reaches the device: waits while the lease is over its share.
  void BeforeSubmit() {
    // Not under mu_: completions (which only ever end the work in flight) must not wait behind a throttled
    // submission. The work counts as in flight only once it is let through: a throttled session is not charged.
    turns_->WaitForShare(cancel_);
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_++ == 0) turns_->WorkStarted();
  }

  // The submitted work has run: the last one out tells the table that none of this session's work is left.
  void Completed() {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_ > 0 && --in_flight_ == 0) turns_->WorkDrained();
  }

 private:
  std::shared_ptr<DeviceTurns> turns_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  int in_flight_ = 0;  // Guarded by mu_.
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_DEVICE_TURNS_H_
