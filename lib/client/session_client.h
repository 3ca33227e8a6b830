// Client side of the session service: one RemoteSession per attached slice, with the CUDA semantics the
// interposer needs (calls that return nothing are sent without waiting; their errors surface at the next
// synchronising call; large copies are cut into chunks and pipelined). Internal to gpupool (used by
// lib/interpose); every method is thread-safe and returns a CUresult value.
#ifndef GPUPOOL_CLIENT_SESSION_CLIENT_H_
#define GPUPOOL_CLIENT_SESSION_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpupool/lease.h"
#include "gpupool/status.h"
#include "client/session_channel.h"
#include "schema/session_calls.h"

namespace gpupool::internal {

class Runtime;
struct TokenFields;

using RemoteProps = session::DeviceInfo;
using RemoteParam = session::KernelParam;

struct RemoteFunctionInfo {
  uint64_t handle = 0;
  std::vector<RemoteParam> params;
  int shared_bytes = 0, local_bytes = 0, num_regs = 0;
  int ptx_version = 0;  // Of the kernel's PTX (120 for compute_120); 0: an agent that does not say.
  int max_threads_per_block = 0;  // 0: the device's (an agent from before the field).
};

class RemoteSession {
 public:
  // Opens one session per slice of the lease behind `token` (attaching to it), each in its own address window.
  static Result<std::vector<std::unique_ptr<RemoteSession>>> OpenLease(const std::string& token);
  // A session over `fd` (owned from now on), a connected stream socket whose far end serves the framed session calls
  // of a session opened in [window_base, window_base + window_bytes): no lease, no agent, and no reservation of the
  // window in this process (whoever serves the session holds it). Every call then behaves as on a direct connection
  // to a session's worker. For tests that host a session server in their own process (tests/support/session_host.h);
  // such a session cannot Relocate. With `reconnect`, the session follows its server when the connection goes away
  // (SessionChannel::MakeResumable).
  static Result<std::unique_ptr<RemoteSession>> OverConnection(
      int fd, uint64_t window_base, uint64_t window_bytes,
      std::function<Result<SessionChannel::Resumed>(const std::string& why)> reconnect = nullptr);
  ~RemoteSession();

  const RemoteProps& props() const { return props_; }
  const Slice& slice() const { return slice_; }
  uint64_t window_base() const { return window_base_; }
  uint64_t window_bytes() const { return window_bytes_; }
  bool Owns(uint64_t address) const { return address >= window_base_ && address - window_base_ < window_bytes_; }
  // True until the first call: the session holds no memory, module, stream or event yet.
  bool Untouched() const;
  // Reopens an untouched session in a window whose reservation space starts at `address` (1 GiB aligned) and holds
  // `bytes`, closing the old one: a program's first reservation at a fixed address outside every window gets that
  // address, as the driver gives a free hint (gp-agent's cuda backend stacked on this library reserves its
  // client's window so). The old session stays when the new one cannot be opened.
  Status Relocate(uint64_t address, uint64_t bytes);

  // Sends any call of lib/schema/session_calls.h as its mode says: kReply and kSync wait and fill `*results`
  // (which may be null when the caller needs none); kPosted returns 0 at once and its error surfaces at the next
  // kSync call. Posted calls whose arguments view bytes (DATA fields) copy them into the message before returning,
  // unless `owner` keeps those bytes alive until sent, which spares the caller the wait for the hand-off.
  // Returns a CUresult value; last_error() says more.
  template <typename Call>
  int Invoke(const typename Call::Args& args, typename Call::Results* results = nullptr,
             std::shared_ptr<const void> owner = nullptr);

  // A batch's messages as they were sent, to be sent again as they are (SendRecorded).
  struct RecordedBatch {
    std::vector<std::shared_ptr<const std::vector<uint8_t>>> messages;
  };

  // Gathers the posted calls the calling thread makes on this session into one message (session call `batch`)
  // until EndBatch sends it: a graph launch travels as one message. Any call of this thread that waits sends the
  // gathered calls first, so their order is kept; other threads' calls are not gathered. Not nested.
  // With `record`, the batch's messages are also kept there, and EndBatch answers whether they hold the whole batch:
  // only launches and memsets are kept (their messages depend on nothing but their arguments), so a batch that
  // gathered any other call, or that a call of this thread that waits cut in two, answers false.
  // `send` false: what the batch gathered and has not sent yet is dropped instead (a graph launch that failed on
  // one of its nodes runs none of those it gathered).
  void BeginBatch(RecordedBatch* record = nullptr);
  bool EndBatch(bool send = true);
  // Sends a recorded batch again (a graph launched again with nothing of it changed), without building its calls.
  void SendRecorded(const RecordedBatch& batch);
  // Sends what this thread gathered so far, if anything (gathering goes on, and a recording of the batch is then
  // not whole): before a call of this thread that waits, or before another thread waits on the session for work
  // this thread queued.
  void FlushBatch();

  int MemGetInfo(uint64_t* free_bytes, uint64_t* total);
  int MemAlloc(uint64_t bytes, uint64_t* address);
  int MemFree(uint64_t address);                                                    // Not waited for.
  int CopyToDevice(uint64_t dst, const void* src, size_t bytes, uint64_t stream);   // Not waited for.
  int CopyFromDevice(void* dst, uint64_t src, size_t bytes, uint64_t stream);       // Waits.
  int CopyOnDevice(uint64_t dst, uint64_t src, size_t bytes, uint64_t stream);      // Not waited for.
  int Memset(uint64_t dst, uint32_t value, uint8_t element_size, size_t count, uint64_t stream);
  int ModuleLoad(const void* image, size_t bytes, uint64_t* module);
  int ModuleUnload(uint64_t module);
  int GetFunction(uint64_t module, const std::string& name, RemoteFunctionInfo* info);
  int GetGlobal(uint64_t module, const std::string& name, uint64_t* address, uint64_t* bytes);
  // `cluster`: thread block cluster dimensions, or null for none; `cooperative`: every block resident at once
  // (cuLaunchCooperativeKernel). Not waited for.
  int Launch(uint64_t function, const uint32_t grid[3], const uint32_t block[3], uint32_t shared_bytes,
             uint64_t stream, const void* params, size_t param_bytes, const uint32_t* cluster = nullptr,
             bool cooperative = false);
  // Clusters of `cluster` blocks that can be resident at once (cuOccupancyMaxActiveClusters).
  int OccupancyMaxActiveClusters(uint64_t function, const uint32_t grid[3], const uint32_t block[3],
                                 uint32_t shared_bytes, const uint32_t cluster[3], int* clusters);
  int FunctionSetAttribute(uint64_t function, int attribute, int value);
  int StreamCreate(uint64_t* stream);
  int StreamDestroy(uint64_t stream);
  int StreamSynchronize(uint64_t stream);
  int StreamQuery(uint64_t stream);
  int StreamWaitEvent(uint64_t stream, uint64_t event);
  // The slice's utilisation rates since the previous call (session call utilization). Waits.
  int Utilization(uint32_t* gpu_percent, uint32_t* memory_percent);
  // cuStreamWaitValue32/64 (`width` 4 or 8). Not waited for.
  int StreamWaitValue(uint64_t stream, uint64_t address, uint64_t value, uint8_t width, uint32_t flags);
  int EventCreate(uint64_t* event);
  int EventDestroy(uint64_t event);
  int EventRecord(uint64_t event, uint64_t stream);
  int EventSynchronize(uint64_t event);
  int EventQuery(uint64_t event);
  int EventElapsed(uint64_t start, uint64_t end, float* ms);
  int Synchronize();
  // The first error of an unwaited call, once (then cleared), or 0.
  int TakeAsyncError();
  // Puts an error that a wait took back in front, with last_error()'s text, for the next synchronising call to
  // report: a helper thread's wait (host functions) must not swallow the program's error.
  void KeepAsyncError(int code);
  const std::string& last_error() const { return last_error_; }
  // The kernel fault (cu::IsStickyFault) any reply of this session has carried, or 0: the session's context is
  // ruined, as a GPU's is after a fault, and work queued from now on never runs.
  int StickyFault() const;

  struct Impl;

 private:
  RemoteSession() = default;
  // Opens the slice's session in [base, base + window), replacing the one open, if any, on success. On a refusal,
  // `*window_taken` (if given) says whether it was for that window alone (another may do).
  Status OpenAt(uint64_t base, uint64_t window, bool* window_taken = nullptr);
  // Lets `channel` (the direct connection entered with `ticket`) follow the session when its agent moves it: the
  // agent says where it went (openSession with the ticket), and the channel resumes there.
  void MakeFollowMoves(SessionChannel* channel, const std::string& ticket, uint64_t base, uint64_t window);
  bool Batching() const;
  // Sends what the batch gathered so far (EndBatch, and a batch too large for one message, in parts).
  void SendGathered();
  // When a call failed (`code`) because the session's connection broke, puts why in last_error_ (ExplainLoss).
  void ExplainIfLost(int code);
  // Why the session's connection broke (`broke`: how it broke), asked once of the lease's agent, which may take a
  // few seconds: "the lease of this session ended: agent A restarted and no longer knows it; ..." when the agent
  // ended or forgot the lease, `broke` when the lease holds, `broke` and why the agent does not answer otherwise.
  // REQUIRES: not the runtime's loop thread.
  std::string ExplainLoss(const std::string& broke);
  std::shared_ptr<Runtime> runtime_;
  std::shared_ptr<Lease> lease_;  // Keeps the lease attached (renewed) while sessions live.
  std::string lease_id_, lease_secret_;
  std::unique_ptr<Impl> impl_;
  RemoteProps props_;
  Slice slice_;
  uint64_t window_base_ = 0, window_bytes_ = 0;
  // The window's address range, held in this process (PROT_NONE, nothing committed) while the session lives: no host
  // memory of the program may be placed inside it, where its pointers would read as the device's.
  struct Reservation {
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    // Takes [base, base + bytes), letting go of what was held; false if any of it is mapped already (nothing is
    // then held).
    bool Take(uint64_t base, uint64_t bytes);
    void Release();
    uint64_t base = 0, bytes = 0;
  };
  Reservation window_reservation_;
  std::string last_error_;
};

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_SESSION_CLIENT_H_
