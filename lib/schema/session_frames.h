// The session calls on a direct connection between a client and its session's worker: framed Cap'n Proto messages
// instead of Cap'n Proto RPC. The messages are the same (each call's Params and Results structs of session.capnp,
// in Cap'n Proto's stream framing); what differs is what travels around them:
//   - a 16-byte header per message: the call (its ordinal), the caller's sequence number, the message's length;
//   - no reply for a call that returns nothing the caller waits for (kPosted): the worker sends an error frame when
//     one fails, the first since the client last waited, which the client reads before its next reply;
//   - replies in the order their calls complete, matched by sequence number.
// So a client thread writes its call and reads its reply itself (no thread between it and the socket), and a run of
// posted calls leaves in one write. RPC (with its promise pipelining and capabilities) remains the agent's protocol
// and the way to a session through the agent.
//
// Handshake: the client sends an enter frame whose message is the ticket (16 bytes, wire::DirectSession); the
// worker answers with an entered frame (no message), or closes the connection.
#ifndef GPUPOOL_SCHEMA_SESSION_FRAMES_H_
#define GPUPOOL_SCHEMA_SESSION_FRAMES_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include <capnp/message.h>

namespace gpupool::session {

struct FrameHeader {
  uint32_t kind = 0;   // Client to worker: the call's ordinal (or kEnterFrame). Worker to client: kReplyFrame, ...
  uint32_t seq = 0;    // The call's sequence number (a posted call's is 0); echoed by its reply.
  uint64_t words = 0;  // Length of the message that follows, in 8-byte words (0: none).
};
static_assert(sizeof(FrameHeader) == 16, "the header is 16 bytes on the wire");

inline constexpr uint32_t kEnterFrame = 0xE17E0001;     // Client: the ticket follows (2 words).
inline constexpr uint32_t kEnteredFrame = 0xE17E0002;   // Worker: the ticket was right; calls may follow.
inline constexpr uint32_t kReplyFrame = 0xE17E0003;     // Worker: the Results struct of call `seq`.
inline constexpr uint32_t kAsyncErrorFrame = 0xE17E0004;  // Worker: a wire::CallStatus of a failed posted call.
// Worker: a reply as kReplyFrame, sent when the session was quiet (FramedSession::Quiet): every call the client sent
// before this one has run, and a synchronisation would find nothing to wait for or report. Until the client sends
// anything more, it may answer a synchronisation itself.
inline constexpr uint32_t kQuietReplyFrame = 0xE17E0005;

// The largest message either side accepts: a 64 MiB copy and its framing. A longer one is a corrupt stream.
inline constexpr uint64_t kMaxFrameWords = (64ull << 20) / 8 + 4096;

// Messages up to this length travel in their sender's queue (copied); longer ones are written from their segments.
inline constexpr size_t kSmallFrameBytes = 64u << 10;

// A message in Cap'n Proto's stream framing behind its frame header, as pieces to write with writev: the header
// and segment table in `head`, then the message's segments (not copied: the builder must outlive the pieces).
class OutgoingFrame {
 public:
  OutgoingFrame(uint32_t kind, uint32_t seq, capnp::MessageBuilder& message) {
    auto segments = message.getSegmentsForOutput();
    size_t table_words = (segments.size() + 2) / 2;  // u32 count-1, then one u32 length per segment, padded.
    head_.assign(sizeof(FrameHeader) / sizeof(uint32_t) + table_words * 2, 0);
    uint64_t words = table_words;
    for (auto s : segments) words += s.size();
    FrameHeader h{kind, seq, words};
    std::memcpy(head_.data(), &h, sizeof(h));
    uint32_t* table = head_.data() + sizeof(FrameHeader) / sizeof(uint32_t);
    table[0] = static_cast<uint32_t>(segments.size() - 1);
    for (size_t i = 0; i < segments.size(); ++i) table[i + 1] = static_cast<uint32_t>(segments[i].size());
    pieces_.push_back(kj::arrayPtr(reinterpret_cast<const kj::byte*>(head_.data()), head_.size() * 4));
    for (auto s : segments) pieces_.push_back(s.asBytes());
    bytes_ = sizeof(FrameHeader) + words * sizeof(capnp::word);
  }
  // A frame without a message.
  OutgoingFrame(uint32_t kind, uint32_t seq) {
    head_.assign(sizeof(FrameHeader) / sizeof(uint32_t), 0);
    FrameHeader h{kind, seq, 0};
    std::memcpy(head_.data(), &h, sizeof(h));
    pieces_.push_back(kj::arrayPtr(reinterpret_cast<const kj::byte*>(head_.data()), head_.size() * 4));
    bytes_ = sizeof(FrameHeader);
  }
  OutgoingFrame(OutgoingFrame&&) = default;  // `pieces` point into `head_`'s buffer, which a move keeps.
  OutgoingFrame(const OutgoingFrame&) = delete;

  const std::vector<kj::ArrayPtr<const kj::byte>>& pieces() const { return pieces_; }
  size_t bytes() const { return bytes_; }
  // Appends the whole frame to `out`.
  void AppendTo(std::vector<uint8_t>* out) const {
    for (auto p : pieces_) out->insert(out->end(), p.begin(), p.end());
  }

 private:
  std::vector<uint32_t> head_;
  std::vector<kj::ArrayPtr<const kj::byte>> pieces_;
  size_t bytes_ = 0;
};

// Reader options for a frame's message: a copy message legitimately holds 64 MiB.
inline capnp::ReaderOptions FrameReaderOptions() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = kMaxFrameWords * 2;
  return options;
}

}  // namespace gpupool::session

#endif  // GPUPOOL_SCHEMA_SESSION_FRAMES_H_
