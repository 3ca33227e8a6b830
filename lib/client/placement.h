// Placement: choosing which devices of which servers take the slices of a request. Pure functions over a
// snapshot, so every rule is unit-tested without agents.
#ifndef GPUPOOL_CLIENT_PLACEMENT_H_
#define GPUPOOL_CLIENT_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "gpupool/request.h"
#include "gpupool/status.h"

namespace gpupool::internal {

struct DeviceView {
  uint32_t index = 0;
  std::string model, device_class;
  uint64_t memory_total = 0;
  uint64_t memory_free = 0;
  uint32_t share_free = 0;  // Millionths.
  bool whole_free = false;  // Nothing allocated on it.
};

struct ServerView {
  size_t server = 0;  // Index into the caller's server list.
  std::vector<DeviceView> devices;
};

struct Assignment {
  size_t server = 0;
  uint32_t device = 0;
  uint64_t memory_bytes = 0;
  uint32_t share = 0;
};

// The memory and share one slice of `request` takes on a device of `memory_total` bytes.
void SliceSize(const Request& request, uint64_t memory_total, uint64_t* memory, uint32_t* share);

// Chooses request.count distinct devices. Rules: whole-GPU slices take whole free GPUs; fractional slices pack
// onto already-split GPUs before splitting a whole one (best fit); one server is preferred when one can hold the
// request (best fit across servers too), else slices span servers (fewest servers first) unless
// kSameServer; kSpread puts slices on as many servers as possible.
// Fails with kResourceExhausted and a reason when it does not fit.
Result<std::vector<Assignment>> Place(const Request& request, const std::vector<ServerView>& servers);

// Whether `request` could ever fit this pool: Place() on the same servers with every device free. Fails with
// kUnsatisfiable and the reason when it could not.
Status CheckSatisfiable(const Request& request, const std::vector<ServerView>& servers);

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_PLACEMENT_H_
