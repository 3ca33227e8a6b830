#include "backend/frame_connection.h"

#include <cuda.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <optional>
#include <vector>

#include <capnp/serialize.h>
#include <fmt/format.h>

#include "core/log.h"
#include "core/util.h"
#include "schema/session_frames.h"
#include "schema/session_wire.h"
#include "session.capnp.h"

namespace gpupool::backend {
namespace {

using capnp::word;
using session::FrameHeader;
using Clock = std::chrono::steady_clock;

// How long a copy's bytes may take to come from the socket, or to go into it, straight from or to device memory;
// what is left after that goes through a buffer. The event loop waits meanwhile: device memory is only ever touched
// on its thread and before it serves anything else, so that no later call (a free, the lease's end) can come between.
constexpr auto kBulkWait = std::chrono::milliseconds(20);

// Small frames arrive many to a read (a run of posted launches is one write): read in pieces this large.
constexpr size_t kReadBufferWords = (256u << 10) / sizeof(word);

// What a call in flight costs besides its message, counted against the bytes in flight: its promise chain, its
// reply's builder, the device queue's entry. So that a flood of small posted calls (launches) is bounded too.
constexpr uint64_t kCallOverheadBytes = 1024;

// Spare arrays for large frames are kept only up to this size: a client's copies travel in 4 MiB chunks, and a
// hostile client's 512 MiB frames must not stay behind in the spares once served.
constexpr size_t kMaxSpareBytes = 8u << 20;

class FrameConnection final : public kj::TaskSet::ErrorHandler {
 public:
  FrameConnection(kj::Own<kj::AsyncIoStream> stream, FramedSession& session, uint64_t max_held_bytes,
                  FrameControl* control, uint64_t consumed_before)
      : stream_(kj::mv(stream)),
        session_(session),
        max_held_bytes_(max_held_bytes),
        control_(control != nullptr ? control : &own_control_),
        buffer_(kj::heapArray<word>(kReadBufferWords)),
        tasks_(*this) {
    control_->consumed = consumed_before;
    control_->stop = [this] { return Stop(); };
    control_->resume = [this] {
      if (resume_) resume_->fulfill();
      resume_ = nullptr;
    };
    const int one = 1;
    try {
      stream_->setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // Replies leave at once.
    } catch (const kj::Exception&) {
      // A Unix socket.
    }
  }

  ~FrameConnection() {
    control_->stop = nullptr;
    control_->resume = nullptr;
  }

  kj::Promise<void> Run() { return ReadLoop(); }

  kj::Promise<uint64_t> Stop() {
    if (stopping_) return KJ_EXCEPTION(FAILED, "the connection is already stopped");
    stopping_ = true;
    auto stopped = kj::newPromiseAndFulfiller<uint64_t>();
    stopped_ = kj::mv(stopped.fulfiller);
    if (stop_wake_) stop_wake_->fulfill(size_t{kStopWake});
    stop_wake_ = nullptr;
    return kj::mv(stopped.promise);
  }

  // Reading has stopped at a frame boundary (FrameControl::stop): waits for every call read to be done and its reply
  // written, answers the stop, and reads on once resumed. What the buffer holds beyond the boundary stays there.
  kj::Promise<void> Stopped() {
    return tasks_.onEmpty()
        .then([this] {
          auto written = kj::mv(writing_);
          writing_ = kj::READY_NOW;
          return written;
        })
        .then([this] {
          auto resume = kj::newPromiseAndFulfiller<void>();
          resume_ = kj::mv(resume.fulfiller);
          if (stopped_) stopped_->fulfill(kj::cp(control_->consumed));
          stopped_ = nullptr;
          return kj::mv(resume.promise);
        })
        .then([this] {
          stopping_ = false;
          return ReadLoop();
        });
  }

  void taskFailed(kj::Exception&& e) override {
    GP_WARN("session", "a call on the direct connection failed: {}", e.getDescription().cStr());
  }

 private:
  kj::byte* bytes() { return buffer_.asBytes().begin(); }
  // The connection's socket, or -1 where the stream has none (TLS).
  int SocketFd() {
    KJ_IF_MAYBE(fd, stream_->getFd()) return *fd;
    return -1;
  }

  // Dispatches every whole frame in the buffer, then reads more; a frame longer than the buffer is read into its
  // own array, or its bulk straight to the device. Resolves when the client hangs up.
  kj::Promise<void> ReadLoop() {
    if (stopping_) return Stopped();
    while (end_ - begin_ >= sizeof(FrameHeader)) {
      KJ_IF_MAYBE(held, Held()) return kj::mv(*held);
      if (stopping_) return Stopped();
      if (held_bytes_ >= max_held_bytes_) return WaitForRoom();
      FrameHeader h;
      std::memcpy(&h, bytes() + begin_, sizeof(h));
      if (h.words > session::kMaxFrameWords) {
        // The one refusal on the session paths that stays an exception: a header this long leaves no frame to
        // answer (the stream's framing is lost, so no reply or async-error frame can follow it), and ending the
        // connection is the only answer. A corrupt message inside sound framing is answered with a CallStatus.
        return KJ_EXCEPTION(FAILED, "corrupt frame: a message of this many words", h.words);
      }
      size_t length = sizeof(h) + h.words * sizeof(word);
      if (length > buffer_.asBytes().size()) {
        KJ_IF_MAYBE(landed, ReadLanded(h)) return kj::mv(*landed);
        return ReadLarge(h);
      }
      if (end_ - begin_ < length) break;
      auto body = kj::heapArray<word>(h.words);
      std::memcpy(body.begin(), bytes() + begin_ + sizeof(h), h.words * sizeof(word));
      begin_ += length;
      Dispatch(h, kj::mv(body));
    }
    KJ_IF_MAYBE(held, Held()) return kj::mv(*held);
    if (held_bytes_ >= max_held_bytes_) return WaitForRoom();
    if (begin_ > 0) {
      std::memmove(bytes(), bytes() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    // A stop ends the wait for the client's next bytes (none are taken from the socket then: they stay for whoever
    // serves the session next).
    auto wake = kj::newPromiseAndFulfiller<size_t>();
    stop_wake_ = kj::mv(wake.fulfiller);
    auto read = stream_->tryRead(bytes() + end_, 1, buffer_.asBytes().size() - end_);
    return read.exclusiveJoin(kj::mv(wake.promise)).then([this](size_t n) -> kj::Promise<void> {
      stop_wake_ = nullptr;
      if (n == kStopWake) return Stopped();
      if (replied_at_) {
        call_gaps_[next_gap_++ % call_gaps_.size()] = Clock::now() - *replied_at_;
        replied_at_.reset();
      }
      if (n == 0) {
        if (end_ > 0) GP_DEBUG("session", "direct connection closed inside a frame");
        return kj::Promise<void>(kj::READY_NOW);
      }
      end_ += n;
      return ReadLoop();
    });
  }

  // While a reply that refers to device memory waits to be written, nothing more is served: what it carries must be
  // the bytes as they were when its call was served.
  kj::Maybe<kj::Promise<void>> Held() {
    KJ_IF_MAYBE(hold, hold_) {
      auto wait = kj::mv(*hold);
      hold_ = nullptr;
      return wait.then([this] { return ReadLoop(); });
    }
    return nullptr;
  }

  // Back-pressure: the calls read and not yet done (their messages, and their replies until written) hold
  // max_held_bytes_ or more, so nothing more is read until some are done. The client's writes then block in its
  // socket, as a GPU's driver blocks a submitting thread whose queue is full, instead of this process buffering
  // whatever the client sends ahead of the device.
  kj::Promise<void> WaitForRoom() {
    auto paf = kj::newPromiseAndFulfiller<void>();
    room_ = kj::mv(paf.fulfiller);
    return paf.promise.then([this] { return ReadLoop(); });
  }
  void Hold(uint64_t bytes) { held_bytes_ += bytes; }
  void Release(uint64_t bytes) {
    held_bytes_ -= std::min(held_bytes_, bytes);
    if (room_ && held_bytes_ < max_held_bytes_) {
      room_->fulfill();
      room_ = nullptr;
    }
  }

  kj::Promise<void> ReadLarge(FrameHeader h) {
    kj::Array<word> body = SpareArray(h.words);
    size_t have = end_ - begin_ - sizeof(h);
    std::memcpy(body.begin(), bytes() + begin_ + sizeof(h), have);
    begin_ = end_ = 0;
    return ReadRest(h, kj::mv(body), have);
  }

  // Reads the rest of frame `h` into `body`, whose first `have` bytes are in, then serves it.
  kj::Promise<void> ReadRest(FrameHeader h, kj::Array<word> body, size_t have) {
    kj::byte* rest = body.asBytes().begin() + have;
    return stream_->read(rest, h.words * sizeof(word) - have).then([this, h, body = kj::mv(body)]() mutable {
      Dispatch(h, kj::mv(body));
      return ReadLoop();
    });
  }

  // A large frame whose bulk (its message's second and last segment) the session takes where it goes
  // (FramedSession::BulkLanding): the first segment is kept here, and the bulk read straight to the device memory it
  // is for, with no buffer and no second copy. The bulk is read now, on this thread, waiting up to kBulkWait for its
  // bytes (the session must not free the memory under a read still under way); a bulk slower than that is read on
  // into a buffer, with what landed, and the call served as any other. Null: the frame is not one of those.
  kj::Maybe<kj::Promise<void>> ReadLanded(FrameHeader h) {
    const int fd = SocketFd();  // A TLS stream has none: its bytes cannot be read straight.
    const kj::byte* start = bytes() + begin_ + sizeof(h);
    const size_t have = end_ - begin_ - sizeof(h);  // Less than the frame: it does not fit in the buffer.
    uint32_t table[4];  // A two-segment message's table: count - 1, the two sizes, padding.
    if (fd < 0 || have < sizeof(table)) return nullptr;
    std::memcpy(table, start, sizeof(table));
    const size_t head_bytes = sizeof(table) + size_t{table[1]} * sizeof(word);
    const uint64_t bulk = uint64_t{table[2]} * sizeof(word);
    if (table[0] != 1 || head_bytes > have || head_bytes + bulk != h.words * sizeof(word)) return nullptr;
    auto head = kj::heapArray<word>(table[1]);
    std::memcpy(head.begin(), start + sizeof(table), head.asBytes().size());
    uint8_t* at = session_.BulkLanding(h.kind, head, bulk);
    if (at == nullptr) return nullptr;
    size_t landed = have - head_bytes;
    std::memcpy(at, start + head_bytes, landed);
    begin_ = end_ = 0;
    landed += ReadNow(fd, at + landed, bulk - landed);
    if (landed == bulk) {
      ++control_->consumed;
      auto call = kj::heap<Call>(this, kj::mv(head));
      call->segments = kj::heapArray<kj::ArrayPtr<const word>>(
          {call->body.asPtr(), kj::arrayPtr(reinterpret_cast<const word*>(at), bulk / sizeof(word))});
      call->params = kj::heap<capnp::SegmentArrayMessageReader>(call->segments, session::FrameReaderOptions());
      Serve(h, kj::mv(call));
      return ReadLoop();
    }
    kj::Array<word> body = SpareArray(h.words);
    kj::byte* out = body.asBytes().begin();
    std::memcpy(out, table, sizeof(table));
    std::memcpy(out + sizeof(table), head.begin(), head.asBytes().size());
    std::memcpy(out + head_bytes, at, landed);
    return ReadRest(h, kj::mv(body), head_bytes + landed);
  }

  // Reads up to `bytes` into `dst` now, waiting for them up to kBulkWait; answers how many came. A failure is left
  // for the next asynchronous read to report.
  size_t ReadNow(int fd, uint8_t* dst, size_t bytes) {
    const auto until = std::chrono::steady_clock::now() + kBulkWait;
    size_t got = 0;
    while (got < bytes) {
      ssize_t n = recv(fd, dst + got, bytes - got, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && WaitFor(fd, POLLIN, until)) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    return got;
  }

  // Whether `fd` became ready for `events` before `until`.
  static bool WaitFor(int fd, short events, std::chrono::steady_clock::time_point until) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{fd, events, 0};
    return left.count() > 0 && poll(&p, 1, static_cast<int>(left.count())) > 0;
  }

  // Large arrays are reused: allocating (and faulting in) 4 MiB per copy chunk costs more than the copy.
  kj::Array<word> SpareArray(size_t words) {
    for (auto it = spares_.begin(); it != spares_.end(); ++it) {
      if (it->size() >= words) {
        kj::Array<word> a = kj::mv(*it);
        spares_.erase(it);
        return a;
      }
    }
    return kj::heapArray<word>(words);
  }
  void Recycle(kj::Array<word> a) {
    const size_t bytes = a.size() * sizeof(word);
    if (bytes > buffer_.asBytes().size() && bytes <= kMaxSpareBytes && spares_.size() < 4) {
      spares_.push_back(kj::mv(a));
    }
  }

  struct Call {
    // Counts its message's bytes as held (back-pressure) from now until it is gone: done, and its reply written.
    Call(FrameConnection* connection, kj::Array<word> words)
        : owner(connection), body(kj::mv(words)), held(body.asBytes().size() + kCallOverheadBytes) {
      owner->Hold(held);
    }
    ~Call() {
      if (release_hold) release_hold->fulfill();
      owner->Release(held);
    }
    // Counts `bytes` more as held (the reply's bulk) until the call is gone.
    void HoldMore(uint64_t bytes) {
      held += bytes;
      owner->Hold(bytes);
    }
    FrameConnection* owner;
    kj::Array<word> body;
    uint64_t held;
    kj::Array<kj::ArrayPtr<const word>> segments;  // A landed call's: its first segment (body) and its bulk.
    kj::Own<capnp::MessageReader> params;
    capnp::MallocMessageBuilder reply;
    kj::Array<word> reply_data;  // The reply's bulk bytes (FramedSession::ReplyData::buffer), if any.
    // The reply refers to device memory (FramedSession::ReplyData::in_place): the connection serves nothing more
    // until this call is gone.
    kj::Own<kj::PromiseFulfiller<void>> release_hold;
  };

  void Dispatch(const FrameHeader& h, kj::Array<word> body) {
    ++control_->consumed;
    auto call = kj::heap<Call>(this, kj::mv(body));
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
      call->params = kj::heap<capnp::FlatArrayMessageReader>(call->body, session::FrameReaderOptions());
    })) {
      (void)e;
    }
    Serve(h, kj::mv(call));
  }

  void Serve(const FrameHeader& h, kj::Own<Call> call) {
    const bool known = FramedSession::IsCall(h.kind), posted = FramedSession::IsPosted(h.kind);
    if (!known || !call->params) {
      // What the client did not expect a reply to: reported as a failed posted call.
      SendAsyncError({CUDA_ERROR_INVALID_VALUE, known ? "corrupt message framing" : fmt::format("unknown call {}", h.kind)});
      return;
    }
    Call* raw = call.get();
    FramedSession::ReplyData reply_data;
    reply_data.buffer = [this, raw](size_t bytes) {
      const size_t words = (bytes + sizeof(word) - 1) / sizeof(word);
      raw->reply_data = SpareArray(words);
      raw->HoldMore(raw->reply_data.asBytes().size());
      uint8_t* out = raw->reply_data.asBytes().begin();
      std::memset(out + bytes, 0, words * sizeof(word) - bytes);  // The last word's padding goes out too.
      return out;
    };
    if (!posted) {
      reply_data.in_place = [this, raw] {
        auto paf = kj::newPromiseAndFulfiller<void>();
        hold_ = kj::mv(paf.promise);
        raw->release_hold = kj::mv(paf.fulfiller);
      };
    }
    kj::Promise<CallStatus> served = session_.ServeFramed(h.kind, *call->params, call->reply, reply_data);
    tasks_.add(served.then([this, seq = h.seq, posted, call = kj::mv(call)](CallStatus status) mutable {
      // A posted call is answered only when its frame carries a number: a client whose session moved to a worker
      // that does not map its shared memory sends a shared copy (which it collects a reply for) as a plain one.
      if (posted && seq == 0) {
        if (!status.ok()) SendAsyncError(status);
        Recycle(kj::mv(call->body));
        return;
      }
      // The client reads any error frame sent before this reply first: it is reading again.
      error_sent_ = false;
      call->params = nullptr;
      Recycle(kj::mv(call->body));
      const uint32_t kind = session_.Quiet() ? session::kQuietReplyFrame : session::kReplyFrame;
      auto frame = kj::heap<session::OutgoingFrame>(kind, seq, call->reply);
      if (call->release_hold) return SendInPlace(kj::mv(frame), kj::mv(call));
      Send(kj::mv(frame), kj::mv(call), [this](kj::Own<Call> done) { Recycle(kj::mv(done->reply_data)); });
    }));
  }

  // Writes a reply that refers to device memory now, while nothing else runs, waiting up to kBulkWait for the
  // socket to take it; what it did not take is copied and follows as usual. Behind other replies still being
  // written, all of it is copied. Either way the memory is not touched again once this returns.
  void SendInPlace(kj::Own<session::OutgoingFrame> frame, kj::Own<Call> call) {
    const auto& pieces = frame->pieces();
    size_t written = writes_pending_ == 0 ? WriteNow(pieces) : 0;
    auto rest = kj::heapArray<kj::byte>(frame->bytes() - written);
    size_t at = 0;
    for (auto p : pieces) {
      size_t skip = std::min(written, p.size());
      written -= skip;
      std::memcpy(rest.begin() + at, p.begin() + skip, p.size() - skip);
      at += p.size() - skip;
    }
    call = nullptr;  // Serving resumes.
    if (rest.size() == 0) return AfterReply();
    auto piece = kj::heapArray<kj::ArrayPtr<const kj::byte>>({rest.asPtr()});
    // What the socket did not take is held until written: a client that never reads its replies must not make
    // this process copy device memory for it without end.
    const uint64_t unsent = rest.size();
    Hold(unsent);
    Write(kj::mv(piece), kj::mv(rest), [this, unsent](kj::Array<kj::byte>) { Release(unsent); });
  }

  // Writes what it can of `pieces` to the socket at once, waiting for room up to kBulkWait; answers how many
  // bytes went. A failure is left for the asynchronous write of the rest to report.
  size_t WriteNow(const std::vector<kj::ArrayPtr<const kj::byte>>& pieces) {
    const int fd = SocketFd();
    if (fd < 0) return 0;
    std::vector<iovec> iov;
    for (auto p : pieces) iov.push_back({const_cast<kj::byte*>(p.begin()), p.size()});
    const auto until = std::chrono::steady_clock::now() + kBulkWait;
    size_t written = 0, first = 0;
    while (first < iov.size()) {
      msghdr m{};
      m.msg_iov = iov.data() + first;
      m.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
      ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && WaitFor(fd, POLLOUT, until)) continue;
      if (n <= 0) break;
      written += static_cast<size_t>(n);
      SkipWritten(iov, &first, static_cast<size_t>(n));
    }
    return written;
  }

  // A client that answers a reply with its next call within microseconds (a program's synchronous calls back to
  // back, a training loop's next step) finds this thread awake if it polls the socket for that long: sleeping in
  // the kernel instead costs a wakeup of an idle CPU when the call comes, more than the round trip itself (on a
  // virtual machine, an exit to the hypervisor: 10-40 us). Only while the session is quiet (no device work to
  // follow up on: the event loop is not needed meanwhile), the host has a CPU to spare, and the client's last few
  // gaps were all short: a client that pauses longer, or one that waits its turn on a busy host, costs no poll. A
  // probe now and then measures again what the last gaps, slept through, overstated.
  void AfterReply() {
    if (writes_pending_ != 0 || !session_.Quiet()) return;
    const int fd = SocketFd();
    if (fd < 0) return;
    replied_at_ = Clock::now();
    constexpr auto kMinCallPoll = std::chrono::microseconds(5), kMaxCallPoll = std::chrono::microseconds(30);
    constexpr uint32_t kProbeEvery = 16;
    const auto longest = *std::max_element(call_gaps_.begin(), call_gaps_.end());
    const bool probe = ++quiet_replies_ % kProbeEvery == 0;
    if ((longest > kMaxCallPoll && !probe) || !HostHasSpareCpu()) return;
    const Clock::duration fitting = std::clamp<Clock::duration>(longest + longest / 2, kMinCallPoll, kMaxCallPoll);
    PollReadable(fd, std::chrono::duration_cast<std::chrono::microseconds>(probe ? kMaxCallPoll : fitting));
  }

  // Only the first failure until the client next waits: it keeps only that one, and a client that never waits
  // must not pile up frames here.
  void SendAsyncError(const CallStatus& status) {
    if (error_sent_) return;
    error_sent_ = true;
    auto message = kj::heap<capnp::MallocMessageBuilder>();
    session::WriteStatus(status, message->initRoot<wire::CallStatus>());
    auto frame = kj::heap<session::OutgoingFrame>(session::kAsyncErrorFrame, 0, *message);
    Send(kj::mv(frame), kj::mv(message));
  }

  // Writes `frame` after those before it; `keep` owns the message the frame points into, and is handed to
  // `written` once the frame is out.
  template <typename Keep, typename Written>
  void Send(kj::Own<session::OutgoingFrame> frame, Keep keep, Written written) {
    auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(frame->pieces().size());
    for (size_t i = 0; i < pieces.size(); ++i) pieces[i] = frame->pieces()[i];
    Write(kj::mv(pieces), kj::mv(keep), [frame = kj::mv(frame), written = kj::mv(written)](Keep k) mutable {
      written(kj::mv(k));
    });
  }
  template <typename Keep>
  void Send(kj::Own<session::OutgoingFrame> frame, Keep keep) {
    Send(kj::mv(frame), kj::mv(keep), [](Keep) {});
  }

  template <typename Keep, typename Written>
  void Write(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, Keep keep, Written written) {
    auto* raw = pieces.begin();
    size_t count = pieces.size();
    ++writes_pending_;
    writing_ = writing_
                   .then([this, raw, count] { return stream_->write(kj::arrayPtr(raw, count)); })
                   .then([this, pieces = kj::mv(pieces), keep = kj::mv(keep), written = kj::mv(written)]() mutable {
                     --writes_pending_;
                     written(kj::mv(keep));
                     AfterReply();
                   })
                   .eagerlyEvaluate([this](kj::Exception&& e) {
                     --writes_pending_;
                     GP_DEBUG("session", "cannot reply on the direct connection: {}", e.getDescription().cStr());
                   });
  }

  kj::Own<kj::AsyncIoStream> stream_;  // First in, last out: everything below may still use it as it goes.
  FramedSession& session_;
  const uint64_t max_held_bytes_;
  FrameControl own_control_;  // When the caller keeps none.
  FrameControl* control_;
  bool stopping_ = false;  // FrameControl::stop was called and reading has not resumed.
  static constexpr size_t kStopWake = ~size_t{0};  // What stop_wake_ answers in place of a read's length.
  kj::Own<kj::PromiseFulfiller<size_t>> stop_wake_;  // Ends the wait for the client's bytes (a stop).
  kj::Own<kj::PromiseFulfiller<uint64_t>> stopped_;  // Stop's answer, once drained.
  kj::Own<kj::PromiseFulfiller<void>> resume_;      // Set while stopped.
  uint64_t held_bytes_ = 0;  // Of calls read and not yet gone (Call), and of replies' copies not yet written.
  kj::Own<kj::PromiseFulfiller<void>> room_;  // Set while reading waits for held_bytes_ to fall (WaitForRoom).
  kj::Array<word> buffer_;
  size_t begin_ = 0, end_ = 0;  // Bytes of buffer_ read and not yet dispatched.
  std::vector<kj::Array<word>> spares_;
  bool error_sent_ = false;
  kj::Maybe<kj::Promise<void>> hold_;  // Resolves when the reply that holds serving back is written.
  // When the last reply left a quiet session, and how long the client took to send more the last few times.
  std::optional<Clock::time_point> replied_at_;
  std::array<Clock::duration, 4> call_gaps_{};
  size_t next_gap_ = 0;
  uint32_t quiet_replies_ = 0;
  int writes_pending_ = 0;             // Writes queued on writing_ and not done.
  kj::Promise<void> writing_ = kj::READY_NOW;
  kj::TaskSet tasks_;  // Calls waiting for the device; dropped first, with the connection.
};

}  // namespace

namespace {

// Checkpoints `session` once it is quiet, trying again every few milliseconds until `deadline`.
kj::Promise<CallStatus> CheckpointWhenQuiet(SessionControl& session, kj::Timer& timer, kj::TimePoint deadline,
                                            SessionImage* image) {
  CallStatus status;
  {
    std::lock_guard<std::mutex> lock(session.mu);
    status = session.checkpoint ? session.checkpoint(image)
                                : CallStatus(CUDA_ERROR_INVALID_VALUE, "checkpoint: the session has ended");
  }
  if (status.code() != CUDA_ERROR_NOT_READY || timer.now() >= deadline) return status;
  return timer.afterDelay(2 * kj::MILLISECONDS).then([&session, &timer, deadline, image] {
    return CheckpointWhenQuiet(session, timer, deadline, image);
  });
}

}  // namespace

kj::Promise<MoveCheckpoint> CheckpointForMove(FrameControl& frames, SessionControl& session, kj::Timer& timer,
                                              kj::Duration quiet_within, SessionImage* image) {
  if (!frames.stop) {
    return MoveCheckpoint{CallStatus(CUDA_ERROR_INVALID_VALUE, "checkpoint: the session has no direct connection "
                                                               "(its client cannot follow it elsewhere)"), 0};
  }
  const kj::TimePoint deadline = timer.now() + quiet_within;
  return frames.stop().then([&frames, &session, &timer, deadline, image](uint64_t consumed) {
    return CheckpointWhenQuiet(session, timer, deadline, image).then([&frames, consumed](CallStatus status) {
      if (!status.ok() && frames.resume) frames.resume();
      return MoveCheckpoint{status, consumed};
    });
  });
}

kj::Promise<void> ServeFrames(kj::Own<kj::AsyncIoStream> stream, FramedSession& session, uint64_t max_held_bytes,
                              FrameControl* control, uint64_t consumed_before) {
  auto connection = kj::heap<FrameConnection>(kj::mv(stream), session, std::max<uint64_t>(max_held_bytes, 1), control,
                                              consumed_before);
  auto run = connection->Run();
  return run.attach(kj::mv(connection));
}

}  // namespace gpupool::backend
