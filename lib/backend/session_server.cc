#include "backend/session_server.h"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <capnp/serialize.h>
#include <fmt/format.h>
#include <kj/async.h>

#include "backend/device_wait.h"
#include "backend/handle_table.h"
#include "backend/session_checks.h"
#include "core/array_format.h"
#include "core/log.h"
#include "core/range_map.h"
#include "core/util.h"
#include "schema/session_frames.h"
#include "schema/session_wire.h"

namespace gpupool::backend {
namespace {

// Every backend's statuses pass through here to the client's CUDA program: the CUresult values gpupool names without
// cuda.h (core/call_status.h) must be the driver's own.
#define GP_SAME_CURESULT(ours, theirs) static_assert(cu::ours == theirs, #ours " is not " #theirs);
GP_SAME_CURESULT(kSuccess, CUDA_SUCCESS)
GP_SAME_CURESULT(kInvalidValue, CUDA_ERROR_INVALID_VALUE)
GP_SAME_CURESULT(kOutOfMemory, CUDA_ERROR_OUT_OF_MEMORY)
GP_SAME_CURESULT(kDeviceUnavailable, CUDA_ERROR_DEVICE_UNAVAILABLE)
GP_SAME_CURESULT(kInvalidImage, CUDA_ERROR_INVALID_IMAGE)
GP_SAME_CURESULT(kInvalidContext, CUDA_ERROR_INVALID_CONTEXT)
GP_SAME_CURESULT(kNoBinaryForGpu, CUDA_ERROR_NO_BINARY_FOR_GPU)
GP_SAME_CURESULT(kInvalidPtx, CUDA_ERROR_INVALID_PTX)
GP_SAME_CURESULT(kInvalidSource, CUDA_ERROR_INVALID_SOURCE)
GP_SAME_CURESULT(kInvalidHandle, CUDA_ERROR_INVALID_HANDLE)
GP_SAME_CURESULT(kNotFound, CUDA_ERROR_NOT_FOUND)
GP_SAME_CURESULT(kNotReady, CUDA_ERROR_NOT_READY)
GP_SAME_CURESULT(kIllegalAddress, CUDA_ERROR_ILLEGAL_ADDRESS)
GP_SAME_CURESULT(kLaunchOutOfResources, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
GP_SAME_CURESULT(kLaunchTimeout, CUDA_ERROR_LAUNCH_TIMEOUT)
GP_SAME_CURESULT(kAssert, CUDA_ERROR_ASSERT)
GP_SAME_CURESULT(kIllegalInstruction, CUDA_ERROR_ILLEGAL_INSTRUCTION)
GP_SAME_CURESULT(kMisalignedAddress, CUDA_ERROR_MISALIGNED_ADDRESS)
GP_SAME_CURESULT(kLaunchFailed, CUDA_ERROR_LAUNCH_FAILED)
GP_SAME_CURESULT(kCooperativeLaunchTooLarge, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
GP_SAME_CURESULT(kNotSupported, CUDA_ERROR_NOT_SUPPORTED)
GP_SAME_CURESULT(kUnknown, CUDA_ERROR_UNKNOWN)
#undef GP_SAME_CURESULT

// The first word of a fatbin wrapper (__fatBinC_Wrapper_t: magic, version, pointer to its container).
constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;

namespace calls = session::calls;
using Reply = kj::Promise<CallStatus>;
using Clock = std::chrono::steady_clock;

Reply Done(CallStatus s) { return Reply(std::move(s)); }
Reply Ok() { return Done(CallStatus::Ok()); }
Reply Invalid(std::string message) { return Done({CUDA_ERROR_INVALID_VALUE, std::move(message)}); }
Reply Unknown(const char* what) { return Done({CUDA_ERROR_INVALID_HANDLE, fmt::format("unknown {} handle", what)}); }

class SessionServer final : public wire::Session::Server, public FramedSession {
 public:
  SessionServer(std::unique_ptr<DeviceBackend> backend, const SessionLimits& limits,
                std::shared_ptr<SessionControl> control, std::shared_ptr<DeviceTurns> submission_turns)
      : backend_(std::move(backend)),
        limits_(limits),
        quota_(limits.quota ? limits.quota : SliceQuota::Private(limits.memory_bytes)),
        meter_(limits.meter ? limits.meter : SessionMeter::Private()),
        control_(std::move(control)) {
    if (submission_turns) turns_ = std::make_shared<SubmissionTurns>(std::move(submission_turns));
    if (control_) {
      std::lock_guard<std::mutex> lock(control_->mu);
      control_->revoke = [this](const std::string& why) { Revoke(why); };
      control_->checkpoint = [this](SessionImage* image) { return Checkpoint(image); };
      control_->restore = [this](const SessionImage& image) { return Restore(image); };
    }
    // The driver's memory for the context itself (heap, printf buffer, the threads' stacks) is the slice's from the
    // start. Where the lease's other sessions leave no room for it, the first module load asks again, refused.
    if (!ChargeDriver(backend_->DriverHeldBytes())) {
      GP_INFO("session", "the driver's memory for the session does not fit in the slice yet: {}",
              QuotaMessage(backend_->DriverHeldBytes()));
    }
  }

  ~SessionServer() noexcept(false) {
    if (control_) {
      std::lock_guard<std::mutex> lock(control_->mu);
      control_->revoke = nullptr;
      control_->checkpoint = nullptr;
      control_->restore = nullptr;
    }
    if (limits_.closing) limits_.closing();
    backend_.reset();  // Frees everything the session still holds.
    GP_INFO("session", "session on {} closed: its memory and modules are freed", limits_.description);
  }

  // One override per call of session_calls.h, all alike: the wire plumbing is Serve's; the call's meaning is its
  // Handle overload's.
#define GP_SERVE(Name, method, ordinal, mode, doc) \
  kj::Promise<void> method(Name##Context context) override { return Serve<calls::Name>(kj::mv(context)); }
  GP_SESSION_CALLS(GP_SERVE)
#undef GP_SERVE

 private:
  template <typename Call>
  struct Pending {
    typename Call::Args args;
    typename Call::Results results;
  };

  template <typename Call>
  kj::Promise<void> Serve(typename session::Wire<Call>::Context context) {
    // A call that waits for the device: a caller that goes away (its connection broke) must not keep it running.
    if (Call::kMode == session::Mode::kSync) context.allowCancellation();
    return ServeMessage<Call>(context.getParams(), context.getResults()).then([context](CallStatus) {});
  }

  // One call, from its Params struct to its Results struct (status included), however it arrived.
  // `reply_data` (framed connections only, else null): where a copy's bytes for the client go.
  template <typename Call>
  kj::Promise<CallStatus> ServeMessage(typename session::Wire<Call>::Params::Reader params,
                                       typename session::Wire<Call>::ResultsStruct::Builder results,
                                       const ReplyData* reply_data = nullptr) {
    using W = session::Wire<Call>;
    auto call = kj::heap<Pending<Call>>();
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { W::ReadArgs(params, call->args); })) {
      CallStatus corrupt{CUDA_ERROR_INVALID_VALUE,
                         fmt::format("corrupt {} message: {}", Call::kMethod, e->getDescription().cStr())};
      session::WriteStatus(corrupt, results.initStatus());
      return corrupt;
    }
    W::PrepareResults(results, call->results);
    ++in_flight_;
    if constexpr (!std::is_same_v<Call, calls::Batch>) meter_->CountCalls(1);
    if constexpr (std::is_same_v<Call, calls::CopyFromDevice>) {
      if (reply_data && reply_data->buffer) {
        // The bytes go to the connection's buffer, which the reply refers to (no zeroed segment, no copy).
        call->results.data.reserve = [results, buffer = reply_data->buffer](size_t n) mutable -> uint8_t* {
          if (n == 0) {
            results.initData(0);
            return nullptr;
          }
          uint8_t* bytes = buffer(n);
          results.adoptData(capnp::Orphanage::getForMessageContaining(results).referenceExternalData(
              capnp::Data::Reader(bytes, n)));
          return bytes;
        };
      }
      if (reply_data && reply_data->in_place) {
        call->results.data.refer = [results, in_place = reply_data->in_place](const uint8_t* bytes, size_t n) mutable {
          results.adoptData(capnp::Orphanage::getForMessageContaining(results).referenceExternalData(
              capnp::Data::Reader(bytes, n)));
          in_place();
        };
      }
    }
    const bool outer_awaited = awaited_;
    // A shared host-to-device copy's client collects the reply later (as it reuses the slot, or synchronises).
    awaited_ = Call::kMode != session::Mode::kPosted && !std::is_same_v<Call, calls::CopyToDeviceShared>;
    Reply reply = revoked_ ? Done(Revoked()) : Handle(call->args, call->results);
    awaited_ = outer_awaited;
    return reply.then([this, results, call = kj::mv(call)](CallStatus status) mutable {
      --in_flight_;
      if (revoked_ && status.ok()) status = Revoked();  // The lease ended while the call waited for the device.
      W::WriteResults(call->results, results);
      session::WriteStatus(status, results.initStatus());
      return status;
    });
  }

  void UseSharedMemory(std::shared_ptr<kj::ArrayPtr<kj::byte>> bytes) override { shared_ = std::move(bytes); }

  uint8_t* BulkLanding(uint32_t kind, kj::ArrayPtr<const capnp::word> head, uint64_t bytes) override {
    using W = session::Wire<calls::CopyToDevice>;
    landed_at_ = nullptr;
    if (kind != calls::CopyToDevice::kOrdinal || revoked_ || bytes == 0 || bytes % sizeof(capnp::word) != 0) {
      return nullptr;
    }
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
      // The destination is in the first segment; the data's pointer leads to the second.
      kj::ArrayPtr<const capnp::word> first[] = {head};
      capnp::SegmentArrayMessageReader alone(first, session::FrameReaderOptions());
      auto params = alone.getRoot<W::Params>();
      const uint64_t dst = params.getDst();
      StreamRef stream;
      if (!FindStream(session::StreamId{params.getStream()}, &stream) || !Owned(dst, bytes, "").ok()) return;
      uint8_t* at = backend_->IdleHostView(dst, bytes);
      if (at == nullptr) return;
      // Only if the data is that whole segment, read where it will land.
      kj::ArrayPtr<const capnp::word> both[] = {
          head, {reinterpret_cast<const capnp::word*>(at), bytes / sizeof(capnp::word)}};
      capnp::SegmentArrayMessageReader whole(both, session::FrameReaderOptions());
      auto data = whole.getRoot<W::Params>().getData();
      if (data.begin() == at && data.size() == bytes) {
        landed_at_ = at;
        landed_bytes_ = bytes;
      }
    })) {
      landed_at_ = nullptr;
      return nullptr;  // A corrupt head: the whole message is read and fails as it is served.
    }
    return landed_at_;
  }

  bool Quiet() const override { return in_flight_ == 0 && !revoked_ && backend_->Quiet(); }

  kj::Promise<CallStatus> ServeFramed(uint32_t ordinal, capnp::MessageReader& params, capnp::MessageBuilder& reply,
                                      const ReplyData& reply_data) override {
    try {
      switch (ordinal) {
#define GP_FRAMED(Name, method, number, mode, doc)                                                             \
  case number:                                                                                                 \
    return ServeMessage<calls::Name>(params.getRoot<session::Wire<calls::Name>::Params>(),                     \
                                     reply.initRoot<session::Wire<calls::Name>::ResultsStruct>(), &reply_data);
        GP_SESSION_CALLS(GP_FRAMED)
#undef GP_FRAMED
        default:
          return CallStatus{CUDA_ERROR_INVALID_VALUE, fmt::format("unknown call {}", ordinal)};
      }
    } catch (const kj::Exception& e) {  // A message whose root is not a struct.
      return CallStatus{CUDA_ERROR_INVALID_VALUE, fmt::format("corrupt message: {}", e.getDescription().cStr())};
    }
  }

  // ---- Batches (a graph launch): posted calls, each handled in order as if it had come alone. Every call submits
  // its work while it is handled (so the order of the batch is the order on the device); some replies wait for the
  // device (a copy reads straight from the message), so the batch's reply waits for all of them and reports the
  // first failure, which surfaces at the client as a posted call's does.

  Reply Handle(const calls::Batch::Args& a, calls::Batch::Results&) {
    kj::Vector<Reply> replies;
    for (size_t offset = 0; offset < a.calls.size && !revoked_;) {
      uint32_t header[2];
      if (a.calls.size - offset < sizeof(header)) {
        replies.add(Invalid("batch: truncated entry header"));
        break;
      }
      std::memcpy(header, a.calls.data + offset, sizeof(header));
      const size_t start = offset + sizeof(header), bytes = header[1];
      if (bytes > a.calls.size - start || bytes % sizeof(capnp::word) != 0) {
        replies.add(Invalid("batch: malformed entry"));
        break;
      }
      replies.add(HandleBatched(header[0], a.calls.data + start, bytes));
      offset = start + bytes;
    }
    return kj::joinPromises(replies.releaseAsArray()).then([](kj::Array<CallStatus> all) {
      for (CallStatus& s : all) {
        if (!s.ok()) return std::move(s);
      }
      return CallStatus::Ok();
    });
  }

  Reply HandleBatched(uint32_t ordinal, const uint8_t* data, size_t bytes) {
    switch (ordinal) {
#define GP_BATCHED(Name, method, number, mode, doc) \
  case number:                                      \
    return Batched<calls::Name>(data, bytes);
      GP_SESSION_CALLS(GP_BATCHED)
#undef GP_BATCHED
      default:
        return Invalid(fmt::format("batch: unknown call {}", ordinal));
    }
  }

  // One call of a batch: only posted calls (what the client would have sent without waiting), never a batch.
  template <typename Call>
  Reply Batched(const uint8_t* data, size_t bytes) {
    if constexpr (Call::kMode != session::Mode::kPosted || std::is_same_v<Call, calls::Batch>) {
      return Invalid(fmt::format("batch: {} cannot be batched", Call::kMethod));
    } else {
      using W = session::Wire<Call>;
      // Lives until the call's reply: its DATA arguments are views into the batch's message (which lives until
      // the batch's reply), or into `copy`.
      struct Decoded {
        kj::Array<capnp::word> copy;
        kj::Own<capnp::FlatArrayMessageReader> reader;
        typename Call::Args args;
        typename Call::Results results;
      };
      auto d = kj::heap<Decoded>();
      kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(data), bytes / sizeof(capnp::word));
      if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) != 0) {  // The reader needs aligned words.
        d->copy = kj::heapArray<capnp::word>(words.size());
        std::memcpy(d->copy.begin(), data, bytes);
        words = d->copy.asPtr();
      }
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
        d->reader = kj::heap<capnp::FlatArrayMessageReader>(words);
        W::ReadArgs(d->reader->template getRoot<typename W::Params>(), d->args);
      })) {
        return Invalid(fmt::format("batch: corrupt {} entry: {}", Call::kMethod, e->getDescription().cStr()));
      }
      meter_->CountCalls(1);
      Reply reply = Handle(d->args, d->results);
      return reply.attach(kj::mv(d));
    }
  }

  // ---- Device and memory.

  Reply Handle(const calls::Properties::Args&, calls::Properties::Results& r) {
    r.props = backend_->Info();
    r.props.total_memory = limits_.memory_bytes;
    return Ok();
  }

  Reply Handle(const calls::MemGetInfo::Args&, calls::MemGetInfo::Results& r) {
    uint64_t free_bytes = 0, total = 0;
    CallStatus s = backend_->MemInfo(&free_bytes, &total);
    // The slice, not the device: what is left of the quota, or less if the device itself is short.
    r.total = limits_.memory_bytes;
    r.free = std::min(free_bytes, QuotaLeft());
    return Done(s);
  }

  Reply Handle(const calls::MemAlloc::Args& a, calls::MemAlloc::Results& r) {
    if (a.bytes == 0 || a.bytes > kMaxAllocBytes) return Invalid(fmt::format("cannot allocate {} bytes", a.bytes));
    if (a.bytes > QuotaLeft()) return Done({CUDA_ERROR_OUT_OF_MEMORY, QuotaMessage(a.bytes)});
    uint64_t address = 0, reserved = 0;
    CallStatus s = backend_->Alloc(a.bytes, &address, &reserved);
    if (!s.ok()) return Done(s);
    // Taken after the device's rounding, and atomically against the slice's other sessions (other processes of
    // the lease may have taken room since the check above).
    if (!quota_->Take(reserved)) {
      backend_->Free(address, reserved);
      return Done({CUDA_ERROR_OUT_OF_MEMORY, QuotaMessage(reserved)});
    }
    allocations_[address] = reserved;
    MemoryChanged();
    r.address = address;
    return Ok();
  }

  Reply Handle(const calls::MemFree::Args& a, calls::MemFree::Results&) {
    if (a.address == 0) return Ok();  // As cudaFree(nullptr).
    // Only what memAlloc returned: module variables belong to their module.
    auto it = allocations_.find(a.address);
    if (it == allocations_.end()) {
      return Invalid(fmt::format("0x{:x} is not the start of an allocation of this session", a.address));
    }
    uint64_t reserved = it->second;
    allocations_.erase(it);  // No new work may name it from now on.
    // cuMemFree waits for the device's work, as cudaFree does: work still queued may use the memory, and a GPU's
    // cuMemUnmap does not wait for it (an H100 faulted on a memset still running when its memory was unmapped).
    const uint64_t address = a.address;
    return EveryStreamReached().then([this, address, reserved]() -> Reply {
      if (revoked_) return Revoked();  // The revocation freed everything.
      CallStatus s = backend_->Free(address, reserved);
      if (!s.ok()) {
        quota_->Give(reserved);
        MemoryChanged();
        return Done(s);
      }
      // The device may free it in its own order too (the emulated device frees in stream order), so the reply,
      // and the quota's room, come once it has.
      return Reached(StreamRef()).then([this, reserved] {
        quota_->Give(reserved);
        MemoryChanged();
        return CallStatus::Ok();
      });
    });
  }

  Reply Handle(const calls::CopyToDevice::Args& a, calls::CopyToDevice::Results&) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    if (a.data.size == 0) return Ok();
    if (CallStatus s = Owned(a.dst, a.data.size, "copy destination"); !s.ok()) return Done(s);
    if (a.data.data == reinterpret_cast<const uint8_t*>(landed_at_) && a.data.size == landed_bytes_) {
      // BulkLanding read the bytes straight to their destination: the copy is done.
      landed_at_ = nullptr;
      meter_->CountBytesToDevice(a.data.size);
      return Ok();
    }
    // The device reads straight from the request, which lives until this call's reply: the reply waits for the
    // copy (the client does not wait for the reply, so nothing is delayed but the acknowledgement).
    CallStatus s = Submit(stream, [&] { return backend_->CopyToDevice(a.dst, a.data.data, a.data.size, stream); });
    if (!s.ok()) return Done(s);
    meter_->CountBytesToDevice(a.data.size);
    return AfterReached(stream, a.stream);
  }

  Reply Handle(const calls::CopyFromDevice::Args& a, calls::CopyFromDevice::Results& r) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    if (a.bytes > kMaxCopyBytes) {
      return Invalid(fmt::format("a copy message carries at most {} bytes, not {}", kMaxCopyBytes, a.bytes));
    }
    if (a.bytes == 0) return Ok();
    if (CallStatus s = Owned(a.src, a.bytes, "copy source"); !s.ok()) return Done(s);
    // With nothing left to run on the device, the reply may carry the bytes from where they are: the connection
    // serves nothing else until they are written. Whole aligned words only: the reply's segment is whole words,
    // and the padding of a partial one would be whatever follows in device memory.
    if (r.data.refer && a.src % sizeof(capnp::word) == 0 && a.bytes % sizeof(capnp::word) == 0) {
      if (const uint8_t* at = backend_->IdleHostView(a.src, a.bytes)) {
        r.data.refer(at, a.bytes);
        meter_->CountBytesFromDevice(a.bytes);
        return Ok();
      }
    }
    // The device writes straight into the reply; nothing else touches it until the copy has run.
    uint8_t* dst = r.data.reserve(a.bytes);
    CallStatus s = Submit(stream, [&] { return backend_->CopyFromDevice(dst, a.src, a.bytes, stream); });
    if (!s.ok()) {
      r.data.reserve(0);
      return Done(s);
    }
    meter_->CountBytesFromDevice(a.bytes);
    return AfterReached(stream, a.stream);
  }

  // ---- Copies through memory shared with a client on this host: no bytes on the socket.

  // The shared bytes [offset, offset + bytes), or an error.
  CallStatus SharedRange(uint64_t offset, uint64_t bytes, kj::byte** out) const {
    if (!shared_) return {CUDA_ERROR_INVALID_VALUE, "this connection shares no memory with the worker"};
    if (!RangeInside(offset, bytes, 0, shared_->size())) {
      return {CUDA_ERROR_INVALID_VALUE,
              fmt::format("bytes {}..{} lie beyond the {} shared bytes", offset, offset + bytes, shared_->size())};
    }
    *out = shared_->begin() + offset;
    return CallStatus::Ok();
  }

  Reply Handle(const calls::CopyToDeviceShared::Args& a, calls::CopyToDeviceShared::Results&) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    kj::byte* src = nullptr;
    if (CallStatus s = SharedRange(a.offset, a.bytes, &src); !s.ok()) return Done(s);
    if (a.bytes == 0) return Ok();
    if (CallStatus s = Owned(a.dst, a.bytes, "copy destination"); !s.ok()) return Done(s);
    // Straight from the shared bytes (the reply frees them once copied) when the stream is idle, or holds nothing
    // but the client's earlier shared copies (a large copy's chunks, which the client waits for anyway).
    if (shared_copies_tail_ == a.stream.value || backend_->QueryStream(stream).ok()) {
      CallStatus s = Submit(stream, [&] { return backend_->CopyToDevice(a.dst, src, a.bytes, stream); });
      if (!s.ok()) return Done(s);
      meter_->CountBytesToDevice(a.bytes);
      shared_copies_tail_ = a.stream.value;
      return AfterReached(stream, a.stream);
    }
    // A busy stream would hold the client's shared bytes until its earlier work ran: they are set aside instead,
    // and the copy reads them when its turn comes, as a driver stages pageable memory.
    auto staged = std::make_shared<std::vector<uint8_t>>(src, src + a.bytes);
    CallStatus s = Submit(stream, [&] { return backend_->CopyToDevice(a.dst, staged->data(), a.bytes, stream); });
    if (s.ok() && !backend_->WhenReached(stream, [staged] {}).ok()) staged_for_good_.push_back(staged);
    if (s.ok()) meter_->CountBytesToDevice(a.bytes);
    return Done(s);
  }

  Reply Handle(const calls::CopyFromDeviceShared::Args& a, calls::CopyFromDeviceShared::Results&) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    kj::byte* dst = nullptr;
    if (CallStatus s = SharedRange(a.offset, a.bytes, &dst); !s.ok()) return Done(s);
    if (a.bytes == 0) return Ok();
    if (CallStatus s = Owned(a.src, a.bytes, "copy source"); !s.ok()) return Done(s);
    CallStatus s = Submit(stream, [&] { return backend_->CopyFromDevice(dst, a.src, a.bytes, stream); });
    if (!s.ok()) return Done(s);
    meter_->CountBytesFromDevice(a.bytes);
    return AfterReached(stream, a.stream);
  }

  Reply Handle(const calls::CopyOnDevice::Args& a, calls::CopyOnDevice::Results&) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    if (a.bytes == 0) return Ok();
    if (CallStatus s = Owned(a.dst, a.bytes, "copy destination"); !s.ok()) return Done(s);
    if (CallStatus s = Owned(a.src, a.bytes, "copy source"); !s.ok()) return Done(s);
    return Done(Submit(stream, [&] { return backend_->CopyOnDevice(a.dst, a.src, a.bytes, stream); }));
  }

  Reply Handle(const calls::Memset::Args& a, calls::Memset::Results&) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    uint64_t bytes = 0;
    std::string error;
    if (!MemsetBytes(a.element_size, a.count, &bytes, &error)) return Invalid(error);
    if (bytes == 0) return Ok();
    if (CallStatus s = Owned(a.dst, bytes, "memset destination"); !s.ok()) return Done(s);
    return Done(Submit(stream, [&] { return backend_->Memset(a.dst, a.value, a.element_size, a.count, stream); }));
  }

  // ---- Virtual memory: reservations, physical memory, mappings (cuMemAddressReserve, cuMemCreate, cuMemMap).

  Reply Handle(const calls::AddressReserve::Args& a, calls::AddressReserve::Results& r) {
    if (a.bytes == 0 || a.bytes % kMappingGranularity != 0 || a.bytes > limits_.window_bytes) {
      return Invalid(fmt::format("cannot reserve {} bytes: a multiple of {} bytes up to the window's {}", a.bytes,
                                 kMappingGranularity, limits_.window_bytes));
    }
    if (a.alignment & (a.alignment - 1)) return Invalid(fmt::format("alignment {} is not a power of 2", a.alignment));
    CallStatus s = backend_->ReserveAddress(a.bytes, a.alignment, a.hint, &r.address);
    if (!s.ok()) return Done(s);
    if (!RangeInside(r.address, a.bytes, limits_.window_base, limits_.window_bytes)) {  // Never trusted blindly.
      backend_->FreeAddress(r.address, a.bytes);
      return Done({CUDA_ERROR_UNKNOWN, "the device reserved address space outside the session's window"});
    }
    reservations_[r.address] = a.bytes;
    return Ok();
  }

  Reply Handle(const calls::AddressFree::Args& a, calls::AddressFree::Results&) {
    auto it = reservations_.find(a.address);
    if (it == reservations_.end() || it->second != a.bytes) {
      return Invalid(fmt::format("{} is not a reservation of this session", DescribeRange(a.address, a.bytes)));
    }
    auto m = mappings_.lower_bound(a.address);
    if (m != mappings_.end() && m->first < a.address + a.bytes) {
      return Invalid(fmt::format("{} still has memory mapped at 0x{:x}", DescribeRange(a.address, a.bytes),
                                 m->first));
    }
    reservations_.erase(it);
    return Done(backend_->FreeAddress(a.address, a.bytes));
  }

  Reply Handle(const calls::MemCreate::Args& a, calls::MemCreate::Results& r) {
    if (a.bytes == 0 || a.bytes % kMappingGranularity != 0 || a.bytes > kMaxAllocBytes) {
      return Invalid(fmt::format("physical memory comes in multiples of {} bytes, not {}", kMappingGranularity,
                                 a.bytes));
    }
    if (!quota_->Take(a.bytes)) return Done({CUDA_ERROR_OUT_OF_MEMORY, QuotaMessage(a.bytes)});
    PhysicalRef memory;
    CallStatus s = backend_->CreatePhysical(a.bytes, &memory);
    if (!s.ok()) {
      quota_->Give(a.bytes);
      return Done(s);
    }
    r.memory.value = physical_.Add({memory, a.bytes});
    MemoryChanged();
    return Ok();
  }

  Reply Handle(const calls::MemRelease::Args& a, calls::MemRelease::Results&) {
    auto it = physical_.find(a.memory.value);
    if (it == physical_.end() || it->second.released) return Unknown("physical memory");
    it->second.released = true;
    return Done(DropPhysicalIfUnused(a.memory.value));
  }

  Reply Handle(const calls::MemMap::Args& a, calls::MemMap::Results&) {
    auto it = physical_.find(a.memory.value);
    if (it == physical_.end() || it->second.released) return Unknown("physical memory");
    Physical& memory = it->second;
    if (a.bytes == 0 || a.address % kMappingGranularity != 0 || a.bytes % kMappingGranularity != 0 ||
        a.offset % kMappingGranularity != 0) {
      return Invalid(fmt::format("{} at offset {}: mappings start and end on {}-byte boundaries",
                                 DescribeRange(a.address, a.bytes), a.offset, kMappingGranularity));
    }
    if (!RangeInside(a.offset, a.bytes, 0, memory.bytes)) {
      return Invalid(fmt::format("bytes {}..{} lie beyond the {}-byte physical allocation", a.offset,
                                 a.offset + a.bytes, memory.bytes));
    }
    if (!InsideOneOf(reservations_, a.address, a.bytes, [](uint64_t size) { return size; })) {
      return Invalid(fmt::format("{} is not inside one reservation of this session", DescribeRange(a.address, a.bytes)));
    }
    if (OverlapsAnyRange(mappings_, a.address, a.bytes, MappingBytes)) return Invalid(fmt::format("{} is already mapped (in part)", DescribeRange(a.address, a.bytes)));
    CallStatus s = backend_->Map(a.address, a.bytes, memory.ref, a.offset);
    if (!s.ok()) return Done(s);
    mappings_[a.address] = {a.bytes, a.memory.value, a.offset};
    ++memory.mappings;
    return Ok();
  }

  Reply Handle(const calls::MemUnmap::Args& a, calls::MemUnmap::Results&) {
    // Whole mappings only, back to back from `address` to its end.
    std::map<uint64_t, Mapping>::iterator first, last;
    if (!WholeRangesRun(mappings_, a.address, a.bytes, MappingBytes, &first, &last)) {
      return Invalid(fmt::format("{} is not exactly a run of whole mappings", DescribeRange(a.address, a.bytes)));
    }
    CallStatus s = backend_->Unmap(a.address, a.bytes);
    std::vector<uint64_t> memories;
    for (auto it = first; it != last; ++it) memories.push_back(it->second.memory);
    mappings_.erase(first, last);
    for (uint64_t id : memories) {
      --physical_.find(id)->second.mappings;
      if (CallStatus dropped = DropPhysicalIfUnused(id); s.ok()) s = dropped;
    }
    return Done(s);
  }

  // ---- Modules and kernels.

  Reply Handle(const calls::ModuleLoad::Args& a, calls::ModuleLoad::Results& r) {
    // The message is all the worker has of an image. A loader reads an image of size 0 as one of unknown length (a C
    // string, or a container whose header gives its size: read past the message's end), and a fatbin wrapper holds
    // a pointer into the client's own process (which the worker would follow): clients send what it points at.
    if (a.image.size == 0) return Done(CallStatus{CUDA_ERROR_INVALID_IMAGE, "moduleLoad: the image is empty"});
    if (uint32_t magic = 0; a.image.size >= sizeof(magic) &&
                            (std::memcpy(&magic, a.image.data, sizeof(magic)), magic == kFatbinWrapperMagic)) {
      return Done(CallStatus{CUDA_ERROR_INVALID_IMAGE,
                             "moduleLoad: a fatbin wrapper holds a pointer into the client's process; send the "
                             "fatbin container it points at"});
    }
    ModuleRef module;
    CallStatus s = backend_->LoadModule(a.image.data, a.image.size, &module);
    if (!s.ok()) {
      GP_INFO("session", "module load refused: {}", s.message());
      return Done(s);
    }
    // What the driver took for it (code, constants, variables) is the slice's memory like an allocation.
    const uint64_t held = backend_->DriverHeldBytes();
    if (!ChargeDriver(held)) {
      backend_->UnloadModule(module);
      std::string why = "module load: the driver's memory for the module and the session's context: " +
                        QuotaMessage(held - driver_charged_);
      GP_INFO("session", "{}", why);
      return Done({CUDA_ERROR_OUT_OF_MEMORY, why});
    }
    // The image is kept for a checkpoint (session_image.h): the client's image is all there is of the module as loaded.
    r.module.value = modules_.Add({module, std::vector<uint8_t>(a.image.data, a.image.data + a.image.size)});
    return Ok();
  }

  Reply Handle(const calls::ModuleUnload::Args& a, calls::ModuleUnload::Results&) {
    uint64_t handle = a.module.value;
    LoadedModule module;
    if (!modules_.Take(handle, &module)) return Unknown("module");
    // Its functions and variables go first: no handle may outlive the code or memory it names.
    functions_.EraseIf([handle](uint64_t, const Function& f) { return f.module == handle; });
    for (auto g = globals_.begin(); g != globals_.end();) {
      g = g->second.module == handle ? globals_.erase(g) : std::next(g);
    }
    CallStatus s = backend_->UnloadModule(module.ref);
    ChargeDriver(backend_->DriverHeldBytes());  // Less than before: always fits.
    return Done(s);
  }

  Reply Handle(const calls::ModuleGetFunction::Args& a, calls::ModuleGetFunction::Results& r) {
    auto it = modules_.find(a.module.value);
    if (it == modules_.end()) return Unknown("module");
    FunctionRef fn;
    KernelInfo info;
    CallStatus s = backend_->GetFunction(it->second.ref, a.name, &fn, &info);
    if (!s.ok()) return Done(s);
    // Boilerplate by nature: field by field from the backend's answer to the wire's.
    r.params = info.params;
    r.shared_bytes = info.shared_bytes;
    r.local_bytes = info.local_bytes;
    r.num_regs = info.num_regs;
    r.ptx_version = info.ptx_version;
    r.max_threads_per_block = info.max_threads_per_block;
    r.function.value = functions_.Add({it->first, fn, std::move(info), a.name, {}});
    return Ok();
  }

  Reply Handle(const calls::ModuleGetGlobal::Args& a, calls::ModuleGetGlobal::Results& r) {
    auto it = modules_.find(a.module.value);
    if (it == modules_.end()) return Unknown("module");
    CallStatus s = backend_->GetGlobal(it->second.ref, a.name, &r.address, &r.bytes);
    // The variable is this session's memory until its module is unloaded: copies may reach it.
    if (s.ok() && r.bytes > 0) globals_[r.address] = {r.bytes, it->first};
    return Done(s);
  }

  Reply Handle(const calls::Launch::Args& a, calls::Launch::Results&) {
    auto it = functions_.find(a.function.value);
    if (it == functions_.end()) return Unknown("function");
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    // A short buffer would leave parameters (pointers among them) unset or, worse, read past the message.
    std::string error;
    if (!ParamsFit(it->second.info.params, a.params.size, [](const KernelParam& p) { return p.offset; },
                   [](const KernelParam& p) { return p.size; }, &error)) {
      return Invalid(error);
    }
    if (a.cooperative > 1) return Invalid(fmt::format("cooperative flag {}", a.cooperative));
    LaunchShape shape{a.grid, a.block, a.shared_bytes, a.cluster, a.cooperative != 0};
    const Function& f = it->second;
    // Local memory grows at launch, for every thread the device can hold: refused before it runs if the growth
    // does not fit, charged before it runs if it does (the driver never shrinks it again).
    if (const uint64_t held = backend_->DriverHeldBytesWithLaunch(f.info); held > driver_charged_) {
      if (!ChargeDriver(held)) {
        return Done({CUDA_ERROR_OUT_OF_MEMORY,
                     fmt::format("launch: the local memory of a kernel needing {} bytes per thread, for every thread "
                                 "the device holds at once: {}",
                                 f.info.local_bytes, QuotaMessage(held - driver_charged_))});
      }
    }
    CallStatus s = Submit(stream, [&] {
      return backend_->Launch(f.fn, f.info, shape, stream, a.params.data, a.params.size);
    });
    if (!s.ok()) ChargeDriver(backend_->DriverHeldBytes());  // A launch the driver refused grew nothing.
    return Done(s);
  }

  Reply Handle(const calls::OccupancyMaxActiveClusters::Args& a, calls::OccupancyMaxActiveClusters::Results& r) {
    auto it = functions_.find(a.function.value);
    if (it == functions_.end()) return Unknown("function");
    LaunchShape shape{a.grid, a.block, a.shared_bytes, a.cluster};
    return Done(backend_->MaxActiveClusters(it->second.fn, shape, &r.clusters));
  }

  Reply Handle(const calls::FunctionSetAttribute::Args& a, calls::FunctionSetAttribute::Results&) {
    auto it = functions_.find(a.function.value);
    if (it == functions_.end()) return Unknown("function");
    CallStatus s = backend_->SetFunctionAttribute(it->second.fn, a.attribute, a.value);
    if (s.ok()) RecordAttribute(&it->second.attributes, a.attribute, a.value);  // For a checkpoint.
    return Done(s);
  }

  // ---- Streams and events.

  // Boilerplate by nature, with the other objects' create and destroy calls below: one backend call, one handle.
  Reply Handle(const calls::StreamCreate::Args&, calls::StreamCreate::Results& r) {
    StreamRef stream;
    CallStatus s = backend_->CreateStream(&stream);
    if (s.ok()) r.stream.value = streams_.Add(stream);
    return Done(s);
  }

  Reply Handle(const calls::StreamDestroy::Args& a, calls::StreamDestroy::Results&) {
    StreamRef stream;
    if (!streams_.Take(a.stream.value, &stream)) return Unknown("stream");
    return Done(backend_->DestroyStream(stream));  // Returns at once; queued work still completes.
  }

  Reply Handle(const calls::StreamSynchronize::Args& a, calls::StreamSynchronize::Results& r) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    return AfterReached(stream, a.stream).then([this, &r](CallStatus s) {
      r.output = backend_->TakeOutput();
      return s;
    });
  }

  Reply Handle(const calls::StreamQuery::Args& a, calls::StreamQuery::Results& r) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    r.output = backend_->TakeOutput();
    return Done(backend_->QueryStream(stream));
  }

  Reply Handle(const calls::StreamWaitEvent::Args& a, calls::StreamWaitEvent::Results&) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    auto e = events_.find(a.event.value);
    if (e == events_.end()) return Unknown("event");
    return Done(backend_->StreamWaitEvent(stream, e->second));
  }

  Reply Handle(const calls::Utilization::Args&, calls::Utilization::Results& r) {
    return Done(backend_->Utilization(&r.gpu, &r.memory));
  }

  Reply Handle(const calls::StreamWaitValue::Args& a, calls::StreamWaitValue::Results&) {
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    if (a.width != 4 && a.width != 8) return Invalid(fmt::format("stream wait on {} bytes (4 or 8)", a.width));
    constexpr uint32_t kConditions = 0x3, kFlush = 1u << 30;
    if ((a.flags & ~(kConditions | kFlush)) != 0) return Invalid(fmt::format("stream wait flags 0x{:x}", a.flags));
    if (a.address % a.width != 0) {
      return Invalid(fmt::format("stream wait address 0x{:x} is not aligned to {} bytes", a.address, a.width));
    }
    if (a.width == 4 && a.value > UINT32_MAX) return Invalid("a 32-bit stream wait on a 64-bit value");
    if (CallStatus s = Owned(a.address, a.width, "stream wait address"); !s.ok()) return Done(s);
    // No remote (NIC) writes reach a slice, so a flush of them has nothing to do; a GPU without the platform support
    // would refuse the flag (CUDA_ERROR_NOT_SUPPORTED on an H100, driver 580), so it stops here.
    return Done(Submit(stream, [&] {
      return backend_->StreamWaitValue(stream, a.address, a.value, a.width, a.flags & ~kFlush);
    }));
  }

  // ---- Texture and surface objects. The session checks the description and that every texel lies in its own
  // memory; the backend makes the object (device memory it reserves for one counts against the quota like an
  // allocation; the emulated device keeps its objects in a table of its own and reserves none). Handles are the
  // backend's values, which kernels receive as they are, so the server keeps the set this session created: only
  // those may be destroyed.

  Reply Handle(const calls::TexObjectCreate::Args& a, calls::TexObjectCreate::Results& r) {
    TextureSpec spec;
    std::string error;
    if (!TextureSpecOf(a, &spec, &error)) return Invalid(error);
    uint64_t span = 0;
    if (!TextureSpan(spec, &span)) return Invalid("texture extents out of range");
    if (CallStatus s = Owned(spec.address, span, spec.surface ? "surface memory" : "texture memory"); !s.ok()) {
      return Done(s);
    }
    uint64_t handle = 0, reserved = 0;
    CallStatus s = backend_->CreateTexture(spec, &handle, &reserved);
    if (!s.ok()) return Done(s);
    if (!quota_->Take(reserved)) {
      backend_->DestroyTexture(handle);
      return Done({CUDA_ERROR_OUT_OF_MEMORY, QuotaMessage(reserved)});
    }
    textures_[handle] = {reserved, spec};
    MemoryChanged();
    r.handle = handle;
    return Ok();
  }

  Reply Handle(const calls::TexObjectDestroy::Args& a, calls::TexObjectDestroy::Results&) {
    auto it = textures_.find(a.handle);
    if (it == textures_.end()) {
      return Done({CUDA_ERROR_INVALID_HANDLE,
                   fmt::format("0x{:x} is not a texture or surface object of this session", a.handle)});
    }
    quota_->Give(it->second.reserved);
    textures_.erase(it);
    MemoryChanged();
    return Done(backend_->DestroyTexture(a.handle));
  }

  // The wire's description as a TextureSpec, checked for what every device requires; false with `*error`.
  static bool TextureSpecOf(const calls::TexObjectCreate::Args& a, TextureSpec* spec, std::string* error) {
    spec->surface = a.surface != 0;
    if (a.resource > 2) return *error = fmt::format("unknown texture resource kind {}", a.resource), false;
    spec->resource = static_cast<TextureSpec::Resource>(a.resource);
    if (ChannelBytes(a.format) == 0) {
      return *error = fmt::format("texel format 0x{:x} is not supported", a.format), false;
    }
    if (a.channels != 1 && a.channels != 2 && a.channels != 4) {
      return *error = fmt::format("a texel has 1, 2 or 4 channels, not {}", a.channels), false;
    }
    if (a.dims < 1 || a.dims > 3 || (a.layers != 0 && a.dims == 3)) {
      return *error = fmt::format("a texture has 1, 2 or 3 dimensions (layered: 1 or 2), not {}", a.dims), false;
    }
    if (a.width == 0 || a.height == 0 || a.depth == 0 || (a.dims < 2 && a.height != 1) || (a.dims < 3 && a.depth != 1)) {
      return *error = fmt::format("texture extents {} x {} x {} do not fit {} dimension(s)", a.width, a.height,
                                  a.depth, a.dims), false;
    }
    if (a.filter > CU_TR_FILTER_MODE_LINEAR) return *error = fmt::format("filter mode {}", a.filter), false;
    for (int i = 0; i < 3; ++i) {
      spec->address_mode[i] = (a.address_modes >> (8 * i)) & 0xff;
      if (spec->address_mode[i] > CU_TR_ADDRESS_MODE_BORDER) {
        return *error = fmt::format("address mode {}", spec->address_mode[i]), false;
      }
    }
    spec->dims = a.dims;
    spec->format = a.format;
    spec->channels = a.channels;
    spec->address = a.address;
    spec->pitch = a.pitch;
    spec->slice_pitch = a.slice_pitch;
    spec->width = a.width;
    spec->height = a.height;
    spec->depth = a.depth;
    spec->layers = a.layers;
    spec->filter_mode = a.filter;
    spec->flags = a.flags;
    spec->border[0] = a.border0;
    spec->border[1] = a.border1;
    spec->border[2] = a.border2;
    spec->border[3] = a.border3;
    return true;
  }

  // Bytes from the texture's address to the end of its last texel; false when rows or slices overlap their
  // predecessors' texels or the span exceeds any device.
  static bool TextureSpan(const TextureSpec& t, uint64_t* span) {
    const unsigned __int128 row = static_cast<unsigned __int128>(t.width) * ChannelBytes(t.format) * t.channels;
    const uint32_t slices = t.layers ? t.layers : t.depth;
    if (t.height > 1 && t.pitch < row) return false;
    if (slices > 1 && t.slice_pitch < static_cast<unsigned __int128>(t.pitch) * t.height) return false;
    const unsigned __int128 bytes = static_cast<unsigned __int128>(slices - 1) * t.slice_pitch +
                                    static_cast<unsigned __int128>(t.height - 1) * t.pitch + row;
    if (bytes > kMaxAllocBytes) return false;
    *span = static_cast<uint64_t>(bytes);
    return true;
  }

  Reply Handle(const calls::EventCreate::Args&, calls::EventCreate::Results& r) {
    EventRef event;
    CallStatus s = backend_->CreateEvent(&event);
    if (s.ok()) r.event.value = events_.Add(event);
    return Done(s);
  }

  Reply Handle(const calls::EventDestroy::Args& a, calls::EventDestroy::Results&) {
    EventRef event;
    if (!events_.Take(a.event.value, &event)) return Unknown("event");
    return Done(backend_->DestroyEvent(event));
  }

  Reply Handle(const calls::EventRecord::Args& a, calls::EventRecord::Results&) {
    auto e = events_.find(a.event.value);
    if (e == events_.end()) return Unknown("event");
    StreamRef stream;
    if (!FindStream(a.stream, &stream)) return Unknown("stream");
    return Done(backend_->RecordEvent(e->second, stream));
  }

  Reply Handle(const calls::EventSynchronize::Args& a, calls::EventSynchronize::Results& r) {
    auto e = events_.find(a.event.value);
    if (e == events_.end()) return Unknown("event");
    uint64_t id = a.event.value;
    EventRef event = e->second;
    auto recorded = [&](std::function<void()> done) { return backend_->WhenRecorded(event, std::move(done)); };
    return CalledBack(StreamRef(), recorded).then([this, &r, id]() {
      r.output = backend_->TakeOutput();
      if (revoked_) return Revoked();
      // Looked up again: destroyed while we waited means it had completed (or was never waited on) as well.
      auto e = events_.find(id);
      return e != events_.end() ? backend_->SettledEvent(e->second) : backend_->Settled(StreamRef());
    });
  }

  Reply Handle(const calls::EventQuery::Args& a, calls::EventQuery::Results&) {
    auto e = events_.find(a.event.value);
    if (e == events_.end()) return Unknown("event");
    return Done(backend_->QueryEvent(e->second));
  }

  Reply Handle(const calls::EventElapsed::Args& a, calls::EventElapsed::Results& r) {
    auto start = events_.find(a.start.value), end = events_.find(a.end.value);
    if (start == events_.end() || end == events_.end()) return Unknown("event");
    return Done(backend_->ElapsedMs(start->second, end->second, &r.ms));
  }

  Reply Handle(const calls::Synchronize::Args&, calls::Synchronize::Results& r) {
    return EveryStreamReached().then([this, &r]() {
      r.output = backend_->TakeOutput();
      return revoked_ ? Revoked() : backend_->Settled(StreamRef());
    });
  }

  // ---- Helpers.

  struct Function {
    uint64_t module;  // The handle of its module: unloading the module erases it.
    FunctionRef fn;
    KernelInfo info;
    std::string name;                               // For a checkpoint: how to find it again,
    std::vector<std::pair<int, int>> attributes;  // and what was set on it.
  };
  struct LoadedModule {
    ModuleRef ref;
    std::vector<uint8_t> image;  // As the client sent it, for a checkpoint: all there is of the module as loaded.
  };
  struct Texture {
    uint64_t reserved;  // Device memory the backend took for it, counted in quota_.
    TextureSpec spec;   // What it was made of, for a checkpoint.
  };
  struct Global {
    uint64_t bytes;
    uint64_t module;  // The handle of its module.
  };
  struct Physical {
    PhysicalRef ref;
    uint64_t bytes = 0;
    int mappings = 0;       // Mappings still using it.
    bool released = false;  // The client gave it up: it goes with its last mapping.
  };
  struct Mapping {
    uint64_t bytes;
    uint64_t memory;       // The handle of its physical memory.
    uint64_t offset = 0;   // Where in it the mapping starts.
  };

  // Frees physical memory the client released once nothing maps it any more; its bytes return to the quota.
  CallStatus DropPhysicalIfUnused(uint64_t id) {
    auto it = physical_.find(id);
    if (it == physical_.end() || !it->second.released || it->second.mappings > 0) return CallStatus::Ok();
    Physical memory;
    physical_.Take(id, &memory);
    quota_->Give(memory.bytes);
    MemoryChanged();
    return backend_->ReleasePhysical(memory.ref);
  }

  static uint64_t MappingBytes(const Mapping& m) { return m.bytes; }

  // Submits work with `submit` on `stream`, within the device's turn when the server takes turns for it.
  template <typename Submission>
  CallStatus Submit(StreamRef stream, Submission submit) {
    shared_copies_tail_ = kNoStream;  // Other work now follows any shared copies.
    if (!turns_) return submit();
    turns_->BeforeSubmit();
    CallStatus s = submit();
    // The turn is held until the work has run: the device's time is charged to whoever keeps it busy.
    std::shared_ptr<SubmissionTurns> turns = turns_;
    if (!s.ok() || !backend_->WhenRan(stream, [turns] { turns->Completed(); }).ok()) turns_->Completed();
    return s;
  }

  bool FindStream(session::StreamId id, StreamRef* out) {
    if (id.value == 0) {
      *out = StreamRef();
      return true;
    }
    auto it = streams_.find(id.value);
    if (it == streams_.end()) return false;
    *out = it->second;
    return true;
  }

  // Resolves once the device has run everything queued on every stream of the session, the default stream included.
  kj::Promise<void> EveryStreamReached() {
    kj::Vector<kj::Promise<void>> all;
    all.add(Reached(StreamRef()));
    for (auto& [id, stream] : streams_) all.add(Reached(stream));
    return kj::joinPromises(all.releaseAsArray());
  }

  // Resolves once the device has run everything queued on `stream` so far, without blocking the event loop.
  kj::Promise<void> Reached(StreamRef stream) {
    auto reached = [&](std::function<void()> done) { return backend_->WhenReached(stream, std::move(done)); };
    return CalledBack(stream, reached);
  }

  // Resolves once the callback that `start` hands to the device has run. The callback owns only a fulfiller, never
  // the session, and travels to the device's thread, which fulfils it there: the session, its objects or its lease
  // may end meanwhile. If `start` fails nothing will run (a faulted device: Settled reports why); a callback the
  // device dropped (the session was reset under it) ends the wait, not the call. When a client waits for the
  // call's reply, the event loop is woken a little ahead of the callback (device_wait.h's WakeAhead).
  template <typename Start>
  kj::Promise<void> CalledBack(StreamRef stream, Start start) {
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    auto wait = std::make_shared<DeviceWait>();
    wait->done = kj::mv(paf.fulfiller);
    if (!start([wait] { wait->Fulfil(); }).ok()) return kj::READY_NOW;
    kj::Promise<void> done = paf.promise.catch_([](kj::Exception&&) {});
    // A posted call's client waits for nothing: its wait may be slept through.
    if (!awaited_) return done;
    return WakeAhead(*backend_, stream, std::move(wait), kj::mv(done));
  }

  // The status of a call that waited for `stream` (handle `id`): the lease may have ended, or the stream been
  // destroyed, meanwhile.
  Reply AfterReached(StreamRef stream, session::StreamId id) {
    return Reached(stream).then([this, id]() {
      if (revoked_) return Revoked();
      StreamRef now;
      return FindStream(id, &now) ? backend_->Settled(now) : backend_->Settled(StreamRef());
    });
  }

  // Whether the session owns [address, address + bytes): inside one of its allocations or module variables. The
  // device's address space also holds other tenants' memory (on a GPU) or the session's free space (emulated):
  // neither may be reached.
  CallStatus Owned(uint64_t address, uint64_t bytes, const char* what) const {
    if (InsideOneOf(allocations_, address, bytes, [](uint64_t size) { return size; })) return CallStatus::Ok();
    if (InsideOneOf(globals_, address, bytes, [](const Global& g) { return g.bytes; })) return CallStatus::Ok();
    if (InsideAdjacentRanges(mappings_, address, bytes, MappingBytes)) return CallStatus::Ok();
    if (!RangeInside(address, bytes, limits_.window_base, limits_.window_bytes)) {
      return {CUDA_ERROR_INVALID_VALUE,
              fmt::format("{}: {} lies outside this session's window [0x{:x}, 0x{:x})", what,
                          DescribeRange(address, bytes), limits_.window_base,
                          limits_.window_base + limits_.window_bytes)};
    }
    return {CUDA_ERROR_INVALID_VALUE,
            fmt::format("{}: {} is not inside one allocation of this session", what, DescribeRange(address, bytes))};
  }

  // What is left of the slice's quota, which the lease's other sessions on the slice share.
  uint64_t QuotaLeft() const { return quota_->limit() - std::min(quota_->limit(), quota_->used()); }
  std::string QuotaMessage(uint64_t bytes) const {
    uint64_t used = quota_->used(), mine = quota_->mine();
    if (used == mine) {
      return fmt::format("{} bytes do not fit in the slice's memory ({} of {} bytes in use)", bytes, used,
                         quota_->limit());
    }
    return fmt::format("{} bytes do not fit in the slice's memory ({} of {} bytes in use, {} of them by other "
                       "processes of the lease)", bytes, used, quota_->limit(), used - mine);
  }

  // ---- Checkpoint and restore (session_image.h). Both run on the session's thread, between calls.

  CallStatus Checkpoint(SessionImage* image) {
    if (revoked_) return Revoked();
    if (in_flight_ > 0 || !backend_->Quiet()) {
      return {CUDA_ERROR_NOT_READY, "checkpoint: the session has work queued or running; it can be taken when quiet"};
    }
    if (CallStatus s = NotYetRestorable(); !s.ok()) return s;
    if (!textures_.empty() && !backend_->PlacesTextureObjects()) {
      return {CUDA_ERROR_NOT_SUPPORTED, "checkpoint: the session holds texture or surface objects, whose handles this "
                                        "device's driver chooses, so a restore could not give them back"};
    }
    SessionImage taken;
    taken.window_base = limits_.window_base;
    taken.window_bytes = limits_.window_bytes;
    // Asked for, the allocations' bytes stay in the device's memory file for the next worker; mappings' physical
    // memory is not in that file, so a session with any travels whole.
    taken.memory_stays = image->memory_stays && backend_->MemoryShareable() && mappings_.empty() &&
                         physical_.begin() == physical_.end();
    for (const auto& [address, reserved] : allocations_) {
      SessionImage::Memory memory{address, reserved, {}};
      if (!taken.memory_stays) {
        if (CallStatus s = ReadIdle(address, reserved, &memory.data); !s.ok()) return s;
      }
      taken.allocations.push_back(std::move(memory));
    }
    for (auto& [handle, module] : modules_) {
      SessionImage::Module saved{handle, module.image, {}};
      std::vector<std::pair<uint64_t, uint64_t>> placed;
      if (CallStatus s = backend_->ModuleVariables(module.ref, module.image, &placed); !s.ok()) return s;
      for (const auto& [address, bytes] : placed) {
        SessionImage::Memory variable{address, bytes, {}};
        if (CallStatus s = ReadIdle(address, bytes, &variable.data); !s.ok()) return s;
        saved.variables.push_back(std::move(variable));
      }
      taken.modules.push_back(std::move(saved));
    }
    for (auto& [handle, function] : functions_) {
      taken.functions.push_back({handle, function.module, function.name, function.attributes});
    }
    for (const auto& [address, global] : globals_) taken.globals.push_back({address, global.bytes, global.module});
    for (auto& [handle, stream] : streams_) taken.streams.push_back(handle);
    for (auto& [handle, event] : events_) taken.events.push_back(handle);
    for (const auto& [handle, texture] : textures_) taken.textures.push_back({handle, texture.spec});
    for (const auto& [address, bytes] : reservations_) taken.reservations.push_back({address, bytes});
    for (auto& [handle, memory] : physical_) taken.physical.push_back({handle, memory.bytes, memory.released});
    for (const auto& [address, mapping] : mappings_) {
      SessionImage::Mapping saved{address, mapping.bytes, mapping.memory, mapping.offset, {}};
      if (CallStatus s = ReadIdle(address, mapping.bytes, &saved.data); !s.ok()) return s;
      taken.mappings.push_back(std::move(saved));
    }
    if (!backend_->PlacesModuleVariables()) {
      for (const SessionImage::Module& module : taken.modules) {
        taken.variables_placed_by_driver |= !module.variables.empty();
      }
    }
    *image = std::move(taken);
    return CallStatus::Ok();
  }

  CallStatus Restore(const SessionImage& image) {
    if (revoked_) return Revoked();
    if (!allocations_.empty() || modules_.begin() != modules_.end() || streams_.begin() != streams_.end() ||
        events_.begin() != events_.end() || !reservations_.empty() || physical_.begin() != physical_.end() ||
        !textures_.empty()) {
      return {CUDA_ERROR_INVALID_VALUE, "restore: only a fresh session can become another"};
    }
    if (image.window_base != limits_.window_base || image.window_bytes != limits_.window_bytes) {
      return {CUDA_ERROR_INVALID_VALUE,
              fmt::format("restore: the image's window [0x{:x}, +0x{:x}) is not this session's [0x{:x}, +0x{:x})",
                          image.window_base, image.window_bytes, limits_.window_base, limits_.window_bytes)};
    }
    if (image.memory_stays && !backend_->MemoryKept()) {
      return {CUDA_ERROR_INVALID_VALUE, "restore: the image left its memory where it was, and this device was not "
                                        "given that memory"};
    }
    for (const SessionImage::Memory& memory : image.allocations) {
      if (memory.bytes == 0 || memory.data.size() != (image.memory_stays ? 0 : memory.bytes) ||
          !RangeInside(memory.address, memory.bytes, limits_.window_base, limits_.window_bytes)) {
        return {CUDA_ERROR_INVALID_VALUE, "restore: an allocation of the image lies outside the session's window"};
      }
      uint64_t reserved = 0;
      if (CallStatus s = backend_->AllocAt(memory.address, memory.bytes, &reserved); !s.ok()) return s;
      if (!quota_->Take(reserved)) {
        backend_->Free(memory.address, reserved);
        return {CUDA_ERROR_OUT_OF_MEMORY, "restore: " + QuotaMessage(reserved)};
      }
      allocations_[memory.address] = reserved;
      if (image.memory_stays) continue;  // Its bytes are there already.
      if (CallStatus s = WriteIdle(memory.address, memory.data); !s.ok()) return s;
    }
    MemoryChanged();
    std::map<uint64_t, Global> variables;  // Where the restored modules placed their variables, as the device says.
    for (const SessionImage::Module& saved : image.modules) {
      std::vector<uint64_t> placements;
      for (const SessionImage::Memory& variable : saved.variables) placements.push_back(variable.address);
      ModuleRef module;
      if (CallStatus s = backend_->LoadModuleAt(saved.image.data(), saved.image.size(), placements, &module);
          !s.ok()) {
        return s;
      }
      if (!modules_.AddAt(saved.handle, {module, saved.image})) {
        backend_->UnloadModule(module);
        return {CUDA_ERROR_INVALID_VALUE, fmt::format("restore: module handle {} twice", saved.handle)};
      }
      if (!ChargeDriver(backend_->DriverHeldBytes())) {
        return {CUDA_ERROR_OUT_OF_MEMORY, "restore: the modules' memory: " + QuotaMessage(backend_->DriverHeldBytes())};
      }
      // The device's word for each variable's size, not the image's: its bytes must fit the variable exactly.
      std::vector<std::pair<uint64_t, uint64_t>> placed;
      if (CallStatus s = backend_->ModuleVariables(module, saved.image, &placed); !s.ok()) return s;
      for (size_t i = 0; i < saved.variables.size(); ++i) {
        if (i >= placed.size() || placed[i].first != saved.variables[i].address ||
            placed[i].second != saved.variables[i].data.size()) {
          return {CUDA_ERROR_INVALID_VALUE, "restore: a module variable's bytes are not the variable's size"};
        }
        if (CallStatus s = WriteIdle(placed[i].first, saved.variables[i].data); !s.ok()) return s;
        variables[placed[i].first] = {placed[i].second, saved.handle};
      }
    }
    for (const SessionImage::Function& saved : image.functions) {
      auto module = modules_.find(saved.module);
      if (module == modules_.end()) return {CUDA_ERROR_INVALID_VALUE, "restore: a function of no module"};
      Function function{saved.module, {}, {}, saved.name, saved.attributes};
      if (CallStatus s = backend_->GetFunction(module->second.ref, saved.name, &function.fn, &function.info);
          !s.ok()) {
        return s;
      }
      for (const auto& [attribute, value] : saved.attributes) {
        if (CallStatus s = backend_->SetFunctionAttribute(function.fn, attribute, value); !s.ok()) return s;
      }
      if (!functions_.AddAt(saved.handle, std::move(function))) {
        return {CUDA_ERROR_INVALID_VALUE, fmt::format("restore: function handle {} twice", saved.handle)};
      }
    }
    // A variable the client looked up makes its bytes reachable by copies: only one of the module's own.
    for (const SessionImage::Global& global : image.globals) {
      auto in = variables.upper_bound(global.address);
      if (in == variables.begin() || (--in)->second.module != global.module ||
          !RangeInside(global.address, global.bytes, in->first, in->second.bytes)) {
        return {CUDA_ERROR_INVALID_VALUE, "restore: a looked-up variable that is not one of its module's"};
      }
      globals_[global.address] = {global.bytes, global.module};
    }
    if (CallStatus s = RestoreVirtualMemory(image); !s.ok()) return s;
    for (const SessionImage::Texture& texture : image.textures) {
      uint64_t span = 0;
      if (!TextureSpan(texture.spec, &span) ||
          !Owned(texture.spec.address, span, "a restored texture's memory").ok()) {
        return {CUDA_ERROR_INVALID_VALUE, "restore: a texture of the image lies outside the session's memory"};
      }
      uint64_t reserved = 0;
      if (CallStatus s = backend_->CreateTextureAt(texture.spec, texture.handle, &reserved); !s.ok()) return s;
      if (!quota_->Take(reserved)) {
        backend_->DestroyTexture(texture.handle);
        return {CUDA_ERROR_OUT_OF_MEMORY, "restore: " + QuotaMessage(reserved)};
      }
      textures_[texture.handle] = {reserved, texture.spec};
    }
    auto stream = [this](StreamRef* s) { return backend_->CreateStream(s); };
    auto drop_stream = [this](StreamRef s) { backend_->DestroyStream(s); };
    if (CallStatus s = RemakeUnder(image.streams, "stream", stream, drop_stream, &streams_); !s.ok()) return s;
    auto event = [this](EventRef* e) { return backend_->CreateEvent(e); };
    auto drop_event = [this](EventRef e) { backend_->DestroyEvent(e); };
    return RemakeUnder(image.events, "event", event, drop_event, &events_);
  }

  // Makes one object with `make` for each of `handles` and files it under that handle in `table` (`drop`: ends an
  // object the table refused).
  template <typename Ref, typename Make, typename Drop>
  static CallStatus RemakeUnder(const std::vector<uint64_t>& handles, const char* what, Make make, Drop drop,
                                HandleTable<Ref>* table) {
    for (uint64_t handle : handles) {
      Ref object;
      if (CallStatus s = make(&object); !s.ok()) return s;
      if (!table->AddAt(handle, object)) {
        drop(object);
        return {CUDA_ERROR_INVALID_VALUE, fmt::format("restore: {} handle {} twice", what, handle)};
      }
    }
    return CallStatus::Ok();
  }

  // Keeps the last value of each attribute only: a client that sets one a million times holds one entry.
  static void RecordAttribute(std::vector<std::pair<int, int>>* attributes, int attribute, int value) {
    for (auto& [known, last] : *attributes) {
      if (known == attribute) {
        last = value;
        return;
      }
    }
    attributes->emplace_back(attribute, value);
  }

  // What a checkpoint cannot carry: refused by name, never dropped. Physical memory is saved through its mappings,
  // so each must be mapped whole somewhere.
  CallStatus NotYetRestorable() {
    for (auto& [handle, memory] : physical_) {
      std::map<uint64_t, uint64_t> seen;  // Offset -> end, of the memory's mappings.
      for (const auto& [address, mapping] : mappings_) {
        if (mapping.memory != handle) continue;
        seen[mapping.offset] = std::max(seen[mapping.offset], mapping.offset + mapping.bytes);
      }
      uint64_t covered = 0;
      for (const auto& [offset, end] : seen) {
        if (offset > covered) break;
        covered = std::max(covered, end);
      }
      if (covered < memory.bytes) {
        return {CUDA_ERROR_NOT_SUPPORTED,
                fmt::format("checkpoint: physical memory {} is not mapped whole (bytes {}.. are mapped nowhere), so a "
                            "checkpoint cannot read it",
                            handle, covered)};
      }
    }
    return CallStatus::Ok();
  }

  // Restore's part for virtual memory: the reservations at their addresses, the physical memory under its handles,
  // the mappings where they were, then the bytes seen through them.
  CallStatus RestoreVirtualMemory(const SessionImage& image) {
    for (const SessionImage::Reservation& r : image.reservations) {
      uint64_t address = 0;
      if (CallStatus s = backend_->ReserveAddress(r.bytes, kMappingGranularity, r.address, &address); !s.ok()) return s;
      reservations_[address] = r.bytes;
      if (address != r.address) return {CUDA_ERROR_INVALID_VALUE, "restore: a reservation's address is taken"};
    }
    for (const SessionImage::Physical& p : image.physical) {
      if (!quota_->Take(p.bytes)) return {CUDA_ERROR_OUT_OF_MEMORY, "restore: " + QuotaMessage(p.bytes)};
      Physical memory{{}, p.bytes, 0, p.released};
      if (CallStatus s = backend_->CreatePhysical(p.bytes, &memory.ref); !s.ok()) {
        quota_->Give(p.bytes);
        return s;
      }
      if (!physical_.AddAt(p.handle, memory)) {
        backend_->ReleasePhysical(memory.ref);
        quota_->Give(p.bytes);
        return {CUDA_ERROR_INVALID_VALUE, fmt::format("restore: physical memory handle {} twice", p.handle)};
      }
    }
    MemoryChanged();
    for (const SessionImage::Mapping& m : image.mappings) {
      auto memory = physical_.find(m.memory);
      if (memory == physical_.end() || m.data.size() != m.bytes ||
          !InsideOneOf(reservations_, m.address, m.bytes, [](uint64_t size) { return size; })) {
        return {CUDA_ERROR_INVALID_VALUE, "restore: a mapping of no physical memory, or outside the reservations"};
      }
      if (CallStatus s = backend_->Map(m.address, m.bytes, memory->second.ref, m.offset); !s.ok()) return s;
      mappings_[m.address] = {m.bytes, m.memory, m.offset};
      ++memory->second.mappings;
    }
    for (const SessionImage::Mapping& m : image.mappings) {
      if (CallStatus s = WriteIdle(m.address, m.data); !s.ok()) return s;
    }
    return CallStatus::Ok();
  }

  // Device memory read or written in place while the device is idle (a checkpoint's or a restore's).
  CallStatus ReadIdle(uint64_t address, uint64_t bytes, std::vector<uint8_t>* out) {
    CallStatus s = backend_->ReadIdle(address, bytes, out);
    return s.ok() ? s : CallStatus{s.code(), "checkpoint: " + s.message()};
  }
  CallStatus WriteIdle(uint64_t address, const std::vector<uint8_t>& data) {
    CallStatus s = backend_->WriteIdle(address, data.data(), data.size());
    return s.ok() ? s : CallStatus{s.code(), "restore: " + s.message()};
  }

  // The lease ended: every object goes now, and every later call fails (Serve checks revoked_ first).
  void Revoke(const std::string& why) {
    revoked_ = true;
    revoked_why_ = why;
    functions_.clear();
    globals_.clear();
    modules_.clear();
    streams_.clear();
    events_.clear();
    allocations_.clear();
    reservations_.clear();
    mappings_.clear();
    physical_.clear();
    textures_.clear();
    backend_->Reset();
    quota_->GiveAll();  // After the device freed it.
    driver_charged_ = 0;
    MemoryChanged();
  }

  // Brings the slice's charge for the driver's own memory for the session (DeviceBackend::DriverHeldBytes) to
  // `held`: takes the growth, gives back what shrank. False, with nothing changed, when the growth does not fit.
  bool ChargeDriver(uint64_t held) {
    if (held > driver_charged_) {
      if (!quota_->Take(held - driver_charged_)) return false;
    } else if (held < driver_charged_) {
      quota_->Give(driver_charged_ - held);
    }
    if (held != driver_charged_) {
      driver_charged_ = held;
      MemoryChanged();
    }
    return true;
  }

  // The session's device memory changed: the agent's telemetry reads it from the meter.
  void MemoryChanged() { meter_->SetMemory(quota_->mine()); }

  std::unique_ptr<DeviceBackend> backend_;
  SessionLimits limits_;
  // The slice's memory quota: this session's allocations and physical memory take from it.
  std::shared_ptr<SliceQuota> quota_;
  uint64_t driver_charged_ = 0;  // Of quota_: the driver's own memory for the session (ChargeDriver).
  std::shared_ptr<SessionMeter> meter_;  // What the session does, for the agent's telemetry.
  std::shared_ptr<SessionControl> control_;
  std::shared_ptr<SubmissionTurns> turns_;  // Null: the device shares itself (or the session is alone).
  // Memory shared with the client on this host (UseSharedMemory); the device may use it until backend_ is gone.
  std::shared_ptr<kj::ArrayPtr<kj::byte>> shared_;
  // The stream (its handle) whose last submissions, since any other work of the session, are shared copies.
  static constexpr uint64_t kNoStream = ~uint64_t{0};
  uint64_t shared_copies_tail_ = kNoStream;
  // Staged copies whose completion the device could not report (a faulted device): kept until the session ends.
  std::vector<std::shared_ptr<std::vector<uint8_t>>> staged_for_good_;
  bool revoked_ = false;
  std::string revoked_why_;  // Why the lease ended, as the agent said; empty: it did not say.

  // What every call after the revocation answers: the program's next CUDA call says why its lease ended.
  CallStatus Revoked() const {
    return {CUDA_ERROR_INVALID_CONTEXT,
            fmt::format("the lease of this session ended: {}; its memory is freed",
                        revoked_why_.empty() ? "released, expired, or ended by an administrator or the agent's policy"
                                             : revoked_why_)};
  }
  // Whether the call being handled has a client waiting for its reply (not a posted call).
  bool awaited_ = false;
  // Where BulkLanding read the bytes of the copy it answered for, until that copy is served.
  uint8_t* landed_at_ = nullptr;
  uint64_t landed_bytes_ = 0;
  int in_flight_ = 0;  // Calls being served (ServeMessage) whose reply is not written yet.
  std::map<uint64_t, uint64_t> allocations_;    // Start -> reserved bytes: what memAlloc returned, not yet freed.
  std::map<uint64_t, Global> globals_;          // Module variables the client asked for (moduleGetGlobal).
  std::map<uint64_t, uint64_t> reservations_;   // Start -> bytes: address space of addressReserve.
  std::map<uint64_t, Mapping> mappings_;        // Start -> mapping of physical memory (memMap).
  HandleTable<Physical> physical_;              // memCreate's physical memory, counted in quota_.
  std::map<uint64_t, Texture> textures_;        // Texture and surface objects, by handle.
  HandleTable<LoadedModule> modules_;
  HandleTable<Function> functions_;
  HandleTable<StreamRef> streams_;
  HandleTable<EventRef> events_;
};

}  // namespace

kj::Own<wire::Session::Server> NewSessionServer(std::unique_ptr<DeviceBackend> backend, const SessionLimits& limits,
                                                std::shared_ptr<SessionControl> control,
                                                std::shared_ptr<DeviceTurns> submission_turns,
                                                FramedSession** framed) {
  auto server = kj::heap<SessionServer>(std::move(backend), limits, std::move(control), std::move(submission_turns));
  if (framed) *framed = server.get();
  return server;
}

namespace {
template <session::Mode kMode>
bool ModeIs(uint32_t ordinal) {
  switch (ordinal) {
#define GP_MODE(Name, method, number, mode, doc) \
  case number:                                   \
    return calls::Name::kMode == kMode;
    GP_SESSION_CALLS(GP_MODE)
#undef GP_MODE
    default:
      return false;
  }
}
}  // namespace

bool FramedSession::IsCall(uint32_t ordinal) {
  return ModeIs<session::Mode::kPosted>(ordinal) || ModeIs<session::Mode::kReply>(ordinal) ||
         ModeIs<session::Mode::kSync>(ordinal);
}
bool FramedSession::IsPosted(uint32_t ordinal) { return ModeIs<session::Mode::kPosted>(ordinal); }
bool FramedSession::IsSync(uint32_t ordinal) { return ModeIs<session::Mode::kSync>(ordinal); }

}  // namespace gpupool::backend
