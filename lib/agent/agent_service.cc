#include "agent/agent_service.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>

#include "agent/auth.h"
#include "agent/gpu_monitor.h"
#include "agent/image_spill.h"
#include "agent/lease_table.h"
#include "agent/lease_transfer.h"
#include "agent/directory_publisher.h"
#include "agent/metrics.h"
#include "agent/refusal_log.h"
#include "agent/session_worker.h"
#include "agent/socket_claim.h"
#include "agent/systemd_notify.h"
#include "agent/telemetry.h"
#include "core/tls.h"
#include "backend/cuda/cuda_driver.h"
#include "backend/device_turns.h"
#include "backend/session_image_stream.h"
#include "backend/slice_quota.h"
#include "core/log.h"
#include "core/test_seams.h"
#include "core/util.h"
#include "gpupool/units.h"
#include "schema/outcome.h"
#include "pool.capnp.h"

namespace gpupool::agent {
namespace {

// Where a session's address window must end: x86-64's and AArch64's 47-bit user address space (4-level pages; a
// window above it could not be mapped by the worker).
constexpr uint64_t kMaxWindowEnd = uint64_t{1} << 47;

// Whether a session's address window [base, base + window) may hold a slice of `slice_bytes`.
Status WindowFits(uint64_t base, uint64_t window, uint64_t slice_bytes) {
  if (base == 0 || base % (1ull << 30) != 0 || window < slice_bytes) {
    return Status(StatusCode::kInvalidArgument, "the address window must be 1 GiB aligned and hold the slice");
  }
  // A worker maps its window in its own address space (an emulated device's memory, a GPU's unified addresses):
  // one beyond the user address space could only fail there, after a worker started for nothing.
  if (base >= kMaxWindowEnd || window > kMaxWindowEnd - base) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the address window [0x{:x}, +0x{:x}) must end below 0x{:x}, the user address space of "
                              "the session's worker",
                              base, window, kMaxWindowEnd));
  }
  return Status::Ok();
}

std::string DirectListen(const std::string& configured);

// A move between agents dies here, at `step` (test_seams::MoveFault): the agent is killed, as by a crash.
void DieAtMoveStep(std::string_view step) {
  if (std::string_view(test_seams::MoveFault()) != step) return;
  GP_WARN("agent", "killed at the move's step {} (test seam GPUPOOL_MOVE_FAULT)", step);
  raise(SIGKILL);
}

struct AgentState;
// Why the policy in force keeps suspended lease `e` suspended (on_change = "migrate"), or empty (below).
std::string PolicyHoldsSuspended(const AgentState& state, const LeaseEntry& e);

struct AgentState {
  AgentConfig config;
  std::vector<DeviceRecord> devices;
  LeaseTable table;
  // The system CUDA driver, loaded when physical GPUs are present; why not, when it could not be.
  std::shared_ptr<backend::CudaDriver> cuda;
  std::string cuda_error = "no physical GPU";
  // Every session runs in a worker process of its own; a lease's end kills its workers.
  kj::Own<SessionWorkers> workers;
  // systemd's readiness protocol, when the agent runs as a Type=notify service.
  SystemdNotifier systemd;

  // Per device: the table through which its sessions take turns (backend/device_turns.h); -1 until
  // the device's first session.
  std::vector<int> turns_fds;
  // Per (lease, device): the quota table the lease's sessions on that slice share (backend/slice_quota.h).
  std::map<std::pair<std::string, uint32_t>, int> quota_fds;
  // Per (lease, device): the lease's group in the device's turns table, whose share its sessions share. Numbered by
  // the agent, never by a client: two leases never share a weight.
  std::map<std::pair<std::string, uint32_t>, uint64_t> turns_groups;
  uint64_t next_turns_group = 1;
  // What each device and lease is doing (sampled every kSampleInterval), and NVML for the physical GPUs (null:
  // none, or no NVML).
  Telemetry telemetry;
  std::unique_ptr<GpuMonitor> gpus;
  Clock::time_point last_sample = Clock::now();
  AgentCounters counters;
  TokenTable tokens;  // TCP clients' per-user tokens (config.tokens_file).
  std::string own_user = UserNameOf(geteuid());  // The agent's own user: an administrator of it.
  kj::Timer* timer = nullptr;                     // The event loop's, for TLS handshake deadlines.
  std::string personality;  // In force at the last sweep (for the log).
  const std::string instance_id = RandomHex(16);  // This run of the agent, whatever address reaches it.
  // Why each lease this agent ended did end (expired, revoked by an administrator, ended by the policy, released):
  // what its holder's next renewal is told, so that it can say why it lost the lease. A lease with no reason here
  // was never seen by this run of the agent: it restarted. Bounded: the oldest reasons go first, and with
  // kEndReasons of them a holder that renews every few seconds hears its own long before it goes.
  static constexpr size_t kEndReasons = 4096;
  std::map<std::string, std::string> end_reasons;
  std::deque<std::string> end_order;
  void RememberEnd(const std::string& lease_id, std::string why) {
    if (end_reasons.insert_or_assign(lease_id, std::move(why)).second) end_order.push_back(lease_id);
    while (end_order.size() > kEndReasons) {
      end_reasons.erase(end_order.front());
      end_order.pop_front();
    }
  }
  RefusalLog refusals;  // The policy's refusals of reservations, for the log.

  // A renewal's answer for a lease the table does not hold: kNotFound, "lease ID lost: why".
  Status Lost(const std::string& lease_id) const {
    auto it = end_reasons.find(lease_id);
    return Status(StatusCode::kNotFound,
                  fmt::format("lease {} lost: {}", lease_id,
                              it != end_reasons.end()
                                  ? it->second
                                  : fmt::format("agent {} restarted and no longer knows it", config.name)));
  }

  // Resolves once the lease's sessions are revoked (their clients' next calls fail, saying `why`), or after a
  // bounded wait.
  kj::Promise<void> EndSessions(const std::string& lease_id, const std::string& why) {
    kj::Promise<void> revoked = workers->KillLease(lease_id, why);
    ForgetLease(lease_id, why);
    return revoked;
  }

  // Forgets what the agent keeps of lease `lease_id` beside its table entry and its workers (its slices' tables,
  // where its sessions moved, its suspended images), remembering `why` it is no longer here.
  void ForgetLease(const std::string& lease_id, const std::string& why) {
    RememberEnd(lease_id, why);
    ForgetSliceTables(lease_id);
    for (auto it = moved_sessions.begin(); it != moved_sessions.end();) {
      it = it->second.lease_id == lease_id ? moved_sessions.erase(it) : std::next(it);
    }
    DropSuspended(lease_id);  // Its images: the memory (or files) of a lease that ended.
    suspended_devices.erase(lease_id);
    resumed_at.erase(lease_id);
    moved_devices.erase(lease_id);
  }

  AgentState(const AgentConfig& c, std::vector<DeviceRecord> d)
      : config(c),
        devices(std::move(d)),
        table(Capacities(devices), c.timing),
        turns_fds(devices.size(), -1),
        telemetry(devices.size()) {
    // Every reason a reservation or a session can be refused, and a lease expire, has a series from the start.
    for (const char* reason : {"busy", "invalid_argument", "draining", "not_found", "permission_denied", "internal"}) {
      counters.reservations_refused[reason] = 0;
      counters.sessions_refused[reason] = 0;
    }
    counters.lease_expirations["not_renewed"] = 0;
    counters.lease_expirations["not_committed"] = 0;
  }
  ~AgentState() {
    for (int fd : turns_fds) {
      if (fd >= 0) close(fd);
    }
    for (auto& [slice, fd] : quota_fds) close(fd);
  }
  AgentState(const AgentState&) = delete;
  AgentState& operator=(const AgentState&) = delete;

  // The device's turns table, created on first use.
  Result<int> TurnsFd(size_t device) {
    if (turns_fds[device] < 0) {
      auto fd = backend::DeviceTurns::CreateSegment();
      if (!fd.ok()) return fd.status();
      turns_fds[device] = *fd;
    }
    return turns_fds[device];
  }

  // The lease's group in `device`'s turns table, numbered by its first session there.
  uint64_t TurnsGroup(const std::string& lease_id, uint32_t device) {
    auto [it, added] = turns_groups.emplace(std::make_pair(lease_id, device), next_turns_group);
    if (added) ++next_turns_group;
    return it->second;
  }

  // The quota table of the lease's slice on `device`, created by its first session.
  Result<int> QuotaFd(const std::string& lease_id, uint32_t device, uint64_t memory_bytes) {
    auto key = std::make_pair(lease_id, device);
    auto it = quota_fds.find(key);
    if (it != quota_fds.end()) return it->second;
    auto fd = backend::SliceQuota::CreateSegment(memory_bytes);
    if (!fd.ok()) return fd.status();
    quota_fds.emplace(key, *fd);
    return *fd;
  }

  // How a session of lease `lease_id` on `device` (its slice `slice`) at window [base, base + window) is opened: as
  // openSession and an adoption (a lease moved here) start its worker, in the device's turns table and the slice's
  // quota table.
  Result<WorkerSpec> SessionSpec(const std::string& lease_id, uint32_t device, const SliceGrant& slice, uint64_t base,
                                 uint64_t window) {
    const DeviceRecord& record = devices[device];
    WorkerSpec spec;
    spec.lease_id = lease_id;
    spec.device = device;
    spec.emulated = record.emulated;
    spec.device_name = record.model;
    if (record.compute_capability != 0) spec.compute_capability = record.compute_capability;
    spec.nvml_uuid = record.uuid;
    spec.memory_bytes = slice.memory_bytes;
    spec.window_base = base;
    spec.window_bytes = window;
    spec.share_micros = slice.share;
    spec.cuda_driver = config.cuda_driver;
    // Over TLS the session stays on this (encrypted, authenticated) connection: a worker's door would be neither.
    spec.direct_listen = config.tls_cert.empty() ? DirectListen(config.listen) : "";
    spec.bytes_in_flight = config.session_bytes_in_flight;
    // Every device's sessions take turns by their compute shares (a worker on a GPU under MPS leaves the table).
    auto turns = TurnsFd(device);
    if (!turns.ok()) return turns.status();
    spec.turns_fd = *turns;
    spec.turns_group = TurnsGroup(lease_id, device);
    // Every process of the lease opens sessions of its own; the slice's memory is the lease's, shared by them.
    auto quota = QuotaFd(lease_id, device, slice.memory_bytes);
    if (!quota.ok()) return quota.status();
    spec.quota_fd = *quota;
    if (record.emulated) {
      // A stable UUID per emulated device, derived from its pool-wide id.
      uint64_t h = 1469598103934665603ull;
      for (char c : record.uuid) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      for (int i = 0; i < 16; ++i) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        spec.uuid[i] = static_cast<uint8_t>(h >> 56);
      }
      spec.pci_bus = static_cast<int>(device) + 1;
    }
    return spec;
  }

  // ---- Moving leases (docs/moving-leases.md).

  // Where a moved session went, by the ticket its client entered its old worker with: the lease, and the door of its
  // new worker. Dropped with the lease.
  struct MovedSession {
    std::string lease_id;
    DirectDoor door;
  };
  std::map<std::string, MovedSession> moved_sessions;
  std::set<std::string> moving;  // Leases being moved now.
  // Moves run here, not on the connection that asked: an administrator who hangs up mid-move must not leave a
  // lease's sessions stopped.
  struct MoveErrors final : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override {
      GP_WARN("agent", "a lease's move failed: {}", e.getDescription().cStr());
    }
  };
  MoveErrors move_errors;
  kj::TaskSet moves{move_errors};
  // `work` runs to its end here whatever becomes of the returned promise (its caller's connection may go).
  template <typename T>
  kj::Promise<T> InBackground(kj::Promise<T> work) {
    auto forked = work.fork();
    moves.add(forked.addBranch().ignoreResult());
    return forked.addBranch();
  }
  // How long a session may take to finish the work it has queued before a move gives up and leaves it running.
  static constexpr kj::Duration kQuietWithin = 10 * kj::SECONDS;

  // Whether lease `lease_id` can be checkpointed now to be `done` ("moved", "suspended"): held here, committed,
  // neither suspended nor being moved or resumed, and every session of it on a direct connection its client can
  // follow. Its sessions, when it can.
  Status Movable(const std::string& lease_id, const char* done, std::vector<SessionWorkers::LeaseSession>* sessions) {
    const LeaseEntry* e = table.Find(lease_id);
    if (e == nullptr || !e->committed) return Status(StatusCode::kNotFound, "no lease " + lease_id + " here");
    if (e->suspended) return Status(StatusCode::kInvalidArgument, "lease " + lease_id + " is suspended already");
    if (moving.count(lease_id) || resuming.count(lease_id) || arriving.count(lease_id)) {
      return Status(StatusCode::kResourceExhausted, "lease " + lease_id + " is being moved or resumed");
    }
    *sessions = workers->SessionsOf(lease_id);
    for (const auto& session : *sessions) {
      if (session.door.ticket.empty()) {
        return Status(StatusCode::kUnavailable, fmt::format("a session of the lease has no direct connection (its "
                                                            "client could not follow it): nothing {}", done));
      }
    }
    return Status::Ok();
  }

  // How a session opened as `spec` is opened again on `device`, restored from `image` (a move, a resumption): in
  // the device's turns table and the lease's quota table there.
  Result<WorkerSpec> RestoredSpec(const std::string& lease_id, WorkerSpec spec, uint32_t device,
                                  std::shared_ptr<const std::vector<uint8_t>> image, uint64_t consumed) {
    spec.device = device;
    auto turns = TurnsFd(device);
    if (!turns.ok()) return turns.status();
    auto quota = QuotaFd(lease_id, device, spec.memory_bytes);
    if (!quota.ok()) return quota.status();
    spec.turns_fd = *turns;
    spec.turns_group = TurnsGroup(lease_id, device);
    spec.quota_fd = *quota;
    spec.restore_image = std::move(image);
    spec.restore_consumed = consumed;
    return spec;
  }

  // Session `i`'s checkpoint, as a status naming the session.
  static Status CheckpointStatus(const SessionWorkers::Checkpointed& taken, size_t i) {
    if (taken.status.ok()) return Status::Ok();
    return Status(taken.status.code(),
                  fmt::format("session {} of the lease could not be checkpointed: {}", i, taken.status.message()));
  }

  // The first of restored sessions' workers that did not open, with a direct connection, as a status.
  static Status RestoreFailure(const kj::Array<OpenedSession>& opened) {
    for (size_t i = 0; i < opened.size(); ++i) {
      if (!opened[i].status.ok() || opened[i].direct == nullptr) {
        return Status(opened[i].status.ok() ? StatusCode::kInternal : opened[i].status.code(),
                      fmt::format("session {} could not be restored: {}", i,
                                  opened[i].status.ok() ? "no direct connection" : opened[i].status.message()));
      }
    }
    return Status::Ok();
  }

  // The session its client entered with `ticket` is at `door` now. A session moved again before its client came
  // back holds the ticket of a door nobody entered: the client still asks with the ticket it entered with, so what
  // pointed there points on to `door`.
  void RecordMoved(const std::string& ticket, const std::string& lease_id, const DirectDoor& door) {
    for (auto& [entered_with, moved] : moved_sessions) {
      if (moved.door.ticket == ticket) moved.door = door;
    }
    moved_sessions[ticket] = MovedSession{lease_id, door};
  }

  struct MoveResult {
    Status status;
    uint32_t sessions = 0;
    uint64_t bytes = 0;
    uint32_t pause_ms = 0;
    std::vector<uint32_t> devices;  // The lease's slices' devices afterwards.
  };

  // Moves lease `lease_id`'s slices, with their sessions, to other devices of this agent (`to`, or any other that
  // fits when negative). A failure at any step leaves the lease where it was, its sessions serving on.
  kj::Promise<MoveResult> Migrate(const std::string& lease_id, int32_t to) {
    std::vector<SessionWorkers::LeaseSession> sessions;
    if (Status movable = Movable(lease_id, "moved", &sessions); !movable.ok()) return MoveResult{movable};
    if (to >= static_cast<int32_t>(devices.size())) {
      return MoveResult{Status(StatusCode::kInvalidArgument,
                               fmt::format("no device {} here (this agent has {})", to, devices.size()))};
    }
    const LeaseEntry* e = table.Find(lease_id);
    std::set<uint32_t> from;
    for (const SliceGrant& slice : e->slices) from.insert(slice.device);
    // Each device of the lease to another of the same kind that takes its slices.
    std::map<uint32_t, uint32_t> targets;
    auto undo = [this, lease_id](const std::map<uint32_t, uint32_t>& done) {
      for (const auto& [source, target] : done) (void)table.MoveSlices(lease_id, target, source);
    };
    Status last(StatusCode::kResourceExhausted, "no other device here");
    for (uint32_t source : from) {
      bool placed = false;
      for (uint32_t target = 0; target < devices.size() && !placed; ++target) {
        const bool taken = from.count(target) > 0 ||
                           std::any_of(targets.begin(), targets.end(), [&](const auto& t) { return t.second == target; });
        if ((to >= 0 && target != static_cast<uint32_t>(to)) || taken) continue;
        if (devices[target].emulated != devices[source].emulated || devices[target].model != devices[source].model) {
          last = Status(StatusCode::kResourceExhausted, fmt::format("device {} is another model", target));
          continue;
        }
        // The target's session limit counts the sessions coming with the slices.
        const size_t coming = std::count_if(sessions.begin(), sessions.end(),
                                            [&](const auto& session) { return session.spec.device == source; });
        if (workers->OnDevice(target) + coming > static_cast<size_t>(config.sessions_per_device)) {
          last = Status(StatusCode::kResourceExhausted,
                        fmt::format("device {} would hold more sessions than this agent allows on one device "
                                    "([limits] sessions_per_device = {})", target, config.sessions_per_device));
          continue;
        }
        last = table.MoveSlices(lease_id, source, target);
        if (last.ok()) {
          targets[source] = target;
          placed = true;
        }
      }
      if (!placed) {
        undo(targets);
        return MoveResult{Status(last.code(), fmt::format("lease {} cannot leave device {}: {}", lease_id, source,
                                                          to >= 0 && from.count(to) ? "it is on that device already"
                                                                                    : last.message()))};
      }
    }
    // The new workers start now, beside the checkpoints (a worker's start is much of a small move's pause); each is
    // sent its image once its session's checkpoint is taken, or is killed if the move is abandoned first.
    std::vector<WorkerSpec> specs;
    for (const auto& session : sessions) {
      auto spec = RestoredSpec(lease_id, session.spec, targets.at(session.spec.device), nullptr, 0);
      if (!spec.ok()) {
        undo(targets);
        return MoveResult{spec.status()};
      }
      // An emulated device's memory is a file: the new worker maps the old one's, and the image leaves the bytes in
      // it (no copy). The restore writes none of it, so an abandoned move leaves the old session's memory as it was.
      if (spec->emulated) {
        spec->memory_fd = workers->MemoryFileOf(session.pid);
        spec->memory_kept = spec->memory_fd >= 0;
      }
      specs.push_back(std::move(spec).value());
    }
    moving.insert(lease_id);
    const auto started = std::chrono::steady_clock::now();
    auto images = std::make_shared<std::vector<kj::Own<kj::PromiseFulfiller<SessionWorkers::RestoreInput>>>>();
    kj::Vector<kj::Promise<OpenedSession>> opens;
    for (const WorkerSpec& spec : specs) {
      auto paf = kj::newPromiseAndFulfiller<SessionWorkers::RestoreInput>();
      images->push_back(kj::mv(paf.fulfiller));
      opens.add(workers->OpenRestoring(spec, kj::mv(paf.promise)));
    }
    auto opening = kj::joinPromises(opens.releaseAsArray());
    kj::Vector<kj::Promise<SessionWorkers::Checkpointed>> checkpoints;
    for (size_t i = 0; i < sessions.size(); ++i) {
      checkpoints.add(workers->Checkpoint(sessions[i].pid, kQuietWithin, specs[i].memory_kept));
    }
    return kj::joinPromises(checkpoints.releaseAsArray())
        .then([this, lease_id, sessions, targets, undo, started, images, opening = kj::mv(opening)](
                  kj::Array<SessionWorkers::Checkpointed> taken) mutable -> kj::Promise<MoveResult> {
          const auto checkpointed = std::chrono::steady_clock::now();
          // Back where it was: the sessions checkpointed serve on, the new workers go.
          auto abandon = [this, lease_id, sessions, targets, undo](const std::vector<pid_t>& opened, Status why) {
            for (pid_t pid : opened) workers->Retire(pid);
            for (const auto& session : sessions) workers->Resume(session.pid);
            undo(targets);
            moving.erase(lease_id);
            GP_WARN("agent", "lease {} stays where it was: {}", lease_id, why.message());
            return MoveResult{why};
          };
          Status failed = Status::Ok();
          for (size_t i = 0; i < taken.size() && failed.ok(); ++i) {
            failed = CheckpointStatus(taken[i], i);
          }
          if (failed.ok() && table.Find(lease_id) == nullptr) {
            failed = Status(StatusCode::kNotFound, "the lease ended meanwhile");
          }
          auto bytes = std::make_shared<uint64_t>(0);
          for (size_t i = 0; i < taken.size(); ++i) {
            if (failed.ok()) {
              *bytes += taken[i].image->size();
              (*images)[i]->fulfill(SessionWorkers::RestoreInput{Status::Ok(), taken[i].image, taken[i].consumed});
            } else {
              (*images)[i]->fulfill(SessionWorkers::RestoreInput{failed, nullptr, 0});  // Its worker is killed.
            }
          }
          return kj::mv(opening)
              .then([this, lease_id, sessions, targets, abandon, started, checkpointed, bytes,
                     failed](kj::Array<OpenedSession> opened) {
                if (!failed.ok()) return abandon({}, failed);  // The new workers were killed as they failed to open.
                std::vector<pid_t> new_workers;
                for (const auto& session : workers->SessionsOf(lease_id)) {
                  if (std::none_of(sessions.begin(), sessions.end(),
                                   [&](const auto& old) { return old.pid == session.pid; })) {
                    new_workers.push_back(session.pid);
                  }
                }
                if (Status failed = RestoreFailure(opened); !failed.ok()) return abandon(new_workers, failed);
                if (table.Find(lease_id) == nullptr) {
                  return abandon(new_workers, Status(StatusCode::kNotFound, "the lease ended meanwhile"));
                }
                // Done: each client finds its old worker gone and asks here where its session went.
                for (size_t i = 0; i < opened.size(); ++i) {
                  KJ_IF_MAYBE(door, opened[i].direct) { RecordMoved(sessions[i].door.ticket, lease_id, *door); }
                  workers->Retire(sessions[i].pid);
                }
                for (const auto& [source, target] : targets) {
                  NoteMoved(lease_id, source, target);
                  if (auto q = quota_fds.find({lease_id, source}); q != quota_fds.end()) {
                    close(q->second);
                    quota_fds.erase(q);
                  }
                  turns_groups.erase({lease_id, source});
                }
                moving.erase(lease_id);
                std::vector<uint32_t> devices;
                if (const LeaseEntry* now = table.Find(lease_id)) {
                  for (const auto& slice : now->slices) devices.push_back(slice.device);
                }
                return Moved(lease_id, "", sessions.size(), *bytes, started, checkpointed, std::move(devices));
              });
        });
  }

  // A move done (to another device here, or to the agent at `to`): counted, logged, and answered.
  MoveResult Moved(const std::string& lease_id, const std::string& to, size_t sessions, uint64_t bytes,
                   std::chrono::steady_clock::time_point started, std::chrono::steady_clock::time_point checkpointed,
                   std::vector<uint32_t> devices) {
    auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    MoveResult result;
    result.status = Status::Ok();
    result.sessions = static_cast<uint32_t>(sessions);
    result.bytes = bytes;
    result.pause_ms = static_cast<uint32_t>(ms(std::chrono::steady_clock::now() - started));
    result.devices = std::move(devices);
    ++counters.migrations;
    if (!to.empty()) ++counters.migrations_away;
    counters.migrated_sessions += result.sessions;
    counters.migrated_bytes += result.bytes;
    counters.migration_pause_ms += result.pause_ms;
    GP_INFO("agent", "lease {} moved{}: {} session(s), {} of images, paused {} ms (checkpoint {} ms)", lease_id,
            to.empty() ? "" : " to the agent at " + to, result.sessions, FormatMemorySize(result.bytes),
            result.pause_ms, ms(checkpointed - started));
    return result;
  }

  // ---- Moving leases to another agent (migrateTo here, adopt there).

  // What this agent answers for a lease it moved to another agent: where it went (Outcome.moved), until
  // kMovedAwayKept younger moves push it out. `told`: when a holder of the lease first asked here since and was told.
  struct MovedAway {
    std::string secret;
    std::string server;
    std::vector<std::pair<uint32_t, uint32_t>> devices;  // Its devices here -> there.
    std::optional<Clock::time_point> told;
  };

  // Moved leases whose holders may not all know where they went: none has asked here yet, or the first did less than
  // a renewal interval ago (each process of a lease renews that often, and learns it then). Counted over the recent
  // moves only (every describe asks, and moved_away keeps up to kMovedAwayKept): those settled leave `untold`.
  uint32_t MovesUntold() const {
    const auto now = Clock::now();
    for (auto it = untold.begin(); it != untold.end();) {
      auto moved = moved_away.find(*it);
      const bool settled = moved == moved_away.end() ||
                           (moved->second.told && now - *moved->second.told >= table.timing().renew_interval);
      it = settled ? untold.erase(it) : std::next(it);
    }
    return static_cast<uint32_t>(untold.size());
  }
  static constexpr size_t kMovedAwayKept = 65536;
  std::map<std::string, MovedAway> moved_away;
  std::deque<std::string> moved_away_order;
  mutable std::set<std::string> untold;  // Leases of moved_away whose holders may not know yet (MovesUntold).
  std::set<std::string> arriving;  // Leases being adopted here, not committed yet.
  // An adoption given up (or one that could not start): the lease and all it made here go.
  void DropArrival(const std::string& id, const std::string& why) {
    (void)table.Revoke(id);
    (void)EndSessions(id, why);
    arriving.erase(id);
  }
  std::unique_ptr<LeaseTransfers> transfers;  // Made at the first move to another agent.

  // Whether lease `id` moved from here to another agent; if so `out` says where (kNotFound, and `moved`), or
  // refuses a wrong secret.
  bool AnswerMovedAway(const std::string& id, const std::string& secret, wire::Outcome::Builder out) {
    auto it = moved_away.find(id);
    if (it == moved_away.end()) return false;
    if (!ConstantTimeEquals(it->second.secret, secret)) {
      SetOutcome(out, Status(StatusCode::kPermissionDenied, "wrong secret for lease " + id));
      return true;
    }
    if (!it->second.told) it->second.told = Clock::now();
    SetOutcome(out, Status(StatusCode::kNotFound,
                           fmt::format("lease {} moved from agent {} to the agent at {}", id, config.name,
                                       it->second.server)));
    auto moved = out.initMoved();
    moved.setServer(it->second.server);
    auto from = moved.initFromDevices(static_cast<unsigned>(it->second.devices.size()));
    auto to = moved.initToDevices(static_cast<unsigned>(it->second.devices.size()));
    for (size_t i = 0; i < it->second.devices.size(); ++i) {
      from.set(static_cast<unsigned>(i), it->second.devices[i].first);
      to.set(static_cast<unsigned>(i), it->second.devices[i].second);
    }
    return true;
  }

  void RememberMovedAway(const std::string& id, MovedAway moved) {
    untold.insert(id);
    if (moved_away.insert_or_assign(id, std::move(moved)).second) moved_away_order.push_back(id);
    while (moved_away_order.size() > kMovedAwayKept) {
      moved_away.erase(moved_away_order.front());
      moved_away_order.pop_front();
    }
  }

  // What the agent at `server` is told of lease `lease_id` and its `sessions` to adopt it.
  LeavingLease Leaving(const LeaseEntry& e, const std::vector<SessionWorkers::LeaseSession>& sessions) {
    LeavingLease out;
    out.id = e.id;
    out.secret = e.secret;
    out.owner = e.owner;
    for (const SliceGrant& slice : e.slices) {
      out.slices.push_back({slice.memory_bytes, slice.share, devices[slice.device].model,
                            devices[slice.device].device_class, devices[slice.device].emulated, slice.device});
    }
    for (const auto& session : sessions) {
      LeavingLease::Session leaving;
      for (size_t i = 0; i < e.slices.size(); ++i) {
        if (e.slices[i].device == session.spec.device) {
          leaving.slice = static_cast<uint32_t>(i);
          break;
        }
      }
      leaving.window_base = session.spec.window_base;
      leaving.window_bytes = session.spec.window_bytes;
      // Its client asks with the ticket it entered with last: this worker's, or, if the session moved here before
      // it came back, one that points here (RecordMoved).
      leaving.tickets.push_back(session.door.ticket);
      for (const auto& [entered_with, moved] : moved_sessions) {
        if (moved.lease_id == e.id && moved.door.ticket == session.door.ticket) leaving.tickets.push_back(entered_with);
      }
      out.sessions.push_back(std::move(leaving));
    }
    return out;
  }

  // Where the memory an image of worker `pid`'s session left out lies (SessionImage::memory_stays): the worker's
  // memory file (a dup, so that it outlives the worker) and its allocations' ranges in it, from the image (the
  // worker's bytes, read as hostile).
  Result<std::shared_ptr<kj::AutoCloseFd>> LeavingMemory(pid_t pid, const std::vector<uint8_t>& image,
                                                        std::vector<std::pair<uint64_t, uint64_t>>* ranges) {
    backend::SessionImage read;
    CallStatus parsed = backend::ReadSessionImage(image.data(), image.size(), &read);
    if (!parsed.ok()) return Status(StatusCode::kInternal, "the session's image: " + parsed.message());
    for (const backend::SessionImage::Memory& memory : read.allocations) {
      if (memory.address < read.window_base || memory.address - read.window_base > read.window_bytes) {
        return Status(StatusCode::kInternal, "the session's image has an allocation outside its window");
      }
      ranges->emplace_back(memory.address - read.window_base, memory.bytes);
    }
    const int file = workers->MemoryFileOf(pid);
    const int own = file >= 0 ? fcntl(file, F_DUPFD_CLOEXEC, 3) : -1;
    if (own < 0) return Status(StatusCode::kInternal, "the session's memory file is gone (its worker ended)");
    return std::make_shared<kj::AutoCloseFd>(own);
  }

  // Moves lease `lease_id`, with every session of it, to the agent at `server`, which places it as a new lease and
  // restores its sessions at the same addresses; its clients follow it there (Outcome.moved). A failure at any step
  // leaves the lease here, its sessions serving on; the other agent drops what it had of it.
  kj::Promise<MoveResult> MigrateTo(const std::string& lease_id, const std::string& server) {
    std::vector<SessionWorkers::LeaseSession> sessions;
    if (Status movable = Movable(lease_id, "moved", &sessions); !movable.ok()) return MoveResult{movable};
    if (server.empty()) return MoveResult{Status(StatusCode::kInvalidArgument, "no agent named to move to")};
    if (server == config.listen) {
      return MoveResult{Status(StatusCode::kInvalidArgument,
                               "that is this agent's own address: to move to another of its GPUs, migrate --to-gpu")};
    }
    const LeaseEntry* e = table.Find(lease_id);
    LeavingLease leaving = Leaving(*e, sessions);
    if (!transfers) transfers = std::make_unique<LeaseTransfers>();
    moving.insert(lease_id);
    const auto started = std::chrono::steady_clock::now();
    kj::Vector<kj::Promise<SessionWorkers::Checkpointed>> checkpoints;
    // An emulated session's memory is read from its worker's memory file and sent apart from its image.
    for (const auto& session : sessions) {
      checkpoints.add(workers->Checkpoint(session.pid, kQuietWithin, workers->MemoryFileOf(session.pid) >= 0));
    }
    // The other agent places the lease and starts its workers while the sessions here reach a quiet point.
    auto adopted = std::make_shared<Result<std::vector<uint32_t>>>(Status(StatusCode::kInternal, "not adopted"));
    auto adopting = transfers->Adopt(server, leaving).then([adopted](Result<std::vector<uint32_t>> r) {
      *adopted = std::move(r);
    });
    auto taken = std::make_shared<kj::Array<SessionWorkers::Checkpointed>>();
    auto checkpointing = kj::joinPromises(checkpoints.releaseAsArray())
                             .then([taken](kj::Array<SessionWorkers::Checkpointed> t) { *taken = kj::mv(t); });
    kj::Vector<kj::Promise<void>> both;
    both.add(kj::mv(adopting));
    both.add(kj::mv(checkpointing));
    // Back where it was: the sessions checkpointed serve on, the other agent drops what it has.
    auto abandon = [this, lease_id, sessions, server](Status why) {
      transfers->Abandon(lease_id);
      for (const auto& session : sessions) workers->Resume(session.pid);
      moving.erase(lease_id);
      GP_WARN("agent", "lease {} stays here (not moved to {}): {}", lease_id, server, why.message());
      return MoveResult{why};
    };
    auto bytes = std::make_shared<uint64_t>(0);
    auto checkpointed = std::make_shared<std::chrono::steady_clock::time_point>();
    return kj::joinPromises(both.releaseAsArray())
        .then([this, lease_id, sessions, adopted, taken, bytes, checkpointed]() -> kj::Promise<Status> {
          *checkpointed = std::chrono::steady_clock::now();
          if (!adopted->ok()) return adopted->status();
          std::vector<LeaseTransfers::LeavingImage> images;
          for (size_t i = 0; i < taken->size(); ++i) {
            if (Status failed = CheckpointStatus((*taken)[i], i); !failed.ok()) return failed;
            LeaseTransfers::LeavingImage leaving{(*taken)[i].image, (*taken)[i].consumed, nullptr, {}};
            *bytes += (*taken)[i].image->size();
            if ((*taken)[i].memory_stayed) {
              auto memory = LeavingMemory(sessions[i].pid, *(*taken)[i].image, &leaving.ranges);
              if (!memory.ok()) return memory.status();
              leaving.memory = std::move(memory).value();
              for (const auto& [offset, length] : leaving.ranges) *bytes += length;
            }
            images.push_back(std::move(leaving));
          }
          if (table.Find(lease_id) == nullptr) return Status(StatusCode::kNotFound, "the lease ended meanwhile");
          DieAtMoveStep("leave-restore");
          return transfers->Restore(lease_id, std::move(images));
        })
        .then([this, lease_id](Status restored) -> kj::Promise<Status> {
          if (!restored.ok()) return restored;
          // The lease may have ended here while its images travelled: then it must not begin there.
          if (table.Find(lease_id) == nullptr) return Status(StatusCode::kNotFound, "the lease ended meanwhile");
          return transfers->Commit(lease_id);
        })
        .then([this, lease_id, server, sessions, leaving, adopted, started, checkpointed, bytes,
               abandon](Status committed) {
          if (!committed.ok()) return abandon(committed);
          if (table.Find(lease_id) == nullptr) {
            // Its holder released it here while the other agent committed it: nobody will renew it there, and it
            // expires there as a lease whose holder went away.
            for (const auto& session : sessions) workers->Retire(session.pid);
            moving.erase(lease_id);
            return MoveResult{Status(StatusCode::kNotFound, fmt::format("the lease ended meanwhile; the agent at {} "
                                                                        "lets it expire", server))};
          }
          MovedAway away{leaving.secret, server, {}, std::nullopt};
          const std::vector<uint32_t>& there = adopted->value();
          for (size_t i = 0; i < leaving.slices.size() && i < there.size(); ++i) {
            away.devices.emplace_back(leaving.slices[i].from_device, there[i]);
          }
          // Done: each client finds its worker gone, asks here, and is sent there.
          for (const auto& session : sessions) workers->Retire(session.pid);
          (void)table.Revoke(lease_id);
          ForgetLease(lease_id, fmt::format("moved to the agent at {}", server));
          RememberMovedAway(lease_id, std::move(away));
          moving.erase(lease_id);
          return Moved(lease_id, server, sessions.size(), *bytes, started, *checkpointed, there);
        })
        .catch_([abandon](kj::Exception&& e) { return abandon(Status(StatusCode::kInternal, e.getDescription().cStr())); });
  }

  // ---- Suspension: a lease's sessions kept as images in the agent's memory, its slices given back to the pool.

  struct SuspendedSession {
    std::string ticket;  // The door ticket its client entered with last: how it asks for the session back.
    WorkerSpec spec;     // As it was opened (its device is the slice's before the suspension).
    std::shared_ptr<std::vector<uint8_t>> image;  // Null when it is in `spilled`.
    std::string spilled;  // Its file in the spill directory ([telemetry] suspend_spill_dir), or "".
    uint64_t consumed = 0;
    uint64_t bytes = 0;  // The image's.
  };
  uint64_t suspended_in_memory = 0;  // Bytes of the images held in `suspended` (not spilled).
  std::map<std::string, std::vector<SuspendedSession>> suspended;  // By lease.
  std::map<std::string, kj::ForkedPromise<Status>> resuming;        // Leases being resumed now.
  // When each lease last resumed: its idle time counts from there at most (its telemetry may not have seen a call of
  // its new workers yet).
  std::map<std::string, Clock::time_point> resumed_at;

  struct SuspendResult {
    Status status;
    uint32_t sessions = 0;
    uint64_t bytes = 0;
  };

  // Suspends lease `lease_id`: checkpoints its sessions (as for a move), keeps their images here, ends their workers
  // and gives its slices back. Its clients' next calls resume it (ResumeLease). On failure nothing changes.
  kj::Promise<SuspendResult> Suspend(const std::string& lease_id) {
    std::vector<SessionWorkers::LeaseSession> sessions;
    if (Status movable = Movable(lease_id, "suspended", &sessions); !movable.ok()) return SuspendResult{movable};
    moving.insert(lease_id);
    kj::Vector<kj::Promise<SessionWorkers::Checkpointed>> checkpoints;
    for (const auto& session : sessions) checkpoints.add(workers->Checkpoint(session.pid, kQuietWithin));
    return kj::joinPromises(checkpoints.releaseAsArray())
        .then([this, lease_id, sessions](kj::Array<SessionWorkers::Checkpointed> taken) -> kj::Promise<SuspendResult> {
          Status failed = Status::Ok();
          uint64_t bytes = 0;
          std::vector<std::shared_ptr<std::vector<uint8_t>>> images;
          for (size_t i = 0; i < taken.size() && failed.ok(); ++i) {
            failed = CheckpointStatus(taken[i], i);
            if (failed.ok() && taken[i].placed_by_driver) {
              // Its worker ends with the suspension: a restore refused later would lose the program.
              failed = Status(StatusCode::kUnavailable,
                              fmt::format("session {} of the lease holds module variables on a GPU, whose driver "
                                          "places them itself: a restore might not find them where they were, so "
                                          "the lease is not suspended (ctl migrate can move it: its sessions serve "
                                          "on where they are until they are restored)", i));
            }
            if (failed.ok()) {
              bytes += taken[i].image->size();
              images.push_back(taken[i].image);
            }
          }
          // Beyond [telemetry] suspend_memory the images go to the spill directory, or the suspension is refused.
          const bool spill = failed.ok() && suspended_in_memory + bytes > config.suspend_memory;
          if (spill && config.suspend_spill_dir.empty()) {
            failed = Status(StatusCode::kResourceExhausted,
                            fmt::format("the lease's {} of images would keep {} of suspended leases in the agent's "
                                        "memory, past [telemetry] suspend_memory ({}); give the agent a "
                                        "suspend_spill_dir",
                                        FormatMemorySize(bytes), FormatMemorySize(suspended_in_memory + bytes),
                                        FormatMemorySize(config.suspend_memory)));
          }
          if (!failed.ok()) return AbandonSuspension(lease_id, sessions, failed);
          kj::Promise<Result<std::vector<std::string>>> stored =
              spill ? SpillImages(config.suspend_spill_dir, lease_id, std::move(images))
                    : kj::Promise<Result<std::vector<std::string>>>(std::vector<std::string>(taken.size()));
          auto shared_taken = std::make_shared<kj::Array<SessionWorkers::Checkpointed>>(kj::mv(taken));
          return stored.then([this, lease_id, sessions, shared_taken, bytes](Result<std::vector<std::string>> paths) {
            Status failed = paths.ok() ? Status::Ok()
                                       : Status(paths.status().code(), "spilling its images: " + paths.status().message());
            std::vector<uint32_t> devices_then;
            if (const LeaseEntry* now = table.Find(lease_id)) {
              for (const auto& slice : now->slices) devices_then.push_back(slice.device);
            }
            if (failed.ok()) failed = table.Suspend(lease_id);  // It may have ended meanwhile.
            if (!failed.ok()) {
              if (paths.ok()) RemoveSpilled(*paths);
              return AbandonSuspension(lease_id, sessions, failed);
            }
            moving.erase(lease_id);
            const bool spilled = !paths->empty() && !paths->front().empty();
            SuspendResult result{Status::Ok(), static_cast<uint32_t>(sessions.size()), bytes};
            suspended_devices[lease_id] = std::move(devices_then);
            auto& kept = suspended[lease_id];
            for (size_t i = 0; i < sessions.size(); ++i) {
              const auto& image = (*shared_taken)[i].image;
              kept.push_back({sessions[i].door.ticket, sessions[i].spec, spilled ? nullptr : image, (*paths)[i],
                              (*shared_taken)[i].consumed, image->size()});
              workers->Retire(sessions[i].pid);
            }
            if (!spilled) suspended_in_memory += bytes;
            ForgetSliceTables(lease_id);
            ++counters.suspensions;
            counters.suspended_bytes += result.bytes;
            GP_INFO("agent", "lease {} suspended: {} session(s), {} kept {}", lease_id, result.sessions,
                    FormatMemorySize(result.bytes), spilled ? "in " + config.suspend_spill_dir : "in memory");
            return result;
          });
        });
  }

  // A suspension that failed: the sessions serve on where they were.
  SuspendResult AbandonSuspension(const std::string& lease_id,
                                  const std::vector<SessionWorkers::LeaseSession>& sessions, const Status& why) {
    moving.erase(lease_id);
    for (const auto& session : sessions) workers->Resume(session.pid);
    GP_WARN("agent", "lease {} not suspended: {}", lease_id, why.message());
    return SuspendResult{why};
  }

  // Forgets a suspended lease's images (it resumed, or ended): the memory they held, their spilled files.
  void DropSuspended(const std::string& lease_id) {
    auto it = suspended.find(lease_id);
    if (it == suspended.end()) return;
    std::vector<std::string> files;
    for (const auto& session : it->second) {
      if (!session.spilled.empty()) {
        files.push_back(session.spilled);
      } else {
        suspended_in_memory -= std::min(suspended_in_memory, session.bytes);
      }
    }
    RemoveSpilled(files);
    suspended.erase(it);
  }

  // Places a suspended lease again and restores its sessions in new workers, where their clients find them (by
  // their tickets, as after a move). kResourceExhausted: no room for it now (it stays suspended; ask again).
  kj::Promise<Status> ResumeLease(const std::string& lease_id) {
    if (auto it = resuming.find(lease_id); it != resuming.end()) return it->second.addBranch();
    const LeaseEntry* e = table.Find(lease_id);
    if (e == nullptr) return Lost(lease_id);
    if (!e->suspended) return Status::Ok();
    // Moved off its GPUs by a change of personality: back once the rules in force allow it (a client waits, as for
    // room).
    if (std::string why = PolicyHoldsSuspended(*this, *e); !why.empty()) {
      return Status(StatusCode::kResourceExhausted, why);
    }
    Status placed = table.Unsuspend(lease_id, [this](uint32_t from, uint32_t to) {
      return devices[from].emulated == devices[to].emulated && devices[from].model == devices[to].model;
    });
    if (!placed.ok()) return placed;
    if (const std::vector<uint32_t>& before = suspended_devices[lease_id]; !before.empty()) {
      const LeaseEntry* now = table.Find(lease_id);
      for (size_t i = 0; i < before.size() && i < now->slices.size(); ++i) NoteMoved(lease_id, before[i], now->slices[i].device);
    }
    // Spilled images come back from their files first.
    std::vector<std::string> files;
    for (const auto& session : suspended[lease_id]) {
      if (!session.spilled.empty()) files.push_back(session.spilled);
    }
    auto done = LoadSpilledImages(files)
                    .then([this, lease_id](Result<std::vector<std::shared_ptr<std::vector<uint8_t>>>> loaded) {
                      if (!loaded.ok()) {
                        if (table.Find(lease_id) != nullptr) (void)table.Suspend(lease_id);
                        return kj::Promise<Status>(
                            Status(loaded.status().code(), "its spilled images: " + loaded.status().message()));
                      }
                      std::vector<SuspendedSession> sessions = suspended[lease_id];
                      size_t next = 0;
                      for (auto& session : sessions) {
                        if (!session.spilled.empty()) session.image = (*loaded)[next++];
                      }
                      return RestoreSuspended(lease_id, std::move(sessions));
                    })
                    .attach(kj::defer([this, lease_id] { resuming.erase(lease_id); }))
                    .fork();
    auto branch = done.addBranch();
    resuming.emplace(lease_id, kj::mv(done));
    return branch;
  }

  // ResumeLease's second half: the suspended sessions, their images in hand, restored in new workers.
  kj::Promise<Status> RestoreSuspended(const std::string& lease_id, std::vector<SuspendedSession> sessions) {
    const auto started = std::chrono::steady_clock::now();
    kj::Vector<kj::Promise<OpenedSession>> opens;
    for (auto& session : sessions) {
      auto spec = RestoredSpec(lease_id, session.spec, SliceDeviceAfterResume(*table.Find(lease_id), session.spec),
                               session.image, session.consumed);
      if (!spec.ok()) {
        (void)table.Suspend(lease_id);
        return spec.status();
      }
      opens.add(workers->Open(*spec));
    }
    return kj::joinPromises(opens.releaseAsArray())
                    .then([this, lease_id, sessions, started](kj::Array<OpenedSession> opened) {
                      // kInternal whatever the worker said: a client retries a busy answer, and a restore that
                      // failed is no lack of room.
                      Status failed = RestoreFailure(opened);
                      if (!failed.ok()) failed = Status(StatusCode::kInternal, failed.message());
                      if (failed.ok() && table.Find(lease_id) == nullptr) failed = Lost(lease_id);
                      if (!failed.ok()) {
                        // Back to suspended: the images stay, and the next call asks again.
                        for (const auto& session : workers->SessionsOf(lease_id)) workers->Retire(session.pid);
                        ForgetSliceTables(lease_id);
                        if (table.Find(lease_id) != nullptr) (void)table.Suspend(lease_id);
                        GP_WARN("agent", "lease {} could not resume: {}", lease_id, failed.message());
                        return failed;
                      }
                      for (size_t i = 0; i < opened.size(); ++i) {
                        KJ_IF_MAYBE(door, opened[i].direct) { RecordMoved(sessions[i].ticket, lease_id, *door); }
                      }
                      DropSuspended(lease_id);
                      resumed_at[lease_id] = Clock::now();
                      ++counters.resumptions;
                      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - started).count();
                      GP_INFO("agent", "lease {} resumed: {} session(s) restored in {} ms", lease_id, sessions.size(), ms);
                      return Status::Ok();
                    });
  }

  // The device a suspended session's slice is on once its lease is placed again: the lease's slices keep their order,
  // so the slice the session had (by its memory and share on its old device) is found by position.
  uint32_t SliceDeviceAfterResume(const LeaseEntry& e, const WorkerSpec& spec) {
    const std::vector<uint32_t>& before = suspended_devices[e.id];
    for (size_t i = 0; i < before.size() && i < e.slices.size(); ++i) {
      if (before[i] == spec.device) return e.slices[i].device;
    }
    return spec.device;
  }
  std::map<std::string, std::vector<uint32_t>> suspended_devices;  // By lease: its slices' devices when suspended.

  // Where each lease's slices went when they changed devices (a move, or a resumption elsewhere): from device to
  // device. A process of the lease that learned its slices before asks for the old device, and means the slice.
  std::map<std::string, std::map<uint32_t, uint32_t>> moved_devices;
  void NoteMoved(const std::string& lease_id, uint32_t from, uint32_t to) {
    if (from == to) return;
    auto& moved = moved_devices[lease_id];
    for (auto& [old, now] : moved) {
      if (now == from) now = to;
    }
    moved[from] = to;
    moved.erase(to);  // The device it came back to is its own again.
  }
  // `device` as a process of `lease_id` names it, where that slice is now.
  uint32_t DeviceNow(const std::string& lease_id, uint32_t device) const {
    const LeaseEntry* e = table.Find(lease_id);
    auto moved = moved_devices.find(lease_id);
    if (e == nullptr || moved == moved_devices.end()) return device;
    for (const auto& s : e->slices) {
      if (s.device == device) return device;  // It holds that device (still, or again).
    }
    auto to = moved->second.find(device);
    return to == moved->second.end() ? device : to->second;
  }

  // The lease's slices' quota and turns tables go with its workers (new ones are made where it goes next).
  void ForgetSliceTables(const std::string& lease_id) {
    for (auto it = quota_fds.lower_bound({lease_id, 0}); it != quota_fds.end() && it->first.first == lease_id;) {
      close(it->second);
      it = quota_fds.erase(it);
    }
    turns_groups.erase(turns_groups.lower_bound({lease_id, 0}), turns_groups.lower_bound({lease_id + '\0', 0}));
  }

  static std::vector<DeviceCapacity> Capacities(const std::vector<DeviceRecord>& devices) {
    std::vector<DeviceCapacity> out;
    for (const auto& d : devices) out.push_back({d.memory_bytes});
    return out;
  }
};

// Where session workers listen for their clients' direct connections: the agent's own host (any port), or beside
// its Unix socket.
std::string DirectListen(const std::string& configured) {
  if (configured.rfind("unix:", 0) == 0) return configured + ".session";
  std::string host = configured.substr(0, configured.rfind(':'));
  if (host.empty()) host = "*";
  return host + ":0";
}

uint64_t Ms(std::chrono::milliseconds d) { return static_cast<uint64_t>(d.count()); }

void FillSlices(capnp::List<wire::SliceSpec>::Builder out, const std::vector<SliceGrant>& slices) {
  for (size_t i = 0; i < slices.size(); ++i) {
    out[i].setDevice(slices[i].device);
    out[i].setMemoryBytes(slices[i].memory_bytes);
    out[i].setShareMicros(slices[i].share);
  }
}

// The time policies go by: the wall clock, or the local time in the file a test seam names
// (test_seams::PolicyClock), re-read at every look.
std::time_t PolicyNow() {
  const char* path = test_seams::PolicyClock();
  if (path == nullptr) return std::time(nullptr);
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  std::tm tm{};
  int seconds = 0;
  if (std::sscanf(text.c_str(), "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &seconds) < 5) {
    GP_WARN("policy", "the policy clock file {} holds no \"YYYY-MM-DD HH:MM\"; using the wall clock", path);
    return std::time(nullptr);
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_sec = seconds;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

// A lease as its agent's policy sees it: its user and slices (what the user holds besides: ReservationView).
PolicyRequest PolicyView(const AgentState& state, const std::string& user, const std::vector<SliceGrant>& slices) {
  PolicyRequest r;
  r.user = user;
  for (const SliceGrant& s : slices) {
    r.slice_classes.push_back(s.device < state.devices.size() ? state.devices[s.device].device_class : "");
    r.slice_fractions.push_back(FractionFromShare(s.share));
  }
  return r;
}

// A reservation as the policy sees it: also what its user holds on this agent already.
PolicyRequest ReservationView(const AgentState& state, const std::string& user, const std::vector<SliceGrant>& slices) {
  PolicyRequest r = PolicyView(state, user, slices);
  for (const auto& [id, e] : state.table.entries()) {
    if (e.owner.user != user) continue;
    r.gpus_held += static_cast<int>(e.slices.size());
    for (const SliceGrant& s : e.slices) r.share_held += FractionFromShare(s.share);
  }
  return r;
}

// How often telemetry samples the sessions' meters and the GPUs.
constexpr auto kSampleInterval = std::chrono::seconds(1);

// A refusal's reason as the metrics label it.
const char* ReasonOf(const Status& status) {
  switch (OutcomeCodeOf(status.code())) {
    case wire::Outcome::Code::BUSY: return "busy";
    case wire::Outcome::Code::INVALID_ARGUMENT: return "invalid_argument";
    case wire::Outcome::Code::DRAINING: return "draining";
    case wire::Outcome::Code::NOT_FOUND: return "not_found";
    case wire::Outcome::Code::PERMISSION_DENIED: return "permission_denied";
    default: return "internal";
  }
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void FillActivity(wire::Activity::Builder out, const ActivitySample& a) {
  out.setUnixMs(a.unix_ms);
  out.setMemoryUsed(a.memory_used);
  out.setUtilization(a.utilization ? static_cast<float>(*a.utilization) : -1.0f);
  out.setCallsPerSecond(static_cast<float>(a.calls_per_s));
  out.setBytesToDevicePerSecond(a.bytes_to_device_per_s);
  out.setBytesFromDevicePerSecond(a.bytes_from_device_per_s);
  out.setTemperatureC(a.temperature_c ? static_cast<float>(*a.temperature_c) : -1.0f);
  out.setPowerW(a.power_w ? static_cast<float>(*a.power_w) : -1.0f);
}

// The latest sample, and the last `seconds` of history (one sample a second).
template <typename Builder>
void FillTelemetry(Builder out, const ActivityHistory& h, uint32_t seconds) {
  if (h.samples.empty()) return;
  FillActivity(out.initActivity(), h.latest);
  size_t n = std::min<size_t>(seconds, h.samples.size());
  auto list = out.initHistory(static_cast<unsigned>(n));
  for (size_t i = 0; i < n; ++i) FillActivity(list[static_cast<unsigned>(i)], h.samples[h.samples.size() - n + i]);
}

// Since the lease's last sign of life (a call, or its work running), or since it was granted if none.
uint64_t IdleMs(const LeaseEntry& e, const LeaseActivity* activity, Clock::time_point now, int64_t now_unix_ms) {
  auto age = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - e.created).count());
  if (!activity || activity->last_active_unix_ms == 0) return age;
  return std::min<uint64_t>(age, static_cast<uint64_t>(std::max<int64_t>(0, now_unix_ms -
                                                                           activity->last_active_unix_ms)));
}

// Device `i` as describe() and the directory give it, without activity.
void FillDevice(const AgentState& state, size_t i, wire::Device::Builder d) {
  const DeviceRecord& r = state.devices[i];
  d.setIndex(static_cast<uint32_t>(i));
  d.setUuid(r.uuid);
  d.setModel(r.model);
  d.setDeviceClass(r.device_class);
  d.setEmulated(r.emulated);
  d.setMemoryTotal(r.memory_bytes);
  d.setMemoryAllocated(state.table.usage()[i].memory_bytes);
  d.setShareAllocatedMicros(static_cast<uint32_t>(std::min<uint64_t>(kShareWhole, state.table.usage()[i].share)));
  d.setCordoned(state.table.cordoned(static_cast<uint32_t>(i)));
}

// The agent's entry in the pool's directory: its devices' capacity and state, as placement needs them (client/
// directory.h). Changes with every grant and release; the publisher folds those of one interval into one put.
std::string DirectoryEntryJson(const AgentState& state, const std::string& address) {
  capnp::MallocMessageBuilder message;
  auto entry = message.initRoot<wire::DirectoryEntry>();
  entry.setFormat(1);
  entry.setName(state.config.name);
  entry.setInstanceId(state.instance_id);
  entry.setAddress(address);
  entry.setDraining(state.table.draining());
  entry.setProtocolVersion(wire::PROTOCOL_VERSION);
  entry.setLeaseTtlMs(Ms(state.table.timing().lease_ttl));
  entry.setLeases(static_cast<uint32_t>(state.table.entries().size()));
  if (!state.config.policy.empty()) {
    const Personality* active = state.config.policy.ActiveAt(PolicyNow());
    entry.setPersonality(active ? active->name : "");
  }
  auto devices = entry.initDevices(static_cast<unsigned>(state.devices.size()));
  for (size_t i = 0; i < state.devices.size(); ++i) FillDevice(state, i, devices[static_cast<unsigned>(i)]);
  return internal::EncodeDirectoryEntry(entry.asReader());
}

// Where clients reach this agent, as it tells the directory: [etcd] advertise, else the listen address with its
// real port and, for a wildcard host, this host's name.
std::string AdvertisedAddress(const AgentConfig& config, uint port, bool tls) {
  if (!config.directory_advertise.empty()) return config.directory_advertise;
  if (config.listen.rfind("unix:", 0) == 0) return config.listen;
  std::string host = config.listen.substr(0, config.listen.rfind(':'));
  if (host == "*" || host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return fmt::format("{}{}:{}", tls ? "tls:" : "", host, port);
}

// The agent's state as describe() answers it and /metrics renders it.
void Describe(const AgentState& state, wire::AgentState::Builder out, bool with_leases, uint32_t history_seconds) {
  auto now = Clock::now();
  const int64_t now_unix_ms = UnixMs();
  const LeaseTable& table = state.table;
  out.setName(state.config.name);
  out.setInstanceId(state.instance_id);
  out.setMovesUntold(state.MovesUntold());
  out.setProtocolVersion(wire::PROTOCOL_VERSION);
  out.setDraining(table.draining());
  out.setLeaseTtlMs(Ms(table.timing().lease_ttl));
  out.setRenewIntervalMs(Ms(table.timing().renew_interval));
  out.setIdleAfterMs(Ms(state.config.idle_after));
  const Policy& policy = state.config.policy;
  if (!policy.empty()) {
    std::time_t now_t = PolicyNow();
    const Personality* active = policy.ActiveAt(now_t);
    out.setPersonality(active ? active->name : "");
    if (auto next = policy.NextChange(now_t)) {
      const Personality* then = policy.ActiveAt(*next);
      out.setPersonalityNext(fmt::format("{} from {}", then ? then->name : "no personality", FormatLocal(*next)));
    }
    out.setPolicy(policy.Describe());
  }
  auto devices = out.initDevices(static_cast<unsigned>(state.devices.size()));
  for (size_t i = 0; i < state.devices.size(); ++i) {
    auto d = devices[static_cast<unsigned>(i)];
    FillDevice(state, i, d);
    FillTelemetry(d, state.telemetry.device(i), history_seconds);
  }
  if (!with_leases) return;
  auto leases = out.initLeases(static_cast<unsigned>(table.entries().size()));
  unsigned i = 0;
  for (const auto& [id, e] : table.entries()) {
    auto l = leases[i++];
    l.setId(id);
    auto owner = l.initOwner();
    owner.setUser(e.owner.user);
    owner.setHost(e.owner.host);
    owner.setPid(e.owner.pid);
    owner.setLabel(e.owner.label);
    l.setUserVerified(e.owner.verified);
    l.setUserClaimed(e.owner.claimed_user);
    FillSlices(l.initSlices(static_cast<unsigned>(e.slices.size())), e.slices);
    l.setCommitted(e.committed);
    l.setExpiresInMs(e.expires > now ? static_cast<uint64_t>(
                                           std::chrono::duration_cast<std::chrono::milliseconds>(e.expires - now).count())
                                     : 0);
    l.setAgeMs(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - e.created).count()));
    const LeaseActivity* activity = state.telemetry.lease(id);
    if (activity) {
      FillTelemetry(l, *activity, history_seconds);
      l.setSessions(static_cast<uint32_t>(activity->sessions));
      l.setCallsTotal(activity->totals.calls);
      l.setBytesToDeviceTotal(activity->totals.bytes_to_device);
      l.setBytesFromDeviceTotal(activity->totals.bytes_from_device);
      auto list = l.initSessionList(static_cast<unsigned>(activity->per_session.size()));
      for (size_t k = 0; k < activity->per_session.size(); ++k) {
        const SessionActivity& one = activity->per_session[k];
        auto v = list[static_cast<unsigned>(k)];
        v.setDevice(one.device);
        v.setPid(static_cast<uint32_t>(one.pid));
        FillActivity(v.initActivity(), one.latest);
      }
    }
    uint64_t idle_ms = IdleMs(e, activity, now, now_unix_ms);
    l.setIdleMs(idle_ms);
    l.setIdle(e.committed && idle_ms >= Ms(state.config.idle_after));
    l.setSuspended(e.suspended);
  }
}

// [telemetry] suspend_idle_after: leases idle that long are suspended (their GPUs go back to the pool).
void SuspendIdleLeases(AgentState& state) {
  if (state.config.suspend_idle_after.count() == 0) return;
  const auto now = Clock::now();
  const int64_t now_unix_ms = UnixMs();
  std::vector<std::string> idle;
  for (const auto& [id, e] : state.table.entries()) {
    if (!e.committed || e.suspended || state.moving.count(id) || state.resuming.count(id)) continue;
    uint64_t idle_ms = IdleMs(e, state.telemetry.lease(id), now, now_unix_ms);
    if (auto resumed = state.resumed_at.find(id); resumed != state.resumed_at.end()) {
      idle_ms = std::min<uint64_t>(idle_ms, Ms(std::chrono::duration_cast<std::chrono::milliseconds>(now - resumed->second)));
    }
    if (idle_ms >= Ms(state.config.suspend_idle_after)) {
      idle.push_back(id);
    }
  }
  for (const auto& id : idle) {
    GP_INFO("agent", "lease {} is idle past {}: suspending it", id, FormatDuration(state.config.suspend_idle_after));
    state.moves.add(state.Suspend(id).ignoreResult());
  }
}

// Samples the sessions' meters and the GPUs once a kSampleInterval, for ever.
kj::Promise<void> SampleLoop(AgentState& state, kj::Timer& timer) {
  return timer.afterDelay(std::chrono::duration_cast<std::chrono::milliseconds>(kSampleInterval).count() *
                          kj::MILLISECONDS)
      .then([&state, &timer]() {
        auto now = Clock::now();
        double interval = std::chrono::duration<double>(now - state.last_sample).count();
        state.last_sample = now;
        std::vector<std::optional<GpuGauges>> gpus(state.devices.size());
        if (state.gpus) {
          for (size_t i = 0; i < state.devices.size(); ++i) {
            if (!state.devices[i].emulated) gpus[i] = state.gpus->Read(state.devices[i].uuid);
          }
        }
        state.telemetry.Sample(UnixMs(), interval, state.workers->Sessions(), state.workers->retired(), gpus);
        // The totals of leases that ended, once their workers are reaped, are history.
        std::vector<std::string> gone;
        for (const auto& [id, r] : state.workers->retired()) {
          if (!state.table.Find(id)) gone.push_back(id);
        }
        for (const auto& id : gone) state.workers->ForgetRetired(id);
        SuspendIdleLeases(state);
        return SampleLoop(state, timer);
      });
}

// Ends the leases the policy ends now: every one (the sweep), or one about to be renewed.
void EnforcePolicy(AgentState& state);
void EnforcePolicyOn(AgentState& state, const std::string& lease_id);
// When the policy is to end lease `lease_id` (the sooner of its personality's max_lease and the end of a grace whose
// new rules it breaks), for its holder's warning: how long from now and why. Nullopt: the policy does not.
struct PolicyEnding {
  std::chrono::milliseconds in{0};
  std::string why;
};
std::optional<PolicyEnding> PolicyEndsLater(const AgentState& state, const std::string& lease_id);

// A lease arriving from another agent (that agent's migrateTo, this one's adopt): its slices are placed and its
// lease committed here, and a worker waits per session for its image. The images come in pieces; `restore` hands
// them to the workers; `commit` makes the lease this agent's. Dropped before its commit (the other agent gave up,
// or its connection broke), it ends everything it made here.
class LeaseArrivalImpl final : public wire::LeaseArrival::Server {
 public:
  struct Session {
    std::vector<std::string> tickets;
    uint64_t most_bytes = 0;  // The image may not grow past this.
    std::shared_ptr<std::vector<uint8_t>> image = std::make_shared<std::vector<uint8_t>>();
    kj::Own<kj::PromiseFulfiller<SessionWorkers::RestoreInput>> give;
    // An emulated device's memory file for the new worker (WorkerSpec::memory_fd), filled by `memory` when the image
    // leaves the memory out; none on a GPU. Its bytes lie below `most_memory` (the slice and the device's heap).
    kj::AutoCloseFd memory;
    uint64_t most_memory = 0;
  };

  LeaseArrivalImpl(AgentState& state, std::string lease_id, std::string secret, std::vector<Session> sessions,
                   kj::Promise<kj::Array<OpenedSession>> opening)
      : state_(state),
        lease_id_(std::move(lease_id)),
        secret_(std::move(secret)),
        sessions_(std::move(sessions)),
        opening_(kj::mv(opening)) {}

  ~LeaseArrivalImpl() noexcept(false) {
    if (!committed_) Abandon("its move from another agent was given up");
  }

  kj::Promise<void> piece(PieceContext context) override {
    auto params = context.getParams();
    DieAtMoveStep("arrive-piece");
    KJ_REQUIRE(!restoring_ && !ended_, "an image piece after the restore");
    KJ_REQUIRE(params.getSession() < sessions_.size(), "no such arriving session");
    Session& session = sessions_[params.getSession()];
    auto data = params.getData();
    KJ_REQUIRE(params.getOffset() == session.image->size(), "an image piece out of order");
    KJ_REQUIRE(data.size() <= session.most_bytes - session.image->size(), "an image larger than its slice allows");
    // Room for all of it at once (growing piece by piece would copy it again and again), within its limit.
    if (session.image->empty()) session.image->reserve(std::min(params.getTotal(), session.most_bytes));
    session.image->insert(session.image->end(), data.begin(), data.end());
    // The lease lives on while its images travel (no holder renews it here yet).
    (void)state_.table.Renew(lease_id_, secret_, Clock::now());
    return kj::READY_NOW;
  }

  kj::Promise<void> memory(MemoryContext context) override {
    auto params = context.getParams();
    KJ_REQUIRE(!restoring_ && !ended_, "session memory after the restore");
    KJ_REQUIRE(params.getSession() < sessions_.size(), "no such arriving session");
    Session& session = sessions_[params.getSession()];
    auto data = params.getData();
    KJ_REQUIRE(session.memory.get() >= 0, "this session's device takes no memory apart from its image");
    KJ_REQUIRE(params.getOffset() <= session.most_memory && data.size() <= session.most_memory - params.getOffset(),
               "session memory beyond its slice");
    for (size_t done = 0; done < data.size();) {
      ssize_t n = pwrite(session.memory.get(), data.begin() + done, data.size() - done,
                         static_cast<off_t>(params.getOffset() + done));
      if (n < 0 && errno == EINTR) continue;
      KJ_REQUIRE(n > 0, "cannot write the session's memory file", strerror(errno));
      done += static_cast<size_t>(n);
    }
    (void)state_.table.Renew(lease_id_, secret_, Clock::now());
    return kj::READY_NOW;
  }

  kj::Promise<void> restore(RestoreContext context) override {
    DieAtMoveStep("arrive-restore");
    auto consumed = context.getParams().getConsumed();
    Status refused = Status::Ok();
    if (restoring_ || ended_) refused = Status(StatusCode::kInvalidArgument, "the arrival's restore was asked already");
    if (refused.ok() && consumed.size() != sessions_.size()) {
      refused = Status(StatusCode::kInvalidArgument, "one count of consumed call frames per session is needed");
    }
    for (size_t i = 0; i < sessions_.size() && refused.ok(); ++i) {
      if (sessions_[i].image->empty()) {
        refused = Status(StatusCode::kInvalidArgument, fmt::format("session {}'s image did not arrive", i));
      }
    }
    if (!refused.ok()) {
      Abandon(refused.message());
      SetOutcome(context.getResults().initOutcome(), refused);
      return kj::READY_NOW;
    }
    restoring_ = true;
    for (size_t i = 0; i < sessions_.size(); ++i) {
      sessions_[i].give->fulfill(SessionWorkers::RestoreInput{Status::Ok(), sessions_[i].image, consumed[i]});
    }
    return kj::mv(opening_).then([this, context](kj::Array<OpenedSession> opened) mutable {
      Status failed = AgentState::RestoreFailure(opened);
      if (failed.ok() && state_.table.Find(lease_id_) == nullptr) {
        failed = Status(StatusCode::kNotFound, "the lease ended here meanwhile");
      }
      if (!failed.ok()) {
        Abandon(failed.message());
        SetOutcome(context.getResults().initOutcome(), failed);
        return;
      }
      // Each client asks here with a ticket it entered with (the redirect of the agent the lease left).
      for (size_t i = 0; i < opened.size(); ++i) {
        KJ_IF_MAYBE(door, opened[i].direct) {
          for (const std::string& ticket : sessions_[i].tickets) state_.RecordMoved(ticket, lease_id_, *door);
        }
      }
      restored_ = true;
      SetOutcome(context.getResults().initOutcome(), Status::Ok());
    });
  }

  kj::Promise<void> commit(CommitContext context) override {
    DieAtMoveStep("arrive-commit");
    if (!restored_ || ended_ || state_.table.Find(lease_id_) == nullptr) {
      SetOutcome(context.getResults().initOutcome(),
                 Status(StatusCode::kInvalidArgument, "the arriving lease's sessions are not restored"));
      return kj::READY_NOW;
    }
    committed_ = true;
    state_.arriving.erase(lease_id_);
    ++state_.counters.arrivals;
    for (const Session& session : sessions_) state_.counters.arrived_bytes += session.image->size();
    (void)state_.table.Renew(lease_id_, secret_, Clock::now());  // A whole TTL for its holders to find it here.
    GP_INFO("agent", "lease {} moved here from another agent: {} session(s)", lease_id_, sessions_.size());
    SetOutcome(context.getResults().initOutcome(), Status::Ok());
    return kj::READY_NOW;
  }

 private:
  void Abandon(const std::string& why) {
    if (ended_) return;
    ended_ = true;
    GP_WARN("agent", "lease {} does not move here: {}", lease_id_, why);
    for (Session& session : sessions_) {
      // A worker still waiting for its image is killed as it fails to open.
      if (session.give->isWaiting()) {
        session.give->fulfill(SessionWorkers::RestoreInput{Status(StatusCode::kInternal, why), nullptr, 0});
      }
    }
    state_.DropArrival(lease_id_, "its move here was given up: " + why);
  }

  AgentState& state_;
  const std::string lease_id_, secret_;
  std::vector<Session> sessions_;
  kj::Promise<kj::Array<OpenedSession>> opening_;
  bool restoring_ = false, restored_ = false, committed_ = false, ended_ = false;
};

// Lease `key`'s adoption from another agent (wire::Agent::adopt), checked as hostile input: its slices placed here
// on devices of their model, one device per device they leave, as a new lease would be (cordons, room, the sessions
// allowed, the policy); `devices` receives them by slice. Null with `why` when it cannot be adopted.
kj::Own<LeaseArrivalImpl> Adopt(AgentState& state, wire::Agent::AdoptParams::Reader params,
                                std::vector<uint32_t>* devices, Status* why) {
  auto refuse = [why](StatusCode code, std::string message) -> kj::Own<LeaseArrivalImpl> {
    *why = Status(code, std::move(message));
    return kj::Own<LeaseArrivalImpl>();
  };
  if (std::string_view(test_seams::MoveFault()) == "arrive-refuse") {
    return refuse(StatusCode::kResourceExhausted, "adoption refused (test seam GPUPOOL_MOVE_FAULT)");
  }
  const std::string id = params.getLease().getId(), secret = params.getLease().getSecret();
  if (id.empty() || id.size() > 256 || secret.empty() || secret.size() > 256) {
    return refuse(StatusCode::kInvalidArgument, "an arriving lease needs an id and a secret (256 bytes at most)");
  }
  if (state.table.Find(id) != nullptr || state.arriving.count(id)) {
    return refuse(StatusCode::kInvalidArgument,
                  fmt::format("agent {} holds lease {} (a part of it) already: a lease moves only to an agent that "
                              "holds none of it", state.config.name, id));
  }
  auto slices = params.getSlices();
  auto sessions = params.getSessions();
  if (slices.size() == 0 || slices.size() > state.devices.size() * LeaseTable::kMaxSlicesPerDevice) {
    return refuse(StatusCode::kInvalidArgument, fmt::format("an arriving lease of {} slices", slices.size()));
  }
  if (sessions.size() > slices.size() * static_cast<size_t>(std::max(state.config.sessions_per_lease, 0))) {
    return refuse(StatusCode::kResourceExhausted,
                  fmt::format("{} sessions arrive, more than this agent allows the lease ([limits] sessions_per_lease "
                              "= {} per device)", sessions.size(), state.config.sessions_per_lease));
  }
  LeaseOwner owner;
  owner.host = params.getOwner().getHost();
  owner.pid = params.getOwner().getPid();
  owner.label = params.getOwner().getLabel();
  if (params.getOwnerVerified()) {  // By the agent it leaves, one of this agent's administrators.
    owner.user = params.getOwner().getUser();
    owner.verified = true;
  } else {
    owner.claimed_user = params.getOwner().getUser();
    owner.user = kAnonymousUser;
  }
  // The devices it leaves, each to one here: same model, open, with room for its slices and sessions.
  std::map<uint32_t, uint32_t> to;  // Device it leaves -> device here.
  std::vector<SliceGrant> grants(slices.size());
  std::map<uint32_t, uint64_t> memory_on, share_on;
  std::map<uint32_t, size_t> sessions_on;
  for (auto slice : slices) {
    memory_on[slice.getFromDevice()] += slice.getMemoryBytes();
    share_on[slice.getFromDevice()] += slice.getShareMicros();
  }
  for (auto session : sessions) {
    if (session.getSlice() >= slices.size()) {
      return refuse(StatusCode::kInvalidArgument, "an arriving session names no slice of the lease");
    }
    ++sessions_on[slices[session.getSlice()].getFromDevice()];
  }
  Status last(StatusCode::kResourceExhausted, "no device here fits");
  for (const auto& [from, memory] : memory_on) {
    wire::ArrivingSlice::Reader first;
    for (auto slice : slices) {
      if (slice.getFromDevice() == from) {
        first = slice;
        break;
      }
    }
    bool placed = false;
    for (uint32_t d = 0; d < state.devices.size() && !placed; ++d) {
      const DeviceRecord& record = state.devices[d];
      const bool taken = std::any_of(to.begin(), to.end(), [d](const auto& t) { return t.second == d; });
      if (taken) continue;
      if (record.model != first.getModel().cStr() || record.emulated != first.getEmulated()) {
        last = Status(StatusCode::kResourceExhausted, fmt::format("device {} is another model", d));
        continue;
      }
      if (record.device_class != first.getDeviceClass().cStr()) {
        last = Status(StatusCode::kResourceExhausted,
                      fmt::format("device {} is of class '{}', not '{}'", d, record.device_class,
                                  first.getDeviceClass().cStr()));
        continue;
      }
      if (state.table.cordoned(d)) {
        last = Status(StatusCode::kUnavailable, fmt::format("device {} is cordoned", d));
        continue;
      }
      const DeviceUsage& used = state.table.usage()[d];
      if (used.memory_bytes + memory > state.table.devices()[d].memory_bytes || used.share + share_on[from] > 1000000) {
        last = Status(StatusCode::kResourceExhausted, fmt::format("device {} has no room for the slices", d));
        continue;
      }
      if (state.workers->OnDevice(d) + sessions_on[from] > static_cast<size_t>(state.config.sessions_per_device)) {
        last = Status(StatusCode::kResourceExhausted,
                      fmt::format("device {} would hold more sessions than this agent allows on one device", d));
        continue;
      }
      to[from] = d;
      placed = true;
    }
    if (!placed) return refuse(last.code(), fmt::format("agent {} cannot take it: {}", state.config.name, last.message()));
  }
  for (unsigned i = 0; i < slices.size(); ++i) {
    grants[i] = SliceGrant{to.at(slices[i].getFromDevice()), slices[i].getMemoryBytes(), slices[i].getShareMicros()};
  }
  const Policy& policy = state.config.policy;
  if (!policy.empty()) {
    std::time_t now_t = PolicyNow();
    Status allowed = policy.Check(ReservationView(state, owner.user, grants), now_t, UnixGroupHas);
    if (!allowed.ok()) return refuse(allowed.code(), fmt::format("agent {}: {}", state.config.name, allowed.message()));
    const Personality* active = policy.ActiveAt(now_t);
    owner.personality = active ? active->name : "";
  }
  // Checked now that the slices are known, before anything is made.
  std::vector<LeaseArrivalImpl::Session> arriving(sessions.size());
  for (unsigned i = 0; i < sessions.size(); ++i) {
    auto session = sessions[i];
    const SliceGrant& grant = grants[session.getSlice()];
    if (Status fits = WindowFits(session.getWindowBase(), session.getWindowBytes(), grant.memory_bytes); !fits.ok()) {
      return refuse(fits.code(), fmt::format("arriving session {}: {}", i, fits.message()));
    }
    auto tickets = session.getTickets();
    if (tickets.size() == 0 || tickets.size() > 64) {
      return refuse(StatusCode::kInvalidArgument, "an arriving session needs between 1 and 64 tickets");
    }
    for (auto ticket : tickets) {
      if (ticket.size() != 16) return refuse(StatusCode::kInvalidArgument, "a session ticket has 16 bytes");
      arriving[i].tickets.emplace_back(reinterpret_cast<const char*>(ticket.begin()), ticket.size());
    }
    // An image holds the session's memory (its slice at most) and its modules.
    arriving[i].most_bytes = 2 * grant.memory_bytes + (4ull << 30);
  }
  Status reserved = state.table.Reserve(id, secret, owner, grants, Clock::now());
  if (reserved.ok()) reserved = state.table.Commit(id, secret, Clock::now());
  if (!reserved.ok()) {
    (void)state.table.Revoke(id);
    return refuse(reserved.code(), fmt::format("agent {}: {}", state.config.name, reserved.message()));
  }
  state.moved_away.erase(id);  // Back here, if it had left.
  state.arriving.insert(id);
  kj::Vector<kj::Promise<OpenedSession>> opens;
  for (unsigned i = 0; i < sessions.size(); ++i) {
    auto session = sessions[i];
    const SliceGrant& grant = grants[session.getSlice()];
    auto spec = state.SessionSpec(id, grant.device, grant, session.getWindowBase(), session.getWindowBytes());
    if (!spec.ok()) {
      state.DropArrival(id, "its move here failed: " + spec.status().message());
      return refuse(spec.status().code(), spec.status().message());
    }
    if (spec->emulated) {
      // Its memory may come apart from its image (the leaving agent read it from the old worker's memory file):
      // into a file the new worker maps, restoring without writing it.
      int made = memfd_create("gpupool-arriving-memory", MFD_CLOEXEC);
      if (made < 0) {
        const std::string why = fmt::format("memfd_create: {}", strerror(errno));
        state.DropArrival(id, "its move here failed: " + why);
        return refuse(StatusCode::kInternal, why);
      }
      arriving[i].memory = kj::AutoCloseFd(made);
      arriving[i].most_memory = grant.memory_bytes + (64ull << 20);
      spec->memory_fd = made;
      spec->memory_kept = true;
    }
    auto paf = kj::newPromiseAndFulfiller<SessionWorkers::RestoreInput>();
    arriving[i].give = kj::mv(paf.fulfiller);
    opens.add(state.workers->OpenRestoring(*spec, kj::mv(paf.promise)));
  }
  for (const SliceGrant& grant : grants) devices->push_back(grant.device);
  GP_INFO("agent", "lease {} of {} arrives from another agent: {} slice(s), {} session(s)", id, owner.user,
          grants.size(), sessions.size());
  return kj::heap<LeaseArrivalImpl>(state, id, secret, std::move(arriving), kj::joinPromises(opens.releaseAsArray()));
}

class AgentImpl final : public wire::Agent::Server {
 public:
  // `spoke` is set at the connection's first call (AcceptLoop closes a connection that makes none in time).
  AgentImpl(AgentState& state, Peer peer, std::shared_ptr<bool> spoke)
      : state_(state), peer_(std::move(peer)), spoke_(std::move(spoke)) {}

  DispatchCallResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                                  capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override {
    *spoke_ = true;  // A whole call arrived: hello, or any other.
    return wire::Agent::Server::dispatchCall(interface_id, method_id, context);
  }

  kj::Promise<void> hello(HelloContext context) override {
    auto params = context.getParams();
    uint32_t theirs = params.getClientVersion();
    if (theirs != wire::PROTOCOL_VERSION) {
      GP_WARN("rpc", "client speaks protocol v{}, this agent v{}", theirs, wire::PROTOCOL_VERSION);
    }
    // Over TCP a client proves who it is with its token; on a Unix socket the kernel has said already.
    // A TLS client certificate, when there is one, has said already too, and wins.
    if (!peer_.unix_socket && !peer_.authenticated && params.hasToken() && params.getToken().size() > 0) {
      std::string user = state_.tokens.UserOf(params.getToken());
      if (!user.empty()) {
        peer_.authenticated = true;
        peer_.user = user;
      } else {
        // Worth a warning only where tokens are in use: elsewhere a user's token meant for other agents is no news.
        if (state_.tokens.size() > 0) GP_WARN("auth", "a client presented a token this agent does not know");
        token_refused_ = true;
      }
    }
    auto results = context.getResults();
    results.setServerVersion(wire::PROTOCOL_VERSION);
    results.setName(state_.config.name);
    results.setUser(peer_.user);
    if (std::string why = Unauthenticated(); !why.empty()) results.setRefused(why);
    return kj::READY_NOW;
  }

  kj::Promise<void> describe(DescribeContext context) override {
    if (std::string why = Unauthenticated(); !why.empty()) {
      // describe's results carry no Outcome (hello already refused this client; only a client that ignored that
      // gets here): the refusal is an exception, which the client reads as kPermissionDenied by its tag.
      return KJ_EXCEPTION(FAILED, "gpupool-refused", why);
    }
    auto params = context.getParams();
    Describe(state_, context.getResults().initState(), params.getWithLeases(), params.getHistorySeconds());
    return kj::READY_NOW;
  }

  kj::Promise<void> reserve(ReserveContext context) override {
    auto params = context.getParams();
    auto key = params.getLease();
    LeaseOwner owner;
    owner.user = params.getOwner().getUser();
    owner.host = params.getOwner().getHost();
    owner.pid = params.getOwner().getPid();
    owner.label = params.getOwner().getLabel();
    if (peer_.authenticated) {  // Who the client is, not who it says it is.
      owner.user = peer_.user;
      owner.verified = true;
    } else {
      // A name the agent cannot verify is anyone's to claim: it earns no user's rules or holdings, only anonymous's.
      owner.claimed_user = owner.user;
      owner.user = kAnonymousUser;
    }
    auto results = context.getResults();
    if (!Admitted(results.initOutcome())) {
      ++state_.counters.reservations_refused["permission_denied"];
      return kj::READY_NOW;
    }
    std::vector<SliceGrant> slices;
    for (auto s : params.getSlices()) slices.push_back({s.getDevice(), s.getMemoryBytes(), s.getShareMicros()});
    Status status = Status::Ok();
    const Policy& policy = state_.config.policy;
    if (!policy.empty()) {
      std::time_t now_t = PolicyNow();
      status = policy.Check(ReservationView(state_, owner.user, slices), now_t, UnixGroupHas);
      const Personality* active = policy.ActiveAt(now_t);
      owner.personality = active ? active->name : "";
      const std::string client = fmt::format("{}@{} pid {}", owner.user, owner.host, owner.pid);
      if (!status.ok()) {
        status = Status(status.code(), fmt::format("agent {}: {}", state_.config.name, status.message()));
        if (auto line = state_.refusals.Refused(client, status.message(), Clock::now())) GP_INFO("policy", "{}", *line);
      } else if (auto line = state_.refusals.Allowed(client, Clock::now())) {
        GP_INFO("policy", "{}", *line);
      }
    }
    const bool by_policy = !status.ok();
    if (status.ok()) status = state_.table.Reserve(key.getId(), key.getSecret(), owner, slices, Clock::now());
    if (status.ok()) {
      GP_DEBUG("agent", "reserved {} for {}@{} pid {}", key.getId().cStr(), owner.user, owner.host, owner.pid);
      ++state_.counters.reservations_granted;
    } else {
      ++state_.counters.reservations_refused[ReasonOf(status)];
    }
    SetOutcome(results.initOutcome(), status);
    results.getOutcome().setByPolicy(by_policy);
    if (status.ok() && !owner.verified) {
      // Said to the client (gp-run -v prints it), not only in gp-ls: its lease is not its user's.
      results.getOutcome().setMessage(fmt::format(
          "agent {} could not verify {}: the lease is held as user {} (give the client a token, a TLS client "
          "certificate, or the agent's Unix socket)",
          state_.config.name,
          owner.claimed_user.empty() ? "who this client is" : "that this client is " + owner.claimed_user,
          kAnonymousUser));
    }
    results.setReservationTtlMs(Ms(state_.table.timing().reservation_ttl));
    return kj::READY_NOW;
  }

  kj::Promise<void> commit(CommitContext context) override {
    if (!Admitted(context.getResults().initOutcome())) return kj::READY_NOW;
    auto key = context.getParams().getLease();
    Status status = state_.table.Commit(key.getId(), key.getSecret(), Clock::now());
    if (status.ok()) {
      const LeaseEntry* e = state_.table.Find(key.getId());
      GP_INFO("agent", "lease {} granted to {}@{} pid {} ({} slice(s))", key.getId().cStr(), e->owner.user,
              e->owner.host, e->owner.pid, e->slices.size());
    }
    auto results = context.getResults();
    SetOutcome(results.initOutcome(), status);
    results.setLeaseTtlMs(Ms(state_.table.timing().lease_ttl));
    results.setRenewIntervalMs(Ms(state_.table.timing().renew_interval));
    return kj::READY_NOW;
  }

  kj::Promise<void> renew(RenewContext context) override {
    if (!Admitted(context.getResults().initOutcome())) return kj::READY_NOW;
    auto key = context.getParams().getLease();
    if (MovedAway(key, context.getResults().initOutcome())) return kj::READY_NOW;
    EnforcePolicyOn(state_, key.getId());  // A renewal is no way past the policy: it ends what the sweep would.
    Status status = state_.table.Renew(key.getId(), key.getSecret(), Clock::now());
    if (status.code() == StatusCode::kNotFound) status = state_.Lost(key.getId());
    auto results = context.getResults();
    SetOutcome(results.initOutcome(), status);
    results.setLeaseTtlMs(Ms(state_.table.timing().lease_ttl));
    if (status.ok()) {
      const LeaseEntry* e = state_.table.Find(key.getId());
      FillSlices(results.initSlices(static_cast<unsigned>(e->slices.size())), e->slices);
      if (auto ending = PolicyEndsLater(state_, key.getId())) {
        results.setPolicyEnd(ending->why);
        results.setPolicyEndsInMs(Ms(ending->in));
      }
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> release(ReleaseContext context) override {
    if (!Admitted(context.getResults().initOutcome())) return kj::READY_NOW;
    auto key = context.getParams().getLease();
    if (MovedAway(key, context.getResults().initOutcome())) return kj::READY_NOW;
    Status status = state_.table.Release(key.getId(), key.getSecret());
    SetOutcome(context.getResults().initOutcome(), status);
    if (!status.ok()) return kj::READY_NOW;
    GP_INFO("agent", "lease {} released", key.getId().cStr());
    // Answered once its sessions are revoked: after Release returns, no call of the lease's sessions is served.
    return state_.EndSessions(key.getId(), "released by its holder");
  }

  kj::Promise<void> openSession(OpenSessionContext context) override {
    if (!Admitted(context.getResults().initOutcome())) return kj::READY_NOW;
    auto params = context.getParams();
    auto key = params.getLease();
    auto results = context.getResults();
    if (MovedAway(key, results.initOutcome())) return kj::READY_NOW;
    const LeaseEntry* e = state_.table.Find(key.getId());
    if (!e || !ConstantTimeEquals(e->secret, key.getSecret().cStr()) || !e->committed) {
      RefuseSession(results.initOutcome(),
                 Status(e ? StatusCode::kPermissionDenied : StatusCode::kNotFound,
                        e ? "this lease may not open a session here (wrong secret or not committed)"
                          : "no such lease here (released, expired, or the agent restarted)"));
      return kj::READY_NOW;
    }
    if (state_.moving.count(e->id) && state_.timer != nullptr) {
      // Its slices are changing devices (a move or a suspension under way): asked again once that is over, so that
      // a process of the lease opening a session meanwhile finds the lease where it went.
      return state_.timer->afterDelay(20 * kj::MILLISECONDS).then([this, context]() mutable {
        return openSession(context);
      });
    }
    if (e->suspended) {
      // The lease's first call since it was suspended: it is placed again (its sessions restored), then the call is
      // answered as if it had never been.
      std::string id = e->id;
      return state_.ResumeLease(id).then([this, context, id](Status resumed) mutable -> kj::Promise<void> {
        if (!resumed.ok()) {
          auto out = context.getResults().initOutcome();
          SetOutcome(out, resumed.code() == StatusCode::kResourceExhausted
                              ? Status(resumed.code(), fmt::format("lease {} is suspended and waits for room to "
                                                                   "resume: {}", id, resumed.message()))
                              : resumed);
          return kj::READY_NOW;
        }
        return openSession(context);
      });
    }
    if (params.hasResumeTicket() && params.getResumeTicket().size() > 0) {
      // A client whose session moved asks where it went.
      auto ticket = params.getResumeTicket();
      auto moved = state_.moved_sessions.find(std::string(reinterpret_cast<const char*>(ticket.begin()), ticket.size()));
      if (moved == state_.moved_sessions.end() || moved->second.lease_id != e->id) {
        RefuseSession(results.initOutcome(),
                      Status(StatusCode::kNotFound, "the session did not move: it ended (its worker is gone)"));
        return kj::READY_NOW;
      }
      const DirectDoor& door = moved->second.door;
      SetOutcome(results.initOutcome(), Status::Ok());
      auto d = results.initDirect();
      d.setPort(door.port);
      d.setPath(door.path);
      d.setTicket(kj::arrayPtr(reinterpret_cast<const kj::byte*>(door.ticket.data()), door.ticket.size()));
      // Kept (a client whose knock there failed may ask again) until the session moves again or its lease ends.
      return kj::READY_NOW;
    }
    uint32_t device = state_.DeviceNow(e->id, params.getDevice());
    const SliceGrant* slice = nullptr;
    for (const auto& s : e->slices) {
      if (s.device == device) slice = &s;
    }
    if (!slice) {
      RefuseSession(results.initOutcome(), Status(StatusCode::kPermissionDenied,
                                               fmt::format("lease {} holds no slice of device {}", e->id, device)));
      return kj::READY_NOW;
    }
    const DeviceRecord& record = state_.devices[device];
    uint64_t base = params.getWindowBase(), window = params.getWindowBytes();
    if (Status fits = WindowFits(base, window, slice->memory_bytes); !fits.ok()) {
      RefuseSession(results.initOutcome(), fits);
      return kj::READY_NOW;
    }
    if (!record.emulated && !state_.cuda) {
      RefuseSession(results.initOutcome(),
                 Status(StatusCode::kInternal, "cannot run CUDA on this server's GPUs: " + state_.cuda_error));
      return kj::READY_NOW;
    }
    // Capacity is checked before a worker starts: past it, a worker could not join its device's tables, and a
    // tenant would meet a failed start instead of the limit.
    if (const size_t open = state_.workers->OnDevice(device);
        open >= static_cast<size_t>(state_.config.sessions_per_device)) {
      RefuseSession(results.initOutcome(),
                    Status(StatusCode::kResourceExhausted,
                           fmt::format("device {} has {} sessions open, the most this agent allows on one device "
                                       "([limits] sessions_per_device = {}): close some first",
                                       device, open, state_.config.sessions_per_device)));
      return kj::READY_NOW;
    }
    if (const size_t open = state_.workers->OfLease(e->id, device);
        open >= static_cast<size_t>(state_.config.sessions_per_lease)) {
      RefuseSession(results.initOutcome(),
                    Status(StatusCode::kResourceExhausted,
                           fmt::format("lease {} has {} sessions open on device {}, the most this agent allows one "
                                       "lease on one device ([limits] sessions_per_lease = {}): close some first",
                                       e->id, open, device, state_.config.sessions_per_lease)));
      return kj::READY_NOW;
    }
    auto made = state_.SessionSpec(e->id, device, *slice, base, window);
    if (!made.ok()) {
      RefuseSession(results.initOutcome(), made.status());
      return kj::READY_NOW;
    }
    WorkerSpec spec = std::move(made).value();
    std::string lease_id = e->id;
    std::string what = record.emulated ? fmt::format("device {} ({})", device, FormatMemorySize(slice->memory_bytes))
                                       : fmt::format("GPU {} ({})", device, record.model);
    return state_.workers->Open(spec).then([this, context, lease_id, what, base](OpenedSession&& opened) mutable {
      auto results = context.getResults();
      // The lease may have ended while the worker started: then the worker goes too.
      if (opened.status.ok() && !state_.table.Find(lease_id)) {
        Status lost = state_.Lost(lease_id);
        // Its revocation is not awaited: the session was never handed out.
        (void)state_.workers->KillLease(lease_id, lost.message());
        opened.status = Status(StatusCode::kNotFound, "the session could not open: " + lost.message());
      }
      if (!opened.status.ok()) {
        // A window taken in the worker (its own mappings are there) is worth another window: said apart from the
        // other refusals, which another window would meet too.
        RefuseSession(results.initOutcome(), opened.status);
        results.getOutcome().setWindowTaken(opened.window_taken);
        return;
      }
      ++state_.counters.sessions_opened;
      GP_INFO("session", "lease {}: session on {}, window 0x{:x}", lease_id, what, base);
      SetOutcome(results.initOutcome(), Status::Ok());
      KJ_IF_MAYBE(session, opened.session) { results.setSession(kj::mv(*session)); }
      KJ_IF_MAYBE(door, opened.direct) {
        auto d = results.initDirect();
        d.setPort(door->port);
        d.setPath(door->path);
        d.setTicket(kj::arrayPtr(reinterpret_cast<const kj::byte*>(door->ticket.data()), door->ticket.size()));
      }
    });
  }

  kj::Promise<void> cordon(CordonContext context) override {
    auto params = context.getParams();
    auto out = context.getResults().initOutcome();
    if (!AdminOnly(out, params.getCordoned() ? "cordon" : "uncordon")) return kj::READY_NOW;
    int32_t device = params.getDevice();
    if (device < -1 || device >= static_cast<int32_t>(state_.devices.size())) {
      SetOutcome(out, Status(StatusCode::kInvalidArgument,
                             fmt::format("no device {} here (this agent has {})", device, state_.devices.size())));
      return kj::READY_NOW;
    }
    for (size_t i = 0; i < state_.devices.size(); ++i) {
      if (device == -1 || static_cast<size_t>(device) == i) {
        state_.table.SetCordoned(static_cast<uint32_t>(i), params.getCordoned());
      }
    }
    GP_INFO("admin", "{} {} {}", peer_.user, params.getCordoned() ? "cordoned" : "uncordoned",
            device == -1 ? std::string("every device") : fmt::format("device {}", device));
    SetOutcome(out, Status::Ok());
    return kj::READY_NOW;
  }

  kj::Promise<void> revoke(RevokeContext context) override {
    auto out = context.getResults().initOutcome();
    if (!AdminOnly(out, "revoke")) return kj::READY_NOW;
    std::string id = context.getParams().getLeaseId();
    Status status = state_.table.Revoke(id);
    SetOutcome(out, status);
    if (!status.ok()) return kj::READY_NOW;
    GP_INFO("admin", "{} revoked lease {}", peer_.user, id);
    ++state_.counters.lease_revocations;
    return state_.EndSessions(id, fmt::format("revoked by {} (an administrator of agent {})", peer_.user,
                                              state_.config.name));
  }

  kj::Promise<void> migrate(MigrateContext context) override {
    auto results = context.getResults();
    if (!AdminOnly(results.initOutcome(), "migrate")) return kj::READY_NOW;
    std::string id = context.getParams().getLeaseId();
    GP_INFO("admin", "{} moves lease {}", peer_.user, id);
    return state_.InBackground(state_.Migrate(id, context.getParams().getDevice()))
        .then([context](AgentState::MoveResult moved) mutable { FillMoved(context.getResults(), moved); });
  }

  kj::Promise<void> migrateTo(MigrateToContext context) override {
    auto results = context.getResults();
    if (!AdminOnly(results.initOutcome(), "migrate")) return kj::READY_NOW;
    std::string id = context.getParams().getLeaseId(), server = context.getParams().getServer();
    GP_INFO("admin", "{} moves lease {} to the agent at {}", peer_.user, id, server);
    return state_.InBackground(state_.MigrateTo(id, server)).then([context](AgentState::MoveResult moved) mutable {
      FillMoved(context.getResults(), moved);
    });
  }

  kj::Promise<void> adopt(AdoptContext context) override {
    auto results = context.getResults();
    if (!AdminOnly(results.initOutcome(), "adopt")) return kj::READY_NOW;
    std::vector<uint32_t> devices;
    Status why = Status::Ok();
    kj::Own<LeaseArrivalImpl> arrival = Adopt(state_, context.getParams(), &devices, &why);
    SetOutcome(results.initOutcome(), why);
    if (arrival.get() == nullptr) return kj::READY_NOW;
    results.setArrival(kj::mv(arrival));
    auto list = results.initDevices(static_cast<unsigned>(devices.size()));
    for (size_t i = 0; i < devices.size(); ++i) list.set(static_cast<unsigned>(i), devices[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> suspend(SuspendContext context) override {
    if (!AdminOnly(context.getResults().initOutcome(), "suspend")) return kj::READY_NOW;
    std::string id = context.getParams().getLeaseId();
    GP_INFO("admin", "{} suspends lease {}", peer_.user, id);
    return state_.InBackground(state_.Suspend(id)).then([context](AgentState::SuspendResult done) mutable {
      auto results = context.getResults();
      SetOutcome(results.initOutcome(), done.status);
      results.setSessions(done.sessions);
      results.setBytes(done.bytes);
    });
  }

  kj::Promise<void> resume(ResumeContext context) override {
    if (!AdminOnly(context.getResults().initOutcome(), "resume")) return kj::READY_NOW;
    std::string id = context.getParams().getLeaseId();
    const LeaseEntry* e = state_.table.Find(id);
    if (e == nullptr || !e->suspended) {
      SetOutcome(context.getResults().initOutcome(),
                 Status(StatusCode::kNotFound, "no suspended lease " + id + " here"));
      return kj::READY_NOW;
    }
    GP_INFO("admin", "{} resumes lease {}", peer_.user, id);
    return state_.InBackground(state_.ResumeLease(id)).then([context](Status done) mutable {
      SetOutcome(context.getResults().initOutcome(), done);
    });
  }

  kj::Promise<void> cancel(CancelContext context) override {
    if (!Admitted(context.getResults().initOutcome())) return kj::READY_NOW;
    auto key = context.getParams().getLease();
    Status status = state_.table.Cancel(key.getId(), key.getSecret());
    if (status.ok()) GP_DEBUG("agent", "reservation {} cancelled", key.getId().cStr());
    SetOutcome(context.getResults().initOutcome(), status);
    return kj::READY_NOW;
  }

 private:
  // What a move did, in migrate's or migrateTo's answer.
  template <typename Results>
  static void FillMoved(Results results, const AgentState::MoveResult& moved) {
    SetOutcome(results.initOutcome(), moved.status);
    results.setSessions(moved.sessions);
    results.setBytes(moved.bytes);
    results.setPauseMs(moved.pause_ms);
    auto devices = results.initDevices(static_cast<unsigned>(moved.devices.size()));
    for (size_t i = 0; i < moved.devices.size(); ++i) devices.set(static_cast<unsigned>(i), moved.devices[i]);
  }

  // Whether lease `key` moved from here to another agent: then `out` says where (AgentState::AnswerMovedAway).
  bool MovedAway(wire::LeaseKey::Reader key, wire::Outcome::Builder out) {
    return state_.table.Find(key.getId()) == nullptr && state_.AnswerMovedAway(key.getId(), key.getSecret(), out);
  }

  // Why this connection may do nothing (the agent requires authentication and it has none); empty if it may.
  std::string Unauthenticated() const {
    if (!state_.config.require_auth || peer_.authenticated) return "";
    if (peer_.unix_socket) return "this agent requires authentication and cannot tell who is on this Unix socket";
    if (token_refused_) {
      return fmt::format("agent {} does not know this client's token (GPUPOOL_TOKEN or ~/.config/gpupool/token)",
                         state_.config.name);
    }
    return fmt::format("agent {} requires authentication: give this client a token the agent knows "
                       "(GPUPOOL_TOKEN, or ~/.config/gpupool/token readable by you alone), or use its Unix socket",
                       state_.config.name);
  }
  // Whether the peer administers this agent: an authenticated root, the agent's own user, or one of [auth] admins. If
  // not, `out` says that `verb` was refused and how to be allowed: on the Unix socket the kernel says who the peer
  // is; over TCP only a token (or a TLS client certificate) does, whoever the peer is on its own host, root included.
  bool AdminOnly(wire::Outcome::Builder out, const char* verb) {
    if (peer_.authenticated) {
      const auto& admins = state_.config.admins;
      if (peer_.user == "root" || peer_.user == state_.own_user ||
          std::find(admins.begin(), admins.end(), peer_.user) != admins.end()) {
        return true;
      }
      SetOutcome(out, Status(StatusCode::kPermissionDenied,
                             fmt::format("{} refused: it is for agent {}'s administrators (root, {}, and the users "
                                         "of [auth] admins in its agent.toml); {} is not one: ask for {} to be added "
                                         "to [auth] admins",
                                         verb, state_.config.name, state_.own_user, peer_.user, peer_.user)));
      return false;
    }
    std::string why;
    if (peer_.unix_socket) {
      why = "the agent cannot tell who is on this Unix socket";
    } else if (token_refused_) {
      why = "over TCP an administrator proves who they are with a token, and agent " + state_.config.name +
            " does not know this client's (GPUPOOL_TOKEN or ~/.config/gpupool/token)";
    } else {
      why = "over TCP an administrator proves who they are with a token, root included, and this client gave none";
    }
    SetOutcome(out, Status(StatusCode::kPermissionDenied,
                           fmt::format("{} refused: {}. Run it on the agent's host against its Unix socket "
                                       "(--listen unix:PATH), where the kernel says who you are, or give it an "
                                       "administrator's token from the agent's --tokens file (GPUPOOL_TOKEN)",
                                       verb, why)));
    return false;
  }

  // Whether the connection may act; if not, `out` says why.
  bool Admitted(wire::Outcome::Builder out) {
    std::string why = Unauthenticated();
    if (why.empty()) return true;
    SetOutcome(out, Status(StatusCode::kPermissionDenied, why));
    return false;
  }

  void RefuseSession(wire::Outcome::Builder out, const Status& status) {
    ++state_.counters.sessions_refused[ReasonOf(status)];
    SetOutcome(out, status);
  }

  AgentState& state_;
  Peer peer_;
  std::shared_ptr<bool> spoke_;
  bool token_refused_ = false;  // The client presented a token the agent does not know.
};

// How many sessions' worth of calls in flight (AgentConfig::session_bytes_in_flight) the agent holds for one client
// connection before it stops reading it.
constexpr uint64_t kAgentFlowSessions = 4;

// One client connection: its own AgentImpl, which knows who the client is.
struct AgentConnection {
  AgentConnection(kj::Own<kj::AsyncIoStream> s, kj::Own<AgentImpl> impl)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER),
        rpc(capnp::makeRpcServer(network, capnp::Capability::Client(kj::mv(impl)))) {}
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

class ConnectionErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& e) override { GP_DEBUG("rpc", "a client connection failed: {}", e.getDescription().cStr()); }
};

// Accepts clients for ever; each connection lives until its client disconnects. With `tls`, each connection's
// handshake runs on its own (a client that fails it, or never finishes it, holds up nobody), and a client
// certificate says who the client is.
kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& receiver, AgentState& state, kj::TaskSet& connections,
                             bool unix_socket, kj::TlsContext* tls) {
  return receiver.acceptAuthenticated().then(
      [&receiver, &state, &connections, unix_socket, tls](kj::AuthenticatedStream&& accepted) {
        auto serve = [&state, &connections](kj::Own<kj::AsyncIoStream> stream, Peer peer) {
          auto spoke = std::make_shared<bool>(false);
          auto connection =
              kj::heap<AgentConnection>(kj::mv(stream), kj::heap<AgentImpl>(state, kj::mv(peer), spoke));
          // The agent buffers no more for a client than its sessions' workers do: calls it forwarded and that are
          // not answered yet (a worker answers a posted copy once done) stop it reading more from that client.
          // Room for a few sessions of the client that go through the agent (over TLS, every session does).
          connection->rpc.setFlowLimit(kAgentFlowSessions * state.config.session_bytes_in_flight / sizeof(capnp::word));
          auto ended = connection->network.onDisconnect();
          // Every client's first call is hello, as it connects. A connection without a whole call by hello_timeout
          // (silent, or stopped mid-message) is closed: otherwise it would hold its socket and buffers for ever.
          // Connections that spoke are left alone: leases and sessions have timeouts of their own.
          const auto timeout = state.config.hello_timeout;
          auto silent = state.timer->afterDelay(timeout.count() * kj::MILLISECONDS)
                            .then([spoke, timeout]() -> kj::Promise<void> {
                              if (*spoke) return kj::NEVER_DONE;
                              GP_INFO("agent", "closed a client connection that made no call in {} ([limits] "
                                               "hello_timeout)",
                                      FormatDuration(timeout));
                              return kj::READY_NOW;
                            });
          connections.add(ended.exclusiveJoin(kj::mv(silent)).attach(kj::mv(connection)));
        };
        if (tls) {
          connections.add(state.timer->timeoutAfter(10 * kj::SECONDS, tls->wrapServer(kj::mv(accepted)))
                              .then([serve](kj::AuthenticatedStream&& secured) {
                                Peer peer = TlsPeer(secured.peerIdentity.get());
                                serve(kj::mv(secured.stream), kj::mv(peer));
                              })
                              .catch_([](kj::Exception&& e) {
                                GP_WARN("tls", "a client's TLS handshake failed: {}", e.getDescription().cStr());
                              }));
        } else {
          Peer peer = unix_socket ? UnixPeer(*accepted.stream) : Peer{};
          serve(kj::mv(accepted.stream), kj::mv(peer));
        }
        return AcceptLoop(receiver, state, connections, unix_socket, tls);
      });
}

// Why the agent cannot listen on `listen`, in an operator's words: KJ's description names the call and the
// expressions it evaluated ("::bind(sockfd, ...): No such file or directory; toString() = ...").
std::string ListenFailure(const std::string& desc, const std::string& listen) {
  const bool unix_socket = listen.rfind("unix:", 0) == 0;
  auto has = [&desc](const char* text) { return desc.find(text) != std::string::npos; };
  if (has("DNS lookup failed")) return "its host name cannot be resolved: give an address of this machine";
  if (has("No such file or directory")) {
    return "its directory does not exist: create it first, or choose another path";
  }
  if (has("Address already in use")) {
    return unix_socket ? "a file is already there: remove it, or choose another path"
                       : "another program listens on that port: stop it, or choose another port (0 picks a free one)";
  }
  if (has("Permission denied")) {
    return unix_socket ? "permission denied: the agent's user may not create a file there"
                       : "permission denied: ports below 1024 need privileges; choose a higher port";
  }
  if (has("Cannot assign requested address")) return "no network interface of this machine has that address";
  if (has("Path too long") || has("too long")) return "the socket path is too long (at most 107 bytes)";
  // Anything else: the operating system's words, after the call's name and before KJ's expressions.
  std::string text = desc.substr(0, desc.find("; "));
  if (auto colon = text.rfind("): "); colon != std::string::npos) text = text.substr(colon + 3);
  return text;
}

// The policy at one moment, as the leases it ends are judged.
struct PolicyMoment {
  explicit PolicyMoment(const Policy& p) : policy(p), now_t(PolicyNow()), now(Clock::now()), active(p.ActiveAt(now_t)) {}
  // Whether a grace of `grace` since the change to the personality in force has passed. A grace runs from the change,
  // by the policy's clock, whether or not the agent was up to see it; worked out once, and only when asked.
  bool GraceOver(std::chrono::milliseconds grace) {
    if (!since) since = policy.InForceSince(now_t);
    return now_t - *since >= std::chrono::duration_cast<std::chrono::seconds>(grace).count();
  }
  const Policy& policy;
  const std::time_t now_t;
  const Clock::time_point now;
  const Personality* const active;
  std::optional<std::time_t> since;
};

// Why the policy ends lease `e` now: over its personality's max_lease, or, after a change of personality with a grace
// period, granted under other rules that break the new one's once the grace is over. Empty: it does not.
std::string PolicyEnds(const AgentState& state, const LeaseEntry& e, PolicyMoment& m) {
  if (!e.committed) return "";
  auto age = std::chrono::duration_cast<std::chrono::milliseconds>(m.now - e.created);
  for (const Personality& p : m.policy.personalities()) {
    if (p.name == e.owner.personality && p.max_lease && age > *p.max_lease) {
      return fmt::format("it reached personality {}'s max_lease of {}", p.name, FormatDuration(*p.max_lease));
    }
  }
  const Personality* active = m.active;
  if (!active || !active->grace || e.owner.personality == active->name || !m.GraceOver(*active->grace)) return "";
  std::string why = m.policy.Breaks(*active, PolicyView(state, e.owner.user, e.slices), age, UnixGroupHas);
  return why.empty() ? "" : fmt::format("{} (after its {} grace)", why, FormatDuration(*active->grace));
}

// After a change to a personality with on_change = "migrate": why lease `e`, granted under other rules, breaks the
// rules in force (so that it is moved off its GPUs instead of ended, or kept off them). Empty: it keeps to them.
std::string PolicyMoves(const AgentState& state, const LeaseEntry& e, PolicyMoment& m) {
  const Personality* active = m.active;
  if (!e.committed || !active || !active->migrate_on_change || e.owner.personality == active->name) return "";
  auto age = std::chrono::duration_cast<std::chrono::milliseconds>(m.now - e.created);
  return m.policy.Breaks(*active, PolicyView(state, e.owner.user, e.slices), age, UnixGroupHas);
}

std::string PolicyHoldsSuspended(const AgentState& state, const LeaseEntry& e) {
  if (state.config.policy.empty()) return "";
  PolicyMoment m(state.config.policy);
  std::string why = PolicyMoves(state, e, m);
  return why.empty() ? "" : fmt::format("agent {}'s policy (personality {}) keeps the lease off its GPUs: {}; it "
                                        "resumes when the rules in force allow it",
                                        state.config.name, m.active->name, why);
}

// Moves lease `id` off its GPUs for `why` (on_change = "migrate"): within one agent, a suspension, which keeps its
// programs' state and gives its GPUs back; a lease that cannot be suspended (a session with no direct connection, a
// GPU session whose module variables a restore might not place, no room for its images) is ended as a grace would
// end it, saying why.
void MoveByPolicy(AgentState& state, const std::string& id, const std::string& why, std::time_t now_t);

std::optional<PolicyEnding> PolicyEndsLater(const AgentState& state, const std::string& lease_id) {
  const LeaseEntry* e = state.table.Find(lease_id);
  if (state.config.policy.empty() || !e || !e->committed) return std::nullopt;
  PolicyMoment m(state.config.policy);
  auto age = std::chrono::duration_cast<std::chrono::milliseconds>(m.now - e->created);
  std::optional<PolicyEnding> soonest;
  auto consider = [&soonest](std::chrono::milliseconds in, std::string why) {
    if (!soonest || in < soonest->in) soonest = PolicyEnding{std::max(in, std::chrono::milliseconds(0)), std::move(why)};
  };
  for (const Personality& p : m.policy.personalities()) {
    if (p.name == e->owner.personality && p.max_lease) {
      consider(*p.max_lease - age, fmt::format("agent {}'s policy: personality {} allows leases of at most {}",
                                               state.config.name, p.name, FormatDuration(*p.max_lease)));
    }
  }
  const Personality* active = m.active;
  const PolicyRequest view = PolicyView(state, e->owner.user, e->slices);
  // Judged as it will be when the grace ends (a max_lease it reaches by then counts); a lease that keeps to the rules
  // even a whole grace from now needs no look back for when the grace began.
  if (active && active->grace && e->owner.personality != active->name &&
      !m.policy.Breaks(*active, view, age + *active->grace, UnixGroupHas).empty()) {
    if (!m.since) m.since = m.policy.InForceSince(m.now_t);
    auto left = *active->grace - std::chrono::seconds(m.now_t - *m.since);
    std::string why = m.policy.Breaks(*active, view, age + left, UnixGroupHas);
    if (!why.empty()) {
      consider(left, fmt::format("agent {}'s policy: {}, and its grace of {} for leases granted under other rules "
                                 "ends then",
                                 state.config.name, why, FormatDuration(*active->grace)));
    }
  }
  return soonest;
}

// Ends lease `id` for `why`, remembering why for its holder's next renewal (bounded: the oldest reasons go first).
void EndByPolicy(AgentState& state, const std::string& id, const std::string& why, std::time_t now_t) {
  GP_INFO("policy", "lease {} ended: {}", id, why);
  std::tm tm{};
  localtime_r(&now_t, &tm);  // The policy's clock, as its personalities' hours are read.
  std::string reason = fmt::format("ended by agent {}'s policy at {:02}:{:02}: {}", state.config.name, tm.tm_hour,
                                   tm.tm_min, why);
  if (state.table.Revoke(id).ok()) {
    ++state.counters.lease_revocations;
    (void)state.EndSessions(id, reason);  // Nobody waits for the policy's revocations.
  }
}

void EnforcePolicy(AgentState& state) {
  if (state.config.policy.empty()) return;
  PolicyMoment moment(state.config.policy);
  std::string name = moment.active ? moment.active->name : "";
  if (name != state.personality) {
    GP_INFO("policy", "personality {} in force (was {})", name.empty() ? "none" : name,
            state.personality.empty() ? "none" : state.personality);
    state.personality = name;
  }
  std::vector<std::pair<std::string, std::string>> ending, moving;  // Lease, why.
  for (const auto& [id, e] : state.table.entries()) {
    if (std::string why = PolicyEnds(state, e, moment); !why.empty()) {
      ending.push_back({id, why});
    } else if (!e.suspended && !state.moving.count(id) && !state.resuming.count(id)) {
      if (std::string breaks = PolicyMoves(state, e, moment); !breaks.empty()) moving.push_back({id, breaks});
    }
  }
  for (const auto& [id, why] : ending) EndByPolicy(state, id, why, moment.now_t);
  for (const auto& [id, why] : moving) MoveByPolicy(state, id, why, moment.now_t);
}

// Lease `id`, which breaks the rules in force (`why`), to the first of [moves] agents from `next` on that takes it
// (its policy decides there); resolves to where it went, or "" when none did.
kj::Promise<std::string> MoveToAnotherAgent(AgentState& state, const std::string& id, size_t next) {
  if (next >= state.config.move_agents.size() || state.table.Find(id) == nullptr) return std::string();
  const std::string to = state.config.move_agents[next];
  return state.MigrateTo(id, to).then([&state, id, next, to](AgentState::MoveResult r) -> kj::Promise<std::string> {
    if (r.status.ok()) return to;
    GP_INFO("policy", "lease {} not moved to the agent at {}: {}", id, to, r.status.message());
    return MoveToAnotherAgent(state, id, next + 1);
  });
}

void MoveByPolicy(AgentState& state, const std::string& id, const std::string& why, std::time_t now_t) {
  GP_INFO("policy", "lease {} breaks personality {}'s rules ({}): moving it off its GPUs", id, state.personality, why);
  state.moves.add(MoveToAnotherAgent(state, id, 0).then([&state, id](std::string to) -> kj::Promise<AgentState::SuspendResult> {
    if (!to.empty()) {
      GP_INFO("policy", "lease {} moved by the policy to the agent at {}", id, to);
      return AgentState::SuspendResult{Status::Ok()};
    }
    if (state.table.Find(id) == nullptr) return AgentState::SuspendResult{Status::Ok()};  // It ended meanwhile.
    return state.Suspend(id).then([&state, id](AgentState::SuspendResult r) {
      if (r.status.ok()) {
        GP_INFO("policy", "lease {} suspended by the policy: {} session(s) kept, its GPUs given back", id, r.sessions);
      }
      return r;
    });
  }).then([&state, id, why, now_t](AgentState::SuspendResult r) {
    if (r.status.ok()) return;
    if (state.table.Find(id) != nullptr) {
      EndByPolicy(state, id, fmt::format("{} (it could not be moved off its GPUs: {})", why, r.status.message()),
                  now_t);
    }
  }));
}

void EnforcePolicyOn(AgentState& state, const std::string& lease_id) {
  const LeaseEntry* e = state.table.Find(lease_id);
  if (state.config.policy.empty() || !e) return;
  PolicyMoment moment(state.config.policy);
  if (std::string why = PolicyEnds(state, *e, moment); !why.empty()) EndByPolicy(state, lease_id, why, moment.now_t);
}

// On every SIGHUP: the policy and the administrators again from the config file; leases are kept. A file that
// does not load keeps the old policy, and the log says why.
kj::Promise<void> ReloadLoop(AgentState& state, kj::UnixEventPort& port) {
  return port.onSignal(SIGHUP).then([&state, &port](siginfo_t) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    state.systemd.Notify(fmt::format("RELOADING=1\nMONOTONIC_USEC={}",
                                     static_cast<uint64_t>(now.tv_sec) * 1000000 + now.tv_nsec / 1000));
    if (state.config.config_path.empty()) {
      GP_WARN("policy", "SIGHUP: the agent was started without --config; nothing to re-read");
    } else {
      AgentConfig fresh;
      Status s = LoadAgentConfig(state.config.config_path, &fresh);
      if (s.ok()) s = fresh.Validate();
      if (!s.ok()) {
        GP_ERROR("policy", "SIGHUP: {}; keeping the policy in force", s.message());
      } else {
        state.config.policy = std::move(fresh.policy);
        state.config.admins = std::move(fresh.admins);
        state.config.move_agents = std::move(fresh.move_agents);
        GP_INFO("policy", "SIGHUP: policy re-read from {} ({} personalities); {} lease(s) kept",
                state.config.config_path, state.config.policy.personalities().size(), state.table.entries().size());
      }
    }
    state.systemd.Notify("READY=1");
    return ReloadLoop(state, port);
  });
}

kj::Promise<void> SweepLoop(AgentState& state, kj::Timer& timer) {
  return timer.afterDelay(state.config.sweep_interval.count() * kj::MILLISECONDS).then([&state, &timer]() {
    for (const LeaseTable::Expired& e : state.table.Expire(Clock::now())) {
      if (e.committed) {
        GP_INFO("agent", "lease {} expired: its holder stopped renewing; freed", e.id);
      } else {
        GP_INFO("agent", "reservation {} expired: never committed; freed", e.id);
      }
      ++state.counters.lease_expirations[e.committed ? "not_renewed" : "not_committed"];
      // Nobody waits for an expiry's revocations.
      (void)state.EndSessions(e.id, e.committed ? fmt::format("expired: agent {} had no renewal from its holder for {}",
                                                              state.config.name,
                                                              FormatDuration(state.table.timing().lease_ttl))
                                                : "expired: the reservation was never committed");
    }
    EnforcePolicy(state);
    return SweepLoop(state, timer);
  });
}

// Resolves once the agent may exit after the first SIGTERM/SIGINT: no leases left, and the holders of leases moved
// from here told where they went (MovesUntold); or the drain timeout.
kj::Promise<void> DrainLoop(AgentState& state, kj::Timer& timer, kj::TimePoint deadline) {
  if (state.table.entries().empty() && state.MovesUntold() == 0) {
    GP_INFO("agent", "drained: no leases left");
    return kj::READY_NOW;
  }
  if (timer.now() >= deadline) {
    GP_WARN("agent", "drain timeout passed with {} lease(s) still held and {} moved lease(s) whose holders may not "
            "know where they went; exiting", state.table.entries().size(), state.MovesUntold());
    return kj::READY_NOW;
  }
  return timer.afterDelay(100 * kj::MILLISECONDS).then([&state, &timer, deadline]() {
    return DrainLoop(state, timer, deadline);
  });
}

std::string DisplayAddress(const std::string& configured, uint port) {
  if (configured.rfind("unix:", 0) == 0) return configured;
  std::string host = configured.substr(0, configured.rfind(':'));
  if (host == "*" || host.empty()) host = "0.0.0.0";
  return fmt::format("{}:{}", host, port);
}

}  // namespace

void CaptureAgentSignals() {
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGHUP);  // Re-read the policy.
  kj::UnixEventPort::captureChildExit();  // Session workers are reaped by the event loop.
  signal(SIGPIPE, SIG_IGN);
}

int RunAgent(const AgentConfig& config, std::vector<DeviceRecord> devices) {
  CaptureAgentSignals();  // Before KJ or anything else may start a thread.

  auto io = kj::setupAsyncIo();
  AgentState state(config, std::move(devices));
  state.systemd = SystemdNotifier::FromEnvironment();  // Before any worker could inherit $NOTIFY_SOCKET.
  auto sandbox = ResolveWorkerSandbox(config.workers);
  if (!sandbox.ok()) {
    GP_ERROR("agent", "{}", sandbox.status().message());
    return 2;
  }
  auto cgroups = WorkerCgroups::Resolve(config.workers.cgroup);
  if (!cgroups.ok()) {
    GP_ERROR("agent", "{}", cgroups.status().message());
    return 2;
  }
  bool physical = false;
  for (const auto& d : state.devices) physical = physical || !d.emulated;
  if (config.workers.memory_limit == 0) {
    GP_INFO("agent", "session workers are not memory-capped: [workers] memory_limit = 0");
  } else if (cgroups->usable()) {
    GP_INFO("agent", "session workers' memory: a cgroup each under {}, {} {} MiB besides an emulated device's window",
            cgroups->parent(), cgroups->memory_v1() ? "memory.limit_in_bytes (v1; with swap where the kernel accounts it)" : "memory.max",
            config.workers.memory_limit >> 20);
  } else {
    // Said once: every GPU worker of this agent's life is uncapped, for the same reason.
    GP_WARN("agent", "session workers' memory: no cgroup per worker ({}); workers of emulated devices are capped by "
            "RLIMIT_AS, workers of GPUs are not memory-capped (RLIMIT_AS would break the CUDA driver's address-space "
            "reservations){}",
            cgroups->reason(), physical ? "" : " (this agent has none)");
  }
  state.workers = kj::heap<SessionWorkers>(io, std::move(sandbox).value(), config.workers.memory_limit,
                                           std::move(cgroups).value());
  if (physical) {
    auto driver = backend::CudaDriver::Load(config.cuda_driver);
    if (driver.ok()) {
      GP_INFO("agent", "CUDA driver {} with {} device(s)", (*driver)->version(), (*driver)->device_count());
      state.cuda = std::shared_ptr<backend::CudaDriver>(std::move(driver).value());
    } else {
      state.cuda_error = driver.status().message();
      GP_WARN("agent", "physical GPUs found, but {}: sessions on them will be refused", state.cuda_error);
    }
  }
  kj::Own<kj::ConnectionReceiver> receiver;
  std::string address;
  const bool unix_socket = config.listen.rfind("unix:", 0) == 0;
  UnixSocketClaim socket_claim;
  if (unix_socket) {
    // A socket file left by a dead agent would make bind fail, so it goes; a live agent's socket, or any other file,
    // stays where it is and this agent does not start.
    if (Status s = UnixSocketClaim::Prepare(config.listen.substr(5)); !s.ok()) {
      GP_ERROR("agent", "will not listen on {}: {}", config.listen, s.message());
      return 1;
    }
  }
  try {
    auto addr = io.provider->getNetwork().parseAddress(config.listen, 7450).wait(io.waitScope);
    receiver = addr->listen();
    address = DisplayAddress(config.listen, receiver->getPort());
  } catch (const kj::Exception& e) {
    GP_ERROR("agent", "cannot listen on {}: {}", config.listen, ListenFailure(e.getDescription().cStr(), config.listen));
    return 1;
  }
  if (unix_socket) socket_claim.Bound(config.listen.substr(5));

  if (!config.tokens_file.empty()) {
    auto tokens = TokenTable::Load(config.tokens_file);
    if (!tokens.ok()) {
      GP_ERROR("agent", "{}", tokens.status().message());
      return 2;
    }
    state.tokens = std::move(tokens).value();
    GP_INFO("auth", "{} user token(s) from {}", state.tokens.size(), config.tokens_file);
  }
  if (config.require_auth) {
    // Anyone may connect: the kernel says who they are, and whoever it cannot vouch for is refused.
    if (unix_socket) chmod(config.listen.substr(5).c_str(), 0666);
    GP_INFO("auth", "authentication required: {}", unix_socket ? "Unix socket peers by uid"
                                                                : "TCP clients by token");
  } else {
    GP_INFO("auth", "authentication not required: {}",
            unix_socket ? "users are who the kernel says they are on this Unix socket"
                        : fmt::format("TCP clients without a token are served as user '{}' (policies for the user "
                                      "they claim do not apply to them; [auth])", kAnonymousUser));
  }
  kj::Own<TlsSetup> tls;
  if (!config.tls_cert.empty()) {
    auto made = MakeTls({config.tls_cert, config.tls_key, config.tls_ca}, true);
    if (!made.ok()) {
      GP_ERROR("agent", "{}", made.status().message());
      return 2;
    }
    tls = std::move(made).value();
    GP_INFO("tls", "serving TLS{}; sessions go through this connection (no direct worker doors)",
            config.tls_ca.empty() ? "" : ", client certificates required (their common name is the user)");
  }
  state.timer = &io.provider->getTimer();
  ConnectionErrors connection_errors;
  kj::TaskSet connections(connection_errors);
  auto accepting = AcceptLoop(*receiver, state, connections, unix_socket, tls ? tls->context.get() : nullptr)
                       .eagerlyEvaluate([](kj::Exception&& e) {
    GP_ERROR("rpc", "accept loop failed: {}", e.getDescription().cStr());
  });
  auto sweeping = SweepLoop(state, io.provider->getTimer()).eagerlyEvaluate([](kj::Exception&& e) {
    GP_ERROR("agent", "lease sweep failed: {}", e.getDescription().cStr());
  });
  if (physical) {
    std::string why;
    state.gpus = GpuMonitor::Open(&why);
    if (!state.gpus) GP_WARN("agent", "no GPU gauges (utilisation, temperature, power): {}", why);
  }
  auto reloading = ReloadLoop(state, io.unixEventPort).eagerlyEvaluate([](kj::Exception&& e) {
    GP_ERROR("policy", "the SIGHUP handler failed: {}", e.getDescription().cStr());
  });
  if (!state.config.policy.empty()) GP_INFO("policy", "personalities:\n{}", state.config.policy.Describe());
  auto sampling = SampleLoop(state, io.provider->getTimer()).eagerlyEvaluate([](kj::Exception&& e) {
    GP_ERROR("agent", "telemetry sampling failed: {}", e.getDescription().cStr());
  });
  Result<MetricsServer> metrics = MetricsServer{};
  if (!state.config.metrics_listen.empty()) {
    metrics = ServeMetrics(io, state.config.metrics_listen, [&state] {
      capnp::MallocMessageBuilder message;
      auto root = message.initRoot<wire::AgentState>();
      Describe(state, root, true, 0);
      std::vector<double> busy;
      for (size_t i = 0; i < state.devices.size(); ++i) {
        // Known where the sessions take turns by device time: every emulated device, and GPUs without MPS.
        busy.push_back(state.telemetry.device(i).busy_nanos / 1e9);
      }
      return RenderMetrics(root.asReader(), state.counters, busy);
    });
    if (!metrics.ok()) {
      GP_ERROR("agent", "{}", metrics.status().message());
      return 1;
    }
  }

  kj::Own<DirectoryPublisher> directory;
  kj::Promise<void> publishing = kj::READY_NOW;
  if (config.directory) {
    const std::string advertised = AdvertisedAddress(config, receiver->getPort(), tls.get() != nullptr);
    if (unix_socket && config.directory_advertise.empty()) {
      GP_ERROR("agent", "[etcd]: an agent on a Unix socket cannot be reached through the directory (clients refuse "
               "such entries); listen on TCP, or set [etcd] advertise");
      return 2;
    }
    const std::string advertised_host = advertised.substr(0, advertised.rfind(':'));
    if (advertised_host == "127.0.0.1" || advertised_host == "localhost" || advertised_host == "tls:127.0.0.1" ||
        advertised_host == "tls:localhost" || advertised_host == "[::1]") {
      GP_WARN("directory", "this agent tells the directory it is at {}: only clients on this host can reach it "
              "(listen on *:PORT or set [etcd] advertise for others)", advertised);
    }
    auto made = DirectoryPublisher::Make(*io.provider, *config.directory, config.directory_ttl, state.instance_id,
                                         [&state, advertised] { return DirectoryEntryJson(state, advertised); },
                                         &state.counters);
    if (!made.ok()) {
      GP_ERROR("agent", "[etcd]: {}", made.status().message());
      return 2;
    }
    directory = std::move(made).value();
    publishing = directory->Run().eagerlyEvaluate([](kj::Exception&& e) {
      GP_ERROR("directory", "publishing to the pool's directory failed: {}", e.getDescription().cStr());
    });
  }

  size_t emulated = 0;
  for (const auto& d : state.devices) emulated += d.emulated ? 1 : 0;
  std::printf("gp-agent %s listening on %s with %zu device(s) (%zu emulated)\n", config.name.c_str(),
              address.c_str(), state.devices.size(), emulated);
  if (!config.metrics_listen.empty()) {
    std::printf("gp-agent %s serves metrics at http://%s/metrics\n", config.name.c_str(),
                DisplayAddress(config.metrics_listen, metrics->port).c_str());
  }
  std::fflush(stdout);
  GP_INFO("agent", "{} listening on {}", config.name, address);
  state.systemd.Notify(fmt::format("READY=1\nSTATUS=listening on {} with {} device(s) ({} emulated)\nMAINPID={}",
                                   address, state.devices.size(), emulated, getpid()));

  auto& port = io.unixEventPort;
  auto stop = port.onSignal(SIGTERM).exclusiveJoin(port.onSignal(SIGINT));
  const pid_t parent = getppid();
  siginfo_t first = stop.wait(io.waitScope);
  // The kernel reparents the agent before it sends PR_SET_PDEATHSIG's signal: a changed parent means the owner died.
  if (config.exit_with_parent && getppid() != parent) {
    GP_INFO("agent", "signal {}: the process that started this agent has ended; exiting now", first.si_signo);
  } else {
    GP_INFO("agent", "signal {}: draining (no new leases; up to {} ms for {} lease(s) to end)", first.si_signo,
            config.drain_timeout.count(), state.table.entries().size());
    state.table.SetDraining(true);
    state.systemd.Notify(fmt::format("STOPPING=1\nSTATUS=draining: no new leases; {} lease(s) held",
                                     state.table.entries().size()));
    auto& timer = io.provider->getTimer();
    auto drained = DrainLoop(state, timer, timer.now() + config.drain_timeout.count() * kj::MILLISECONDS);
    auto second = port.onSignal(SIGTERM).exclusiveJoin(port.onSignal(SIGINT)).then([](siginfo_t) {
      GP_WARN("agent", "second signal: exiting now");
    });
    drained.exclusiveJoin(kj::mv(second)).wait(io.waitScope);
  }
  if (directory) {
    publishing = kj::READY_NOW;  // No more puts: the entry goes now, not a TTL later.
    directory->Withdraw().wait(io.waitScope);
  }
  socket_claim.Remove();  // Only if the file there is still ours: a later agent may have taken the path.
  if (unix_socket && config.remove_socket_dir) {
    std::string path = config.listen.substr(5);
    if (size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
      rmdir(path.substr(0, slash).c_str());  // Only when empty: whatever else is there is not ours to remove.
    }
  }
  return 0;
}

}  // namespace gpupool::agent
