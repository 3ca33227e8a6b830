// Events: client objects naming (slice, remote event id). Generated from forward_spec.h.
#include "driver.h"
#include "forward_spec.h"
#include "graph.h"
#include "remote.h"

namespace gpupool::interpose {

CUresult EventCreate(CUevent* out, unsigned int flags) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  int dev;
  if (CUresult r = remote.CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  uint64_t id = 0;
  if (int code = remote.session(dev)->EventCreate(&id); code != 0) return remote.Fail(dev, code, "cuEventCreate");
  auto* event = new Event{dev, id, flags, true};
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.events.insert(event);
  *out = reinterpret_cast<CUevent>(event);
  return CUDA_SUCCESS;
}

// Boilerplate by nature, with EventSynchronize and EventQuery below: resolve the event, forward one call.
CUresult EventRecord(CUevent handle, CUstream stream) {
  Remote& remote = Remote::Get();
  Event* event;
  if (CUresult r = remote.ResolveEvent(handle, &event); r != CUDA_SUCCESS) return r;
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  if (CUresult captured; CaptureEventRecord(handle, stream, &captured)) return captured;
  // An event lives on its slice: recorded from another device's stream, it marks its own slice's default stream.
  if (dev != event->device) sid = 0;
  if (int code = remote.session(event->device)->EventRecord(event->remote, sid); code != 0) {
    return remote.Fail(event->device, code, "cuEventRecord");
  }
  return CUDA_SUCCESS;
}

// Boilerplate by nature, with EventQuery below: resolve the event, forward one call.
CUresult EventSynchronize(CUevent handle) {
  Remote& remote = Remote::Get();
  Event* event;
  if (CUresult r = remote.ResolveEvent(handle, &event); r != CUDA_SUCCESS) return r;
  if (int code = remote.session(event->device)->EventSynchronize(event->remote); code != 0) {
    return remote.Fail(event->device, code, "work before an event");
  }
  return CUDA_SUCCESS;
}

CUresult EventQuery(CUevent handle) {
  Remote& remote = Remote::Get();
  Event* event;
  if (CUresult r = remote.ResolveEvent(handle, &event); r != CUDA_SUCCESS) return r;
  int code = remote.session(event->device)->EventQuery(event->remote);
  if (code == 0 || code == CUDA_ERROR_NOT_READY) return ToResult(code);
  return remote.Fail(event->device, code, "work before an event");
}

CUresult EventElapsedTime(float* ms, CUevent start_handle, CUevent end_handle) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  Event *start, *end;
  if (CUresult r = remote.ResolveEvent(start_handle, &start); r != CUDA_SUCCESS) return r;
  if (CUresult r = remote.ResolveEvent(end_handle, &end); r != CUDA_SUCCESS) return r;
  if (start->device != end->device) return CUDA_ERROR_INVALID_HANDLE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  int code = remote.session(start->device)->EventElapsed(start->remote, end->remote, ms);
  if (code == 0 || code == CUDA_ERROR_NOT_READY) return ToResult(code);
  return remote.Fail(start->device, code, "cuEventElapsedTime");
}

CUresult EventDestroy(CUevent handle) {
  Remote& remote = Remote::Get();
  Event* event;
  if (CUresult r = remote.ResolveEvent(handle, &event); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    event->alive = false;
  }
  remote.session(event->device)->EventDestroy(event->remote);
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_EVENT_FORWARDS(GP_DEFINE_FORWARD)
