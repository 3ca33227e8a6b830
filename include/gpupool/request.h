// What a program asks the pool for.
#ifndef GPUPOOL_REQUEST_H_
#define GPUPOOL_REQUEST_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "gpupool/status.h"

namespace gpupool {

// The smallest slice of a device: 1/20 of its memory and compute.
inline constexpr double kMinFraction = 0.05;

enum class Spread {
  kPack,        // Default: one server if any can hold the whole request, else span servers (fewest first).
  kSameServer,  // All slices on one server, or fail.
  kSpread,      // Slices on as many different servers as possible.
};

// N slices of one size. Each slice of a request lands on a different device.
struct Request {
  // Number of slices (devices the program will see). Default 1; must be >= 1.
  int count = 1;
  // Fraction of a device's memory and compute, in [0.05, 1.0]. Default 1.0 (whole GPUs).
  // Ignored when memory_bytes is set.
  double fraction = 1.0;
  // Fixed memory per slice; the compute share is derived from it (memory / device memory, at least 0.05)
  // unless compute_share is set. Default: unset.
  std::optional<uint64_t> memory_bytes;
  // Explicit compute share per slice in [0.05, 1.0]. Default: same as the memory fraction.
  std::optional<double> compute_share;
  // Only devices of this class (the agent's `class` tag), or whose model name equals it (case-insensitive).
  // Default: empty, any device.
  std::string device_class;
  Spread spread = Spread::kPack;
  // How long to wait for capacity when the pool is busy. Default 0: fail at once with kResourceExhausted.
  std::chrono::milliseconds wait{0};
  // Called, when set, each time Pool::Allocate pauses to wait for capacity (wait above 0), with why the request
  // cannot be granted now (the pool's or an agent's policy's words) and how much of the wait is left. On the calling
  // thread. Default: none.
  std::function<void(const Status& why, std::chrono::milliseconds left)> on_wait;
  // Shown next to the lease in gp-ls (e.g. the command line). Default: this program's name.
  std::string label;
};

// Checks the request alone (not against any pool): kInvalidArgument with a message naming the bad field.
Status ValidateRequest(const Request& request);

// Renders the request the way gp-run spells it, e.g. "2 x 50% of a GPU".
std::string DescribeRequest(const Request& request);

}  // namespace gpupool

#endif  // GPUPOOL_REQUEST_H_
