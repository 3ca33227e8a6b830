// A session hosted in the test's own process: the one session server (lib/backend/session_server.h) over an
// emulated device (NewEmuBackend), served on its own thread and KJ event loop over one end of a socket pair, as a
// session worker serves its client's direct connection (ServeFrames). The other end is the client's: the
// interposer's own client code (internal::RemoteSession::OverConnection) or a test's raw frames. What is about
// the protocol and the session server's validation is tested here, without an agent, a worker process or a port;
// what is about processes, doors, tickets and leases is tested against a real gp-agent (tests/remote).
//
// Why a socket pair and not an in-memory KJ pipe: the client's side of a direct connection (SessionChannel)
// writes and reads its socket on the program's own threads, with no event loop, so it needs a file descriptor;
// and the bytes then take the very path they take from a worker, back-pressure and partial writes included.
#ifndef GPUPOOL_TESTS_SUPPORT_SESSION_HOST_H_
#define GPUPOOL_TESTS_SUPPORT_SESSION_HOST_H_

#include <cstdint>
#include <memory>
#include <string>

#include "backend/session_image.h"
#include "client/session_client.h"
#include "core/call_status.h"
#include "gpupool/status.h"

namespace gpupool::testing {

struct SessionHostOptions {
  uint64_t memory_bytes = uint64_t{1} << 30;  // The slice's memory and quota; default 1 GiB.
  // The session's window: its device memory is mapped at its start, in this process. 0 (the default): the first
  // free GiB-aligned window from 40 TiB, of the memory rounded up to whole GiB plus 16 GiB for virtual memory
  // reservations (window_bytes is then ignored).
  uint64_t window_base = 0;
  uint64_t window_bytes = 0;
  int cc_major = 7, cc_minor = 5;  // Compute capability; default 7.5, as the guard kernels' PTX.
  int worker_threads = 2;          // The emulated device's CTA threads; default 2.
  // A checkpoint (Checkpoint's) the session becomes before it serves: window_base and window_bytes must be its.
  const backend::SessionImage* restore = nullptr;
  uint64_t restore_consumed = 0;  // The call frames the restored session had consumed (CheckpointAndLeave's).
};

class SessionHost {
 public:
  // Opens the session and starts serving it; fails when the emulated device cannot be made (no free window).
  static Result<std::unique_ptr<SessionHost>> Start(const SessionHostOptions& options = {});
  // Ends the session (if its client has not hung up first) and stops the host's thread.
  ~SessionHost();
  SessionHost(const SessionHost&) = delete;
  SessionHost& operator=(const SessionHost&) = delete;

  uint64_t window_base() const { return window_base_; }
  uint64_t window_bytes() const { return window_bytes_; }

  // The client's end of the connection, which the caller then owns; -1 after the first call.
  int TakeClientFd();
  // A RemoteSession over the client's end (TakeClientFd's), the real client code.
  Result<std::unique_ptr<internal::RemoteSession>> Connect();
  // The session as it stands now (SessionControl::checkpoint), taken on the host's thread between calls.
  CallStatus Checkpoint(backend::SessionImage* image);
  // As a session's worker does for a move: stops reading calls, waits for the session to be quiet, checkpoints it,
  // and (when that worked) ends the connection, whatever the client had sent after `*consumed` call frames.
  CallStatus CheckpointAndLeave(backend::SessionImage* image, uint64_t* consumed);

  // Whether the session is still served: false once its connection ended (the client hung up, or sent a frame
  // that ends it) and the session closed.
  bool Serving() const;

  struct Loop;  // The host's thread and what lives on it.

 private:
  SessionHost() = default;
  std::unique_ptr<Loop> loop_;
  int client_fd_ = -1;
  uint64_t window_base_ = 0, window_bytes_ = 0;
};

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_SUPPORT_SESSION_HOST_H_
