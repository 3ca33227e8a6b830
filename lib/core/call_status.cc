#include "core/call_status.h"

#include "gpupool/status.h"

namespace gpupool {

Status ToStatus(const CallStatus& status) {
  switch (status.code()) {
    case cu::kSuccess: return Status::Ok();
    case cu::kOutOfMemory: return Status(StatusCode::kResourceExhausted, status.message());
    case cu::kInvalidValue: return Status(StatusCode::kInvalidArgument, status.message());
    case cu::kNotFound: return Status(StatusCode::kNotFound, status.message());
    case cu::kNotSupported: return Status(StatusCode::kUnsatisfiable, status.message());
    case cu::kDeviceUnavailable: return Status(StatusCode::kUnavailable, status.message());
    default: return Status(StatusCode::kInternal, status.message());
  }
}

}  // namespace gpupool
