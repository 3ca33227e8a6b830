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

#include <kj/memory.h>

#include "backend/device_backend.h"
#include "backend/slice_quota.h"
#include "emu/device.h"
#include "session.capnp.h"

namespace gpupool::backend {

// Lets the session's worker end a session whose lease ended while the client still holds the capability.
struct SessionControl {
  std::mutex mu;
  std::function<void()> revoke;  // Set while the session lives; frees its device memory and fails later calls.
};

struct SessionLimits {
  uint64_t memory_bytes = 0;  // The slice's quota: allocations beyond it fail with CUDA_ERROR_OUT_OF_MEMORY.
  // The quota shared with the lease's other sessions on the slice (slice_quota.h); null: memory_bytes for this
  // session alone.
  std::shared_ptr<SliceQuota> quota;
  uint64_t window_base = 0;   // The session's device addresses lie in [window_base, window_base + window_bytes).
  uint64_t window_bytes = 0;
  std::string description;    // Names the session in log lines ("emulated GPU 0, window 0x...").
  // Called as the session closes, before the device frees what the session holds (which waits for its work: on a
  // GPU, a kernel that never ends would hold it forever). A session worker arms its exit timer here.
  std::function<void()> closing;
};

// The server for one session over `backend`. `control` (may be null) receives the session's revoke function.
// `submission_turns` (may be null) shares a device that does not share itself by its compute shares (a physical GPU
// without MPS): the session submits work (kernels, copies, memsets) only while it holds the device's turn, keeps it
// while that work runs and for one time slice at most while a neighbour waits, then hands it on. The wait happens
// before a submission reaches the device, on the session's own thread: a session waits, its neighbours do not.
kj::Own<wire::Session::Server> NewSessionServer(std::unique_ptr<DeviceBackend> backend, const SessionLimits& limits,
                                                std::shared_ptr<SessionControl> control,
                                                std::shared_ptr<emu::ExecutionGate> submission_turns = nullptr);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_SESSION_SERVER_H_
