#include "client/session_client.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <capnp/serialize.h>

#include <fmt/format.h>

#include "client/lease_core.h"
#include "client/runtime.h"
#include "client/session_channel.h"
#include "core/call_status.h"
#include "core/log.h"
#include "core/mapping.h"
#include "core/util.h"
#include "gpupool/units.h"
#include "schema/session_frames.h"
#include "schema/session_wire.h"

namespace gpupool::internal {
namespace {

namespace calls = session::calls;

constexpr uint64_t kGiB = 1ull << 30;
constexpr size_t kChunk = 4u << 20;  // Copies travel in 4 MiB messages, pipelined.
// From this size a copy's bytes are referred to rather than copied for a move (SessionChannel::PostHeld): one round
// trip per copy costs less than copying them, and below it the copy costs less than the round trip.
constexpr size_t kHeldCopyMin = 1u << 20;
constexpr size_t kChunksInFlight = 4;  // Copies back: chunks asked for ahead of the one being read.
constexpr size_t kBatchBytes = 16u << 20;  // A batch this large is sent, and gathering goes on in a new one.
// Address windows live in [32 TiB, 96 TiB), below where Linux places shared libraries and stacks. A PIE program and
// its heap may be in that range too (around 85 TiB): each window is reserved in the client's address space
// (RemoteSession::Reservation), and a range already in use is not taken.
constexpr uint64_t kWindowLow = 32ull << 40, kWindowHigh = 96ull << 40;

// printf output of the device goes to the program's stdout, as on a GPU.
void EmitOutput(capnp::Text::Reader text) {
  if (text.size() == 0) return;
  std::fwrite(text.begin(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// The worker's address for a client that reached its agent at `server` ("host", "host:port", "[v6]:port").
std::string WorkerAddress(const std::string& server, uint16_t port) {
  std::string host = server;
  if (host.rfind('[', 0) == 0) {
    host = host.substr(0, host.find(']') + 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  } else if (host.find(':') != std::string::npos) {
    host = "[" + host + "]";  // A bare IPv6 address.
  }
  return fmt::format("{}:{}", host, port);
}

// Where `door` (an openSession answer's) says the session's worker of agent `server` waits, and with which ticket.
void ReadDoor(const std::string& server, wire::DirectSession::Reader door, std::string* address, std::string* ticket) {
  *address = door.hasPath() && door.getPath().size() > 0 ? "unix:" + std::string(door.getPath())
                                                         : WorkerAddress(server, door.getPort());
  auto bytes = door.getTicket();
  ticket->assign(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// GPUPOOL_DIRECT_SESSIONS=0: every call goes through the agent (to measure the extra hop, or where only the
// agent's port is reachable and connecting elsewhere would wait for a firewall's silence).
bool DirectSessionsWanted() {
  const char* v = std::getenv("GPUPOOL_DIRECT_SESSIONS");
  return v == nullptr || std::string_view(v) != "0";
}

// GPUPOOL_FOLLOW_MOVES=0: a session does not follow its lease when an administrator moves it (gp-agent ctl migrate):
// the channel keeps no copy of the calls it sends, and a move ends the program's session instead.
bool FollowMovesWanted() {
  const char* v = std::getenv("GPUPOOL_FOLLOW_MOVES");
  return v == nullptr || std::string_view(v) != "0";
}

// GPUPOOL_RESUME_WAIT_MS (gp-run sets it from --wait): how long a call of a suspended lease waits for room to resume
// it; unset, as long as it takes.
std::optional<std::chrono::milliseconds> ResumeWait() {
  const char* v = std::getenv("GPUPOOL_RESUME_WAIT_MS");
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long long ms = std::strtoll(v, &end, 10);
  if (*end != '\0' || ms < 0) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

constexpr std::chrono::milliseconds kDirectConnectTimeout{2000};
// How long a session whose connection broke asks its lease's agent why (ExplainLoss) before it reports the break as
// it is: long enough for an agent's restart.
constexpr std::chrono::seconds kLossInquiry{5};

}  // namespace

struct RemoteSession::Impl : public kj::TaskSet::ErrorHandler {
  kj::Maybe<wire::Session::Client> session;  // Loop thread only.
  kj::Own<kj::TaskSet> tasks;                // Loop thread only.
  std::mutex mu;
  int async_error = 0;
  std::string async_message;
  // The thread gathering posted calls into `batch` (BeginBatch), or none. Only that thread touches `batch`.
  std::atomic<std::thread::id> batch_thread{};
  std::vector<uint8_t> batch;
  // Where the batch's messages are kept (BeginBatch's `record`), or null; whether they still hold all of it.
  RecordedBatch* recording = nullptr;
  bool recording_whole = false;

  void taskFailed(kj::Exception&& e) override {
    if (e.getType() == kj::Exception::Type::DISCONNECTED) disconnected = true;
    Record(cu::kLaunchFailed, e.getDescription().cStr());
  }
  void Record(int code, const std::string& message) {
    if (code == 0) return;
    NoteFault(code);
    std::lock_guard<std::mutex> lock(mu);
    if (async_error == 0) {
      async_error = code;
      async_message = message;
    }
  }
  // The first kernel fault a reply carried (RemoteSession::StickyFault).
  std::atomic<int> sticky_fault{0};
  void NoteFault(int code) {
    int none = 0;
    if (cu::IsStickyFault(code)) sticky_fault.compare_exchange_strong(none, code);
  }
  // Whether any call went to the session since it opened: until one does, the server holds nothing of it.
  std::atomic<bool> used{false};
  wire::Session::Client& S() {
    used = true;
    KJ_IF_MAYBE(s, session) { return *s; }
    KJ_FAIL_REQUIRE("session closed");
  }
  // The framed connection straight to the session's worker, when the agent offered one and it let us in: it
  // carries every call; `session` (through the agent) is dropped then.
  std::unique_ptr<SessionChannel> channel;
  // The connection through the agent broke (the channel's own loss is channel->lost()).
  std::atomic<bool> disconnected{false};
  // Why the session's connection broke, as its agent explains it (ExplainLoss), once asked; guarded by loss_mu.
  std::mutex loss_mu;
  bool loss_explained = false;
  std::string loss_explanation;
  bool ConnectionLost() const { return channel ? !channel->lost().empty() : disconnected.load(); }
  // Posted calls sent through the agent and not answered yet (the worker answers one once it is done): their bytes.
  // A thread that posts waits while they reach kPostedBytesInFlight, as a GPU's driver blocks a thread whose queue
  // is full, instead of this process (and the agent, and the worker) buffering all a program queues ahead of its
  // device. The direct connection needs none of this: the worker stops reading it (ServeFrames), so its socket
  // blocks the writer.
  static constexpr uint64_t kPostedBytesInFlight = 64ull << 20;
  std::mutex posted_mu;
  std::condition_variable posted_cv;
  uint64_t posted_bytes = 0;  // Guarded by posted_mu.
  void PostedOut(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(posted_mu);
    posted_bytes += bytes;
  }
  void PostedDone(uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(posted_mu);
      posted_bytes -= std::min(posted_bytes, bytes);
    }
    posted_cv.notify_all();
  }
  // Not on the loop thread: it is what answers them.
  void AwaitPostedRoom() {
    std::unique_lock<std::mutex> lock(posted_mu);
    posted_cv.wait(lock, [this] { return posted_bytes < kPostedBytesInFlight; });
  }
  // Host-to-device copies through the shared slots whose replies nobody has read yet (0: none), by slot: the call
  // returned once its bytes were in the slot, as cuMemcpyHtoD may once pageable memory is staged; the slot is
  // reused only after its reply. `shared_next`: the slot the next copy starts at. Guarded by channel->shared_mu().
  uint32_t shared_unsettled[SessionChannel::kSharedSlots] = {};
  size_t shared_next = 0;
};

namespace {

uint64_t WholeGiB(uint64_t bytes) { return (bytes + kGiB - 1) / kGiB * kGiB; }

// The slice's memory (and the device's heap) at the start of a window, rounded to whole GiB, as every window of a
// slice begins; its virtual memory reservations come after it.
uint64_t MemoryPart(const Slice& slice) { return WholeGiB(slice.memory_bytes + (64ull << 20)); }

}  // namespace

RemoteSession::Reservation& RemoteSession::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    base = std::exchange(other.base, 0);
    bytes = std::exchange(other.bytes, 0);
  }
  return *this;
}

void RemoteSession::Reservation::Release() {
  if (bytes != 0) munmap(reinterpret_cast<void*>(base), bytes);
  base = bytes = 0;
}

bool RemoteSession::Reservation::Take(uint64_t at, uint64_t size) {
  Release();
  if (MapAnonymousAt(at, size, PROT_NONE) == nullptr) return false;
  base = at;
  bytes = size;
  return true;
}

Status RemoteSession::OpenAt(uint64_t base, uint64_t window, bool* window_taken) {
  if (window_taken) *window_taken = false;
  auto impl = std::make_unique<Impl>();
  Impl* raw = impl.get();
  std::string server = slice_.server;
  uint32_t device = slice_.device;
  auto props = std::make_shared<RemoteProps>();
  std::string door_address, door_ticket;  // Where the worker waits for us directly, if it does.
  const std::string& id = lease_id_;
  const std::string& secret = lease_secret_;
  Status status = runtime_->Run([&]() -> kj::Promise<Status> {
    return WithLeaseAgent(*runtime_, id, server, "openSession",
                     [&, raw, base, window, device, props](Runtime& rt, wire::Agent::Client agent,
                                                          const std::string& at) {
                       auto req = agent.openSessionRequest();
                       SetKey(req.initLease(), id, secret);
                       // Its index on the agent that holds the slice now, if the lease moved to another.
                       req.setDevice(rt.LeaseDevice(id, server, device));
                       req.setWindowBase(base);
                       req.setWindowBytes(window);
                       return rt.Deadline(req.send()).then(
                           [&, raw, at, props](capnp::Response<wire::Agent::OpenSessionResults>&& r)
                               -> kj::Promise<Status> {
                             Status s = LeaseStatus(rt, id, at, r.getOutcome());
                             if (!s.ok()) {
                               if (window_taken) *window_taken = r.getOutcome().getWindowTaken();
                               return s;
                             }
                             raw->session = r.getSession();
                             raw->tasks = kj::heap<kj::TaskSet>(*raw);
                             if (r.hasDirect() && DirectSessionsWanted()) {
                               ReadDoor(at, r.getDirect(), &door_address, &door_ticket);
                             }
                             return rt.Deadline(raw->S().propertiesRequest().send())
                                 .then([props](capnp::Response<wire::Session::PropertiesResults>&& p) {
                                   calls::Properties::Results results;
                                   session::Wire<calls::Properties>::ReadResults(p, results);
                                   *props = std::move(results.props);
                                   return Status::Ok();
                                 });
                           });
                     });
  });
  if (!status.ok()) {
    runtime_->Run([&impl] { impl.reset(); });  // Capabilities are dropped on the loop thread.
    return status;
  }
  if (!door_address.empty()) {
    // Off the loop thread: a connection that waits for a firewall's silence must not stall other sessions' calls.
    auto channel = SessionChannel::Enter(door_address, door_ticket, kDirectConnectTimeout,
                                         [raw](int code, const std::string& message) { raw->Record(code, message); });
    if (channel.ok()) {
      raw->channel = std::move(channel).value();
      if (FollowMovesWanted()) MakeFollowMoves(raw->channel.get(), door_ticket, base, window);
      runtime_->Run([raw] { raw->session = nullptr; });  // The agent's forwarding reference goes.
      GP_DEBUG("session", "reached the session's worker directly at {}", door_address);
    } else {
      GP_DEBUG("session", "no direct connection to the session's worker at {} ({}): calls go through the agent",
               door_address, channel.status().message());
    }
  }
  raw->used = false;  // Asking for the properties leaves nothing on the session.
  std::unique_ptr<Impl> old = std::move(impl_);
  impl_ = std::move(impl);
  if (old) runtime_->Run([&old] { old.reset(); });  // Ends the session that this one replaces.
  window_base_ = base;
  window_bytes_ = window;
  props_ = *props;
  return Status::Ok();
}

void RemoteSession::MakeFollowMoves(SessionChannel* channel, const std::string& ticket, uint64_t base,
                                    uint64_t window) {
  // What the channel's reconnection needs, by value: it outlives nothing but the channel, which this session owns.
  auto current_ticket = std::make_shared<std::string>(ticket);
  std::shared_ptr<Runtime> runtime = runtime_;
  const std::string server = slice_.server, id = lease_id_, secret = lease_secret_;
  const uint32_t device = slice_.device;
  channel->MakeResumable([=](const std::string& why) -> Result<SessionChannel::Resumed> {
    std::string address, next_ticket;
    // Where the session is now, as the lease's agent says.
    auto ask = [&]() -> Status {
      return runtime->Run([&]() -> kj::Promise<Status> {
        return WithLeaseAgent(*runtime, id, server, "openSession", [&](Runtime& rt, wire::Agent::Client agent,
                                                                       const std::string& at) {
          auto req = agent.openSessionRequest();
          SetKey(req.initLease(), id, secret);
          req.setDevice(rt.LeaseDevice(id, server, device));
          req.setWindowBase(base);
          req.setWindowBytes(window);
          req.setResumeTicket(kj::arrayPtr(reinterpret_cast<const kj::byte*>(current_ticket->data()),
                                           current_ticket->size()));
          return rt.Deadline(req.send()).then([&, at](capnp::Response<wire::Agent::OpenSessionResults>&& r) {
            Status s = LeaseStatus(rt, id, at, r.getOutcome());
            if (!s.ok()) return s;
            if (!r.hasDirect()) {
              return Status(StatusCode::kInternal, "the agent said where the session went, but not how to reach it");
            }
            ReadDoor(at, r.getDirect(), &address, &next_ticket);
            return Status::Ok();
          });
        });
      });
    };
    // A suspended lease resumes once its agent has room for it: until then the call waits, saying so once, as gp-run
    // waits for room to start: up to its --wait (GPUPOOL_RESUME_WAIT_MS), or for as long as it takes.
    const std::optional<std::chrono::milliseconds> limit = ResumeWait();
    const auto since = std::chrono::steady_clock::now();
    Status asked = ask();
    for (bool said = false; asked.code() == StatusCode::kResourceExhausted; said = true) {
      if (limit && std::chrono::steady_clock::now() - since >= *limit) {
        return Status(asked.code(), fmt::format("{}; no room came within {} (gp-run --wait)", asked.message(),
                                                FormatDuration(*limit)));
      }
      if (!said) {
        GP_WARN("session", "{}; this program waits for it{}", asked.message(),
                limit ? " up to " + FormatDuration(*limit) : "");
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
      asked = ask();
    }
    if (!asked.ok()) return asked;
    auto resumed = channel->Knock(address, next_ticket, kDirectConnectTimeout);
    if (resumed.ok()) {
      *current_ticket = next_ticket;
      GP_DEBUG("session", "the session moved ({}); it goes on at {}", why, address);
    }
    return resumed;
  });
}

Result<std::vector<std::unique_ptr<RemoteSession>>> RemoteSession::OpenLease(const std::string& token) {
  auto fields = DecodeToken(token);
  if (!fields.ok()) return fields.status();
  auto lease = Lease::Attach(token);
  if (!lease.ok()) return lease.status();
  auto shared_lease = std::make_shared<Lease>(std::move(lease).value());
  PoolOptions options;
  options.servers = fields->servers;
  auto runtime = std::make_shared<Runtime>(options);
  std::vector<std::unique_ptr<RemoteSession>> out;
  for (const Slice& slice : shared_lease->slices()) {
    auto rs = std::unique_ptr<RemoteSession>(new RemoteSession());
    rs->runtime_ = runtime;
    rs->lease_ = shared_lease;
    rs->lease_id_ = fields->id;
    rs->lease_secret_ = fields->secret;
    rs->slice_ = slice;
    // The slice's memory, then address space for virtual memory reservations: PyTorch's expandable segments
    // reserve a little more than the whole device per pool and stream.
    uint64_t memory_part = MemoryPart(slice);
    uint64_t window = memory_part + std::max<uint64_t>(16 * kGiB, 16 * memory_part);
    Status last(StatusCode::kInternal, "no window tried");
    for (int attempt = 0; attempt < 16; ++attempt) {
      // A random window that does not overlap this client's others; the agent checks its own side.
      uint64_t slots = (kWindowHigh - kWindowLow - window) / kGiB;
      uint64_t base = kWindowLow + static_cast<uint64_t>(RandomUnit() * static_cast<double>(slots)) * kGiB;
      bool overlaps = false;
      for (const auto& other : out) {
        overlaps = overlaps || (base < other->window_base_ + other->window_bytes_ &&
                                other->window_base_ < base + window);
      }
      if (overlaps) continue;
      Reservation reservation;
      if (!reservation.Take(base, window)) {
        last = Status(StatusCode::kResourceExhausted, "this process already uses the addresses of every window tried");
        continue;
      }
      bool window_taken = false;
      last = rs->OpenAt(base, window, &window_taken);
      if (last.ok()) rs->window_reservation_ = std::move(reservation);
      // Only "window taken" (the agent says so apart) is worth another try. Any other refusal, such as the agent's
      // declared limits ([limits] sessions_per_device...), would meet another window too, and with this process's
      // windows crowding its address space the last try could end on one it cannot reserve, hiding the refusal's
      // message behind "every window tried".
      if (last.ok() || !window_taken) break;
    }
    if (!last.ok()) {
      return Status(last.code(), fmt::format("cannot open a session on {} GPU {}: {}", slice.server_name,
                                             slice.device, last.message()));
    }
    GP_DEBUG("session", "opened {} GPU {} at window 0x{:x}", slice.server_name, slice.device, rs->window_base_);
    out.push_back(std::move(rs));
  }
  return out;
}

Result<std::unique_ptr<RemoteSession>> RemoteSession::OverConnection(
    int fd, uint64_t window_base, uint64_t window_bytes,
    std::function<Result<SessionChannel::Resumed>(const std::string& why)> reconnect) {
  auto rs = std::unique_ptr<RemoteSession>(new RemoteSession());
  rs->impl_ = std::make_unique<Impl>();
  Impl* raw = rs->impl_.get();
  raw->channel = SessionChannel::Adopt(fd, [raw](int code, const std::string& message) { raw->Record(code, message); });
  if (reconnect) raw->channel->MakeResumable(std::move(reconnect));
  rs->window_base_ = window_base;
  rs->window_bytes_ = window_bytes;
  calls::Properties::Results properties;
  if (int code = rs->Invoke<calls::Properties>({}, &properties); code != 0) {
    return Status(StatusCode::kUnavailable, fmt::format("the session's properties: error {}: {}", code,
                                                        rs->last_error()));
  }
  rs->props_ = std::move(properties.props);
  raw->used = false;  // Asking for the properties leaves nothing on the session.
  return rs;
}

bool RemoteSession::Untouched() const { return !impl_->used.load(); }

Status RemoteSession::Relocate(uint64_t address, uint64_t bytes) {
  uint64_t memory_part = MemoryPart(slice_);
  if (!runtime_) return Status(StatusCode::kInvalidArgument, "a session over a given connection stays in its window");
  if (address % kGiB != 0 || address < memory_part) {
    return Status(StatusCode::kInvalidArgument, "a window is placed at a 1 GiB boundary");
  }
  uint64_t reservations = std::max<uint64_t>(window_bytes_ - memory_part, WholeGiB(bytes));
  // The window's present range may overlap the new one: it is let go first, and taken again if the move fails.
  const uint64_t old_base = window_reservation_.base, old_bytes = window_reservation_.bytes;
  window_reservation_.Release();
  auto keep_old = [&] {
    if (old_bytes != 0) window_reservation_.Take(old_base, old_bytes);
  };
  Reservation reservation;
  if (!reservation.Take(address - memory_part, memory_part + reservations)) {
    keep_old();
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("this process already uses addresses in [0x{:x}, 0x{:x})", address - memory_part,
                              address + reservations));
  }
  Status s = OpenAt(address - memory_part, memory_part + reservations);
  if (!s.ok()) {
    reservation.Release();
    keep_old();
  } else {
    window_reservation_ = std::move(reservation);
    GP_DEBUG("session", "{} GPU {}: window moved to 0x{:x} for a reservation at 0x{:x}", slice_.server_name,
             slice_.device, window_base_, address);
  }
  return s;
}

RemoteSession::~RemoteSession() {
  if (!impl_) return;
  // Close on the loop thread: dropping the capability ends the session on the agent.
  impl_->channel.reset();  // Closing it ends the session in its worker.
  if (!runtime_) return;  // OverConnection's: nothing went through an agent.
  runtime_->Run([this] {
    impl_->tasks = nullptr;
    impl_->session = nullptr;
  });
}

void RemoteSession::KeepAsyncError(int code) { impl_->Record(code, last_error_); }

int RemoteSession::StickyFault() const { return impl_->sticky_fault.load(); }

int RemoteSession::TakeAsyncError() {
  int code = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    code = impl_->async_error;
    if (code) last_error_ = impl_->async_message;
    impl_->async_error = 0;
  }
  ExplainIfLost(code);
  return code;
}

void RemoteSession::ExplainIfLost(int code) {
  if (code != cu::kDeviceUnavailable || !impl_->ConnectionLost()) return;
  last_error_ = ExplainLoss(last_error_);
}

std::string RemoteSession::ExplainLoss(const std::string& broke) {
  std::lock_guard<std::mutex> lock(impl_->loss_mu);  // One inquiry; the session's other threads wait for its answer.
  if (impl_->loss_explained) return impl_->loss_explanation;
  impl_->loss_explained = true;
  impl_->loss_explanation = broke;
  if (!lease_) return broke;
  // An agent that restarted killed the session's worker with it, so no worker is left to say why (as one says
  // "revoked" or "expired"): the agent, once it answers again, does. It usually answers within a second of its
  // restart; one that does not answer within kLossInquiry is reported as not answering.
  const auto deadline = std::chrono::steady_clock::now() + kLossInquiry;
  Status status;
  for (;;) {
    status = lease_->CheckNow();
    const bool unanswered = status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDisconnected ||
                            status.code() == StatusCode::kTimeout;
    if (!unanswered || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (status.code() == StatusCode::kNotFound) {
    // "SERVER: lease ID lost: WHY": the words the session's worker uses for the other ends of a lease.
    const std::string& why = status.message();
    const size_t at = why.find(" lost: ");
    impl_->loss_explanation = fmt::format("the lease of this session ended: {}; its memory is gone",
                                          at == std::string::npos ? why : why.substr(at + 7));
  } else if (!status.ok()) {
    impl_->loss_explanation = fmt::format("{}; and the lease's agent does not answer: {}", broke, status.message());
  }
  return impl_->loss_explanation;
}

namespace {

// The continuation of an unwaited call: keeps its error for the next synchronising call.
auto RecordReply(RemoteSession::Impl* impl) {
  return [impl](auto&& r) {
    CallStatus s = session::ReadStatus(r.getStatus());
    impl->Record(s.code(), s.message());
  };
}

template <typename Call>
void SendPosted(RemoteSession::Impl* impl, const typename Call::Args& args) {
  if (!impl->tasks) return;
  auto req = session::Wire<Call>::Request(impl->S());
  session::Wire<Call>::WriteArgs(args, req);
  const uint64_t bytes = req.totalSize().wordCount * sizeof(capnp::word);
  impl->PostedOut(bytes);
  impl->tasks->add(req.send().then(RecordReply(impl)).attach(kj::defer([impl, bytes] { impl->PostedDone(bytes); })));
}

// Sends a request and waits for its reply; `use(r)` reads the reply on the loop thread.
// A reply's status, with its message in `*error` when it failed; `use(r)` reads the rest of the reply.
template <typename Reader, typename Use>
int ReadReply(Reader& r, Use& use, std::string* error) {
  CallStatus s = session::ReadStatus(r.getStatus());
  if (!s.ok()) *error = s.message();
  use(r);
  return s.code();
}

template <typename Build, typename Use>
int Call(Runtime& rt, RemoteSession::Impl* impl, Build build, Use use, std::string* error) {
  try {
    return rt.Run([&]() { return build(impl->S()).then([&](auto&& r) { return ReadReply(r, use, error); }); });
  } catch (const kj::Exception& e) {
    if (e.getType() == kj::Exception::Type::DISCONNECTED) impl->disconnected = true;
    *error = e.getDescription().cStr();
    return cu::kDeviceUnavailable;
  }
}

constexpr size_t kBatchEntryWords = 64;

// Appends a posted call to a batch: its ordinal, the byte length of its arguments, and the arguments as a flat
// message (whose length is a whole number of 8-byte words, so every entry stays word-aligned).
template <typename Call>
void AppendToBatch(const typename Call::Args& args, std::vector<uint8_t>* batch) {
  using W = session::Wire<Call>;
  // Built in a zeroed first segment on the stack (a launch fits it): no allocation per call, as a graph's launches
  // are gathered one after another.
  capnp::word first[kBatchEntryWords] = {};
  capnp::MallocMessageBuilder message(kj::arrayPtr(first, kBatchEntryWords));
  W::WriteArgs(args, message.initRoot<typename W::Params>());
  auto segments = message.getSegmentsForOutput();
  const size_t words = capnp::computeSerializedSizeInWords(segments);
  const uint32_t header[2] = {static_cast<uint32_t>(Call::kOrdinal), static_cast<uint32_t>(words * sizeof(capnp::word))};
  const size_t at = batch->size();
  batch->resize(at + sizeof(header) + words * sizeof(capnp::word));
  std::memcpy(batch->data() + at, header, sizeof(header));
  // The stream framing (segment table, then the segments), written in place.
  uint8_t* out = batch->data() + at + sizeof(header);
  const size_t table_words = segments.size() / 2 + 1;
  std::memset(out, 0, table_words * sizeof(capnp::word));
  auto* table = reinterpret_cast<uint32_t*>(out);
  table[0] = static_cast<uint32_t>(segments.size() - 1);
  for (size_t i = 0; i < segments.size(); ++i) table[i + 1] = static_cast<uint32_t>(segments[i].size());
  out += table_words * sizeof(capnp::word);
  for (auto segment : segments) {
    std::memcpy(out, segment.begin(), segment.size() * sizeof(capnp::word));
    out += segment.size() * sizeof(capnp::word);
  }
}

// A message builder for one call: small first segment (most calls are a few words), grown as needed.
constexpr unsigned kFirstSegmentWords = 64;

// Whether a message may refer to `bytes` outside it instead of copying them in: Cap'n Proto refers to outside bytes
// only as whole, aligned words (it would write a partial word's neighbours too).
bool WholeWords(const uint8_t* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(capnp::word) == 0 && bytes % sizeof(capnp::word) == 0;
}

// Waits for the reply to call `seq` on the direct channel; `use(results_reader)` reads it.
template <typename Call, typename Use>
int ChannelCall(SessionChannel& channel, uint32_t seq, Use use, std::string* error) {
  using W = session::Wire<Call>;
  SessionChannel::Reply reply;
  if (!channel.Wait(seq, &reply)) {
    *error = channel.lost();
    return cu::kDeviceUnavailable;
  }
  try {
    auto r = reply.message->getRoot<typename W::ResultsStruct>();
    return ReadReply(r, use, error);
  } catch (const kj::Exception& e) {
    *error = fmt::format("corrupt {} reply from the session's worker: {}", Call::kMethod, e.getDescription().cStr());
    return cu::kDeviceUnavailable;
  }
}

template <typename Call, typename Use>
int ChannelCall(SessionChannel& channel, const typename Call::Args& args, Use use, std::string* error) {
  capnp::MallocMessageBuilder message(kFirstSegmentWords);
  session::Wire<Call>::WriteArgs(args, message.initRoot<typename session::Wire<Call>::Params>());
  return ChannelCall<Call>(channel, channel.Send(Call::kOrdinal, message), use, error);
}

// Copies of at least this many bytes to a worker on this host go through the shared memory; smaller ones travel in
// their message (a posted copy then needs no reply).
constexpr size_t kSharedCopyMin = 64u << 10;

// Waits for the reply to the shared host-to-device copy in slot `s`, if one is out; its failure is kept for the
// next synchronising call, as a posted call's. REQUIRES: the shared memory's lock.
void SettleSharedSlot(RemoteSession::Impl* impl, size_t s) {
  uint32_t& seq = impl->shared_unsettled[s];
  if (seq == 0) return;
  std::string error;
  int code = ChannelCall<calls::CopyToDeviceShared>(*impl->channel, seq, [](auto&) {}, &error);
  impl->Record(code, error);
  seq = 0;
}

// Settles every shared host-to-device copy that is out, unless another thread holds the shared memory (it settles
// them as it goes). Called after a synchronising call's reply, when theirs (sent earlier) have arrived too.
void SettleSharedCopies(RemoteSession::Impl* impl) {
  if (!impl->channel || !impl->channel->shared_slots()) return;  // Their replies too once it stopped being shared.
  std::unique_lock<std::mutex> lock(impl->channel->shared_mu(), std::try_to_lock);
  if (!lock.owns_lock()) return;
  for (size_t s = 0; s < SessionChannel::kSharedSlots; ++s) SettleSharedSlot(impl, s);
}

// Host to device through the shared slots, round the ring from where the last copy stopped: each chunk waits for
// its slot's earlier copy to be settled, fills it and asks the worker to copy it. Returns once every chunk's bytes
// are in the slots (the caller's buffer is free, as cuMemcpyHtoD promises) without waiting for the last replies;
// failures surface as a posted call's. REQUIRES: the shared memory's lock.
void SharedCopyToDevice(RemoteSession::Impl* impl, uint64_t dst, const uint8_t* src, size_t bytes, uint64_t stream) {
  using W = session::Wire<calls::CopyToDeviceShared>;
  SessionChannel& channel = *impl->channel;
  const size_t slot = channel.shared_bytes() / SessionChannel::kSharedSlots;
  for (size_t off = 0; off < bytes; off += slot) {
    size_t s = impl->shared_next, n = std::min(slot, bytes - off);
    impl->shared_next = (s + 1) % SessionChannel::kSharedSlots;
    SettleSharedSlot(impl, s);
    std::memcpy(channel.shared_slots() + s * slot, src + off, n);
    capnp::MallocMessageBuilder message(kFirstSegmentWords);
    W::WriteArgs({dst + off, s * slot, n, {stream}}, message.initRoot<W::Params>());
    impl->shared_unsettled[s] = channel.Send(calls::CopyToDeviceShared::kOrdinal, message);
    if (impl->shared_unsettled[s] == 0) impl->Record(cu::kDeviceUnavailable, channel.lost());
  }
}

// Device to host through the shared slots, up to kSharedSlots chunks in flight; each lands in place as its reply
// arrives. Returns the first failure. REQUIRES: the shared memory's lock.
int SharedCopyFromDevice(RemoteSession::Impl* impl, uint8_t* dst, uint64_t src, size_t bytes, uint64_t stream,
                         std::string* error) {
  using W = session::Wire<calls::CopyFromDeviceShared>;
  SessionChannel& channel = *impl->channel;
  for (size_t s = 0; s < SessionChannel::kSharedSlots; ++s) SettleSharedSlot(impl, s);
  const size_t slot = channel.shared_bytes() / SessionChannel::kSharedSlots;
  struct InFlight {
    uint32_t seq = 0;
    size_t offset = 0, bytes = 0;  // bytes == 0: the slot is free.
  } in_flight[SessionChannel::kSharedSlots];
  int first = 0;
  auto land = [&](size_t s) {
    InFlight& f = in_flight[s];
    if (f.bytes == 0) return;
    int code = ChannelCall<calls::CopyFromDeviceShared>(channel, f.seq, [](auto&) {}, error);
    if (code == 0) std::memcpy(dst + f.offset, channel.shared_slots() + s * slot, f.bytes);
    if (first == 0) first = code;
    f.bytes = 0;
  };
  size_t chunk = 0;
  for (size_t off = 0; off < bytes; off += slot, ++chunk) {
    size_t s = chunk % SessionChannel::kSharedSlots, n = std::min(slot, bytes - off);
    land(s);
    capnp::MallocMessageBuilder message(kFirstSegmentWords);
    W::WriteArgs({src + off, s * slot, n, {stream}}, message.initRoot<W::Params>());
    in_flight[s] = {channel.Send(calls::CopyFromDeviceShared::kOrdinal, message), off, n};
  }
  for (size_t s = 0; s < SessionChannel::kSharedSlots; ++s) land(s);
  return first;
}

// Device to host in framed messages: up to kChunksInFlight chunks asked for ahead (the worker keeps that many reply
// buffers for reuse: more would be fresh memory, faulted in, each time); each reply's bytes are read into place (a
// reply laid out otherwise is copied there). Returns the first failure.
int ChannelCopyFromDevice(SessionChannel& channel, uint8_t* dst, uint64_t src, size_t bytes, uint64_t stream,
                          std::string* error) {
  using W = session::Wire<calls::CopyFromDevice>;
  std::deque<std::pair<uint32_t, size_t>> asked;
  size_t next = 0;
  auto ask = [&] {
    size_t n = std::min(kChunk, bytes - next);
    capnp::MallocMessageBuilder message(kFirstSegmentWords);
    W::WriteArgs({src + next, n, {stream}}, message.initRoot<W::Params>());
    asked.emplace_back(channel.Send(calls::CopyFromDevice::kOrdinal, message, {dst + next, n}), next);
    next += n;
  };
  while (next < bytes && asked.size() < kChunksInFlight) ask();
  int first = 0;
  while (!asked.empty()) {
    auto [seq, off] = asked.front();
    asked.pop_front();
    size_t n = std::min(kChunk, bytes - off);
    int code = ChannelCall<calls::CopyFromDevice>(
        channel, seq,
        [&](auto& r) {
          calls::CopyFromDevice::Results results;
          W::ReadResults(r, results);
          if (results.data.data != dst + off) std::memmove(dst + off, results.data.data, std::min(n, results.data.size));
        },
        error);
    if (first == 0) first = code;
    if (next < bytes) ask();
  }
  return first;
}

}  // namespace

bool RemoteSession::Batching() const { return impl_->batch_thread.load() == std::this_thread::get_id(); }

void RemoteSession::BeginBatch(RecordedBatch* record) {
  impl_->batch_thread.store(std::this_thread::get_id());
  impl_->recording = record;
  impl_->recording_whole = record != nullptr;
  if (record) record->messages.clear();
}

bool RemoteSession::EndBatch(bool send) {
  if (!Batching()) return false;
  if (send) {
    SendGathered();
  } else {
    impl_->batch.clear();
    impl_->recording_whole = false;
  }
  impl_->batch_thread.store(std::thread::id());
  const bool whole = impl_->recording && impl_->recording_whole && !impl_->recording->messages.empty();
  impl_->recording = nullptr;
  return whole;
}

void RemoteSession::SendGathered() {
  if (!Batching() || impl_->batch.empty()) return;
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(impl_->batch));
  impl_->batch.clear();
  if (impl_->recording) impl_->recording->messages.push_back(bytes);
  Invoke<calls::Batch>({{bytes->data(), bytes->size()}}, nullptr, bytes);
}

void RemoteSession::FlushBatch() {
  if (!Batching()) return;
  impl_->recording_whole = false;
  SendGathered();
}

void RemoteSession::SendRecorded(const RecordedBatch& batch) {
  FlushBatch();  // What this thread gathered goes first.
  for (const auto& bytes : batch.messages) {
    if (!impl_->channel || !WholeWords(bytes->data(), bytes->size())) {
      Invoke<calls::Batch>({{bytes->data(), bytes->size()}}, nullptr, bytes);
      continue;
    }
    // The message refers to the recorded bytes, which outlive the write, instead of copying them in.
    capnp::MallocMessageBuilder message(kFirstSegmentWords);
    auto params = message.initRoot<session::Wire<calls::Batch>::Params>();
    params.adoptCalls(message.getOrphanage().referenceExternalData(capnp::Data::Reader(bytes->data(), bytes->size())));
    impl_->channel->Post(calls::Batch::kOrdinal, message);
  }
}

template <typename C>
int RemoteSession::Invoke(const typename C::Args& args, typename C::Results* results,
                          std::shared_ptr<const void> owner) {
  using W = session::Wire<C>;
  Impl* impl = impl_.get();
  // Calls that only ask leave nothing on the session; any other may (memory, a module, a stream), and the session
  // may no longer move its window (Relocate). The direct channel never passes S(), which marks the agent's path.
  constexpr bool kOnlyAsks = std::is_same_v<C, calls::Properties> || std::is_same_v<C, calls::MemGetInfo> ||
                             std::is_same_v<C, calls::Utilization> || std::is_same_v<C, calls::Synchronize>;
  if constexpr (!kOnlyAsks) impl->used = true;
  if constexpr (C::kMode == session::Mode::kPosted) {
    if (!std::is_same_v<C, calls::Batch> && Batching()) {
      // Any other posted call's message depends on more than its arguments (a copy's on the host bytes then).
      if (!std::is_same_v<C, calls::Launch> && !std::is_same_v<C, calls::Memset>) impl->recording_whole = false;
      AppendToBatch<C>(args, &impl->batch);
      if (impl->batch.size() >= kBatchBytes) SendGathered();  // In parts; a recording keeps each.
      return 0;
    }
    if (impl->channel) {
      capnp::MallocMessageBuilder message(kFirstSegmentWords);
      W::WriteArgs(args, message.initRoot<typename W::Params>());
      impl->channel->Post(C::kOrdinal, message);
    } else if (C::kArgsView && !owner) {
      // The caller's bytes go into the message on the loop thread before this returns (no extra copy).
      runtime_->Run([&] { SendPosted<C>(impl, args); });
      impl->AwaitPostedRoom();
    } else {
      // Posted: the caller does not even wait for the hand-off to the loop thread.
      runtime_->Post([impl, args, owner] { SendPosted<C>(impl, args); });
      impl->AwaitPostedRoom();
    }
    return 0;
  } else {
    FlushBatch();  // What this thread gathered goes first.
    auto use = [&](auto& r) {
      typename C::Results local;
      typename C::Results* out = results ? results : &local;
      W::ReadResults(r, *out);
      if constexpr (C::kMode == session::Mode::kSync) EmitOutput(r.getOutput());
    };
    int code = impl->channel ? ChannelCall<C>(*impl->channel, args, use, &last_error_)
                             : Call(
                                   *runtime_, impl,
                                   [&](wire::Session::Client& s) {
                                     auto req = W::Request(s);
                                     W::WriteArgs(args, req);
                                     return req.send();
                                   },
                                   use, &last_error_);
    impl->NoteFault(code);
    if constexpr (C::kMode == session::Mode::kSync) {
      SettleSharedCopies(impl);
      int pending = TakeAsyncError();  // An earlier posted call's error comes first, as on a GPU.
      if (pending) return pending;
    }
    ExplainIfLost(code);
    return code;
  }
}

// Every declared call can be sent, by the interposer or any other user of RemoteSession, without code here.
#define GP_INSTANTIATE(Name, method, ordinal, mode, doc)                                               \
  template int RemoteSession::Invoke<calls::Name>(const calls::Name::Args&, calls::Name::Results*, \
                                                  std::shared_ptr<const void>);
GP_SESSION_CALLS(GP_INSTANTIATE)
#undef GP_INSTANTIATE

int RemoteSession::MemGetInfo(uint64_t* free_bytes, uint64_t* total) {
  calls::MemGetInfo::Results r;
  int code = Invoke<calls::MemGetInfo>({}, &r);
  *free_bytes = r.free;
  *total = r.total;
  return code;
}

int RemoteSession::MemAlloc(uint64_t bytes, uint64_t* address) {
  calls::MemAlloc::Results r;
  int code = Invoke<calls::MemAlloc>({bytes}, &r);
  *address = r.address;
  return code;
}

int RemoteSession::MemFree(uint64_t address) { return Invoke<calls::MemFree>({address}); }

int RemoteSession::CopyToDevice(uint64_t dst, const void* src, size_t bytes, uint64_t stream) {
  // The bytes are copied into the messages before this returns: the caller's buffer is free again at once,
  // as cuMemcpyHtoD promises for pageable memory.
  const uint8_t* p = static_cast<const uint8_t*>(src);
  if (impl_->channel && !Batching() && impl_->channel->shared() && bytes >= kSharedCopyMin) {
    std::unique_lock<std::mutex> lock(impl_->channel->shared_mu(), std::try_to_lock);
    if (lock.owns_lock()) {
      SharedCopyToDevice(impl_.get(), dst, p, bytes, stream);
      return 0;
    }
  }
  if (impl_->channel && !Batching()) {
    // Written from the caller's memory, not copied into the message first: a large chunk leaves before Post
    // returns.
    using W = session::Wire<calls::CopyToDevice>;
    // A large copy is referred to, not copied, by a channel that keeps what it sends for a move (PostHeld): the call
    // then returns once the worker has read it all, as cuMemcpyHtoD from pageable memory returns once it is staged.
    const bool held = bytes >= kHeldCopyMin;
    bool any_held = false;
    for (size_t off = 0; off < bytes; off += kChunk) {
      size_t n = std::min(kChunk, bytes - off);
      capnp::MallocMessageBuilder message(kFirstSegmentWords);
      auto params = message.initRoot<W::Params>();
      // Referred to where Cap'n Proto can (WholeWords), copied into the message otherwise.
      const bool whole_words = WholeWords(p + off, n);
      W::WriteArgs({dst + off, {whole_words ? nullptr : p + off, whole_words ? 0 : n}, {stream}}, params);
      if (whole_words) {
        params.adoptData(message.getOrphanage().referenceExternalData(capnp::Data::Reader(p + off, n)));
      }
      if (held && whole_words) {
        impl_->channel->PostHeld(calls::CopyToDevice::kOrdinal, message, p + off);
        any_held = true;
      } else {
        impl_->channel->Post(calls::CopyToDevice::kOrdinal, message);
      }
    }
    if (any_held && impl_->channel->retains()) impl_->channel->AwaitConsumed();
    return 0;
  }
  for (size_t off = 0; off < bytes; off += kChunk) {
    size_t n = std::min(kChunk, bytes - off);
    Invoke<calls::CopyToDevice>({dst + off, {p + off, n}, {stream}});
  }
  return 0;
}

int RemoteSession::CopyFromDevice(void* dst, uint64_t src, size_t bytes, uint64_t stream) {
  using W = session::Wire<calls::CopyFromDevice>;
  FlushBatch();
  uint8_t* p = static_cast<uint8_t*>(dst);
  Impl* impl = impl_.get();
  std::string error;
  int code = 0;
  std::unique_lock<std::mutex> shared_lock;
  if (impl->channel && impl->channel->shared() && bytes >= kSharedCopyMin) {
    shared_lock = std::unique_lock<std::mutex>(impl->channel->shared_mu(), std::try_to_lock);
  }
  if (shared_lock.owns_lock()) {
    code = SharedCopyFromDevice(impl, p, src, bytes, stream, &error);
  } else if (impl->channel) {
    code = ChannelCopyFromDevice(*impl->channel, p, src, bytes, stream, &error);
  } else {
    try {
      code = runtime_->Run([&]() {
        // All chunks in flight at once; each lands in place as its reply arrives.
        kj::Vector<kj::Promise<int>> parts;
        for (size_t off = 0; off < bytes; off += kChunk) {
          size_t n = std::min(kChunk, bytes - off);
          auto req = W::Request(impl->S());
          W::WriteArgs({src + off, n, {stream}}, req);
          parts.add(req.send().then([p, off, n, &error](auto&& r) {
            CallStatus s = session::ReadStatus(r.getStatus());
            if (!s.ok()) {
              error = s.message();
              return s.code();
            }
            calls::CopyFromDevice::Results results;
            W::ReadResults(r, results);
            std::memcpy(p + off, results.data.data, std::min(n, results.data.size));
            return 0;
          }));
        }
        return kj::joinPromises(parts.releaseAsArray()).then([](kj::Array<int> codes) {
          for (int c : codes) {
            if (c) return c;
          }
          return 0;
        });
      });
    } catch (const kj::Exception& e) {
      if (e.getType() == kj::Exception::Type::DISCONNECTED) impl->disconnected = true;
      error = e.getDescription().cStr();
      code = cu::kDeviceUnavailable;
    }
  }
  if (code) last_error_ = error;
  int pending = TakeAsyncError();
  if (!pending) ExplainIfLost(code);
  return pending ? pending : code;
}

int RemoteSession::CopyOnDevice(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream) {
  return Invoke<calls::CopyOnDevice>({dst, src, bytes, {stream}});
}

int RemoteSession::Utilization(uint32_t* gpu_percent, uint32_t* memory_percent) {
  calls::Utilization::Results r;
  int code = Invoke<calls::Utilization>({}, &r);
  *gpu_percent = r.gpu;
  *memory_percent = r.memory;
  return code;
}

int RemoteSession::StreamWaitValue(uint64_t stream, uint64_t address, uint64_t value, uint8_t width,
                                   uint32_t flags) {
  return Invoke<calls::StreamWaitValue>({{stream}, address, value, width, flags});
}

int RemoteSession::Memset(uint64_t dst, uint32_t value, uint8_t element_size, size_t count, uint64_t stream) {
  return Invoke<calls::Memset>({dst, value, element_size, count, {stream}});
}

int RemoteSession::ModuleLoad(const void* image, size_t bytes, uint64_t* module) {
  calls::ModuleLoad::Results r;
  int code = Invoke<calls::ModuleLoad>({{static_cast<const uint8_t*>(image), bytes}}, &r);
  *module = r.module.value;
  return code;
}

int RemoteSession::ModuleUnload(uint64_t module) { return Invoke<calls::ModuleUnload>({{module}}); }

int RemoteSession::GetFunction(uint64_t module, const std::string& name, RemoteFunctionInfo* info) {
  calls::ModuleGetFunction::Results r;
  int code = Invoke<calls::ModuleGetFunction>({{module}, name}, &r);
  info->handle = r.function.value;
  info->params = std::move(r.params);
  info->shared_bytes = r.shared_bytes;
  info->local_bytes = r.local_bytes;
  info->num_regs = r.num_regs;
  info->ptx_version = r.ptx_version;
  info->max_threads_per_block = r.max_threads_per_block;
  return code;
}

int RemoteSession::GetGlobal(uint64_t module, const std::string& name, uint64_t* address, uint64_t* bytes) {
  calls::ModuleGetGlobal::Results r;
  int code = Invoke<calls::ModuleGetGlobal>({{module}, name}, &r);
  if (address) *address = r.address;
  if (bytes) *bytes = r.bytes;
  return code;
}

int RemoteSession::Launch(uint64_t function, const uint32_t grid[3], const uint32_t block[3], uint32_t shared_bytes,
                          uint64_t stream, const void* params, size_t param_bytes, const uint32_t* cluster,
                          bool cooperative) {
  calls::Launch::Args a;
  a.function.value = function;
  a.grid = {grid[0], grid[1], grid[2]};
  a.block = {block[0], block[1], block[2]};
  a.shared_bytes = shared_bytes;
  a.stream.value = stream;
  if (cluster) a.cluster = session::Dim3{cluster[0], cluster[1], cluster[2]};
  a.cooperative = cooperative ? 1 : 0;
  if (impl_->channel || Batching()) {
    a.params = {static_cast<const uint8_t*>(params), param_bytes};  // Encoded before Invoke returns.
    return Invoke<calls::Launch>(a);
  }
  // Through the agent: the parameters are small, so they are copied and the launch is posted without waiting for
  // the loop thread.
  auto packed = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(params),
                                                       static_cast<const uint8_t*>(params) + param_bytes);
  a.params = {packed->data(), packed->size()};
  return Invoke<calls::Launch>(a, nullptr, packed);
}

int RemoteSession::OccupancyMaxActiveClusters(uint64_t function, const uint32_t grid[3], const uint32_t block[3],
                                              uint32_t shared_bytes, const uint32_t cluster[3], int* clusters) {
  calls::OccupancyMaxActiveClusters::Results r;
  int code = Invoke<calls::OccupancyMaxActiveClusters>({{function},
                                                        {grid[0], grid[1], grid[2]},
                                                        {block[0], block[1], block[2]},
                                                        shared_bytes,
                                                        {cluster[0], cluster[1], cluster[2]}},
                                                       &r);
  *clusters = r.clusters;
  return code;
}

int RemoteSession::FunctionSetAttribute(uint64_t function, int attribute, int value) {
  return Invoke<calls::FunctionSetAttribute>({{function}, attribute, value});
}

int RemoteSession::StreamCreate(uint64_t* stream) {
  calls::StreamCreate::Results r;
  int code = Invoke<calls::StreamCreate>({}, &r);
  *stream = r.stream.value;
  return code;
}

int RemoteSession::StreamDestroy(uint64_t stream) { return Invoke<calls::StreamDestroy>({{stream}}); }
int RemoteSession::StreamSynchronize(uint64_t stream) { return Invoke<calls::StreamSynchronize>({{stream}}); }
// Queries report an earlier unwaited call's error too, as the driver's do ("may return errors of previous,
// asynchronous launches"): a poller (the cuda backend's Settled) must not miss a failed kernel.
int RemoteSession::StreamQuery(uint64_t stream) {
  int code = Invoke<calls::StreamQuery>({{stream}});
  int pending = TakeAsyncError();
  return pending ? pending : code;
}
int RemoteSession::EventSynchronize(uint64_t event) { return Invoke<calls::EventSynchronize>({{event}}); }
int RemoteSession::Synchronize() {
  FlushBatch();
  // The worker's last reply said nothing was left to run or report, and nothing has been sent since: no round
  // trip (a training step's synchronise right after its copy back). Posted calls' errors arrived before that reply.
  if (impl_->channel && impl_->channel->Quiet()) {
    SettleSharedCopies(impl_.get());
    return TakeAsyncError();
  }
  return Invoke<calls::Synchronize>({});
}

int RemoteSession::StreamWaitEvent(uint64_t stream, uint64_t event) {
  return Invoke<calls::StreamWaitEvent>({{stream}, {event}});
}

int RemoteSession::EventCreate(uint64_t* event) {
  calls::EventCreate::Results r;
  int code = Invoke<calls::EventCreate>({}, &r);
  *event = r.event.value;
  return code;
}

int RemoteSession::EventDestroy(uint64_t event) { return Invoke<calls::EventDestroy>({{event}}); }
int RemoteSession::EventRecord(uint64_t event, uint64_t stream) {
  return Invoke<calls::EventRecord>({{event}, {stream}});
}
int RemoteSession::EventQuery(uint64_t event) {
  int code = Invoke<calls::EventQuery>({{event}});
  int pending = TakeAsyncError();
  return pending ? pending : code;
}

int RemoteSession::EventElapsed(uint64_t start, uint64_t end, float* ms) {
  calls::EventElapsed::Results r;
  int code = Invoke<calls::EventElapsed>({{start}, {end}}, &r);
  *ms = r.ms;
  return code;
}

}  // namespace gpupool::internal
