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
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
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
  ~SessionChannel();
  SessionChannel(const SessionChannel&) = delete;
  SessionChannel& operator=(const SessionChannel&) = delete;

  // Queues posted call `ordinal` with its Params message (copied; a large one is written before this returns).
  // A lost connection is reported by the next waiting call.
  void Post(uint32_t ordinal, capnp::MessageBuilder& params);

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
  uint8_t* shared() const { return shared_; }
  size_t shared_bytes() const { return shared_bytes_; }
  std::mutex& shared_mu() { return shared_mu_; }
  static constexpr size_t kSharedSlots = 4;
  static constexpr size_t kSharedMemoryBytes = 16u << 20;

 private:
  explicit SessionChannel(int fd, AsyncErrorSink errors);
  void FlushLoop();
  // Writes what is queued, then `more` (if any), holding write_mu_. False if the connection is lost.
  // `seq`: the call `more` is, if one: its place among the frames sent is noted for its reply (Quiet).
  bool WriteQueuedAnd(const std::vector<kj::ArrayPtr<const kj::byte>>& more, uint32_t seq = 0);
  bool WriteAll(std::vector<iovec> pieces);
  // Reads one frame (the reading thread only). False if the connection is lost.
  bool ReadFrame(uint32_t* kind, uint32_t* seq, Reply* reply);
  // Reads the rest of a reply frame of `words` words whose call gave `landing`, its last segment into the landing
  // when it fits it exactly; `*reply` gets the message either way. False if the connection is lost.
  bool ReadLandingReply(uint64_t words, const Landing& landing, Reply* reply);
  bool ReadExact(void* dst, size_t bytes);
  void AwaitReadable();
  static constexpr std::chrono::microseconds kReplyPoll{50};
  void Lose(const std::string& why);

  const int fd_;
  AsyncErrorSink errors_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;  // The flusher waits here for queued calls.
  std::vector<uint8_t> queue_;        // Posted frames not yet written. Guarded by queue_mu_.
  bool closing_ = false;              // Guarded by queue_mu_.

  std::mutex write_mu_;  // One writer at a time; it empties the queue before writing its own frame.
  std::vector<uint8_t> writing_;  // The queue being written. Guarded by write_mu_.

  mutable std::mutex recv_mu_;
  std::condition_variable recv_cv_;
  bool reading_ = false;  // A waiter is reading the socket; others wait for it. Guarded by recv_mu_.
  std::map<uint32_t, Reply> replies_;  // Read for a waiter that has not taken it yet. Guarded by recv_mu_.
  std::map<uint32_t, Landing> landings_;  // By call, until its waiter returns. Guarded by recv_mu_.
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

  uint8_t* shared_ = nullptr;
  size_t shared_bytes_ = 0;
  std::mutex shared_mu_;

  std::atomic<uint32_t> next_seq_{1};
  // Whether the next posted call is written at once rather than queued: set by every call that waits.
  std::atomic<bool> post_directly_{true};
  std::thread flusher_;
};

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_SESSION_CHANNEL_H_
