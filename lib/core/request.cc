#include "gpupool/request.h"

#include <cmath>

#include <fmt/format.h>

#include "gpupool/units.h"

namespace gpupool {

Status ValidateRequest(const Request& r) {
  if (r.count < 1) {
    return Status(StatusCode::kInvalidArgument, fmt::format("slice count must be at least 1 (got {})", r.count));
  }
  if (r.count > 4096) {
    return Status(StatusCode::kInvalidArgument, fmt::format("slice count {} is absurd (at most 4096)", r.count));
  }
  if (!r.memory_bytes && !(r.fraction >= kMinFraction - 1e-9 && r.fraction <= 1.0 + 1e-9)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("fraction {} is out of range: a slice is between 0.05 (1/20 of a GPU) and 1.0", r.fraction));
  }
  if (r.memory_bytes && *r.memory_bytes == 0) {
    return Status(StatusCode::kInvalidArgument, "memory per slice must be more than 0 bytes");
  }
  if (r.compute_share && !(*r.compute_share >= kMinFraction - 1e-9 && *r.compute_share <= 1.0 + 1e-9)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("compute share {} is out of range: between 0.05 and 1.0", *r.compute_share));
  }
  if (r.wait.count() < 0) return Status(StatusCode::kInvalidArgument, "wait must not be negative");
  return Status::Ok();
}

std::string DescribeRequest(const Request& r) {
  std::string size;
  if (r.memory_bytes) {
    size = FormatMemorySize(*r.memory_bytes) + (r.count == 1 ? " slice" : " slices");
  } else if (r.fraction >= 1.0) {
    size = r.count == 1 ? "GPU" : "GPUs";
  } else {
    size = fmt::format("{:g}% of a GPU", std::round(r.fraction * 1000) / 10);
  }
  std::string out = fmt::format("{} x {}", r.count, size);
  if (!r.device_class.empty()) out += fmt::format(" of class '{}'", r.device_class);
  if (r.spread == Spread::kSameServer) out += " on one server";
  if (r.spread == Spread::kSpread) out += " spread across servers";
  return out;
}

}  // namespace gpupool
