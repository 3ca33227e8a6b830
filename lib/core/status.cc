#include "gpupool/status.h"

#include "gpupool/state.h"

namespace gpupool {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kUnsatisfiable: return "unsatisfiable";
    case StatusCode::kResourceExhausted: return "busy";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDisconnected: return "disconnected";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kProtocolMismatch: return "protocol_mismatch";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

int PoolState::servers_up() const {
  int n = 0;
  for (const auto& s : servers) n += s.up ? 1 : 0;
  return n;
}

int PoolState::device_count() const {
  int n = 0;
  for (const auto& s : servers) n += s.up ? static_cast<int>(s.devices.size()) : 0;
  return n;
}

}  // namespace gpupool
