// The worker's side of a direct connection that speaks framed session calls (lib/schema/session_frames.h): reads
// calls in order, hands each to the session server, and writes replies (and posted calls' failures) back.
#ifndef GPUPOOL_BACKEND_FRAME_CONNECTION_H_
#define GPUPOOL_BACKEND_FRAME_CONNECTION_H_

#include <cstdint>
#include <functional>

#include <kj/async-io.h>

#include "backend/session_server.h"

namespace gpupool::backend {

// What the session's owner holds of a connection that ServeFrames serves: how far it has read, and a way to stop it
// at a frame boundary so that its session can be checkpointed and moved (docs/moving-leases.md). The event loop's
// thread only.
struct FrameControl {
  // Call frames read and handed to the session so far, counting those a restored session had consumed before this
  // connection (ServeFrames' `consumed_before`): the client replays what comes after them to the next worker.
  uint64_t consumed = 0;
  // Set while a connection is served. stop: reads no further call (what is read of a frame is dropped: the client
  // sends it again wherever the session goes) and resolves with `consumed` once every call read is done and its reply
  // written. resume: a stopped connection reads on.
  std::function<kj::Promise<uint64_t>()> stop;
  std::function<void()> resume;
};

// Stops the connection `frames` serves (FrameControl::stop), waits for its session to be quiet (within `quiet_within`:
// the device may still run what the calls read queued) and checkpoints it through `session`: the image and the
// frames it consumed, for a move. On failure (the session never became quiet, or cannot be checkpointed) the
// connection reads on, as if nothing happened.
struct MoveCheckpoint {
  CallStatus status;
  uint64_t consumed = 0;
};
kj::Promise<MoveCheckpoint> CheckpointForMove(FrameControl& frames, SessionControl& session, kj::Timer& timer,
                                              kj::Duration quiet_within, SessionImage* image);

// Serves `stream` (whose client has entered) until the client hangs up or sends a corrupt frame. `session` must
// outlive the returned promise; dropping the promise cancels the calls still waiting for the device.
// `max_held_bytes` bounds what the connection holds for calls in flight (their messages, and their replies until
// written): past it, nothing more is read until some are done, so that a client sending faster than its device
// works blocks in its own socket (back-pressure) instead of growing this process. One call is always read, however
// large (the frame size has its own bound, session::kMaxFrameWords).
// `control` (may be null) must outlive the promise.
kj::Promise<void> ServeFrames(kj::Own<kj::AsyncIoStream> stream, FramedSession& session, uint64_t max_held_bytes,
                              FrameControl* control = nullptr, uint64_t consumed_before = 0);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_FRAME_CONNECTION_H_
