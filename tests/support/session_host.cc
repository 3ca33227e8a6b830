#include "support/session_host.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <kj/async-io.h>

#include "backend/emu/emu_backend.h"
#include "backend/frame_connection.h"
#include "backend/session_server.h"
#include "core/log.h"
#include "core/mapping.h"

namespace gpupool::testing {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
// Where windows are looked for: the range the client library places its windows in (session_client.cc), from 40 TiB
// so that a test's own windows there stay clear of a RemoteSession::OpenLease's in the same process.
constexpr uint64_t kFirstWindow = uint64_t{40} << 40, kWindowsEnd = uint64_t{96} << 40;

// The emulated device of the session, in the given window or in the first free one.
Result<std::unique_ptr<backend::DeviceBackend>> NewDevice(const SessionHostOptions& o, uint64_t* window_base,
                                                          uint64_t* window_bytes) {
  backend::EmuBackendConfig cfg;
  cfg.device_name = "emulated GPU (in-process)";
  cfg.cc_major = o.cc_major;
  cfg.cc_minor = o.cc_minor;
  cfg.memory_bytes = o.memory_bytes;
  cfg.worker_threads = o.worker_threads;
  if (o.window_base != 0) {
    cfg.window_base = *window_base = o.window_base;
    cfg.window_bytes = *window_bytes = o.window_bytes;
    return backend::NewEmuBackend(cfg);
  }
  // As a slice's window: its memory (and the device's heap) in whole GiB, then room for reservations.
  const uint64_t window = (o.memory_bytes + (uint64_t{64} << 20) + kGiB - 1) / kGiB * kGiB + 16 * kGiB;
  for (uint64_t base = kFirstWindow; base + window <= kWindowsEnd; base += window) {
    // A window another host of this process holds is skipped before a device is made for it.
    void* probe = MapAnonymousAt(base, window, PROT_NONE);
    if (probe == nullptr) continue;
    munmap(probe, window);
    cfg.window_base = *window_base = base;
    cfg.window_bytes = *window_bytes = window;
    auto device = backend::NewEmuBackend(cfg);
    if (device.ok() || device.status().code() != StatusCode::kResourceExhausted) return device;
  }
  return Status(StatusCode::kResourceExhausted,
                fmt::format("no free window of {} GiB in [0x{:x}, 0x{:x})", window / kGiB, kFirstWindow, kWindowsEnd));
}

}  // namespace

struct SessionHost::Loop {
  std::thread thread;
  std::atomic<bool> serving{false};
  // Set, on the host's thread, once the session serves; the host's thread then waits for `stop` until the end.
  const kj::Executor* executor = nullptr;
  kj::Own<kj::PromiseFulfiller<void>> stop;  // The host's thread only.
  std::shared_ptr<backend::SessionControl> control = std::make_shared<backend::SessionControl>();
  backend::FrameControl frames;  // The host's thread only.
  kj::Timer* timer = nullptr;
  kj::Promise<void> served = nullptr;  // The connection; dropped to end it.

  // The host's thread: opens the session, reports how that went through `started`, serves `server_fd` (owned)
  // until the connection ends or the host stops.
  void Run(const SessionHostOptions& options, int server_fd, std::promise<Status>* started, uint64_t* window_base,
           uint64_t* window_bytes) {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    auto device = NewDevice(options, window_base, window_bytes);
    if (!device.ok()) {
      close(server_fd);
      started->set_value(device.status());
      return;
    }
    backend::SessionLimits limits;
    limits.memory_bytes = options.memory_bytes;
    limits.window_base = *window_base;
    limits.window_bytes = *window_bytes;
    limits.description = fmt::format("in-process emulated GPU, window 0x{:x}", *window_base);
    backend::FramedSession* framed = nullptr;
    kj::Own<wire::Session::Server> server =
        backend::NewSessionServer(std::move(device).value(), limits, control, nullptr, &framed);
    if (options.restore != nullptr) {
      if (CallStatus s = control->restore(*options.restore); !s.ok()) {
        close(server_fd);
        started->set_value(Status(StatusCode::kInvalidArgument, "restoring the session: " + s.message()));
        return;
      }
    }
    auto stream = io.lowLevelProvider->wrapSocketFd(server_fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    auto stopped = kj::newPromiseAndFulfiller<void>();
    stop = kj::mv(stopped.fulfiller);
    executor = &kj::getCurrentThreadExecutor();
    timer = &io.provider->getTimer();
    serving = true;
    // As in a session worker: the session lives as long as its connection.
    served = backend::ServeFrames(kj::mv(stream), *framed, limits.bytes_in_flight, &frames,
                                  options.restore_consumed)
                                   .catch_([](kj::Exception&& e) {
                                     GP_DEBUG("session", "in-process connection ended: {}", e.getDescription().cStr());
                                   })
                                   .then([this, &server] {
                                     server = nullptr;
                                     serving = false;
                                   })
                                   .eagerlyEvaluate(nullptr);
    started->set_value(Status::Ok());
    stopped.promise.wait(io.waitScope);
    served = nullptr;  // Before the server: it serves the session.
    server = nullptr;
    serving = false;
  }
};

Result<std::unique_ptr<SessionHost>> SessionHost::Start(const SessionHostOptions& options) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status(StatusCode::kInternal, fmt::format("socketpair: {}", std::strerror(errno)));
  }
  auto host = std::unique_ptr<SessionHost>(new SessionHost());
  host->client_fd_ = fds[0];
  host->loop_ = std::make_unique<Loop>();
  std::promise<Status> started;
  Loop* loop = host->loop_.get();
  SessionHost* raw = host.get();
  loop->thread = std::thread([loop, options, server_fd = fds[1], &started, raw] {
    loop->Run(options, server_fd, &started, &raw->window_base_, &raw->window_bytes_);
  });
  if (Status s = started.get_future().get(); !s.ok()) return s;  // The host's thread has ended: nothing to stop.
  return host;
}

SessionHost::~SessionHost() {
  if (loop_->executor != nullptr) {
    Loop* loop = loop_.get();
    loop->executor->executeSync([loop] { loop->stop->fulfill(); });
  }
  loop_->thread.join();
  if (client_fd_ >= 0) close(client_fd_);
}

CallStatus SessionHost::CheckpointAndLeave(backend::SessionImage* image, uint64_t* consumed) {
  if (loop_->executor == nullptr || !loop_->serving) return CallStatus(cu::kInvalidValue, "the session has ended");
  Loop* loop = loop_.get();
  return loop->executor->executeSync([loop, image, consumed] {
    return backend::CheckpointForMove(loop->frames, *loop->control, *loop->timer, 10 * kj::SECONDS, image)
        .then([loop, consumed](backend::MoveCheckpoint taken) {
          *consumed = taken.consumed;
          if (taken.status.ok()) loop->served = nullptr;  // The connection ends, as with a worker that exits.
          return taken.status;
        });
  });
}

CallStatus SessionHost::Checkpoint(backend::SessionImage* image) {
  if (loop_->executor == nullptr || !loop_->serving) return CallStatus(cu::kInvalidValue, "the session has ended");
  Loop* loop = loop_.get();
  return loop->executor->executeSync([loop, image] {
    std::lock_guard<std::mutex> lock(loop->control->mu);
    return loop->control->checkpoint ? loop->control->checkpoint(image)
                                     : CallStatus(cu::kInvalidValue, "the session has ended");
  });
}

int SessionHost::TakeClientFd() { return std::exchange(client_fd_, -1); }

Result<std::unique_ptr<internal::RemoteSession>> SessionHost::Connect() {
  const int fd = TakeClientFd();
  if (fd < 0) return Status(StatusCode::kInvalidArgument, "the host's one connection was taken already");
  return internal::RemoteSession::OverConnection(fd, window_base_, window_bytes_);
}

bool SessionHost::Serving() const { return loop_->serving.load(); }

}  // namespace gpupool::testing
