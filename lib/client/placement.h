// Placement: choosing which devices of which servers take the slices of a request. Pure functions over a
// snapshot, so every rule is unit-tested without agents.
#ifndef GPUPOOL_CLIENT_PLACEMENT_H_
#define GPUPOOL_CLIENT_PLACEMENT_H_

#include <cstdint>
#include <random>
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

// How Place() chooses among the devices that can all take a slice. Either way the rules of Place() hold (class,
// whole GPUs for whole slices, one server when one can hold the request, kSameServer, kSpread); the policy only
// orders the devices and servers that qualify.
enum class PlacementPolicy {
  // Tightest fit: split devices before whole ones, then the least room left on the device (and on the server).
  kBestFit,
  // Fragmentation gradient descent (Weng et al., "Beware of Fragmentation", USENIX ATC '23): the devices where the
  // expected fragmentation of their server against a target workload (TargetWorkload::Fragmentation) grows least;
  // equal growths as kBestFit. On 10,000 simulated GPUs under the Alibaba 2023 mix (bench/placement_sim: loads
  // 0.9 to 1.1, the paper's filling experiment, two models, all-fractional requests) it grants, allocates and
  // fragments as kBestFit does to within 0.1 percentage point, at about twice kBestFit's p99 placement time, so
  // kBestFit stays the default.
  kFragmentationAware,
};

// One kind of request of a target workload: `count` slices of `fraction` of a device each, asked for with the
// relative frequency `weight`.
struct WorkloadShape {
  int count = 1;
  double fraction = 1.0;
  double weight = 1.0;
};

// The requests a pool expects, against which fragmentation is measured. Immutable once built: share it freely
// between threads.
//
// The measure, per server n and shape m (the paper's F_n(m)), counts free capacity in GPUs, a device's free
// capacity being the largest fraction it could still grant (the smaller of its free share and free memory):
//   - if n cannot take m now (fewer than m.count devices with at least m.fraction free): all free capacity of n;
//   - else: the free capacity of the devices that have less than m.fraction free.
// Fragmentation(n) = sum over m of weight(m) * F_n(m): the free capacity a request drawn from the workload
// could not use, in expectation. A whole free server has none (for every shape that fits a server at all).
class TargetWorkload {
 public:
  // Weights are normalised to sum to 1; shapes with no weight are dropped.
  // REQUIRES: at least one shape with a positive weight; every fraction in (0, 1]; every count >= 1.
  explicit TargetWorkload(std::vector<WorkloadShape> shapes);

  // The GPU requests of Alibaba's 2023 GPU-sharing trace (cluster-trace-gpu-v2023, the ATC '23 paper's): 44% ask
  // for a fraction of one GPU (mostly 0.81, 0.47, 0.32, 0.65), 55% for one whole GPU, 1% for 2, 4 or 8 whole GPUs.
  // The table and its source are in placement.cc.
  static const TargetWorkload& Default();

  const std::vector<WorkloadShape>& shapes() const { return shapes_; }
  // The smallest fraction any shape asks for.
  double smallest_fraction() const { return smallest_; }

  // Expected fragmentation of `server`, in GPUs (see the class comment).
  double Fragmentation(const ServerView& server) const;
  // Free capacity of `server`, in GPUs, on devices that no shape could use at all: less free than the smallest
  // fraction of the workload (but not nothing).
  double Stranded(const ServerView& server) const;

  // The same over devices' free capacities alone (fractions of a device, one per device of one server).
  double FragmentationOf(const double* free, size_t devices) const;
  // The part of FragmentationOf() one device contributes on its own: its free capacity times the weight of the
  // single-slice shapes it is too small for. Multi-slice shapes are counted per server, apart.
  double SingleSliceTerm(double free) const;

  // The shapes of more than one slice (counted per server, not per device).
  const std::vector<WorkloadShape>& multi_shapes() const { return multi_; }

 private:
  std::vector<WorkloadShape> shapes_;
  std::vector<double> single_fractions_;    // The single-slice shapes' fractions, ascending.
  std::vector<double> single_weight_from_;  // [i]: the weight of single-slice shapes i and on (one more entry).
  std::vector<WorkloadShape> multi_;
  double smallest_ = 1.0;
};

// How Place() chooses. Every field has a default; a default-constructed PlacementOptions is what Place(request,
// servers) uses.
struct PlacementOptions {
  // Default: kBestFit (see PlacementPolicy).
  PlacementPolicy policy = PlacementPolicy::kBestFit;
  // The workload kFragmentationAware measures fragmentation against. Not owned: must outlive the call. Default
  // (nullptr): TargetWorkload::Default().
  const TargetWorkload* target = nullptr;
  // The source of random tie-breaks, so that clients racing for equal devices pick different ones. Not owned; not
  // thread-safe, so one per thread. Default (nullptr): a per-thread generator seeded by the OS. Simulations and
  // tests pass their own to be reproducible.
  std::mt19937_64* random = nullptr;
};

// The memory and share one slice of `request` takes on a device of `memory_total` bytes.
void SliceSize(const Request& request, uint64_t memory_total, uint64_t* memory, uint32_t* share);

// Chooses request.count distinct devices. Rules: whole-GPU slices take whole free GPUs; one server is preferred
// when one can hold the request (the one the policy ranks first), else slices span servers (fewest servers first)
// unless kSameServer; kSpread puts slices on as many servers as possible. Among devices that qualify, the policy
// decides (kBestFit: fractional slices pack onto already-split GPUs before splitting a whole one, tightest fit
// first; kFragmentationAware: least growth of the expected fragmentation), then chance.
// Fails with kResourceExhausted and a reason when it does not fit.
Result<std::vector<Assignment>> Place(const Request& request, const std::vector<ServerView>& servers,
                                      const PlacementOptions& options);
// Place() with the default options.
Result<std::vector<Assignment>> Place(const Request& request, const std::vector<ServerView>& servers);

// Whether `request` could ever fit this pool: Place() on the same servers with every device free. Fails with
// kUnsatisfiable and the reason when it could not.
Status CheckSatisfiable(const Request& request, const std::vector<ServerView>& servers);

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_PLACEMENT_H_
