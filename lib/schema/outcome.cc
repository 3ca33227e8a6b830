#include "schema/outcome.h"

#include <string>

namespace gpupool {

wire::Outcome::Code OutcomeCodeOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return wire::Outcome::Code::OK;
    case StatusCode::kInvalidArgument: return wire::Outcome::Code::INVALID_ARGUMENT;
    case StatusCode::kResourceExhausted: return wire::Outcome::Code::BUSY;
    case StatusCode::kNotFound: return wire::Outcome::Code::NOT_FOUND;
    case StatusCode::kPermissionDenied: return wire::Outcome::Code::PERMISSION_DENIED;
    case StatusCode::kUnavailable: return wire::Outcome::Code::DRAINING;
    default: return wire::Outcome::Code::INTERNAL;
  }
}

void SetOutcome(wire::Outcome::Builder out, const Status& status) {
  out.setCode(OutcomeCodeOf(status.code()));
  out.setMessage(status.message());
}

Status StatusOf(wire::Outcome::Reader outcome) {
  std::string message = outcome.getMessage();
  switch (outcome.getCode()) {
    case wire::Outcome::Code::OK: return Status::Ok();
    case wire::Outcome::Code::INVALID_ARGUMENT: return Status(StatusCode::kInvalidArgument, std::move(message));
    case wire::Outcome::Code::BUSY: return Status(StatusCode::kResourceExhausted, std::move(message));
    case wire::Outcome::Code::NOT_FOUND: return Status(StatusCode::kNotFound, std::move(message));
    case wire::Outcome::Code::PERMISSION_DENIED: return Status(StatusCode::kPermissionDenied, std::move(message));
    case wire::Outcome::Code::DRAINING: return Status(StatusCode::kUnavailable, std::move(message));
    default: return Status(StatusCode::kInternal, std::move(message));
  }
}

}  // namespace gpupool
