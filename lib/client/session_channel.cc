#include "client/session_channel.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "core/util.h"
#include "schema/session_calls.h"
#include "schema/session_frames.h"
#include "schema/session_wire.h"
#include "session.capnp.h"

namespace gpupool::internal {
namespace {

using capnp::word;
using session::FrameHeader;

// Threads of this process reading a session's socket for a reply now (one per channel at most).
std::atomic<long> readers_now{0};

constexpr size_t kReadAheadBytes = 64u << 10;
// Posted calls queued beyond this are written by the posting thread itself: memory stays bounded when the worker
// falls behind, and the poster slows down to its pace.
constexpr size_t kQueueLimitBytes = 1u << 20;

Status Errno(const std::string& what) { return Status(StatusCode::kUnavailable, what + ": " + std::strerror(errno)); }

// A connected, blocking socket to `address`, within `timeout`.
Result<int> Connect(const std::string& address, std::chrono::milliseconds timeout) {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = AF_UNIX;
  if (address.rfind("unix:", 0) == 0) {
    std::string path = address.substr(5);
    auto* un = reinterpret_cast<sockaddr_un*>(&storage);
    if (path.size() >= sizeof(un->sun_path)) return Status(StatusCode::kInvalidArgument, "socket path too long: " + path);
    un->sun_family = AF_UNIX;
    std::memcpy(un->sun_path, path.c_str(), path.size() + 1);
    length = sizeof(sockaddr_un);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos) return Status(StatusCode::kInvalidArgument, "no port in " + address);
    std::string host = address.substr(0, colon), port = address.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    addrinfo hints{}, *found = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0 || found == nullptr) {
      return Status(StatusCode::kUnavailable, fmt::format("cannot resolve {}: {}", address, gai_strerror(rc)));
    }
    std::memcpy(&storage, found->ai_addr, found->ai_addrlen);
    length = found->ai_addrlen;
    family = found->ai_family;
    freeaddrinfo(found);
  }
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Errno("socket");
  if (connect(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) {
      Status s = Errno("cannot connect to " + address);
      close(fd);
      return s;
    }
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t error_length = sizeof(error);
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &error_length) != 0 || error != 0) {
      close(fd);
      return Status(StatusCode::kUnavailable,
                    fmt::format("cannot connect to {}: {}", address, error ? std::strerror(error) : "timed out"));
    }
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (family != AF_UNIX) {
    // Every call is a small message that someone waits for; and a peer that vanished without a word must end
    // the wait (as the agent connection's keepalive does).
    const int on = 1, idle_s = 4, interval_s = 2, probes = 3;
    const unsigned user_timeout_ms = 10000;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
  }
  return fd;
}

void SetReceiveTimeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

// GPUPOOL_SHARED_MEMORY=0: copies to a worker on this host go through the socket too (to measure, or to rule the
// shared memory out).
bool SharedMemoryWanted() {
  const char* v = std::getenv("GPUPOOL_SHARED_MEMORY");
  return v == nullptr || std::string_view(v) != "0";
}

struct SharedMemory {
  int fd = -1;
  void* base = nullptr;
  size_t bytes = 0;
};

// A memfd of `bytes`, mapped, sealed against resizing (the worker refuses memory that could shrink under a copy).
// On any failure: none (copies go through the socket).
SharedMemory CreateSharedMemory(size_t bytes) {
  SharedMemory out;
  int fd = memfd_create("gpupool-copies", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return out;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    close(fd);
    return out;
  }
  out.fd = fd;
  out.base = p;
  out.bytes = bytes;
  return out;
}

}  // namespace

namespace {

struct Knocked {
  int fd = -1;
  bool shares = false;     // The worker maps the memory that came with the knock.
  uint64_t consumed = 0;   // Call frames its session had consumed before (a restored session; 0 otherwise).
};

// Connects to a worker's door and enters with `ticket`, offering the memory `shared_fd` (of `shared_bytes`; -1:
// none) on a Unix socket.
Result<Knocked> KnockAt(const std::string& address, const std::string& ticket, std::chrono::milliseconds timeout,
                        int shared_fd, uint64_t shared_bytes) {
  if (ticket.size() != 16) return Status(StatusCode::kInvalidArgument, "a session ticket has 16 bytes");
  auto fd = Connect(address, timeout);
  if (!fd.ok()) return fd.status();
  struct {
    FrameHeader header{session::kEnterFrame, 0, 2};
    char ticket[16];
    uint64_t shared_bytes = 0;
  } knock;
  std::memcpy(knock.ticket, ticket.data(), 16);
  const bool offer = shared_fd >= 0 && address.rfind("unix:", 0) == 0;
  msghdr m{};
  iovec io{&knock, sizeof(knock)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  if (offer) {
    knock.header.words = 3;
    knock.shared_bytes = shared_bytes;
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &shared_fd, sizeof(int));
  } else {
    io.iov_len = sizeof(knock) - sizeof(knock.shared_bytes);
  }
  FrameHeader entered;
  Knocked out;
  SetReceiveTimeout(*fd, timeout);
  // The entered frame: `seq` 1 when the worker maps the memory; a restored session's worker adds one word, the call
  // frames its session had consumed.
  bool ok = sendmsg(*fd, &m, MSG_NOSIGNAL) == static_cast<ssize_t>(io.iov_len) &&
            recv(*fd, &entered, sizeof(entered), MSG_WAITALL) == sizeof(entered) &&
            entered.kind == session::kEnteredFrame && entered.words <= 1 &&
            (entered.words == 0 ||
             recv(*fd, &out.consumed, sizeof(out.consumed), MSG_WAITALL) == sizeof(out.consumed));
  SetReceiveTimeout(*fd, std::chrono::milliseconds(0));  // From now on a reply takes as long as the device.
  if (!ok) {
    close(*fd);
    return Status(StatusCode::kPermissionDenied, "the session's worker at " + address + " did not let us in");
  }
  out.fd = *fd;
  out.shares = offer && entered.seq == 1;
  return out;
}

}  // namespace

Result<std::unique_ptr<SessionChannel>> SessionChannel::Enter(const std::string& address, const std::string& ticket,
                                                              std::chrono::milliseconds timeout,
                                                              AsyncErrorSink errors) {
  // A worker on this host (a Unix socket) may share memory with us for copies: the memfd travels with the knock.
  SharedMemory shared;
  if (address.rfind("unix:", 0) == 0 && SharedMemoryWanted()) shared = CreateSharedMemory(kSharedMemoryBytes);
  auto knocked = KnockAt(address, ticket, timeout, shared.fd, shared.bytes);
  if (!knocked.ok()) {
    if (shared.fd >= 0) close(shared.fd);
    if (shared.base) munmap(shared.base, shared.bytes);
    return knocked.status();
  }
  auto channel = std::unique_ptr<SessionChannel>(new SessionChannel(knocked->fd, std::move(errors)));
  if (shared.base && knocked->shares) {
    channel->shared_ = static_cast<uint8_t*>(shared.base);
    channel->shared_bytes_ = shared.bytes;
    channel->shared_fd_ = shared.fd;  // Kept for a resumed session's worker on this host.
  } else if (shared.base) {
    close(shared.fd);
    munmap(shared.base, shared.bytes);  // The worker would not map it.
  }
  return channel;
}

Result<SessionChannel::Resumed> SessionChannel::Knock(const std::string& address, const std::string& ticket,
                                                      std::chrono::milliseconds timeout) {
  auto knocked = KnockAt(address, ticket, timeout, unshared_ ? -1 : shared_fd_, shared_bytes_);
  if (!knocked.ok()) return knocked.status();
  return Resumed{knocked->fd, knocked->consumed, knocked->shares};
}

void SessionChannel::MakeResumable(Reconnect reconnect) {
  reconnect_ = std::move(reconnect);
  resumable_ = true;
}

uint64_t SessionChannel::retained_bytes() const { return retained_bytes_.load(std::memory_order_relaxed); }

std::unique_ptr<SessionChannel> SessionChannel::Adopt(int fd, AsyncErrorSink errors) {
  return std::unique_ptr<SessionChannel>(new SessionChannel(fd, std::move(errors)));
}

SessionChannel::SessionChannel(int fd, AsyncErrorSink errors)
    : errors_(std::move(errors)), read_ahead_(kReadAheadBytes) {
  fd_ = fd;
  // The flusher takes no signal of the program's: they go to the program's own threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  flusher_ = std::thread([this] { FlushLoop(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

SessionChannel::~SessionChannel() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    closing_ = true;
  }
  queue_cv_.notify_one();
  flusher_.join();
  shutdown(fd_, SHUT_RDWR);
  close(fd_);
  if (shared_) munmap(shared_, shared_bytes_);
  if (shared_fd_ >= 0) close(shared_fd_);
}

std::string SessionChannel::lost() const {
  std::lock_guard<std::mutex> lock(recv_mu_);
  return lost_;
}

void SessionChannel::Lose(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (lost_.empty()) lost_ = why;
  }
  broken_ = true;
  recv_cv_.notify_all();
  shutdown(fd_, SHUT_RDWR);  // Wakes a reader blocked in recv.
}

void SessionChannel::Break(const std::string& why) {
  if (!resumable_) return Lose(why);
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (broken_.exchange(true)) return;
    broke_ = why;
  }
  recv_cv_.notify_all();
  shutdown(fd_, SHUT_RDWR);
}

void SessionChannel::Retain(uint64_t first, uint64_t count, const std::vector<kj::ArrayPtr<const kj::byte>>& pieces,
                            bool held) {
  if (count == 0) return;
  const size_t copied = held ? pieces.size() - 1 : pieces.size();
  size_t bytes = 0;
  for (size_t i = 0; i < copied; ++i) bytes += pieces[i].size();
  std::lock_guard<std::mutex> lock(retain_mu_);
  // A buffer that held frames acknowledged already, when one is large enough: a fresh one of megabytes would cost
  // its page faults on every copy.
  std::vector<uint8_t> run;
  for (auto it = spare_runs_.begin(); it != spare_runs_.end(); ++it) {
    if (it->capacity() >= bytes) {
      spare_bytes_ -= it->capacity();
      run = std::move(*it);
      spare_runs_.erase(it);
      break;
    }
  }
  run.resize(bytes);
  size_t at = 0;
  for (size_t i = 0; i < copied; ++i) {
    std::memcpy(run.data() + at, pieces[i].begin(), pieces[i].size());
    at += pieces[i].size();
  }
  retained_bytes_ += bytes;
  retained_ever_ += bytes;
  retained_.push_back({first, count, std::move(run), held ? pieces.back() : kj::ArrayPtr<const kj::byte>()});
}

void SessionChannel::Acknowledge(uint64_t through) {
  std::lock_guard<std::mutex> lock(retain_mu_);
  acknowledged_ = std::max(acknowledged_, through);
  while (!retained_.empty() && retained_.front().first + retained_.front().count - 1 <= acknowledged_) {
    retained_bytes_ -= retained_.front().bytes.size();
    const size_t capacity = retained_.front().bytes.capacity();
    if (capacity >= kSpareRunMin && spare_bytes_ + capacity <= kSpareBytes) {
      spare_bytes_ += capacity;
      spare_runs_.push_back(std::move(retained_.front().bytes));
    }
    retained_.pop_front();
  }
}

// A poster that sent much without waiting for anything asks the worker how far it got: a call answered at once
// (properties), whose reply acknowledges every frame before it. One such question is in flight at a time, and the
// poster waits for the answer to the one before (half the limit ago) rather than its own: the worker, reading on,
// has mostly answered it already, so the stream does not stall; the poster waits only when the worker falls that
// far behind, as a GPU's driver blocks a thread whose queue is full.
void SessionChannel::AwaitAcknowledgement() {
  std::lock_guard<std::mutex> lock(ack_mu_);
  // Asked already, and not half the limit sent since: the answer is on its way.
  const uint64_t retained_ever = retained_ever_.load(std::memory_order_relaxed);
  if (retained_bytes() <= kRetainLimitBytes || retained_ever - asked_at_ < kRetainLimitBytes / 2) return;
  asked_at_ = retained_ever;
  if (ack_seq_ != 0) {
    Reply reply;
    Wait(std::exchange(ack_seq_, 0), &reply);
  }
  ack_seq_ = AskHowFar();
}

uint32_t SessionChannel::AskHowFar() {
  capnp::MallocMessageBuilder params;
  params.initRoot<wire::Session::PropertiesParams>();
  return Send(session::calls::Properties::kOrdinal, params);
}

bool SessionChannel::Resume() {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    why = broke_;
  }
  auto resumed = reconnect_(why);
  if (!resumed.ok()) {
    Lose(why + "; " + resumed.status().message());
    return false;
  }
  // A worker on another host cannot see the memory this process shared with the last (Unshared).
  if (shared_ != nullptr && !resumed->shares) unshared_ = true;
  std::lock_guard<std::mutex> write_lock(write_mu_);
  std::vector<iovec> replay;
  std::vector<std::vector<uint8_t>> rewritten;  // Frames rewritten for such a worker, until they are written.
  uint64_t sent = 0, acknowledged = 0;
  bool fits = false;
  {
    std::lock_guard<std::mutex> lock(retain_mu_);
    sent = sent_.load();
    acknowledged = acknowledged_;
    fits = resumed->consumed >= acknowledged_ && resumed->consumed <= sent;
    if (fits) acknowledged_ = resumed->consumed;
    // The frames after `consumed`, in order: whole runs, and the tail of the run it falls in.
    for (auto& run : retained_) {
      if (!fits || run.first + run.count - 1 <= resumed->consumed) continue;
      size_t offset = 0;
      for (uint64_t frame = run.first; frame <= resumed->consumed; ++frame) {
        FrameHeader h;
        std::memcpy(&h, run.bytes.data() + offset, sizeof(h));
        offset += sizeof(h) + h.words * sizeof(word);
      }
      if (!unshared_) {
        replay.push_back({run.bytes.data() + offset, run.bytes.size() - offset});
      } else {
        // Frame by frame: those naming the shared memory are sent with their bytes instead (the run's frames are
        // whole in `bytes`, but for a held last frame, a copy to the device that names no shared memory).
        while (offset < run.bytes.size()) {
          FrameHeader h;
          std::memcpy(&h, run.bytes.data() + offset, sizeof(h));
          const size_t length = sizeof(h) + h.words * sizeof(word);
          std::optional<std::vector<uint8_t>> instead;
          if (offset + length <= run.bytes.size() && h.words > 0) {
            KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
              capnp::FlatArrayMessageReader params(
                  kj::arrayPtr(reinterpret_cast<const word*>(run.bytes.data() + offset + sizeof(h)), h.words),
                  session::FrameReaderOptions());
              instead = Unshared(h.kind, h.seq, params);
            })) {
              (void)e;  // A frame this channel wrote itself: not one it cannot read. Sent as it is.
            }
          }
          if (instead) {
            rewritten.push_back(std::move(*instead));
            replay.push_back({rewritten.back().data(), rewritten.back().size()});
          } else {
            replay.push_back({run.bytes.data() + offset, std::min(length, run.bytes.size() - offset)});
          }
          offset += length;
        }
      }
      if (run.held.size() > 0) replay.push_back({const_cast<kj::byte*>(run.held.begin()), run.held.size()});
    }
  }
  if (!rewritten.empty()) {
    GP_DEBUG("session", "{} call(s) that named the memory shared with the last worker go to the new one with their "
             "bytes", rewritten.size());
  }
  if (!fits) {
    close(resumed->fd);
    Lose(fmt::format("{}; the session's new worker took over after call frame {}, but this channel sent {} and "
                     "knows {} consumed", why, resumed->consumed, sent, acknowledged));
    return false;
  }
  const int old = fd_.exchange(resumed->fd);
  close(old);
  read_begin_ = read_end_ = 0;
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    broke_.clear();
    quiet_mark_ = 0;  // The new worker says afresh when the session is quiet.
    broken_ = false;
  }
  ++resumptions_;
  // The retained runs stay retained (and unchanged) until acknowledged: the replay may itself be cut short.
  return replay.empty() || WriteAll(std::move(replay));
}

void SessionChannel::FlushLoop() {
  std::unique_lock<std::mutex> lock(queue_mu_);
  while (true) {
    queue_cv_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    if (closing_) return;
    lock.unlock();
    WriteQueuedAnd({});
    lock.lock();
  }
}

void SessionChannel::Post(uint32_t ordinal, capnp::MessageBuilder& params) {
  session::OutgoingFrame frame(ordinal, 0, params);
  // The first call posted after a wait leaves at once (the device may be idle, waiting for it); the calls behind it
  // queue for one write. A large one leaves at once too.
  if (frame.bytes() > session::kSmallFrameBytes || post_directly_.exchange(false, std::memory_order_relaxed)) {
    WriteQueuedAnd(frame.pieces());
  } else {
    bool was_empty = false, over_limit = false;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      was_empty = queue_.empty();
      ++sent_;  // With the append, so that the count follows the order on the wire.
      ++queue_frames_;
      frame.AppendTo(&queue_);
      over_limit = queue_.size() > kQueueLimitBytes;
    }
    if (over_limit) {
      WriteQueuedAnd({});
    } else if (was_empty) {
      queue_cv_.notify_one();
    }
  }
  if (resumable_ && retained_bytes() > kRetainLimitBytes) AwaitAcknowledgement();
}

void SessionChannel::PostHeld(uint32_t ordinal, capnp::MessageBuilder& params, const uint8_t* held) {
  session::OutgoingFrame frame(ordinal, 0, params);
  if (!resumable_ || frame.bytes() <= session::kSmallFrameBytes || frame.pieces().size() < 3 ||
      frame.pieces().back().begin() != held) {
    return Post(ordinal, params);  // Nothing worth referring to: kept as any other.
  }
  post_directly_.store(false, std::memory_order_relaxed);
  WriteQueuedAnd(frame.pieces(), 0, /*held=*/true);
}

void SessionChannel::AwaitConsumed() {
  uint32_t seq = AskHowFar();
  Reply reply;
  if (seq != 0) Wait(seq, &reply);
}

std::optional<std::vector<uint8_t>> SessionChannel::Unshared(uint32_t kind, uint32_t seq,
                                                             capnp::MessageReader& params) {
  using ToShared = session::Wire<session::calls::CopyToDeviceShared>;
  using FromShared = session::Wire<session::calls::CopyFromDeviceShared>;
  if (kind != session::calls::CopyToDeviceShared::kOrdinal && kind != session::calls::CopyFromDeviceShared::kOrdinal) return std::nullopt;
  capnp::MallocMessageBuilder message;
  uint32_t ordinal = 0;
  if (kind == session::calls::CopyToDeviceShared::kOrdinal) {
    auto in = params.getRoot<ToShared::Params>();
    if (in.getOffset() > shared_bytes_ || in.getBytes() > shared_bytes_ - in.getOffset()) return std::nullopt;
    auto out = message.initRoot<session::Wire<session::calls::CopyToDevice>::Params>();
    out.setDst(in.getDst());
    out.setData(kj::arrayPtr(shared_ + in.getOffset(), in.getBytes()));
    out.setStream(in.getStream());
    ordinal = session::calls::CopyToDevice::kOrdinal;  // A posted call; its number asks the worker to answer it all the same.
  } else {
    auto in = params.getRoot<FromShared::Params>();
    if (in.getOffset() > shared_bytes_ || in.getBytes() > shared_bytes_ - in.getOffset()) return std::nullopt;
    auto out = message.initRoot<session::Wire<session::calls::CopyFromDevice>::Params>();
    out.setSrc(in.getSrc());
    out.setBytes(in.getBytes());
    out.setStream(in.getStream());
    ordinal = session::calls::CopyFromDevice::kOrdinal;
    std::lock_guard<std::mutex> lock(recv_mu_);
    landings_[seq] = {shared_ + in.getOffset(), static_cast<size_t>(in.getBytes())};
    unshared_landings_.insert(seq);
  }
  std::vector<uint8_t> framed;
  session::OutgoingFrame(ordinal, seq, message).AppendTo(&framed);
  return framed;
}

uint32_t SessionChannel::Send(uint32_t ordinal, capnp::MessageBuilder& params, Landing landing) {
  uint32_t seq = next_seq_.fetch_add(1);
  if (seq == 0) seq = next_seq_.fetch_add(1);  // 0 marks posted calls.
  if (unshared_) {
    // A copy already using the shared memory when the session moved to a worker that does not map it.
    capnp::SegmentArrayMessageReader reader(params.getSegmentsForOutput());
    if (auto instead = Unshared(ordinal, seq, reader)) {
      post_directly_.store(true, std::memory_order_relaxed);
      return WriteQueuedAnd({kj::arrayPtr(instead->data(), instead->size())}, seq) ? seq : 0;
    }
  }
  if (landing.dst != nullptr && landing.bytes > 0) {
    std::lock_guard<std::mutex> lock(recv_mu_);
    landings_[seq] = landing;
  }
  session::OutgoingFrame frame(ordinal, seq, params);
  post_directly_.store(true, std::memory_order_relaxed);
  return WriteQueuedAnd(frame.pieces(), seq) ? seq : 0;
}

bool SessionChannel::WriteQueuedAnd(const std::vector<kj::ArrayPtr<const kj::byte>>& more, uint32_t seq,
                                    bool held) {
  std::lock_guard<std::mutex> write_lock(write_mu_);
  uint64_t mark = 0, queued = 0, last_queued = 0;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    writing_.swap(queue_);  // queue_ takes the old buffer, empty, and keeps its capacity.
    queued = std::exchange(queue_frames_, 0);
    last_queued = sent_.load();
    if (!more.empty()) mark = ++sent_;
  }
  if (seq != 0) {
    std::lock_guard<std::mutex> lock(recv_mu_);  // Before the frame leaves: its reply may come at once.
    marks_[seq] = mark;
  }
  if (resumable_) {
    // Kept before they leave: a connection that breaks under the write loses nothing.
    if (queued > 0) Retain(last_queued - queued + 1, queued, {kj::arrayPtr(writing_.data(), writing_.size())});
    if (!more.empty()) Retain(mark, 1, more, held);
    if (broken_) {
      // Sent when the channel resumes, with the rest it retained.
      writing_.clear();
      std::lock_guard<std::mutex> lock(recv_mu_);
      return lost_.empty();
    }
  }
  std::vector<iovec> pieces;
  if (!writing_.empty()) pieces.push_back({writing_.data(), writing_.size()});
  for (auto p : more) pieces.push_back({const_cast<kj::byte*>(p.begin()), p.size()});
  bool ok = pieces.empty() || WriteAll(std::move(pieces));
  writing_.clear();
  return ok;
}

bool SessionChannel::WriteAll(std::vector<iovec> pieces) {
  if (broken_) return resumable_ && lost().empty();
  size_t first = 0;
  while (first < pieces.size()) {
    msghdr m{};
    m.msg_iov = pieces.data() + first;
    m.msg_iovlen = std::min<size_t>(pieces.size() - first, IOV_MAX);
    ssize_t n = sendmsg(fd_, &m, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      Break(fmt::format("the connection to the session's worker broke: {}", std::strerror(errno)));
      return resumable_;  // What it did not take is retained, for the session wherever it went.
    }
    SkipWritten(pieces, &first, static_cast<size_t>(n));
  }
  return true;
}

bool SessionChannel::ReadExact(void* dst, size_t bytes) {
  auto* out = static_cast<uint8_t*>(dst);
  while (bytes > 0) {
    if (read_begin_ < read_end_) {
      size_t n = std::min(bytes, read_end_ - read_begin_);
      std::memcpy(out, read_ahead_.data() + read_begin_, n);
      read_begin_ += n;
      out += n;
      bytes -= n;
      continue;
    }
    // Large reads go straight to their destination; small ones read ahead what has already arrived.
    bool direct = bytes >= read_ahead_.size();
    if (!direct) AwaitReadable();
    ssize_t n = direct ? recv(fd_, out, bytes, 0) : recv(fd_, read_ahead_.data(), read_ahead_.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Break(n == 0 ? "the session's worker closed the connection (it ended, or its lease did)"
                   : fmt::format("the connection to the session's worker broke: {}", std::strerror(errno)));
      return false;
    }
    if (direct) {
      out += n;
      bytes -= static_cast<size_t>(n);
    } else {
      read_begin_ = 0;
      read_end_ = static_cast<size_t>(n);
    }
  }
  return true;
}

// A reply to a call that the worker answers at once arrives within microseconds: polling for it that long keeps
// this core from going idle, whose wakeup (an interrupt, on a virtual machine an exit to the hypervisor) costs more
// than the round trip itself. Only while the host has a CPU to spare: with more threads running than CPUs, a poll
// takes the CPU that the worker (or another client) needs, and waiting in the kernel is faster for everyone. Two
// signs of that: the host's running threads (HostHasSpareCpu, sampled), and, seen at once, this process's threads
// reading replies now, each with a worker to run (a poller and its worker take two CPUs). gp-bench load (8 client
// threads, 2 cores), p99/p50 over 8 runs: median 0.28 with the first sign alone, 0.36 with both.
void SessionChannel::AwaitReadable() {
  if (2 * readers_now.load(std::memory_order_relaxed) > std::max(2L, OnlineCpus())) return;
  if (HostHasSpareCpu()) PollReadable(fd_, kReplyPoll);
}

bool SessionChannel::ReadFrame(uint32_t* kind, uint32_t* seq, Reply* reply) {
  FrameHeader h;
  if (!ReadExact(&h, sizeof(h))) return false;
  if (h.words > session::kMaxFrameWords) {
    Lose(fmt::format("corrupt frame from the session's worker ({} words)", h.words));
    return false;
  }
  *kind = h.kind;
  *seq = h.seq;
  Landing landing{nullptr, 0};
  if (h.kind == session::kReplyFrame || h.kind == session::kQuietReplyFrame) {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (auto it = landings_.find(h.seq); it != landings_.end()) landing = it->second;
  }
  if (landing.dst != nullptr) return ReadLandingReply(h.words, landing, reply);
  reply->words = kj::heapArray<word>(h.words);
  return ReadExact(reply->words.begin(), h.words * sizeof(word));
}

bool SessionChannel::ReadLandingReply(uint64_t words, const Landing& landing, Reply* reply) {
  // A two-segment message's table is one word of (count - 1, size 0) and one of (size 1, padding).
  uint32_t table[4] = {};
  const size_t table_words = sizeof(table) / (sizeof(word));  // Bytes to words: 16 bytes are two words.
  if (words < table_words) {
    reply->words = kj::heapArray<word>(words);
    return ReadExact(reply->words.begin(), words * sizeof(word));
  }
  if (!ReadExact(table, sizeof(table))) return false;
  const uint64_t data_words = (landing.bytes + sizeof(word) - 1) / sizeof(word);
  const bool fits = table[0] == 1 && table[2] == data_words && table_words + table[1] + data_words == words &&
                    reinterpret_cast<uintptr_t>(landing.dst) % alignof(word) == 0;
  if (!fits) {
    reply->words = kj::heapArray<word>(words);
    std::memcpy(reply->words.begin(), table, sizeof(table));
    return ReadExact(reply->words.begin() + table_words, (words - table_words) * sizeof(word));
  }
  reply->words = kj::heapArray<word>(table_words + table[1]);
  std::memcpy(reply->words.begin(), table, sizeof(table));
  word padding;
  if (!ReadExact(reply->words.begin() + table_words, table[1] * sizeof(word)) ||
      !ReadExact(landing.dst, landing.bytes) ||
      !ReadExact(&padding, data_words * sizeof(word) - landing.bytes)) {
    return false;
  }
  reply->segments = kj::heapArray<kj::ArrayPtr<const word>>(
      {kj::arrayPtr<const word>(reply->words.begin() + table_words, table[1]),
       kj::arrayPtr(reinterpret_cast<const word*>(landing.dst), data_words)});
  return true;
}

bool SessionChannel::Quiet() const {
  std::lock_guard<std::mutex> lock(recv_mu_);
  return quiet_mark_ != 0 && quiet_mark_ == sent_.load() && !broken_;
}

bool SessionChannel::Wait(uint32_t seq, Reply* reply) {
  std::unique_lock<std::mutex> lock(recv_mu_);
  while (true) {
    if (auto it = replies_.find(seq); it != replies_.end()) {
      *reply = std::move(it->second);
      replies_.erase(it);
      landings_.erase(seq);
      marks_.erase(seq);
      return true;
    }
    if (reading_) {
      recv_cv_.wait(lock);
      continue;
    }
    if (broken_ && resumable_ && lost_.empty() && seq != 0) {
      // The session may have moved: this thread finds where, and the calls it had not consumed go there.
      reading_ = true;
      lock.unlock();
      bool resumed = Resume();
      lock.lock();
      reading_ = false;
      recv_cv_.notify_all();
      if (resumed) continue;
    }
    if (broken_ || seq == 0) {
      landings_.erase(seq);
      marks_.erase(seq);
      return false;
    }
    // This thread reads for everyone until its own reply arrives.
    reading_ = true;
    lock.unlock();
    uint32_t kind = 0, got = 0;
    Reply r;
    readers_now.fetch_add(1, std::memory_order_relaxed);
    bool ok = ReadFrame(&kind, &got, &r);
    readers_now.fetch_sub(1, std::memory_order_relaxed);
    std::string error_message;
    int error_code = 0;
    if (ok) {
      try {
        if (r.segments.size() > 0) {
          r.message = kj::heap<capnp::SegmentArrayMessageReader>(r.segments, session::FrameReaderOptions());
        } else {
          r.message = kj::heap<capnp::FlatArrayMessageReader>(r.words, session::FrameReaderOptions());
        }
        if (kind == session::kAsyncErrorFrame) {
          CallStatus status = session::ReadStatus(r.message->getRoot<wire::CallStatus>());
          error_code = status.code();
          error_message = status.message();
        } else if (kind != session::kReplyFrame && kind != session::kQuietReplyFrame) {
          Lose(fmt::format("unexpected frame 0x{:x} from the session's worker", kind));
        }
      } catch (const kj::Exception& e) {
        Lose(fmt::format("corrupt message from the session's worker: {}", e.getDescription().cStr()));
      }
    }
    if (error_code != 0 && errors_) errors_(error_code, error_message);
    lock.lock();
    reading_ = false;
    const bool reply = kind == session::kReplyFrame || kind == session::kQuietReplyFrame;
    if (ok && reply && r.message && unshared_landings_.count(got)) {
      // A copy from the device rewritten for a worker that does not map the shared memory: its bytes go to the
      // slot its caller reads, if they did not land there directly.
      unshared_landings_.erase(got);
      auto landing = landings_.find(got);
      if (r.segments.size() == 0 && landing != landings_.end()) {
        KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
          auto data = r.message->getRoot<session::Wire<session::calls::CopyFromDevice>::ResultsStruct>().getData();
          std::memcpy(landing->second.dst, data.begin(), std::min(data.size(), landing->second.bytes));
        })) {
          (void)e;  // Its status says what went wrong.
        }
      }
    }
    if (ok && reply && r.message) {
      replies_[got] = std::move(r);
      if (auto mark = marks_.find(got); mark != marks_.end()) {
        if (kind == session::kQuietReplyFrame) quiet_mark_ = std::max(quiet_mark_, mark->second);
        // The worker read this call, so every frame before it too.
        if (resumable_) Acknowledge(mark->second);
      }
    }
    recv_cv_.notify_all();  // Someone else's reply, or the reader's role, is free.
  }
}

}  // namespace gpupool::internal
