// The worker's side of a direct connection that speaks framed session calls (lib/schema/session_frames.h): reads
// calls in order, hands each to the session server, and writes replies (and posted calls' failures) back.
#ifndef GPUPOOL_BACKEND_FRAME_CONNECTION_H_
#define GPUPOOL_BACKEND_FRAME_CONNECTION_H_

#include <kj/async-io.h>

#include "backend/session_server.h"

namespace gpupool::backend {

// Serves `stream` (whose client has entered) until the client hangs up or sends a corrupt frame. `session` must
// outlive the returned promise; dropping the promise cancels the calls still waiting for the device.
// `max_held_bytes` bounds what the connection holds for calls in flight (their messages, and their replies until
// written): past it, nothing more is read until some are done, so that a client sending faster than its device
// works blocks in its own socket (back-pressure) instead of growing this process. One call is always read, however
// large (the frame size has its own bound, session::kMaxFrameWords).
kj::Promise<void> ServeFrames(kj::Own<kj::AsyncIoStream> stream, FramedSession& session, uint64_t max_held_bytes);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_FRAME_CONNECTION_H_
