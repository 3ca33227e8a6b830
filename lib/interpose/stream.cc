// Streams. A CUstream is a client object naming (slice, remote stream id); the NULL stream, CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD are remote stream 0 of the current context's slice. The _ptsz variants (programs built
// with --default-stream per-thread) map onto the same implementations. Generated from forward_spec.h.
#include <atomic>
#include <cstdlib>
#include <optional>

#include "core/log.h"
#include "driver.h"
#include "driver_newer.h"
#include "forward_spec.h"
#include "graph.h"
#include "host_functions.h"
#include "remote.h"

namespace gpupool::interpose {

CUresult StreamCreate(CUstream* out, unsigned int flags, int priority) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned int>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  int dev;
  if (CUresult r = remote.CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  uint64_t id = 0;
  if (int code = remote.session(dev)->StreamCreate(&id); code != 0) return remote.Fail(dev, code, "cuStreamCreate");
  auto* stream = new Stream{dev, id, flags, std::max(-5, std::min(0, priority)), true};
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.streams.insert(stream);
  *out = reinterpret_cast<CUstream>(stream);
  return CUDA_SUCCESS;
}

CUresult StreamDestroy(CUstream handle) {
  Remote& remote = Remote::Get();
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(handle, &dev, &sid); r != CUDA_SUCCESS) return r;
  if (sid == 0) return CUDA_ERROR_INVALID_HANDLE;  // A default stream.
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    reinterpret_cast<Stream*>(handle)->alive = false;  // Kept: stale handles are recognised, never freed memory.
  }
  if (int code = remote.session(dev)->StreamDestroy(sid); code != 0) return remote.Fail(dev, code, "cuStreamDestroy");
  return CUDA_SUCCESS;
}

// Fake devices: the default streams exist and are always idle.
CUresult FakeDefaultStream(CUstream handle) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (Driver::Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD ? CUDA_SUCCESS
                                                                                          : CUDA_ERROR_INVALID_HANDLE;
}

CUresult StreamSynchronize(CUstream handle) {
  Remote& remote = Remote::Get();
  if (!remote.attached()) return FakeDefaultStream(handle);
  if (Capturing(handle)) return RefuseWhileCapturing(handle);
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(handle, &dev, &sid); r != CUDA_SUCCESS) return r;
  if (int code = remote.session(dev)->StreamSynchronize(sid); code != 0) {
    return remote.Fail(dev, code, "work on a stream");
  }
  return CUDA_SUCCESS;
}

CUresult StreamQuery(CUstream handle) {
  Remote& remote = Remote::Get();
  if (!remote.attached()) return FakeDefaultStream(handle);
  if (Capturing(handle)) return RefuseWhileCapturing(handle);
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(handle, &dev, &sid, false); r != CUDA_SUCCESS) return r;
  // A faulted context answers every query with its fault, as a GPU's does: never "not ready" because a host
  // function (which will not run) is still pending.
  if (int fault = remote.session(dev)->StickyFault(); fault != 0) return remote.Fail(dev, fault, "work on a stream");
  if (HostFunctions::Get().PendingBefore(dev, sid)) {
    // Not done while a host function waits or runs, but an error of the work before it is reported now.
    int pending = remote.session(dev)->TakeAsyncError();
    return pending ? remote.Fail(dev, pending, "work on a stream") : CUDA_ERROR_NOT_READY;
  }
  int code = remote.session(dev)->StreamQuery(sid);
  if (code == 0 || code == CUDA_ERROR_NOT_READY) return ToResult(code);
  return remote.Fail(dev, code, "work on a stream");
}

CUresult StreamWaitEvent(CUstream handle, CUevent event_handle) {
  Remote& remote = Remote::Get();
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(handle, &dev, &sid); r != CUDA_SUCCESS) return r;
  Event* event;
  if (CUresult r = remote.ResolveEvent(event_handle, &event); r != CUDA_SUCCESS) return r;
  if (CUresult captured; CaptureEventWait(handle, event_handle, &captured)) return captured;
  if (event->device == dev) {
    if (int code = remote.session(dev)->StreamWaitEvent(sid, event->remote); code != 0) {
      return remote.Fail(dev, code, "cuStreamWaitEvent");
    }
    return CUDA_SUCCESS;
  }
  // Slices cannot wait on each other: the client waits for the event, which orders everything sent after it.
  if (int code = remote.session(event->device)->EventSynchronize(event->remote); code != 0) {
    return remote.Fail(event->device, code, "an event waited on by another device");
  }
  return CUDA_SUCCESS;
}

// ---- Stream memory operations (cuStreamWaitValue*, cuStreamWriteValue*, cuStreamBatchMemOp).

namespace {

// One stream memory operation as the calls below take it, whichever member of the driver's union holds it.
struct MemOp {
  bool wait = false;  // A wait, or a write.
  unsigned width = 4;
  CUdeviceptr address = 0;
  uint64_t value = 0;
  unsigned int flags = 0;
};

// A wait's arguments as cuStreamWaitValue checks them before it looks at the memory.
bool WaitArgumentsValid(CUdeviceptr address, unsigned width, unsigned int flags) {
  return address % width == 0 && (flags & ~(0x3u | CU_STREAM_WAIT_VALUE_FLUSH)) == 0;
}

// `op` as a wait or a write in `*out`; nothing there for a barrier or a flush (a slice's stream already runs its
// work in order, and no remote (NIC) writes reach a slice). CUDA 13.2's atomic reductions are not supported
// (gpupool says it has none: CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED); any other operation is invalid.
CUresult DecodeMemOp(const CUstreamBatchMemOpParams& op, std::optional<MemOp>* out) {
  out->reset();
  // Boilerplate by nature: a switch over the driver's operation types.
  switch (op.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      *out = MemOp{true, 4, op.waitValue.address, op.waitValue.value, op.waitValue.flags};
      return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      *out = MemOp{true, 8, op.waitValue.address, op.waitValue.value64, op.waitValue.flags};
      return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      *out = MemOp{false, 4, op.writeValue.address, op.writeValue.value, op.writeValue.flags};
      return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      *out = MemOp{false, 8, op.writeValue.address, op.writeValue.value64, op.writeValue.flags};
      return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_BARRIER:
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      return CUDA_SUCCESS;
    default:
      return op.operation == kStreamMemOpAtomicReduction ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  }
}

// The driver's form of `m`, for a graph node.
CUstreamBatchMemOpParams EncodeMemOp(const MemOp& m) {
  CUstreamBatchMemOpParams op{};
  const uint64_t value = m.width == 8 ? m.value : static_cast<uint32_t>(m.value);
  if (m.wait) {
    op.waitValue.operation = m.width == 8 ? CU_STREAM_MEM_OP_WAIT_VALUE_64 : CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address = m.address;
    op.waitValue.value64 = value;
    op.waitValue.flags = m.flags;
  } else {
    op.writeValue.operation = m.width == 8 ? CU_STREAM_MEM_OP_WRITE_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = m.address;
    op.writeValue.value64 = value;
    op.writeValue.flags = m.flags;
  }
  return op;
}

}  // namespace

CUresult StreamWaitValue(CUstream handle, CUdeviceptr address, uint64_t value, unsigned width, unsigned int flags) {
  Remote& remote = Remote::Get();
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(handle, &dev, &sid); r != CUDA_SUCCESS) return r;
  if (!WaitArgumentsValid(address, width, flags)) return CUDA_ERROR_INVALID_VALUE;
  int owner = remote.DeviceOf(address);
  if (owner < 0) return CUDA_ERROR_INVALID_VALUE;
  // Captured, the wait becomes a batch node that waits when the graph runs, as NVIDIA's driver captures it.
  if (Capturing(handle)) return CaptureWork(handle, MemOpWork({EncodeMemOp({true, width, address, value, flags})}));
  if (owner != dev) {
    // A stream of one slice cannot watch another slice's memory (no peer access between slices).
    GP_WARN("interpose", "cuStreamWaitValue: 0x{:x} belongs to device {}, the stream to device {}: not supported",
            address, owner, dev);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (int code = remote.session(dev)->StreamWaitValue(sid, address, value, static_cast<uint8_t>(width), flags);
      code != 0) {
    return remote.Fail(dev, code, "cuStreamWaitValue");
  }
  return CUDA_SUCCESS;
}

// A write of the value in stream order: what a copy of those bytes from the host is. Captured, it becomes a batch
// node carrying the value (a copy node would read host bytes when the graph runs, long after this call), as NVIDIA's
// driver captures it.
CUresult StreamWriteValue(CUstream handle, CUdeviceptr address, uint64_t value, unsigned width, unsigned int flags) {
  if (flags & ~static_cast<unsigned int>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) return CUDA_ERROR_INVALID_VALUE;
  if (address % width != 0) return CUDA_ERROR_INVALID_VALUE;
  if (Capturing(handle)) {
    if (Remote::Get().DeviceOf(address) < 0) return CUDA_ERROR_INVALID_VALUE;
    // The node runs it through the v2 call, which takes no NO_MEMORY_BARRIER (a slice's write needs none).
    const MemOp write{false, width, address, value, CU_STREAM_WRITE_VALUE_DEFAULT};
    return CaptureWork(handle, MemOpWork({EncodeMemOp(write)}));
  }
  if (width == 4) {
    uint32_t v = static_cast<uint32_t>(value);
    return CopyHtoD(address, &v, sizeof(v), handle);
  }
  return CopyHtoD(address, &value, sizeof(value), handle);
}

// The v2 API, which cuda.h's cuStreamWriteValue32/64 name since CUDA 12: CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER "is
// not supported in the v2 API" (cuda.h), and NVIDIA's driver refuses it (an H100's, driver 580).
CUresult StreamWriteValueV2(CUstream handle, CUdeviceptr address, uint64_t value, unsigned width, unsigned int flags) {
  if (flags != CU_STREAM_WRITE_VALUE_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  return StreamWriteValue(handle, address, value, width, flags);
}

NodeWork MemOpWork(std::vector<CUstreamBatchMemOpParams> ops) {
  NodeWork w;
  w.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  w.mem_ops = std::move(ops);
  return w;
}

CUresult ValidateMemOp(const CUstreamBatchMemOpParams& op) {
  std::optional<MemOp> m;
  if (CUresult r = DecodeMemOp(op, &m); r != CUDA_SUCCESS || !m) return r;
  const bool valid = m->wait ? WaitArgumentsValid(m->address, m->width, m->flags)
                             : m->address % m->width == 0 && m->flags == CU_STREAM_WRITE_VALUE_DEFAULT;
  return valid && Remote::Get().DeviceOf(m->address) >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult StreamBatchMemOp(CUstream handle, unsigned int count, CUstreamBatchMemOpParams* ops, unsigned int flags) {
  if (flags != 0 || (count > 0 && ops == nullptr) || count >= 256) return CUDA_ERROR_INVALID_VALUE;  // "< 256"
  for (unsigned int i = 0; i < count; ++i) {
    std::optional<MemOp> m;
    if (CUresult r = DecodeMemOp(ops[i], &m); r != CUDA_SUCCESS) return r;
    if (!m) continue;
    CUresult r = m->wait ? StreamWaitValue(handle, m->address, m->value, m->width, m->flags)
                         : StreamWriteValueV2(handle, m->address, m->value, m->width, m->flags);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult StreamGetFlags(CUstream handle, unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(handle, &dev, &sid); r != CUDA_SUCCESS) return r;
  *flags = sid == 0 ? 0 : reinterpret_cast<Stream*>(handle)->flags;
  return CUDA_SUCCESS;
}

CUresult StreamGetPriority(CUstream handle, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(handle, &dev, &sid); r != CUDA_SUCCESS) return r;
  *priority = sid == 0 ? 0 : reinterpret_cast<Stream*>(handle)->priority;
  return CUDA_SUCCESS;
}

// Priorities are recorded, not enforced: the agent schedules by the slice's share.
CUresult StreamPriorityRange(int* least, int* greatest) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}

// Profiling ranges: the driver accepts them and does nothing when no profiler is attached, and none can attach to
// a remote slice (profile on the GPU server instead). Said once on stderr when GPUPOOL_LOG is set.
CUresult ProfilerMarker(const char* name) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (Driver::Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  static std::atomic<bool> said{false};
  if (std::getenv("GPUPOOL_LOG") != nullptr && !said.exchange(true)) {
    GP_INFO("interpose", "{}: no profiler runs on gpupool slices; profiling ranges are accepted without effect", name);
  }
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_STREAM_FORWARDS(GP_DEFINE_FORWARD)
