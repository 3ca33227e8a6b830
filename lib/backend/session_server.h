// The one session server: serves the session protocol (lib/schema/session_calls.h) for a device backend of either
// kind. It does, once for every backend, what the agent must never leave to trust: session-local handle tables
// (a client names only its own objects; stale handles name nothing), device ranges checked against the session's
// own allocations and module variables, the slice's memory quota, revocation (the lease ended: everything is freed
// and every later call fails), and the waits that keep its event loop free while the device works.
#ifndef GPUPOOL_BACKEND_SESSION_SERVER_H_
#define GPUPOOL_BACKEND_SESSION_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <capnp/message.h>
#include <kj/async.h>
#include <kj/memory.h>

#include "backend/device_backend.h"
#include "backend/device_turns.h"
#include "backend/session_image.h"
#include "backend/session_meter.h"
#include "backend/slice_quota.h"
#include "session.capnp.h"

namespace gpupool::backend {

// Lets the session's worker end a session whose lease ended while the client still holds the capability.
struct SessionControl {
  std::mutex mu;
  // Set while the session lives; frees its device memory and fails later calls, saying why the lease ended.
  std::function<void(const std::string& why)> revoke;
  // Set while the session lives; called on the session's own thread (its event loop). checkpoint: the session as it
  // stands (session_image.h), when it is quiet (CUDA_ERROR_NOT_READY while work is queued or running). restore: a
  // fresh session (nothing allocated, loaded or made yet) becomes the one `image` describes, at the same addresses
  // and handles; on failure it is left unusable, and its caller ends it.
  std::function<CallStatus(SessionImage* image)> checkpoint;
  std::function<CallStatus(const SessionImage& image)> restore;
};

struct SessionLimits {
  uint64_t memory_bytes = 0;  // The slice's quota: allocations beyond it fail with CUDA_ERROR_OUT_OF_MEMORY.
  // The quota shared with the lease's other sessions on the slice (slice_quota.h); null: memory_bytes for this
  // session alone.
  std::shared_ptr<SliceQuota> quota;
  // Where the session counts what it does (session_meter.h), for the agent's telemetry; null: counted privately.
  std::shared_ptr<SessionMeter> meter;
  uint64_t window_base = 0;   // The session's device addresses lie in [window_base, window_base + window_bytes).
  uint64_t window_bytes = 0;
  std::string description;    // Names the session in log lines ("emulated GPU 0, window 0x...").
  // Most bytes the session holds for calls in flight (messages read whose work is not done, replies not yet
  // written) before it stops reading its client's calls (back-pressure, not failure): the agent's
  // `[limits] session_bytes_in_flight`.
  uint64_t bytes_in_flight = kDefaultBytesInFlight;
  static constexpr uint64_t kDefaultBytesInFlight = 64ull << 20;
  // Called as the session closes, before the device frees what the session holds (which waits for its work: on a
  // GPU, a kernel that never ends would hold it forever). A session worker arms its exit timer here.
  std::function<void()> closing;
};

// The same server, reached by framed messages (lib/schema/session_frames.h) on a direct connection.
class FramedSession {
 public:
  // Where a reply's bulk bytes (a device-to-host copy's) go instead of the reply's own segments.
  struct ReplyData {
    // Returns `bytes` bytes, 8-byte aligned and padded to whole words, that outlive the reply's write. The reply
    // refers to them as its last segment, so that the client can read them straight into its destination.
    std::function<uint8_t*(size_t bytes)> buffer;
    // Told, while the call is served, that the reply refers to device memory instead (IdleHostView): the connection
    // then serves no later call until it has written the reply, and keeps no reference to the memory after that
    // (what the socket did not take at once is copied), so that nothing can change or free the bytes under it.
    std::function<void()> in_place;
  };
  // Serves call `ordinal` with its Params message `params`, writing its Results struct (status included) into
  // `reply`; all three must live until the promise resolves, with the call's status. An unknown ordinal or a
  // corrupt message fails the call, not the session.
  virtual kj::Promise<CallStatus> ServeFramed(uint32_t ordinal, capnp::MessageReader& params,
                                              capnp::MessageBuilder& reply, const ReplyData& reply_data) = 0;
  // Where the bulk bytes of a large call may be read straight to, as they arrive: `kind` is the frame's kind, `head`
  // its message's first segment and `bytes` the size of its second and last, the bulk. Answers the bytes' device
  // destination as host memory (IdleHostView) for a host-to-device copy whose bytes are that whole segment and
  // that may happen at once; null otherwise (the message is then read whole and served as usual). A call whose
  // bytes landed finds them in place, and copies nothing.
  virtual uint8_t* BulkLanding(uint32_t kind, kj::ArrayPtr<const capnp::word> head, uint64_t bytes) = 0;
  // Memory shared with the client for copies (copyToDeviceShared, copyFromDeviceShared); kept until the session
  // ends, after its device work.
  virtual void UseSharedMemory(std::shared_ptr<kj::ArrayPtr<kj::byte>> bytes) = 0;
  // Whether the session's device has nothing left to do or report and no call of the session is still being served:
  // a synchronisation now would return at once, with nothing.
  virtual bool Quiet() const = 0;
  // Whether `ordinal` names a session call.
  static bool IsCall(uint32_t ordinal);
  // Whether call `ordinal` is posted (its client waits for no reply); false for unknown ordinals.
  static bool IsPosted(uint32_t ordinal);
  // Whether call `ordinal` is kSync (waits for the device and reports earlier posted calls' errors).
  static bool IsSync(uint32_t ordinal);

 protected:
  ~FramedSession() = default;
};

// The server for one session over `backend`. `control` (may be null) receives the session's revoke function.
// `framed` (may be null) receives the same server's framed entry, valid as long as the returned server lives.
// `submission_turns` (may be null) shares a device that does not share itself by its compute shares and cannot pause
// running work (a physical GPU without MPS): the sessions' work runs side by side, the device time-slicing between
// them, and the table (DeviceTurns::WaitForShare) charges each session its part of the device while its work is in
// flight and holds back the submissions (kernels, copies, memsets) of a lease more than one time slice over its
// share until its neighbours catch up. The wait happens before a submission reaches the device, on the session's
// own thread: a session waits, its neighbours do not, and no neighbour's long kernel holds another's work back.
kj::Own<wire::Session::Server> NewSessionServer(std::unique_ptr<DeviceBackend> backend, const SessionLimits& limits,
                                                std::shared_ptr<SessionControl> control,
                                                std::shared_ptr<DeviceTurns> submission_turns = nullptr,
                                                FramedSession** framed = nullptr);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_SESSION_SERVER_H_
