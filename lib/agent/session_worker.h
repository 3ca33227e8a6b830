// Session workers: each CUDA session of gp-agent runs in its own child process (gp-agent --session-worker FD), so
// that a segfault, an abort, a kernel that never ends or a sticky error of one tenant ends that session alone.
// The agent keeps leases and placement; it spawns a worker per session, hands the worker's Session capability to
// the client (Cap'n Proto forwards the calls), kills the worker when the lease ends, and reaps it.
//
// Compute share: the workers of one emulated device take turns on it through a table the agent shares with them
// (backend/device_turns.h): under contention each lease gets device time in proportion to its share (all its
// sessions on the device together), a session alone gets all of it, and a kernel that never ends is paused at its
// time slice's end. On a physical GPU served by an MPS daemon the worker sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to
// its share; without MPS the GPU's driver time-slices the contexts and the session server holds back the
// submissions of a lease over its share (DeviceTurns::WaitForShare). A worker without a turns table only runs at
// the CFS weight (nice value) nearest its share, which orders its CPU side alone.
#ifndef GPUPOOL_AGENT_SESSION_WORKER_H_
#define GPUPOOL_AGENT_SESSION_WORKER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kj/async-io.h>

#include "agent/worker_cgroup.h"
#include "agent/worker_sandbox.h"
#include "backend/session_meter.h"
#include "gpupool/status.h"
#include "session.capnp.h"
#include "worker.capnp.h"

namespace gpupool::agent {

// The argument that makes gp-agent run as a session worker: `gp-agent --session-worker FD`.
inline constexpr const char kSessionWorkerFlag[] = "--session-worker";

// Runs the session worker on the connected socket `fd` until its session is closed or the agent goes away, confined
// first as `sandbox` (WorkerSandbox::Encode; "" for none) says. Returns the process exit code.
int RunSessionWorker(int fd, std::string_view sandbox);

// The nice value whose CFS weight is closest to `share_micros` millionths of nice 0's weight (0 for a whole
// device, 19 at most).
int NiceForShare(uint32_t share_micros);

struct WorkerSpec {
  std::string lease_id;
  uint32_t device = 0;  // The device's index on the agent (for telemetry).
  bool emulated = true;
  std::string device_name;
  int compute_capability = 75;  // Emulated devices: major * 10 + minor.
  std::string nvml_uuid;
  uint64_t memory_bytes = 0, window_base = 0, window_bytes = 0;
  uint8_t uuid[16] = {};
  int pci_bus = 0, pci_device = 0;
  uint32_t share_micros = 1000000;
  std::string cuda_driver;
  int turns_fd = -1;  // The device's turns table (DeviceTurns::CreateSegment), or -1: none.
  uint64_t turns_group = 0;  // The lease's group in it (DeviceTurns::Join): one weight for the lease's sessions.
  int quota_fd = -1;  // The slice's quota table (SliceQuota::CreateSegment), or -1: the session's own quota.
  // Where the worker listens for its client's direct connection ("host:0", "unix:PATH"); empty: nowhere.
  std::string direct_listen;
  uint64_t bytes_in_flight = 0;  // backend::SessionLimits::bytes_in_flight; 0: its default.
  // A moved session: the worker opens it restored from this image (SessionWorkers::Checkpoint's), after
  // `restore_consumed` of its client's call frames. Null: a fresh session.
  std::shared_ptr<const std::vector<uint8_t>> restore_image;
  uint64_t restore_consumed = 0;
  // Emulated devices: the memory file of the session's last worker (MemoryFileOf), which the new one maps in its
  // place, holding the session's memory (memory_kept: a move within the agent whose checkpoint left the bytes there).
  // -1: a file of its own.
  int memory_fd = -1;
  bool memory_kept = false;
};

// Where the client reaches the worker itself (wire::DirectSession).
struct DirectDoor {
  uint16_t port = 0;
  std::string path;
  std::string ticket;
};

struct OpenedSession {
  Status status;
  kj::Maybe<wire::Session::Client> session;
  kj::Maybe<DirectDoor> direct;
  bool window_taken = false;  // The worker's device could not have the session's window: another may do.
};

// The agent's side: spawns, tracks, kills and reaps workers. Lives on the agent's event-loop thread.
class SessionWorkers {
 public:
  // Each worker confines itself as `sandbox` says (ResolveWorkerSandbox), with an address-space cap of its
  // emulated device's window plus `memory_limit` bytes (0: none; [workers] memory_limit). Where `cgroups` is
  // usable, each worker also goes into a group of its own whose memory.max is that cap (`memory_limit` alone for a
  // physical GPU's worker, whose device memory is not the host's), removed once the worker is reaped; a worker that
  // cannot be put there is killed and its session refused.
  // REQUIRES: kj::UnixEventPort::captureChildExit() was called before any thread started.
  SessionWorkers(kj::AsyncIoContext& io, WorkerSandbox sandbox, uint64_t memory_limit,
                 WorkerCgroups cgroups = WorkerCgroups());
  ~SessionWorkers();

  // Spawns a worker and opens the session in it.
  kj::Promise<OpenedSession> Open(const WorkerSpec& spec);
  // A moved session's image and the call frames it had consumed, or why there is none (the worker is then killed).
  struct RestoreInput {
    Status status;
    std::shared_ptr<const std::vector<uint8_t>> image;
    uint64_t consumed = 0;
  };
  // As Open, for a session restored from an image that comes later: the worker starts now (its process, its
  // sandbox and its connection), while the old worker is still being checkpointed, and is sent the image when
  // `restore` gives it. `spec`'s own restore_image is ignored.
  kj::Promise<OpenedSession> OpenRestoring(const WorkerSpec& spec, kj::Promise<RestoreInput> restore) {
    return Start(spec, kj::mv(restore));
  }
  // Kills (SIGKILL) every worker of the lease: its sessions end, the OS frees their memory and contexts. Each is
  // first told to revoke its session (every later call of its client answers "the lease ended"); resolves once
  // all have, or after a bounded wait.
  kj::Promise<void> KillLease(const std::string& lease_id, const std::string& why);
  size_t running() const { return workers_.size(); }

  // A lease's session as a move sees it: its worker, how it was opened, and where its client reaches it.
  struct LeaseSession {
    pid_t pid = 0;
    WorkerSpec spec;
    DirectDoor door;  // Empty ticket: the session has no direct connection (it cannot move).
  };
  // The sessions of `lease_id` that serve now (started, opened, not ended).
  std::vector<LeaseSession> SessionsOf(const std::string& lease_id) const;
  // For a move: the session of worker `pid` stopped at a frame boundary and checkpointed once quiet (within
  // `quiet_within`): its image and the call frames it consumed. The worker then serves nothing until Resume, or
  // Retire. Not ok: why not, and the session serves on.
  struct Checkpointed {
    Status status;
    uint64_t consumed = 0;
    std::shared_ptr<std::vector<uint8_t>> image;
    bool placed_by_driver = false;  // A restore may be refused (worker.capnp, checkpoint).
    bool memory_stayed = false;     // The image leaves the allocations' bytes in the worker's memory file.
  };
  // `memory_stays`: the session's next worker gets this one's memory file (MemoryFileOf), so the image may leave the
  // allocations' bytes there.
  kj::Promise<Checkpointed> Checkpoint(pid_t pid, kj::Duration quiet_within, bool memory_stays = false);
  // The memory file of worker `pid`'s emulated device (WorkerSpec::memory_fd), or -1: none (a GPU, or no such worker).
  int MemoryFileOf(pid_t pid) const;
  // The move was abandoned: the checkpointed session serves its client again.
  void Resume(pid_t pid);
  // The session moved: its worker is killed (its client finds the connection gone and follows the session).
  void Retire(pid_t pid);
  // Workers of `device`, and of the lease `lease_id` on it, that hold or may still hold a place in its turns and
  // quota tables: starting, serving, or ended but not yet reaped.
  size_t OnDevice(uint32_t device) const;
  size_t OfLease(const std::string& lease_id, uint32_t device) const;

  // A running session as the agent's telemetry sees it.
  struct SessionView {
    std::string lease_id;
    uint32_t device = 0;
    pid_t pid = 0;
    backend::MeterReading reading;
  };
  std::vector<SessionView> Sessions() const;
  // Per lease: what its ended sessions did, in total (their memory went with them: memory_bytes is 0).
  const std::map<std::string, backend::MeterReading>& retired() const { return retired_; }
  // The lease ended and its sessions are reaped: its totals go.
  void ForgetRetired(const std::string& lease_id) { retired_.erase(lease_id); }

 private:
  // Open and OpenRestoring: without `restore`, a fresh session.
  kj::Promise<OpenedSession> Start(const WorkerSpec& spec, kj::Maybe<kj::Promise<RestoreInput>> restore);
  struct Worker;
  void Reap(pid_t pid, int status);
  // A moved session's image to a new worker, in pieces from `offset`.
  kj::Promise<void> SendImage(wire::SessionWorker::Client worker, std::shared_ptr<const std::vector<uint8_t>> image,
                              size_t offset);
  // A checkpoint's image from its worker, in pieces from `offset`, into `image` (sized to the length announced).
  kj::Promise<void> FetchImage(wire::SessionWorker::Client worker, std::shared_ptr<std::vector<uint8_t>> image,
                               uint64_t offset);
  // Kills a worker whose session did not open, as the agent's doing (Reap then reports no crash).
  void KillFailedToOpen(pid_t pid, kj::StringPtr why);

  kj::AsyncIoContext& io_;
  WorkerSandbox sandbox_;
  uint64_t memory_limit_ = 0;
  WorkerCgroups cgroups_;
  std::map<pid_t, kj::Own<Worker>> workers_;
  std::map<std::string, backend::MeterReading> retired_;
  kj::Own<kj::TaskSet> reapers_;
  kj::Own<kj::TaskSet::ErrorHandler> reaper_errors_;
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_SESSION_WORKER_H_
