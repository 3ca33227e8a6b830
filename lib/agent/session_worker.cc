#include "agent/session_worker.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <capnp/rpc-twoparty.h>
#include <fmt/format.h>
#include <kj/async-unix.h>

#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/device_turns.h"
#include "backend/emu/emu_backend.h"
#include "backend/frame_connection.h"
#include "backend/session_image_stream.h"
#include "backend/session_server.h"
#include "backend/session_meter.h"
#include "backend/slice_quota.h"
#include "core/log.h"
#include "core/test_seams.h"
#include "core/util.h"
#include "schema/outcome.h"
#include "schema/session_frames.h"
#include "worker.capnp.h"

extern char** environ;

namespace gpupool::agent {
namespace {

// The fd numbers the worker finds its socket, its device's turns table and its slice's quota table at.
constexpr int kWorkerFd = 3;
constexpr int kTurnsFd = 4;
constexpr int kQuotaFd = 5;
constexpr int kMeterFd = 6;
constexpr int kMemoryFd = 7;
// Between a lease's end and the kill of its workers: their clients' next calls get "the lease ended".
constexpr kj::Duration kRevokeGrace = 2 * kj::SECONDS;
// A session image crosses between agent and worker in pieces of this much (within Cap'n Proto's message limit), a
// few in flight at once.
constexpr size_t kImagePieceBytes = 16u << 20;
constexpr size_t kImagePiecesInFlight = 4;
// How long a closed session may take to free its device memory before its worker exits regardless.
constexpr std::chrono::seconds kTeardownLimit{5};

// Linux's CFS weights for nice 0..19 (kernel/sched/core.c, sched_prio_to_weight).
constexpr int kNiceWeights[20] = {1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
                                  110,  87,  70,  56,  45,  36,  29,  23,  18,  15};

// An MPS control daemon serves this machine's GPUs when its pipe directory holds the control socket.
bool MpsRunning() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  std::string control = std::string(dir && *dir ? dir : "/tmp/nvidia-mps") + "/control";
  struct stat st;
  return stat(control.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// The permission bits of the agent's own Unix socket, which a door's `where` ("unix:PATH.session") sits beside;
// 0600 if it cannot be read.
mode_t AgentSocketMode(const std::string& where) {
  constexpr std::string_view kSuffix = ".session";
  struct stat st;
  if (where.size() > 5 + kSuffix.size() && where.compare(where.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0 &&
      stat(where.substr(5, where.size() - 5 - kSuffix.size()).c_str(), &st) == 0) {
    return st.st_mode & 0666;
  }
  return 0600;
}

// The Unix socket a worker's door listens on, when the agent listens on one ("unix:PATH" -> PATH.PID); "" for
// TCP. The agent computes it too, to remove the socket of a worker that was killed before it could.
std::string DoorSocketPath(const std::string& direct_listen, pid_t pid) {
  if (direct_listen.rfind("unix:", 0) != 0) return "";
  return fmt::format("{}.{}", direct_listen.substr(5), pid);
}

// A Unix-socket door bound by the worker before it gave up root (BindDoor); the Door takes it over.
struct PreboundDoor {
  std::string path;
  kj::AutoCloseFd fd;
};

// Binds and listens on the worker's Unix-socket door for `where` ("unix:PATH.session"), with the agent's socket's
// permissions. Run before the worker gives up root: the directory beside the agent's socket may be the agent's
// alone, and the door's file stays root's (the agent removes it when it reaps the worker).
Result<PreboundDoor> BindDoor(const std::string& where) {
  PreboundDoor door;
  door.path = DoorSocketPath(where, getpid());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (door.path.size() >= sizeof(address.sun_path)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("the session door's path {} is longer than {} bytes",
                                                            door.path, sizeof(address.sun_path) - 1));
  }
  std::memcpy(address.sun_path, door.path.c_str(), door.path.size() + 1);
  door.fd = kj::AutoCloseFd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (door.fd.get() < 0 || bind(door.fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      chmod(door.path.c_str(), AgentSocketMode(where)) != 0 || listen(door.fd.get(), SOMAXCONN) != 0) {
    Status failed(StatusCode::kInternal, fmt::format("cannot listen at {}: {}", door.path, std::strerror(errno)));
    unlink(door.path.c_str());
    return failed;
  }
  return door;
}

// How long a worker waits for its client's direct connection before it serves through the agent alone.
constexpr kj::Duration kDoorOpenFor = 10 * kj::SECONDS;

// The worker's direct listener: one client, holding the ticket from openSession, enters and its connection carries
// the session's calls as framed messages (schema/session_frames.h) until it breaks; then the listener closes.
class Door {
 public:
  // `restored`: the session is a moved one, restored after `*restored` call frames of its client, who comes back
  // when it finds its old worker gone, however long that takes.
  Door(kj::AsyncIoContext& io, wire::Session::Client session, backend::FramedSession& framed,
       uint64_t bytes_in_flight, std::optional<uint64_t> restored)
      : io_(io),
        session_(kj::mv(session)),
        framed_(framed),
        bytes_in_flight_(bytes_in_flight),
        restored_(restored),
        ticket_(RandomBytes(kTicketBytes)),
        tasks_(errors_) {
    if (restored_) {
      // A restored session its client has not entered yet (it idles, or has not found its old worker gone) can be
      // moved again: the door lets no one in while a checkpoint is taken, and the session has consumed what it was
      // restored with. An entered connection replaces these with its own (ServeFrames).
      frames_.consumed = *restored_;
      frames_.stop = [this] {
        sealed_ = true;
        return kj::Promise<uint64_t>(*restored_);
      };
      frames_.resume = [this] { sealed_ = false; };
    }
  }
  ~Door() { Close(); }

  // Listens at `where` ("host:0" or "unix:PATH"), on `prebound` if it is that Unix door; fills `direct` with the
  // port or path and the ticket.
  kj::Promise<void> Open(const std::string& where, kj::Maybe<PreboundDoor>& prebound,
                         wire::DirectSession::Builder direct) {
    unix_path_ = DoorSocketPath(where, getpid());
    bool is_unix = !unix_path_.empty();
    kj::Maybe<kj::Own<kj::ConnectionReceiver>> bound;
    KJ_IF_MAYBE(door, prebound) {
      if (is_unix && door->path == unix_path_) {
        bound = io_.lowLevelProvider->wrapListenSocketFd(
            kj::mv(door->fd), kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC | kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK);
      }
    }
    prebound = nullptr;
    kj::Promise<kj::Own<kj::ConnectionReceiver>> listening = nullptr;
    KJ_IF_MAYBE(receiver, bound) {
      listening = kj::mv(*receiver);
    } else {
      listening = io_.provider->getNetwork()
                      .parseAddress(is_unix ? "unix:" + unix_path_ : where)
                      .then([](kj::Own<kj::NetworkAddress> a) { return a->listen(); });
    }
    return listening.then(
        [this, direct, is_unix, mode = AgentSocketMode(where)](kj::Own<kj::ConnectionReceiver> listener) mutable {
          listener_ = kj::mv(listener);
          if (is_unix) {
            // Whoever may connect to the agent's own socket may knock (0600 by default; 0666 on an agent that
            // authenticates its peers): the ticket, not the mode, says who enters.
            chmod(unix_path_.c_str(), mode);
            direct.setPath(unix_path_);
          } else {
            direct.setPort(static_cast<uint16_t>(listener_->getPort()));
          }
          direct.setTicket(kj::arrayPtr(reinterpret_cast<const kj::byte*>(ticket_.data()), ticket_.size()));
          accepting_ = Accept().eagerlyEvaluate([](kj::Exception&& e) {
            GP_DEBUG("session", "direct listener stopped: {}", e.getDescription().cStr());
          });
          if (!restored_) {
            expiry_ = io_.provider->getTimer().afterDelay(kDoorOpenFor).then([this] { Close(); }).eagerlyEvaluate(nullptr);
          }
        });
  }

  // The client's connection, once it entered: how far it read, and how to stop it for a checkpoint.
  backend::FrameControl& frames() { return frames_; }

 private:
  static constexpr size_t kTicketBytes = 16;
  static constexpr kj::Duration kKnockWithin = 5 * kj::SECONDS;
  struct Errors final : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override {
      GP_DEBUG("session", "direct connection ended: {}", e.getDescription().cStr());
    }
  };
  // The enter frame: header, then the ticket, then (a client on this host, words == 3) the size of the memory it
  // shares for copies, whose memfd travels with the frame.
  struct Knock {
    session::FrameHeader header;
    kj::byte ticket[kTicketBytes];
    uint64_t shared_bytes = 0;
  };

  kj::Promise<void> Accept() {
    return listener_->accept().then([this](kj::Own<kj::AsyncIoStream> stream) {
      tasks_.add(Enter(kj::mv(stream)));
      return Accept();
    });
  }

  // Checks the knock; the connection that enters serves the session until it breaks.
  kj::Promise<void> Enter(kj::Own<kj::AsyncIoStream> stream) {
    auto knock = kj::heap<Knock>();
    auto fd = kj::heap<kj::AutoCloseFd>();
    constexpr size_t kFixed = sizeof(session::FrameHeader) + kTicketBytes;
    // A Unix socket may carry the client's shared memory with the knock's first bytes.
    auto* unix_stream = dynamic_cast<kj::AsyncCapabilityStream*>(stream.get());
    kj::Promise<size_t> read = unix_stream != nullptr
        ? unix_stream->tryReadWithFds(knock.get(), kFixed, kFixed, fd.get(), 1).then([](auto r) { return r.byteCount; })
        : stream->tryRead(knock.get(), kFixed, kFixed);
    auto* raw = knock.get();
    auto* s = stream.get();
    read = read.then([raw, s](size_t n) -> kj::Promise<size_t> {
      if (n < kFixed || raw->header.words != 3) return n;
      return s->read(&raw->shared_bytes, sizeof(raw->shared_bytes)).then([n] { return n; });
    });
    return io_.provider->getTimer()
        .timeoutAfter(kKnockWithin, kj::mv(read))
        .then([this, stream = kj::mv(stream), knock = kj::mv(knock), fd = kj::mv(fd)](size_t n) mutable
              -> kj::Promise<void> {
          KJ_IF_MAYBE(session, session_) {
            // Constant time: a wrong guess learns nothing of the right bytes.
            const bool well_formed = n == kFixed && knock->header.kind == session::kEnterFrame &&
                                     (knock->header.words == 2 || knock->header.words == 3);
            const bool right = ConstantTimeEquals(
                std::string_view(reinterpret_cast<const char*>(knock->ticket), kTicketBytes), ticket_);
            if (well_formed && right && sealed_) {
              // Being checkpointed: the client asks the agent where its session is, and is told once the move ends.
              GP_DEBUG("session", "a knock while the session is checkpointed: refused");
              return kj::READY_NOW;
            }
            if (well_formed && right) {
              wire::Session::Client held = *session;  // The connection keeps the session; the door lets go.
              Close();
              bool shares = knock->shared_bytes > 0 && ShareMemory(*fd, knock->shared_bytes);
              // A restored session's entered frame carries one word: the call frames it had consumed, after which
              // its client sends again what it sent.
              struct {
                session::FrameHeader header;
                uint64_t consumed;
              } entered{{session::kEnteredFrame, shares ? 1u : 0u, restored_ ? 1u : 0u}, restored_.value_or(0)};
              const size_t entered_bytes = restored_ ? sizeof(entered) : sizeof(entered.header);
              auto bytes = kj::heapArray<kj::byte>(reinterpret_cast<const kj::byte*>(&entered), entered_bytes);
              auto* s = stream.get();
              return s->write(bytes.begin(), bytes.size())
                  .attach(kj::mv(bytes))
                  .then([this, stream = kj::mv(stream)]() mutable {
                    return backend::ServeFrames(kj::mv(stream), framed_, bytes_in_flight_, &frames_,
                                                restored_.value_or(0));
                  })
                  .attach(kj::mv(held));
            }
          }
          GP_WARN("session", "a wrong or used session ticket knocked at the direct listener");
          return kj::READY_NOW;
        });
  }

  // Maps the client's memory for copies: a memfd sealed against shrinking (a client that shrank it under a copy
  // would crash the worker), of the size it announced, within reason.
  bool ShareMemory(const kj::AutoCloseFd& fd, uint64_t bytes) {
    constexpr uint64_t kMaxSharedBytes = 256ull << 20;
    struct stat st {};
    int seals = fd.get() < 0 ? -1 : fcntl(fd.get(), F_GET_SEALS);
    if (fd.get() < 0 || bytes > kMaxSharedBytes || seals < 0 || !(seals & F_SEAL_SHRINK) ||
        fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
      GP_WARN("session", "the client's shared memory is unusable (copies go through the socket)");
      return false;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) {
      GP_WARN("session", "cannot map the client's shared memory: {}", std::strerror(errno));
      return false;
    }
    auto* range = new kj::ArrayPtr<kj::byte>(static_cast<kj::byte*>(p), bytes);
    framed_.UseSharedMemory(std::shared_ptr<kj::ArrayPtr<kj::byte>>(range, [](kj::ArrayPtr<kj::byte>* r) {
      munmap(r->begin(), r->size());
      delete r;
    }));
    return true;
  }

  void Close() {
    session_ = nullptr;
    accepting_ = nullptr;
    listener_ = nullptr;
    if (!unix_path_.empty()) unlink(unix_path_.c_str());
    unix_path_.clear();
  }

  kj::AsyncIoContext& io_;
  kj::Maybe<wire::Session::Client> session_;
  backend::FramedSession& framed_;  // The session's server: lives as long as a reference to it (held above).
  const uint64_t bytes_in_flight_;
  const std::optional<uint64_t> restored_;
  backend::FrameControl frames_;
  bool sealed_ = false;  // A checkpoint of the session before its client entered: nobody enters until it is resumed.
  std::string ticket_;  // From the kernel's random source: whoever holds it gets the session.
  std::string unix_path_;
  kj::Own<kj::ConnectionReceiver> listener_;
  kj::Promise<void> accepting_ = nullptr;
  kj::Promise<void> expiry_ = nullptr;
  Errors errors_;
  kj::TaskSet tasks_;
};

class WorkerImpl final : public wire::SessionWorker::Server {
 public:
  // `flow_limit(bytes)` bounds the calls in flight on the connection from the agent (RpcSystem::setFlowLimit).
  WorkerImpl(kj::AsyncIoContext& io, kj::Own<kj::PromiseFulfiller<void>> closed,
             std::function<void(uint64_t)> flow_limit, kj::Maybe<PreboundDoor> door)
      : io_(io), closed_(kj::mv(closed)), flow_limit_(std::move(flow_limit)), prebound_door_(kj::mv(door)) {}

  // Opens the worker's one session: its limits, its slice's shared quota and meter, its device turns, its backend,
  // then the session server and (when asked) a direct connection for the client.
  kj::Promise<void> open(OpenContext context) override {
    auto results = context.getResults();
    if (opened_) {
      SetOutcome(results.initOutcome(), Status(StatusCode::kInvalidArgument, "this worker already runs a session"));
      return kj::READY_NOW;
    }
    opened_ = true;
    auto c = context.getParams().getConfig();
    backend::SessionLimits limits = LimitsOf(c);
    // Called on this thread, which lives as long as the worker: the shared tables' memberships are held by it.
    if (Status joined = JoinSharedTables(c, &limits); !joined.ok()) {
      SetOutcome(results.initOutcome(), joined);
      closed_->fulfill();
      return kj::READY_NOW;
    }
    Sharing sharing = JoinDeviceTurns(c, limits);
    // The backends answer kResourceExhausted when, and only when, the session's window cannot be had here.
    Result<std::unique_ptr<backend::DeviceBackend>> device =
        sharing.joined.ok() ? NewBackend(c, sharing, &limits) : Result<std::unique_ptr<backend::DeviceBackend>>(
                                                                    sharing.joined);
    if (!device.ok()) {
      SetOutcome(results.initOutcome(), device.status());
      results.getOutcome().setWindowTaken(device.status().code() == StatusCode::kResourceExhausted);
      closed_->fulfill();  // Nothing to serve: the worker exits once this reply is out.
      return kj::READY_NOW;
    }
    std::optional<uint64_t> restored;
    if (c.getRestore()) restored = c.getRestoreConsumed();
    return Serve(std::move(device).value(), limits, sharing, c.getDirectListen(), restored, results);
  }

  kj::Promise<void> revoke(RevokeContext context) override {
    std::lock_guard<std::mutex> lock(control_->mu);
    if (control_->revoke) control_->revoke(context.getParams().getReason());
    return kj::READY_NOW;
  }

  kj::Promise<void> restorePiece(RestorePieceContext context) override {
    auto data = context.getParams().getData();
    if (opened_) {
      SetOutcome(context.getResults().initOutcome(),
                 Status(StatusCode::kInvalidArgument, "the session is open already: nothing more to restore"));
      return kj::READY_NOW;
    }
    if (restore_image_.empty()) {
      // Within reason: the image holds at most the session's memory, and its window bounds that (2^47 bytes).
      restore_image_.reserve(static_cast<size_t>(std::min<uint64_t>(context.getParams().getTotal(), uint64_t{1} << 40)));
    }
    restore_image_.insert(restore_image_.end(), data.begin(), data.end());
    SetOutcome(context.getResults().initOutcome(), Status::Ok());
    return kj::READY_NOW;
  }

  kj::Promise<void> checkpoint(CheckpointContext context) override {
    auto results = context.getResults();
    if (!door_ || checkpointing_) {
      SetOutcome(results.initOutcome(),
                 Status(StatusCode::kInvalidArgument,
                        door_ ? "a checkpoint is under way" : "the session has no direct connection: its client "
                                                              "could not follow it elsewhere"));
      return kj::READY_NOW;
    }
    checkpointing_ = true;
    image_bytes_.clear();
    auto image = kj::heap<backend::SessionImage>();
    auto* raw = image.get();
    raw->memory_stays = context.getParams().getMemoryStays();  // Asked; the checkpoint says whether it could.
    const kj::Duration within = context.getParams().getQuietWithinMs() * kj::MILLISECONDS;
    return backend::CheckpointForMove(door_->frames(), *control_, io_.provider->getTimer(), within, raw)
        .then([this, results, image = kj::mv(image)](backend::MoveCheckpoint taken) mutable {
          CallStatus status = taken.status;
          if (status.ok()) {
            // Counted first, so that the image is written into room made once (growing it as it goes would copy it
            // again and again).
            size_t total = 0;
            (void)backend::WriteSessionImage(*image, [&total](const uint8_t*, size_t bytes) {
              total += bytes;
              return true;
            });
            image_bytes_.reserve(total);
            status = backend::WriteSessionImage(*image, [this](const uint8_t* data, size_t bytes) {
              image_bytes_.insert(image_bytes_.end(), data, data + bytes);
              return true;
            });
            if (!status.ok() && door_->frames().resume) door_->frames().resume();
          }
          if (status.ok() && std::string_view(test_seams::MoveFault()) == "checkpoint") {
            status = CallStatus(cu::kInvalidValue, "checkpoint failed (test seam GPUPOOL_MOVE_FAULT)");
            if (door_->frames().resume) door_->frames().resume();
          }
          if (!status.ok()) {
            checkpointing_ = false;
            image_bytes_.clear();
            SetOutcome(results.initOutcome(), Status(StatusCode::kUnavailable, status.message()));
            return;
          }
          SetOutcome(results.initOutcome(), Status::Ok());
          results.setConsumed(taken.consumed);
          results.setImageBytes(image_bytes_.size());
          results.setPlacedByDriver(image->variables_placed_by_driver);
          results.setMemoryStayed(image->memory_stays);
        });
  }

  kj::Promise<void> imagePiece(ImagePieceContext context) override {
    const uint64_t offset = context.getParams().getOffset();
    if (offset < image_bytes_.size()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kImagePieceBytes, image_bytes_.size() - offset));
      context.getResults().setData(kj::arrayPtr(image_bytes_.data() + offset, n));
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> resume(ResumeContext) override {
    if (checkpointing_ && door_ && door_->frames().resume) door_->frames().resume();
    checkpointing_ = false;
    image_bytes_.clear();
    image_bytes_.shrink_to_fit();
    return kj::READY_NOW;
  }

 private:
  // The session's limits from its configuration; bounds the calls that come through the agent as well.
  backend::SessionLimits LimitsOf(wire::WorkerConfig::Reader c) {
    backend::SessionLimits limits;
    limits.memory_bytes = c.getMemoryBytes();
    limits.window_base = c.getWindowBase();
    limits.window_bytes = c.getWindowBytes();
    if (c.getBytesInFlight() != 0) limits.bytes_in_flight = c.getBytesInFlight();
    // Calls that come through the agent are bounded the same way: Cap'n Proto stops reading the agent's connection
    // while the calls it has not answered (a posted copy is answered once done) hold that many bytes.
    flow_limit_(limits.bytes_in_flight);
    // The worker exits once the session has closed; should freeing it wait on the device for long (a GPU waits for
    // a kernel that never ends), the worker exits anyway, and the driver frees what the process held.
    limits.closing = [] {
      std::thread([] {
        std::this_thread::sleep_for(kTeardownLimit);
        GP_WARN("session", "session closed: the device did not free its memory within {} s; the worker exits and "
                "the driver frees what it held", kTeardownLimit.count());
        std::fflush(stderr);
        _exit(0);
      }).detach();
    };
    return limits;
  }

  // The slice's memory quota, shared by the lease's processes (refusing the session when it cannot be joined), and
  // the agent's telemetry meter (without it the counts stay in this process).
  static Status JoinSharedTables(wire::WorkerConfig::Reader c, backend::SessionLimits* limits) {
    if (c.getSliceQuota()) {
      auto joined = backend::SliceQuota::Join(kQuotaFd);
      close(kQuotaFd);
      if (!joined.ok()) return joined.status();
      limits->quota = std::move(joined).value();
    }
    if (c.getSessionMeter()) {
      auto meter = backend::SessionMeter::Map(kMeterFd);
      close(kMeterFd);
      if (meter.ok()) {
        limits->meter = std::move(meter).value();
      } else {
        GP_WARN("session", "the agent's session meter is unusable ({}): this session's telemetry stays at zero",
                meter.status().message());
      }
    }
    return Status::Ok();
  }

  // How the session shares its device with its neighbours.
  struct Sharing {
    std::shared_ptr<backend::DeviceTurns> turns;
    // Who enforces the turns: the emulated device itself, per kernel, preempting at its checkpoints (turns go to
    // the backend as its gate); for a physical GPU the session server, throttling the submissions of a lease over
    // its share while the driver time-slices the contexts (a GPU's kernels cannot be paused from outside).
    std::shared_ptr<backend::DeviceTurns> submission_turns;
    bool mps = false;  // A physical GPU under MPS: shared by the active-thread percentage instead.
    Status joined = Status::Ok();
  };

  static Sharing JoinDeviceTurns(wire::WorkerConfig::Reader c, const backend::SessionLimits& limits) {
    Sharing sharing;
    sharing.mps = !c.getEmulated() && MpsRunning();
    if (c.getDeviceTurns()) {
      if (!sharing.mps) {
        auto joined = backend::DeviceTurns::Join(kTurnsFd, c.getShareMicros(), c.getTurnsGroup());
        if (joined.ok()) {
          sharing.turns = std::move(joined).value();
          if (limits.meter) sharing.turns->MeterInto(limits.meter);
        } else {
          sharing.joined = joined.status();
        }
      }
      close(kTurnsFd);
    } else if (!sharing.mps) {
      // No turns table (an agent that made none): the nearest the CPU side can do is a CFS weight. Before any thread
      // exists: threads inherit the nice value.
      int nice = NiceForShare(c.getShareMicros());
      if (nice > 0 && setpriority(PRIO_PROCESS, 0, nice) != 0) {
        GP_WARN("session", "cannot lower the worker's priority to nice {}: {}", nice, std::strerror(errno));
      }
    }
    // A test seam shares an emulated device the GPU's way, so that path runs without a GPU.
    if (!c.getEmulated() || test_seams::EmuSubmissionTurns()) sharing.submission_turns = sharing.turns;
    return sharing;
  }

  // The session's device: the emulated one, or the physical GPU through the driver this worker loads. Names the
  // session in `limits` for log lines.
  static Result<std::unique_ptr<backend::DeviceBackend>> NewBackend(wire::WorkerConfig::Reader c,
                                                                    const Sharing& sharing,
                                                                    backend::SessionLimits* limits) {
    if (c.getEmulated()) {
      backend::EmuBackendConfig cfg;
      cfg.device_name = c.getDeviceName();
      if (c.getComputeCapability() != 0) {
        cfg.cc_major = c.getComputeCapability() / 10;
        cfg.cc_minor = c.getComputeCapability() % 10;
      }
      cfg.memory_bytes = c.getMemoryBytes();
      cfg.window_base = c.getWindowBase();
      cfg.window_bytes = c.getWindowBytes();
      auto uuid = c.getUuid();
      std::memcpy(cfg.uuid, uuid.begin(), std::min<size_t>(16, uuid.size()));
      cfg.pci_bus = c.getPciBus();
      cfg.pci_device = c.getPciDevice();
      if (!sharing.submission_turns) cfg.gate = sharing.turns;
      if (c.getMemoryFile()) cfg.memory_fd = kMemoryFd;  // Open for the worker's life: its device's memory.
      cfg.memory_kept = c.getMemoryFile() && c.getMemoryKept();
      limits->description = fmt::format("emulated {}, window 0x{:x}", cfg.device_name, cfg.window_base);
      return backend::NewEmuBackend(cfg);
    }
    if (sharing.mps) {
      // MPS reads it when this process first creates a context; a whole device needs no limit.
      uint32_t percent = std::max(1u, static_cast<uint32_t>(std::lround(c.getShareMicros() / 10000.0)));
      if (percent < 100) setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(percent).c_str(), 1);
    }
    // The worker's driver sees its own GPU alone (no context, no memory on the others), however the agent's
    // environment ordered them.
    std::string uuid = c.getNvmlUuid();
    setenv("CUDA_VISIBLE_DEVICES", uuid.c_str(), 1);
    auto driver = backend::CudaDriver::Load(c.getCudaDriver());
    if (!driver.ok()) return driver.status();
    backend::CudaBackendConfig cfg;
    cfg.nvml_uuid = c.getNvmlUuid();
    cfg.memory_bytes = c.getMemoryBytes();
    cfg.window_base = c.getWindowBase();
    cfg.window_bytes = c.getWindowBytes();
    limits->description = fmt::format("GPU {}, window 0x{:x}", cfg.nvml_uuid, cfg.window_base);
    return backend::NewCudaBackend(std::shared_ptr<backend::CudaDriver>(std::move(driver).value()), cfg);
  }

  // Serves the session: the session server lives as long as some client holds it; when the last reference goes
  // (the client closed it, or its connection broke), the worker's job is done. `where`, when set, is where the
  // client may connect directly.
  // `restored`: the session is the one restore_image_ describes, which had consumed that many of its client's calls.
  kj::Promise<void> Serve(std::unique_ptr<backend::DeviceBackend> device, const backend::SessionLimits& limits,
                          const Sharing& sharing, std::string where, std::optional<uint64_t> restored,
                          wire::SessionWorker::OpenResults::Builder results) {
    auto* closed = closed_.get();
    backend::FramedSession* framed = nullptr;
    auto server = backend::NewSessionServer(std::move(device), limits, control_, sharing.submission_turns, &framed)
                      .attach(kj::defer([closed] { closed->fulfill(); }));
    if (restored) {
      // The image came from an agent, perhaps another server's: read as hostile, and checked again by the restore.
      if (Status s = Restore(where); !s.ok()) {
        SetOutcome(results.initOutcome(), s);
        return kj::READY_NOW;  // The server goes with this scope: the worker exits once the reply is out.
      }
    }
    wire::Session::Client client(kj::mv(server));
    SetOutcome(results.initOutcome(), Status::Ok());
    results.setSession(client);
    if (where.empty()) return kj::READY_NOW;
    door_ = kj::heap<Door>(io_, kj::mv(client), *framed, limits.bytes_in_flight, restored);
    return door_->Open(where, prebound_door_, results.initDirect()).catch_([this, results](kj::Exception&& e) mutable {
      // The client still has the session through the agent.
      GP_WARN("session", "cannot listen for a direct connection: {}", e.getDescription().cStr());
      results.disownDirect();
      door_ = nullptr;
    });
  }

  // The session becomes the one restore_image_ describes (its bytes go as it is read).
  Status Restore(const std::string& where) {
    if (where.empty()) {
      return Status(StatusCode::kInvalidArgument, "a restored session needs a direct connection for its client");
    }
    const std::string_view fault = test_seams::MoveFault();
    if (fault == "restore-crash") _exit(3);
    if (fault == "restore") return Status(StatusCode::kInvalidArgument, "restore refused (test seam GPUPOOL_MOVE_FAULT)");
    backend::SessionImage image;
    CallStatus read = backend::ReadSessionImage(restore_image_.data(), restore_image_.size(), &image);
    restore_image_.clear();
    restore_image_.shrink_to_fit();
    if (!read.ok()) return Status(StatusCode::kInvalidArgument, "the session's image: " + read.message());
    std::lock_guard<std::mutex> lock(control_->mu);
    CallStatus restored = control_->restore ? control_->restore(image)
                                            : CallStatus(cu::kInvalidValue, "the session closed");
    if (!restored.ok()) return Status(StatusCode::kInvalidArgument, restored.message());
    return Status::Ok();
  }

  kj::AsyncIoContext& io_;
  kj::Own<kj::PromiseFulfiller<void>> closed_;
  std::function<void(uint64_t)> flow_limit_;
  std::vector<uint8_t> restore_image_;  // restorePiece's, until open.
  std::vector<uint8_t> image_bytes_;    // The last checkpoint's image, for imagePiece.
  bool checkpointing_ = false;          // A checkpoint was taken (or is being taken) and not resumed.
  kj::Own<Door> door_;
  kj::Maybe<PreboundDoor> prebound_door_;
  std::shared_ptr<backend::SessionControl> control_ = std::make_shared<backend::SessionControl>();
  bool opened_ = false;
};

struct ReaperErrors final : public kj::TaskSet::ErrorHandler {
  void taskFailed(kj::Exception&& e) override {
    GP_ERROR("session", "reaping a session worker failed: {}", e.getDescription().cStr());
  }
};

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return fmt::format("ended (wait status {})", status);
}

}  // namespace

int NiceForShare(uint32_t share_micros) {
  double target = 1024.0 * std::min(1000000u, std::max(1u, share_micros)) / 1e6;
  int best = 0;
  for (int n = 1; n < 20; ++n) {
    // Compare in log space: shares are ratios.
    if (std::fabs(std::log(kNiceWeights[n] / target)) < std::fabs(std::log(kNiceWeights[best] / target))) best = n;
  }
  return best;
}

int RunSessionWorker(int fd, std::string_view sandbox_word) {
  log::SetProgramName("gp-agent[session]");
  // The worker must not outlive its agent: the lease table that accounts for its memory lives there.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Confined before it reads a byte from the agent (a tenant's session config comes through it) and before any
  // thread exists (setuid and the filter are per thread). A worker that cannot be confined does not run.
  kj::Maybe<PreboundDoor> door;
  if (!sandbox_word.empty()) {
    auto sandbox = WorkerSandbox::Parse(sandbox_word);
    Status confined = sandbox.status();
    if (sandbox.ok() && !sandbox->door_listen.empty()) {
      auto bound = BindDoor(sandbox->door_listen);
      // Without its door the session still runs, through the agent.
      if (bound.ok()) {
        door = std::move(bound).value();
      } else {
        GP_WARN("session", "no direct connection: {}", bound.status().message());
      }
    }
    if (sandbox.ok()) confined = ApplyWorkerSandbox(*sandbox);
    if (!confined.ok()) {
      GP_ERROR("session", "session worker not started: {}", confined.message());
      std::fflush(stderr);
      return 1;
    }
  }
  if (getppid() == 1) return 1;  // The agent died before its death signal was (last) set.
  try {
    auto io = kj::setupAsyncIo();
    auto stream = io.lowLevelProvider->wrapUnixSocketFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    capnp::TwoPartyVatNetwork network(*stream, capnp::rpc::twoparty::Side::SERVER);
    auto closed = kj::newPromiseAndFulfiller<void>();
    // The RPC system exists only once it has its bootstrap; the worker sets its flow limit when the session opens.
    capnp::RpcSystem<capnp::rpc::twoparty::VatId>* rpc_system = nullptr;
    auto flow_limit = [&rpc_system](uint64_t bytes) {
      if (rpc_system != nullptr) rpc_system->setFlowLimit(std::max<uint64_t>(bytes / sizeof(capnp::word), 1));
    };
    auto rpc = capnp::makeRpcServer(network, kj::heap<WorkerImpl>(io, kj::mv(closed.fulfiller), flow_limit,
                                                                  kj::mv(door)));
    rpc_system = &rpc;
    // Ends when the session is gone (its destructor freed memory and modules) or the agent hung up.
    kj::mv(closed.promise).exclusiveJoin(network.onDisconnect()).wait(io.waitScope);
    // Let the last reply (a failed open) reach the agent before the socket closes.
    io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  } catch (const kj::Exception& e) {
    GP_ERROR("session", "session worker failed: {}", e.getDescription().cStr());
    std::fflush(stderr);
    _exit(1);
  }
  std::fflush(stderr);
  // Skip the destructors: a session still referenced here means the agent is gone, and a kernel that never ends
  // must not keep this process alive. The OS frees everything.
  _exit(0);
}

struct SessionWorkers::Worker {
  pid_t pid = 0;
  std::string lease_id;
  std::string direct_path;  // A Unix-socket door the worker may have left behind if it was killed.
  std::string cgroup;       // Its memory-capped group (WorkerCgroups::Confine), or "".
  uint32_t device = 0;
  std::unique_ptr<backend::SessionMeter> meter;  // Null: none could be made.
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  kj::Maybe<wire::SessionWorker::Client> control;
  bool killed = false;  // By the agent, because its lease ended (or its session moved).
  bool opened = false;  // Its session opened.
  WorkerSpec spec;      // How it was opened (without the image it may have been restored from).
  DirectDoor door;      // Where its client reaches it, once opened.
  kj::AutoCloseFd memory;  // Its emulated device's memory file (kMemoryFd in the worker), or none.
};

SessionWorkers::SessionWorkers(kj::AsyncIoContext& io, WorkerSandbox sandbox, uint64_t memory_limit,
                               WorkerCgroups cgroups)
    : io_(io),
      sandbox_(std::move(sandbox)),
      memory_limit_(memory_limit),
      cgroups_(std::move(cgroups)),
      reaper_errors_(kj::heap<ReaperErrors>()) {
  reapers_ = kj::heap<kj::TaskSet>(*reaper_errors_);
}

SessionWorkers::~SessionWorkers() {
  for (auto& [pid, worker] : workers_) kill(pid, SIGKILL);
}

kj::Promise<OpenedSession> SessionWorkers::Open(const WorkerSpec& spec) {
  if (!spec.restore_image) return Start(spec, nullptr);
  return Start(spec, kj::Promise<RestoreInput>(RestoreInput{Status::Ok(), spec.restore_image, spec.restore_consumed}));
}

kj::Promise<OpenedSession> SessionWorkers::Start(const WorkerSpec& spec,
                                                 kj::Maybe<kj::Promise<RestoreInput>> restore) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return OpenedSession{Status(StatusCode::kInternal, fmt::format("socketpair: {}", std::strerror(errno))), nullptr,
                         nullptr};
  }
  // Above the fds the child gets: dup2 onto itself would keep close-on-exec set, and one must not clobber the other.
  int child_fd = fcntl(fds[1], F_DUPFD_CLOEXEC, kMemoryFd + 1);
  close(fds[1]);
  int turns_fd = spec.turns_fd >= 0 ? fcntl(spec.turns_fd, F_DUPFD_CLOEXEC, kMemoryFd + 1) : -1;
  int quota_fd = spec.quota_fd >= 0 ? fcntl(spec.quota_fd, F_DUPFD_CLOEXEC, kMemoryFd + 1) : -1;
  // An emulated device's memory: a file of its own, or its last worker's (a move), kept here for the next.
  int memory_fd = -1;
  if (spec.emulated) {
    if (spec.memory_fd >= 0) {
      memory_fd = fcntl(spec.memory_fd, F_DUPFD_CLOEXEC, kMemoryFd + 1);
    } else if (int made = memfd_create("gpupool-session-memory", MFD_CLOEXEC); made >= 0) {
      memory_fd = fcntl(made, F_DUPFD_CLOEXEC, kMemoryFd + 1);
      close(made);
    }
  }
  // The session's meter: the agent keeps it mapped, and reads it after the worker is gone too.
  auto meter_segment = backend::SessionMeter::CreateSegment();
  int meter_fd = -1;
  std::unique_ptr<backend::SessionMeter> meter;
  if (meter_segment.ok()) {
    meter_fd = fcntl(*meter_segment, F_DUPFD_CLOEXEC, kMemoryFd + 1);
    auto mapped = backend::SessionMeter::Map(*meter_segment);
    close(*meter_segment);
    if (mapped.ok() && meter_fd >= 0) {
      meter = std::move(mapped).value();
    } else if (meter_fd >= 0) {
      close(meter_fd);
      meter_fd = -1;
    }
  }
  if (!meter) GP_WARN("session", "lease {}: no session meter; this session's telemetry stays at zero", spec.lease_id);
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0 || child_fd < 0 || (spec.turns_fd >= 0 && turns_fd < 0) || (spec.quota_fd >= 0 && quota_fd < 0) ||
      (spec.memory_fd >= 0 && memory_fd < 0)) {
    std::string why = n <= 0 ? "cannot find gp-agent's own executable"
                             : fmt::format("cannot pass descriptors to a session worker: {}", std::strerror(errno));
    close(fds[0]);
    for (int fd : {child_fd, turns_fd, quota_fd, meter_fd, memory_fd}) {
      if (fd >= 0) close(fd);
    }
    return OpenedSession{Status(StatusCode::kInternal, why), nullptr, nullptr};
  }
  exe[n] = 0;
  std::string fd_arg = std::to_string(kWorkerFd);
  WorkerSandbox sandbox = sandbox_;
  // An emulated device's memory is the worker's own: its window counts against the cap, besides the limit. A
  // physical GPU's driver reserves address space far beyond its use: no RLIMIT_AS there.
  if (spec.emulated && memory_limit_ > 0) sandbox.address_space_limit = spec.window_bytes + memory_limit_;
  if (spec.direct_listen.rfind("unix:", 0) == 0) sandbox.door_listen = spec.direct_listen;  // Bound as root.
  std::string sandbox_arg = sandbox.Encode();
  char* argv[] = {exe, const_cast<char*>(kSessionWorkerFlag), fd_arg.data(), sandbox_arg.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_fd, kWorkerFd);
  if (turns_fd >= 0) posix_spawn_file_actions_adddup2(&actions, turns_fd, kTurnsFd);
  if (quota_fd >= 0) posix_spawn_file_actions_adddup2(&actions, quota_fd, kQuotaFd);
  if (meter_fd >= 0) posix_spawn_file_actions_adddup2(&actions, meter_fd, kMeterFd);
  if (memory_fd >= 0) posix_spawn_file_actions_adddup2(&actions, memory_fd, kMemoryFd);
  pid_t pid = 0;
  int err = posix_spawn(&pid, exe, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  for (int fd : {child_fd, turns_fd, quota_fd, meter_fd}) {
    if (fd >= 0) close(fd);
  }
  kj::AutoCloseFd memory(memory_fd);  // The agent's: the next worker of a move maps it (MemoryFileOf).
  if (err != 0) {
    close(fds[0]);
    return OpenedSession{Status(StatusCode::kInternal, fmt::format("cannot start a session worker: {}",
                                                                   std::strerror(err))),
                         nullptr, nullptr};
  }
  // Into its memory-capped group before the agent sends it anything: until then it has only started (exec and its
  // libraries), so nothing a tenant sends is handled outside the cap.
  std::string cgroup;
  if (cgroups_.usable() && memory_limit_ > 0) {
    auto confined = cgroups_.Confine(pid, spec.emulated ? spec.window_bytes + memory_limit_ : memory_limit_);
    if (!confined.ok()) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(fds[0]);
      GP_ERROR("session", "lease {}: {}", spec.lease_id, confined.status().message());
      return OpenedSession{confined.status(), nullptr, nullptr};
    }
    cgroup = std::move(confined).value();
  }
  auto worker = kj::heap<Worker>();
  worker->pid = pid;
  worker->cgroup = std::move(cgroup);
  worker->lease_id = spec.lease_id;
  worker->device = spec.device;
  worker->spec = spec;
  worker->spec.restore_image = nullptr;
  worker->meter = std::move(meter);
  worker->memory = kj::mv(memory);
  worker->spec.memory_fd = -1;  // Its own is `memory`; the one it came with is its last worker's.
  worker->direct_path = DoorSocketPath(spec.direct_listen, pid);
  worker->stream = io_.lowLevelProvider->wrapUnixSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  worker->rpc = kj::heap<capnp::TwoPartyClient>(*worker->stream);
  auto maybe_pid = kj::heap<kj::Maybe<pid_t>>(pid);
  auto& pid_ref = *maybe_pid;
  reapers_->add(io_.unixEventPort.onChildExit(pid_ref).attach(kj::mv(maybe_pid)).then([this, pid](int status) {
    Reap(pid, status);
  }));
  auto bootstrap = worker->rpc->bootstrap().castAs<wire::SessionWorker>();
  worker->control = bootstrap;
  workers_.emplace(pid, kj::mv(worker));
  GP_DEBUG("session", "lease {}: session worker {} started", spec.lease_id, pid);

  auto req = bootstrap.openRequest();
  // Boilerplate by nature: field by field from the spec to the worker's configuration message.
  auto c = req.initConfig();
  c.setEmulated(spec.emulated);
  c.setDeviceName(spec.device_name);
  c.setComputeCapability(static_cast<uint16_t>(spec.compute_capability));
  c.setNvmlUuid(spec.nvml_uuid);
  c.setMemoryBytes(spec.memory_bytes);
  c.setWindowBase(spec.window_base);
  c.setWindowBytes(spec.window_bytes);
  c.setUuid(kj::arrayPtr(spec.uuid, 16));
  c.setPciBus(spec.pci_bus);
  c.setPciDevice(spec.pci_device);
  c.setShareMicros(spec.share_micros);
  c.setCudaDriver(spec.cuda_driver);
  c.setDeviceTurns(turns_fd >= 0);
  c.setTurnsGroup(spec.turns_group);
  c.setSliceQuota(quota_fd >= 0);
  c.setSessionMeter(meter_fd >= 0);
  c.setDirectListen(spec.direct_listen);
  c.setBytesInFlight(spec.bytes_in_flight);
  c.setMemoryFile(memory_fd >= 0);
  c.setMemoryKept(memory_fd >= 0 && spec.memory_fd >= 0 && spec.memory_kept);
  // A moved session's image goes first, in pieces within the message limit, once it is there.
  auto request = kj::heap<decltype(req)>(kj::mv(req));
  auto* config = request.get();
  kj::Promise<void> image_sent = kj::READY_NOW;
  KJ_IF_MAYBE(later, restore) {
    image_sent = later->then([this, bootstrap, config](RestoreInput in) mutable -> kj::Promise<void> {
      if (!in.status.ok() || !in.image) {
        return KJ_EXCEPTION(FAILED, "no image to restore: " + std::string(in.status.message()));
      }
      auto c = config->getConfig();
      c.setRestore(true);
      c.setRestoreConsumed(in.consumed);
      return SendImage(bootstrap, in.image, 0);
    });
  }
  return image_sent.then([request = kj::mv(request)]() mutable { return request->send(); })
      .then([this, pid](capnp::Response<wire::SessionWorker::OpenResults>&& r) -> OpenedSession {
        if (Status refused = StatusOf(r.getOutcome()); !refused.ok()) {
          KillFailedToOpen(pid, refused.message().c_str());
          return OpenedSession{refused, nullptr, nullptr, r.getOutcome().getWindowTaken()};
        }
        OpenedSession opened{Status::Ok(), r.getSession(), nullptr};
        if (r.hasDirect()) {
          auto d = r.getDirect();
          auto ticket = d.getTicket();
          opened.direct = DirectDoor{d.getPort(), d.getPath(),
                                     std::string(reinterpret_cast<const char*>(ticket.begin()), ticket.size())};
        }
        if (auto it = workers_.find(pid); it != workers_.end()) {
          it->second->opened = true;
          KJ_IF_MAYBE(door, opened.direct) { it->second->door = *door; }
        }
        return opened;
      })
      .catch_([this, pid](kj::Exception&& e) -> OpenedSession {
        KillFailedToOpen(pid, e.getDescription());
        return OpenedSession{Status(StatusCode::kInternal, fmt::format("the session worker failed to start: {}",
                                                                       e.getDescription().cStr())),
                             nullptr, nullptr};
      });
}

kj::Promise<void> SessionWorkers::SendImage(wire::SessionWorker::Client worker,
                                            std::shared_ptr<const std::vector<uint8_t>> image, size_t offset) {
  if (offset >= image->size()) return kj::READY_NOW;
  // A few pieces in flight at once (calls on one capability arrive in order): the worker takes one while the next
  // crosses the socket.
  kj::Vector<kj::Promise<void>> sent;
  size_t at = offset;
  for (size_t i = 0; i < kImagePiecesInFlight && at < image->size(); ++i) {
    auto req = worker.restorePieceRequest();
    const size_t n = std::min(kImagePieceBytes, image->size() - at);
    req.setData(kj::arrayPtr(image->data() + at, n));
    req.setTotal(image->size());
    sent.add(req.send().then([](capnp::Response<wire::SessionWorker::RestorePieceResults>&& r) {
      if (Status s = StatusOf(r.getOutcome()); !s.ok()) return kj::Promise<void>(KJ_EXCEPTION(FAILED, s.message()));
      return kj::Promise<void>(kj::READY_NOW);
    }));
    at += n;
  }
  return kj::joinPromises(sent.releaseAsArray()).then([this, worker, image, at]() mutable {
    return SendImage(kj::mv(worker), kj::mv(image), at);
  });
}

std::vector<SessionWorkers::LeaseSession> SessionWorkers::SessionsOf(const std::string& lease_id) const {
  std::vector<LeaseSession> out;
  for (const auto& [pid, worker] : workers_) {
    if (worker->lease_id == lease_id && worker->opened && !worker->killed) {
      out.push_back({pid, worker->spec, worker->door});
    }
  }
  return out;
}

int SessionWorkers::MemoryFileOf(pid_t pid) const {
  auto it = workers_.find(pid);
  return it == workers_.end() ? -1 : it->second->memory.get();
}

kj::Promise<SessionWorkers::Checkpointed> SessionWorkers::Checkpoint(pid_t pid, kj::Duration quiet_within,
                                                                     bool memory_stays) {
  auto it = workers_.find(pid);
  if (it == workers_.end() || it->second->killed) {
    return Checkpointed{Status(StatusCode::kNotFound, "the session ended"), 0, nullptr};
  }
  wire::SessionWorker::Client* control = nullptr;
  KJ_IF_MAYBE(c, it->second->control) { control = c; }
  if (control == nullptr) return Checkpointed{Status(StatusCode::kNotFound, "the session ended"), 0, nullptr};
  auto req = control->checkpointRequest();
  req.setQuietWithinMs(static_cast<uint32_t>(quiet_within / kj::MILLISECONDS));
  req.setMemoryStays(memory_stays);
  wire::SessionWorker::Client worker = *control;
  return req.send()
      .then([this, worker](capnp::Response<wire::SessionWorker::CheckpointResults>&& r) mutable
            -> kj::Promise<Checkpointed> {
        if (Status s = StatusOf(r.getOutcome()); !s.ok()) return Checkpointed{s, 0, nullptr};
        auto taken = std::make_shared<Checkpointed>();
        taken->consumed = r.getConsumed();
        taken->placed_by_driver = r.getPlacedByDriver();
        taken->memory_stayed = r.getMemoryStayed();
        // Its length is the worker's word, bounded by what a session can hold (its window: 2^47 bytes at most).
        if (r.getImageBytes() > (uint64_t{1} << 47)) {
          return Checkpointed{Status(StatusCode::kInternal, "the worker announced an image larger than any session"), 0,
                              nullptr};
        }
        taken->image = std::make_shared<std::vector<uint8_t>>(r.getImageBytes());
        return FetchImage(kj::mv(worker), taken->image, 0).then([taken] { return *taken; });
      })
      .catch_([](kj::Exception&& e) {
        return Checkpointed{Status(StatusCode::kDisconnected,
                                   fmt::format("the session's worker went away: {}", e.getDescription().cStr())),
                            0, nullptr};
      });
}

kj::Promise<void> SessionWorkers::FetchImage(wire::SessionWorker::Client worker,
                                             std::shared_ptr<std::vector<uint8_t>> image, uint64_t offset) {
  // A few pieces asked for at once, each copied to its place as it comes; each must be as long as asked, so the
  // pieces fill the image exactly.
  if (offset >= image->size()) return kj::READY_NOW;
  kj::Vector<kj::Promise<void>> asked;
  uint64_t at = offset;
  for (size_t i = 0; i < kImagePiecesInFlight && at < image->size(); ++i) {
    auto req = worker.imagePieceRequest();
    req.setOffset(at);
    const uint64_t want = std::min<uint64_t>(kImagePieceBytes, image->size() - at);
    asked.add(req.send().then([image, at, want](capnp::Response<wire::SessionWorker::ImagePieceResults>&& r) {
      auto data = r.getData();
      if (data.size() != want) {
        return kj::Promise<void>(KJ_EXCEPTION(FAILED, "the worker's image is not the length it said"));
      }
      std::memcpy(image->data() + at, data.begin(), data.size());
      return kj::Promise<void>(kj::READY_NOW);
    }));
    at += want;
  }
  return kj::joinPromises(asked.releaseAsArray()).then([this, worker, image, at]() mutable {
    return FetchImage(kj::mv(worker), kj::mv(image), at);
  });
}

void SessionWorkers::Resume(pid_t pid) {
  auto it = workers_.find(pid);
  if (it == workers_.end()) return;
  KJ_IF_MAYBE(control, it->second->control) {
    reapers_->add(control->resumeRequest().send().ignoreResult().catch_([](kj::Exception&&) {}));
  }
}

void SessionWorkers::Retire(pid_t pid) {
  auto it = workers_.find(pid);
  if (it == workers_.end()) return;
  it->second->killed = true;
  kill(pid, SIGKILL);
}

void SessionWorkers::KillFailedToOpen(pid_t pid, kj::StringPtr why) {
  // The agent's own doing, not a crash: Reap says so (a worker that failed to open is no tenant's lost session).
  auto it = workers_.find(pid);
  if (it != workers_.end()) {
    it->second->killed = true;
    GP_INFO("session", "lease {}: session worker {} could not open its session: {}", it->second->lease_id, pid,
            why.cStr());
  }
  kill(pid, SIGKILL);
}

std::vector<SessionWorkers::SessionView> SessionWorkers::Sessions() const {
  std::vector<SessionView> out;
  for (const auto& [pid, worker] : workers_) {
    if (!worker->meter) continue;
    out.push_back({worker->lease_id, worker->device, pid, worker->meter->Read()});
  }
  return out;
}

size_t SessionWorkers::OnDevice(uint32_t device) const {
  size_t n = 0;
  for (const auto& [pid, worker] : workers_) n += worker->device == device ? 1 : 0;
  return n;
}

size_t SessionWorkers::OfLease(const std::string& lease_id, uint32_t device) const {
  size_t n = 0;
  for (const auto& [pid, worker] : workers_) n += worker->device == device && worker->lease_id == lease_id ? 1 : 0;
  return n;
}

kj::Promise<void> SessionWorkers::KillLease(const std::string& lease_id, const std::string& why) {
  kj::Vector<kj::Promise<void>> revoked;
  for (auto& [pid, worker] : workers_) {
    if (worker->lease_id != lease_id || worker->killed) continue;
    worker->killed = true;
    // Revoked at once (memory freed, kernels stopped; the client's next call says the lease ended), killed soon
    // after whatever state it is in: a hung driver call cannot keep it alive.
    // A worker that already ended (its client went away first) has nothing left to revoke: not an error.
    KJ_IF_MAYBE(control, worker->control) {
      auto request = control->revokeRequest();
      request.setReason(why);
      auto sent = request.send().ignoreResult().catch_([](kj::Exception&&) {}).fork();
      reapers_->add(sent.addBranch());
      revoked.add(sent.addBranch());
    }
    pid_t victim = pid;
    reapers_->add(io_.provider->getTimer().afterDelay(kRevokeGrace).then([victim] { kill(victim, SIGKILL); }));
  }
  // Bounded: a worker stuck in its device is killed after kRevokeGrace anyway.
  return io_.provider->getTimer().timeoutAfter(kRevokeGrace, kj::joinPromises(revoked.releaseAsArray()))
      .catch_([](kj::Exception&&) {});
}

void SessionWorkers::Reap(pid_t pid, int status) {
  auto it = workers_.find(pid);
  std::string lease = it == workers_.end() ? "?" : it->second->lease_id;
  bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (clean || (it != workers_.end() && it->second->killed)) {
    GP_DEBUG("session", "lease {}: session worker {} {}", lease, pid, clean ? "exited" : "stopped with its lease");
  } else {
    // Not the agent's doing: a crash, an abort, or someone else's signal. The other sessions go on.
    GP_WARN("session", "lease {}: session worker {} {}: that session ended, its memory is freed", lease, pid,
            DescribeExit(status));
  }
  if (it != workers_.end()) {
    if (!it->second->direct_path.empty()) unlink(it->second->direct_path.c_str());
    if (!it->second->cgroup.empty()) WorkerCgroups::Remove(it->second->cgroup);
    // Its counts stay with its lease, so that the lease's totals never go back.
    if (it->second->meter) {
      backend::MeterReading last = it->second->meter->Read();
      last.memory_bytes = 0;  // Died with the worker.
      backend::MeterReading& r = retired_[lease];
      r.calls += last.calls;
      r.bytes_to_device += last.bytes_to_device;
      r.bytes_from_device += last.bytes_from_device;
      r.busy_nanos += last.busy_nanos;
      r.last_call_unix_ms = std::max(r.last_call_unix_ms, last.last_call_unix_ms);
    }
    workers_.erase(it);
  }
}

}  // namespace gpupool::agent
