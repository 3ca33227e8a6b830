// The client's side of a direct connection to a session's worker, speaking framed session calls
// (lib/schema/session_frames.h). A calling thread writes its call and reads its reply on the socket itself: no
// event-loop thread between it and the worker, so a waiting call costs one write and one read. Posted calls queue
// and leave together in one write: sent by a flusher thread as soon as it runs, or by the next waiting call first.
// Internal to gpupool (used by RemoteSession); thread-safe.
#ifndef GPUPOOL_CLIENT_SESSION_CHANNEL_H_
#define GPUPOOL_CLIENT_SESSION_CHANNEL_H_

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "gpupool/status.h"

namespace gpupool::internal {

class SessionChannel {
 public:
  // Called with the first failure of posted calls that the worker reports (a CUresult and its message).
  using AsyncErrorSink = std::function<void(int code, const std::string& message)>;

  // Connects to the worker's door at `address` ("unix:PATH", "host:port", "[v6]:port") and enters with `ticket`.
  static Result<std::unique_ptr<SessionChannel>> Enter(const std::string& address, const std::string& ticket,
                                                       std::chrono::milliseconds timeout, AsyncErrorSink errors);
  // Speaks on `fd`, a connected stream socket whose far end already serves framed session calls (no door, no
  // ticket, no shared memory: copies go through the socket); takes ownership of `fd`. A session server hosted in a
  // test's own process is reached so (tests/support/session_host.h).
  static std::unique_ptr<SessionChannel> Adopt(int fd, AsyncErrorSink errors);

  // A connection to the worker that serves the session now, after the last one went away because the session moved
  // (docs/moving-leases.md): its socket (owned from now on), and how many of the channel's call frames the session
  // had consumed when it was checkpointed.
  struct Resumed {
    int fd = -1;
    uint64_t consumed = 0;
    bool shares = false;  // The new worker maps the memory this channel offered with its knock.
  };
  // Asked, on the thread that found the connection gone (`why`), where the session is now; an error: nowhere (the
  // channel is then lost, with the error's message).
  using Reconnect = std::function<Result<Resumed>(const std::string& why)>;
  // From now on the channel keeps every call frame it sends until the worker has consumed it (a reply to a later
  // call says so), and when its connection goes away it asks `reconnect` where the session went and sends the
  // frames the session had not consumed again there, in order, before anything new: the program's calls survive a
  // move of their session to another worker, none lost and none run twice. Call before any call is sent.
  void MakeResumable(Reconnect reconnect);
  // Knocks at the door of a worker at `address` with `ticket` (and the memory this channel shares with its worker,
  // if any and the door is on this host): a connection for Reconnect to answer.
  Result<Resumed> Knock(const std::string& address, const std::string& ticket, std::chrono::milliseconds timeout);
  // Whether the channel keeps what it sends for a resumption (MakeResumable was called).
  bool retains() const { return resumable_; }
  // Bytes of call frames kept for a resumption (MakeResumable), and the times the channel resumed.
  uint64_t retained_bytes() const;
  uint64_t resumptions() const { return resumptions_.load(); }
  ~SessionChannel();
  SessionChannel(const SessionChannel&) = delete;
  SessionChannel& operator=(const SessionChannel&) = delete;

  // Queues posted call `ordinal` with its Params message (copied; a large one is written before this returns).
  // A lost connection is reported by the next waiting call.
  void Post(uint32_t ordinal, capnp::MessageBuilder& params);
  // As Post, for a message whose last segment is `held`, memory its caller keeps unchanged until AwaitConsumed
  // returns: a resumable channel refers to that segment for a resumption instead of copying it (a large copy's bytes).
  void PostHeld(uint32_t ordinal, capnp::MessageBuilder& params, const uint8_t* held);
  // Waits until the worker has read every call sent so far (it answers a call at once); what PostHeld referred to is
  // free again then. A resumption on the way sends the calls it had not read again, from the caller's memory.
  void AwaitConsumed();

  // Where the bulk bytes of a call's reply (a device-to-host copy's) may be read to: `bytes` bytes at `dst`. A reply
  // whose last segment holds exactly them (the worker sends a copy's bytes so) is read into `dst` directly, and its
  // message refers to them there; any other reply is read as usual.
  struct Landing {
    uint8_t* dst;
    size_t bytes;
  };
  // Sends the queued calls and call `ordinal`; returns the number to Wait for, 0 if the connection is lost.
  uint32_t Send(uint32_t ordinal, capnp::MessageBuilder& params, Landing landing = {nullptr, 0});

  struct Reply {
    kj::Array<capnp::word> words;
    kj::Array<kj::ArrayPtr<const capnp::word>> segments;  // Set when the reply's bytes landed in place.
    kj::Own<capnp::MessageReader> message;  // The call's Results struct.
  };
  // Waits for the reply to call `seq`. False if the connection is lost (lost() says why).
  bool Wait(uint32_t seq, Reply* reply);

  // Why the connection is lost, or "".
  std::string lost() const;

  // Whether the worker said, in its reply to the last call sent, that the session was quiet (nothing queued, nothing
  // to report), and nothing has been sent since: a synchronisation may be answered here.
  bool Quiet() const;

  // Memory shared with a worker on this host for copies (copyToDeviceShared, copyFromDeviceShared): null when
  // there is none (a worker elsewhere, or GPUPOOL_SHARED_MEMORY=0). Cut into kSharedSlots slots; a copy takes
  // shared_mu() for its whole run (another thread's copy meanwhile goes through the socket).
  // Null too once the session moved to a worker that does not map it (another host): copies then go through the
  // socket, and the calls that named the memory and were not yet run are sent with their bytes (Unshared).
  uint8_t* shared() const { return unshared_.load() ? nullptr : shared_; }
  // The shared memory itself, for the copies already using it when it stopped being shared: they finish through it
  // (their calls rewritten as they leave), and their replies are collected.
  uint8_t* shared_slots() const { return shared_; }
  size_t shared_bytes() const { return shared_bytes_; }
  std::mutex& shared_mu() { return shared_mu_; }
  static constexpr size_t kSharedSlots = 4;
  static constexpr size_t kSharedMemoryBytes = 16u << 20;

 private:
  explicit SessionChannel(int fd, AsyncErrorSink errors);
  void FlushLoop();
  // Writes what is queued, then `more` (if any), holding write_mu_. False if the connection is lost.
  // `seq`: the call `more` is, if one: its place among the frames sent is noted for its reply (Quiet).
  // `held`: the last piece of `more` is the caller's, unchanged until AwaitConsumed (PostHeld).
  bool WriteQueuedAnd(const std::vector<kj::ArrayPtr<const kj::byte>>& more, uint32_t seq = 0, bool held = false);
  bool WriteAll(std::vector<iovec> pieces);
  // Reads one frame (the reading thread only). False if the connection is lost.
  bool ReadFrame(uint32_t* kind, uint32_t* seq, Reply* reply);
  // Reads the rest of a reply frame of `words` words whose call gave `landing`, its last segment into the landing
  // when it fits it exactly; `*reply` gets the message either way. False if the connection is lost.
  bool ReadLandingReply(uint64_t words, const Landing& landing, Reply* reply);
  bool ReadExact(void* dst, size_t bytes);
  void AwaitReadable();
  static constexpr std::chrono::microseconds kReplyPoll{50};
  // The channel is lost for good: no call will be answered.
  void Lose(const std::string& why);
  // The connection broke (the worker went away, or the socket failed): lost for good unless the channel is
  // resumable, when the next waiting call resumes it (Resume).
  void Break(const std::string& why);
  // The reading thread, with the reader's role, once the connection broke: asks where the session went, and replays
  // there what it had not consumed. False if it is nowhere (the channel is then lost).
  bool Resume();
  // Keeps frames [first, first + count), whose bytes are `pieces`, until the worker consumed them. REQUIRES:
  // write_mu_.
  // `held`: the last piece is referred to, not copied (WriteQueuedAnd's).
  void Retain(uint64_t first, uint64_t count, const std::vector<kj::ArrayPtr<const kj::byte>>& pieces,
              bool held = false);
  // Buffers of acknowledged runs kept for the next (a large copy's chunks follow one another).
  // Up to half the retention limit's worth of them, so that a stream of copies (under 1 MiB each: larger ones are
  // referred to, not kept) reuses its buffers in a ring.
  static constexpr size_t kSpareBytes = 8u << 20, kSpareRunMin = 256u << 10;
  // The worker consumed every frame up to `through`.
  void Acknowledge(uint64_t through);
  // Retained frames past this many make a poster ask for an acknowledgement, and wait for the previous one's.
  static constexpr uint64_t kRetainLimitBytes = 16ull << 20;
  void AwaitAcknowledgement();
  // Sends a call the worker answers at once (properties), whose reply acknowledges every frame before it; returns
  // its number, 0 if the channel is lost.
  uint32_t AskHowFar();

  std::atomic<int> fd_;
  AsyncErrorSink errors_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;  // The flusher waits here for queued calls.
  std::vector<uint8_t> queue_;        // Posted frames not yet written. Guarded by queue_mu_.
  uint64_t queue_frames_ = 0;         // How many. Guarded by queue_mu_.
  bool closing_ = false;              // Guarded by queue_mu_.

  std::mutex write_mu_;  // One writer at a time; it empties the queue before writing its own frame.
  std::vector<uint8_t> writing_;  // The queue being written. Guarded by write_mu_.

  mutable std::mutex recv_mu_;
  std::condition_variable recv_cv_;
  bool reading_ = false;  // A waiter is reading the socket; others wait for it. Guarded by recv_mu_.
  std::map<uint32_t, Reply> replies_;  // Read for a waiter that has not taken it yet. Guarded by recv_mu_.
  std::map<uint32_t, Landing> landings_;  // By call, until its waiter returns. Guarded by recv_mu_.
  std::set<uint32_t> unshared_landings_;  // Those of calls Unshared rewrote. Guarded by recv_mu_.
  // Frames sent so far, counted in the order they leave (posted calls as they queue). Guarded by queue_mu_ for
  // writing; read atomically.
  std::atomic<uint64_t> sent_{0};
  std::map<uint32_t, uint64_t> marks_;  // By call: sent_ once its frame was counted. Guarded by recv_mu_.
  uint64_t quiet_mark_ = 0;  // The highest mark of a call whose reply came quiet. Guarded by recv_mu_.
  std::string lost_;                   // Guarded by recv_mu_.
  std::atomic<bool> broken_{false};
  // Bytes read ahead of the frame being read. Only the reading thread touches them.
  std::vector<uint8_t> read_ahead_;
  size_t read_begin_ = 0, read_end_ = 0;

  // Resumption (MakeResumable). Frames sent and not known to be consumed, oldest first, in runs as written.
  struct Retained {
    uint64_t first = 0, count = 0;  // Frame numbers: the first is 1.
    std::vector<uint8_t> bytes;
    kj::ArrayPtr<const kj::byte> held;  // The rest of a single frame, in its caller's memory (PostHeld).
  };
  Reconnect reconnect_;  // Set once, before any call.
  bool resumable_ = false;
  mutable std::mutex retain_mu_;
  std::deque<Retained> retained_;  // Guarded by retain_mu_.
  std::vector<std::vector<uint8_t>> spare_runs_;  // Guarded by retain_mu_.
  size_t spare_bytes_ = 0;                        // Their capacity. Guarded by retain_mu_.
  std::atomic<uint64_t> retained_bytes_{0};  // Written under retain_mu_.
  uint64_t acknowledged_ = 0;      // Every frame up to this one was consumed. Guarded by retain_mu_.
  std::string broke_;              // Why the connection broke, until it resumes. Guarded by recv_mu_.
  std::atomic<uint64_t> resumptions_{0};
  std::mutex ack_mu_;      // One poster at a time asks for an acknowledgement.
  uint32_t ack_seq_ = 0;   // The question in flight (AwaitAcknowledgement), or 0. Guarded by ack_mu_.
  uint64_t asked_at_ = 0;  // retained_ever_ when it was asked. Guarded by ack_mu_.
  std::atomic<uint64_t> retained_ever_{0};  // Bytes retained since the channel began. Written under retain_mu_.

  uint8_t* shared_ = nullptr;
  size_t shared_bytes_ = 0;
  std::atomic<bool> unshared_{false};  // The session's worker does not map shared_ any more (it moved to another host).
  // For such a worker: call `kind` (copyToDeviceShared, copyFromDeviceShared) number `seq` with Params `params` as
  // the call that carries its bytes in the message (copyToDevice, answered as its number asks; copyFromDevice, whose
  // reply lands in the slot the call named), framed; other calls as they are (nullopt).
  std::optional<std::vector<uint8_t>> Unshared(uint32_t kind, uint32_t seq, capnp::MessageReader& params);
  int shared_fd_ = -1;  // The shared memory's memfd, for the knock at a resumed session's door.
  std::mutex shared_mu_;

  std::atomic<uint32_t> next_seq_{1};
  // Whether the next posted call is written at once rather than queued: set by every call that waits.
  std::atomic<bool> post_directly_{true};
  std::thread flusher_;
};

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_SESSION_CHANNEL_H_
