#include "backend/frame_connection.h"

#include <cuda.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cstring>
#include <vector>

#include <capnp/serialize.h>
#include <fmt/format.h>

#include "core/log.h"
#include "schema/session_frames.h"
#include "schema/session_wire.h"
#include "session.capnp.h"

namespace gpupool::backend {
namespace {

using capnp::word;
using session::FrameHeader;

// Small frames arrive many to a read (a run of posted launches is one write): read in pieces this large.
constexpr size_t kReadBufferWords = (256u << 10) / sizeof(word);

class FrameConnection final : public kj::TaskSet::ErrorHandler {
 public:
  FrameConnection(kj::Own<kj::AsyncIoStream> stream, FramedSession& session)
      : stream_(kj::mv(stream)), session_(session), buffer_(kj::heapArray<word>(kReadBufferWords)), tasks_(*this) {
    const int one = 1;
    try {
      stream_->setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // Replies leave at once.
    } catch (const kj::Exception&) {
      // A Unix socket.
    }
  }

  kj::Promise<void> Run() { return ReadLoop(); }

  void taskFailed(kj::Exception&& e) override {
    GP_WARN("session", "a call on the direct connection failed: {}", e.getDescription().cStr());
  }

 private:
  kj::byte* bytes() { return buffer_.asBytes().begin(); }

  // Dispatches every whole frame in the buffer, then reads more; a frame longer than the buffer is read into its
  // own array. Resolves when the client hangs up.
  kj::Promise<void> ReadLoop() {
    while (end_ - begin_ >= sizeof(FrameHeader)) {
      FrameHeader h;
      std::memcpy(&h, bytes() + begin_, sizeof(h));
      if (h.words > session::kMaxFrameWords) {
        return KJ_EXCEPTION(FAILED, "corrupt frame: a message of this many words", h.words);
      }
      size_t length = sizeof(h) + h.words * sizeof(word);
      if (length > buffer_.asBytes().size()) return ReadLarge(h);
      if (end_ - begin_ < length) break;
      auto body = kj::heapArray<word>(h.words);
      std::memcpy(body.begin(), bytes() + begin_ + sizeof(h), h.words * sizeof(word));
      begin_ += length;
      Dispatch(h, kj::mv(body));
    }
    if (begin_ > 0) {
      std::memmove(bytes(), bytes() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    return stream_->tryRead(bytes() + end_, 1, buffer_.asBytes().size() - end_).then([this](size_t n) {
      if (n == 0) {
        if (end_ > 0) GP_DEBUG("session", "direct connection closed inside a frame");
        return kj::Promise<void>(kj::READY_NOW);
      }
      end_ += n;
      return ReadLoop();
    });
  }

  kj::Promise<void> ReadLarge(FrameHeader h) {
    kj::Array<word> body = SpareArray(h.words);
    size_t have = end_ - begin_ - sizeof(h), want = h.words * sizeof(word);
    std::memcpy(body.begin(), bytes() + begin_ + sizeof(h), have);
    begin_ = end_ = 0;
    kj::byte* rest = body.asBytes().begin() + have;
    return stream_->read(rest, want - have).then([this, h, body = kj::mv(body)]() mutable {
      Dispatch(h, kj::mv(body));
      return ReadLoop();
    });
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
    if (a.size() * sizeof(word) > buffer_.asBytes().size() && spares_.size() < 4) spares_.push_back(kj::mv(a));
  }

  struct Call {
    explicit Call(kj::Array<word> words) : body(kj::mv(words)) {}
    kj::Array<word> body;
    kj::Own<capnp::FlatArrayMessageReader> params;
    capnp::MallocMessageBuilder reply;
    kj::Array<word> reply_data;  // The reply's bulk bytes (FramedSession::ReplyDataBuffer), if any.
  };

  void Dispatch(const FrameHeader& h, kj::Array<word> body) {
    auto call = kj::heap<Call>(kj::mv(body));
    const bool known = FramedSession::IsCall(h.kind), posted = FramedSession::IsPosted(h.kind);
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
      call->params = kj::heap<capnp::FlatArrayMessageReader>(call->body, session::FrameReaderOptions());
    })) {
      (void)e;
    }
    if (!known || !call->params) {
      // What the client did not expect a reply to: reported as a failed posted call.
      SendAsyncError({CUDA_ERROR_INVALID_VALUE, known ? "corrupt message framing" : fmt::format("unknown call {}", h.kind)});
      return;
    }
    Call* raw = call.get();
    FramedSession::ReplyDataBuffer reply_data = [this, raw](size_t bytes) {
      const size_t words = (bytes + sizeof(word) - 1) / sizeof(word);
      raw->reply_data = SpareArray(words);
      uint8_t* out = raw->reply_data.asBytes().begin();
      std::memset(out + bytes, 0, words * sizeof(word) - bytes);  // The last word's padding goes out too.
      return out;
    };
    kj::Promise<CallStatus> served = session_.ServeFramed(h.kind, *call->params, call->reply, reply_data);
    tasks_.add(served.then([this, seq = h.seq, posted, call = kj::mv(call)](CallStatus status) mutable {
      if (posted) {
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
      Send(kj::mv(frame), kj::mv(call), [this](kj::Own<Call> done) { Recycle(kj::mv(done->reply_data)); });
    }));
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
    auto* raw = pieces.begin();
    size_t count = pieces.size();
    writing_ = writing_
                   .then([this, raw, count] { return stream_->write(kj::arrayPtr(raw, count)); })
                   .then([pieces = kj::mv(pieces), frame = kj::mv(frame), keep = kj::mv(keep),
                          written = kj::mv(written)]() mutable { written(kj::mv(keep)); })
                   .eagerlyEvaluate([](kj::Exception&& e) {
                     GP_DEBUG("session", "cannot reply on the direct connection: {}", e.getDescription().cStr());
                   });
  }
  template <typename Keep>
  void Send(kj::Own<session::OutgoingFrame> frame, Keep keep) {
    Send(kj::mv(frame), kj::mv(keep), [](Keep) {});
  }

  kj::Own<kj::AsyncIoStream> stream_;  // First in, last out: everything below may still use it as it goes.
  FramedSession& session_;
  kj::Array<word> buffer_;
  size_t begin_ = 0, end_ = 0;  // Bytes of buffer_ read and not yet dispatched.
  std::vector<kj::Array<word>> spares_;
  bool error_sent_ = false;
  kj::Promise<void> writing_ = kj::READY_NOW;
  kj::TaskSet tasks_;  // Calls waiting for the device; dropped first, with the connection.
};

}  // namespace

kj::Promise<void> ServeFrames(kj::Own<kj::AsyncIoStream> stream, FramedSession& session) {
  auto connection = kj::heap<FrameConnection>(kj::mv(stream), session);
  auto run = connection->Run();
  return run.attach(kj::mv(connection));
}

}  // namespace gpupool::backend
