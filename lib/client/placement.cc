#include "client/placement.h"

#include <algorithm>
#include <cmath>
#include <strings.h>

#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "core/util.h"
#include "gpupool/units.h"

namespace gpupool::internal {
namespace {

// Two free capacities closer than this are equal: fractions come from millionths and byte counts.
constexpr double kEps = 1e-9;
// Growths of fragmentation are compared in these units (GPUs), so that float noise cannot break a tie that
// chance should break.
constexpr double kDeltaUnit = 1e-9;

bool ClassMatches(const Request& r, const DeviceView& d) {
  if (r.device_class.empty()) return true;
  return r.device_class == d.device_class || strcasecmp(r.device_class.c_str(), d.model.c_str()) == 0;
}

// The largest fraction of the device a slice could still take: the smaller of its free share and free memory.
double FreeFraction(uint64_t memory_free, uint64_t memory_total, uint32_t share_free) {
  if (memory_total == 0) return 0.0;
  double memory = static_cast<double>(memory_free) / static_cast<double>(memory_total);
  return std::min(memory, FractionFromShare(share_free));
}

// The caller's generator, else this thread's own.
std::mt19937_64& Engine(const PlacementOptions& o) {
  if (o.random != nullptr) return *o.random;
  thread_local std::mt19937_64 engine(std::random_device{}());
  return engine;
}

double Tiebreak(const PlacementOptions& o) { return std::uniform_real_distribution<double>(0.0, 1.0)(Engine(o)); }

// True with probability 1/k: the k-th of k equal choices replaces the one kept, which keeps each with chance 1/k.
bool OneIn(size_t k, const PlacementOptions& o) { return Engine(o)() % k == 0; }

// One server's fragmentation against the target workload, kept in the parts a slice on one device changes, so
// that the growth a candidate causes costs O(multi-slice shapes) instead of a recount of the server. Reused from
// server to server within one Place() call.
class ServerFragmentation {
 public:
  explicit ServerFragmentation(const TargetWorkload& target) : target_(target) {}

  void Reset(const ServerView& server) {
    const auto& multi = target_.multi_shapes();
    free_.clear();
    total_ = 0;
    for (const DeviceView& d : server.devices) {
      free_.push_back(FreeFraction(d.memory_free, d.memory_total, d.share_free));
      total_ += free_.back();
    }
    at_least_.assign(multi.size(), 0);
    below_.assign(multi.size(), 0.0);
    for (size_t m = 0; m < multi.size(); ++m) {
      for (double v : free_) {
        if (v >= multi[m].fraction - kEps) {
          ++at_least_[m];
        } else {
          below_[m] += v;
        }
      }
    }
  }

  // How much the server's fragmentation grows when device `pos` (its position in the server's list) goes from
  // its free capacity now to `after`.
  double Growth(size_t pos, double after) const {
    const double before = free_[pos];
    double growth = target_.SingleSliceTerm(after) - target_.SingleSliceTerm(before);
    const auto& multi = target_.multi_shapes();
    const double total_after = total_ - before + after;
    for (size_t m = 0; m < multi.size(); ++m) {
      const double f = multi[m].fraction - kEps;
      const int count = at_least_[m] - (before >= f ? 1 : 0) + (after >= f ? 1 : 0);
      const double below = below_[m] - (before < f ? before : 0.0) + (after < f ? after : 0.0);
      const double was = at_least_[m] >= multi[m].count ? below_[m] : total_;
      const double now = count >= multi[m].count ? below : total_after;
      growth += multi[m].weight * (now - was);
    }
    return growth;
  }

  // The growth when several devices change at once: (position, free capacity after) pairs.
  double JointGrowth(const std::vector<std::pair<size_t, double>>& changes) {
    after_ = free_;
    for (const auto& [pos, v] : changes) after_[pos] = v;
    return target_.FragmentationOf(after_.data(), after_.size()) - target_.FragmentationOf(free_.data(), free_.size());
  }

 private:
  const TargetWorkload& target_;
  std::vector<double> free_, after_;
  double total_ = 0;
  std::vector<int> at_least_;  // Per multi-slice shape: devices with at least its fraction free.
  std::vector<double> below_;  // Per multi-slice shape: free capacity on the devices with less.
};

struct Candidate {
  uint32_t device;
  uint64_t memory;
  uint32_t share;
  uint32_t leftover_share;  // Share free on the device after this slice: lower is a tighter fit.
  uint64_t leftover_memory;
  bool breaks_whole;        // Takes part of a device that was whole.
  int64_t growth;           // kFragmentationAware: growth of the server's fragmentation, in kDeltaUnit; else 0.
  size_t pos;               // Position of the device in its server's list.
  double after;             // Free capacity of the device after this slice (a fraction).
  double tiebreak;          // Random: clients racing for equal devices pick different ones.
};

int64_t Quantize(double growth) { return std::llround(growth / kDeltaUnit); }

// The policy's order of two candidates of one server, chance aside: < 0 when `a` goes first.
// kBestFit: devices that are split already before whole ones, then the least room left (share, then memory).
// kFragmentationAware: the least growth of fragmentation, then as kBestFit.
int Compare(const Candidate& a, const Candidate& b, bool fgd) {
  if (fgd && a.growth != b.growth) return a.growth < b.growth ? -1 : 1;
  if (a.breaks_whole != b.breaks_whole) return a.breaks_whole ? 1 : -1;
  if (a.leftover_share != b.leftover_share) return a.leftover_share < b.leftover_share ? -1 : 1;
  if (a.leftover_memory != b.leftover_memory) return a.leftover_memory < b.leftover_memory ? -1 : 1;
  return 0;
}

bool BestFitBefore(const Candidate& a, const Candidate& b) {
  int c = Compare(a, b, false);
  return c != 0 ? c < 0 : a.tiebreak < b.tiebreak;
}

bool LeastGrowthBefore(const Candidate& a, const Candidate& b) {
  int c = Compare(a, b, true);
  return c != 0 ? c < 0 : a.tiebreak < b.tiebreak;
}

// SliceSize() for the last device size asked about: pools hold few sizes, and placement asks once per device.
struct SliceSizes {
  uint64_t memory_total = 0, memory = 0;
  uint32_t share = 0;
  bool known = false;
};

// Whether device `d` (at `pos` in its server's list) can take one slice of `r` now, and the candidate if so
// (growth and tiebreak not yet set).
bool Fits(const Request& r, const DeviceView& d, size_t pos, SliceSizes* sizes, Candidate* c) {
  if (!ClassMatches(r, d)) return false;
  if (!sizes->known || sizes->memory_total != d.memory_total) {
    SliceSize(r, d.memory_total, &sizes->memory, &sizes->share);
    sizes->memory_total = d.memory_total;
    sizes->known = true;
  }
  const uint64_t memory = sizes->memory;
  const uint32_t share = sizes->share;
  if (memory == 0 || memory > d.memory_free || share > d.share_free) return false;
  bool whole_slice = memory == d.memory_total && share == kShareWhole;
  c->device = d.index;
  c->memory = memory;
  c->share = share;
  c->leftover_share = d.share_free - share;
  c->leftover_memory = d.memory_free - memory;
  c->breaks_whole = d.whole_free && !whole_slice;
  c->growth = 0;
  c->pos = pos;
  c->after = FreeFraction(c->leftover_memory, d.memory_total, c->leftover_share);
  c->tiebreak = 0.0;
  return true;
}

// Devices of one server that can take one slice now, in the policy's order (best first). `frag` is null for
// kBestFit; for kFragmentationAware it is reset to this server.
std::vector<Candidate> Candidates(const Request& r, const ServerView& server, const PlacementOptions& options,
                                  ServerFragmentation* frag) {
  std::vector<Candidate> out;
  bool measured = false;
  Candidate c;
  SliceSizes sizes;
  for (size_t pos = 0; pos < server.devices.size(); ++pos) {
    if (!Fits(r, server.devices[pos], pos, &sizes, &c)) continue;
    c.tiebreak = Tiebreak(options);
    if (frag != nullptr) {
      if (!measured) {
        frag->Reset(server);
        measured = true;
      }
      c.growth = Quantize(frag->Growth(pos, c.after));
    }
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(), frag != nullptr ? LeastGrowthBefore : BestFitBefore);
  return out;
}

// Place() of one slice without kSpread, the common case, in one pass and without building candidate lists: the
// same choice as the general path (each server's best device by the policy; of those, the one the policy ranks
// first, then the server with fewer usable devices; chance among equals, drawn only when there are equals).
// Nullopt when no device can take it.
std::optional<Assignment> PlaceOne(const Request& r, const std::vector<ServerView>& servers,
                                   const PlacementOptions& options, ServerFragmentation* frag) {
  const bool fgd = frag != nullptr;
  bool found = false;
  size_t best_server = 0, best_usable = 0, best_ties = 0;
  Candidate best{};
  SliceSizes sizes;
  for (const ServerView& server : servers) {
    size_t usable = 0, ties = 0;
    Candidate mine{}, c;
    for (size_t pos = 0; pos < server.devices.size(); ++pos) {
      if (!Fits(r, server.devices[pos], pos, &sizes, &c)) continue;
      if (fgd) {
        if (usable == 0) frag->Reset(server);
        c.growth = Quantize(frag->Growth(pos, c.after));
      }
      int order = usable == 0 ? -1 : Compare(c, mine, fgd);
      ++usable;
      if (order < 0) {
        mine = c;
        ties = 1;
      } else if (order == 0 && OneIn(++ties, options)) {
        mine = c;
      }
    }
    if (usable == 0) continue;
    // Servers by their best device (growth for kFragmentationAware, whole devices broken, share left), then fewer
    // usable devices (leave the emptiest servers for big requests).
    int order = 0;
    if (!found) {
      order = -1;
    } else if (fgd && mine.growth != best.growth) {
      order = mine.growth < best.growth ? -1 : 1;
    } else if (mine.breaks_whole != best.breaks_whole) {
      order = mine.breaks_whole ? 1 : -1;
    } else if (mine.leftover_share != best.leftover_share) {
      order = mine.leftover_share < best.leftover_share ? -1 : 1;
    } else if (usable != best_usable) {
      order = usable < best_usable ? -1 : 1;
    }
    if (order < 0) {
      best_ties = 1;
    } else if (order > 0 || !OneIn(++best_ties, options)) {
      continue;
    }
    found = true;
    best = mine;
    best_server = server.server;
    best_usable = usable;
  }
  if (!found) return std::nullopt;
  return Assignment{best_server, best.device, best.memory, best.share};
}

Assignment Assign(size_t server, const Candidate& c) { return {server, c.device, c.memory, c.share}; }

// How much a server's first `n` candidates cost: whole devices broken, then leftover (lower is better).
std::pair<int, uint64_t> Cost(const std::vector<Candidate>& cands, size_t n) {
  int broken = 0;
  uint64_t leftover = 0;
  for (size_t i = 0; i < n; ++i) {
    broken += cands[i].breaks_whole ? 1 : 0;
    leftover += cands[i].leftover_share;
  }
  return {broken, leftover};
}

}  // namespace

TargetWorkload::TargetWorkload(std::vector<WorkloadShape> shapes) {
  double sum = 0;
  for (const WorkloadShape& s : shapes) {
    if (s.weight > 0) sum += s.weight;
  }
  for (WorkloadShape s : shapes) {
    if (!(s.weight > 0) || sum <= 0) continue;
    s.weight /= sum;
    s.count = std::max(s.count, 1);
    s.fraction = std::clamp(s.fraction, kEps, 1.0);
    shapes_.push_back(s);
    smallest_ = std::min(smallest_, s.fraction);
    if (s.count > 1) multi_.push_back(s);
  }
  std::vector<WorkloadShape> single;
  for (const WorkloadShape& s : shapes_) {
    if (s.count == 1) single.push_back(s);
  }
  std::sort(single.begin(), single.end(),
            [](const WorkloadShape& a, const WorkloadShape& b) { return a.fraction < b.fraction; });
  single_weight_from_.assign(single.size() + 1, 0.0);
  for (size_t i = single.size(); i-- > 0;) single_weight_from_[i] = single_weight_from_[i + 1] + single[i].weight;
  for (const WorkloadShape& s : single) single_fractions_.push_back(s.fraction);
}

// The default target workload: the GPU requests of openb_pod_list_default.csv in Alibaba's cluster-trace-gpu-v2023
// (github.com/alibaba/clusterdata), the trace of the ATC '23 paper: 7,064 tasks that ask for GPUs. 43.6% ask for a
// fraction of one GPU, 55.4% for one whole GPU, 0.2% for 2, 0.2% for 4 and 0.6% for 8 whole GPUs. Fractions below
// 1% of the fractional tasks are merged into the nearest kept one (0.22 into 0.23, 0.46 into 0.47; 0.05, 0.11,
// 0.33, 0.35, 0.48 ... into their neighbours). Weights are percent of GPU requests, normalised when built.
const TargetWorkload& TargetWorkload::Default() {
  // clang-format off
  static const TargetWorkload* const kDefault = new TargetWorkload({
      {1, 0.16, 1.5},  {1, 0.23, 2.9},  {1, 0.32, 4.8},  {1, 0.37, 0.8},  {1, 0.47, 12.7},
      {1, 0.55, 1.0},  {1, 0.59, 1.1},  {1, 0.65, 3.6},  {1, 0.81, 15.3}, {1, 1.0, 55.4},
      {2, 1.0, 0.23},  {4, 1.0, 0.21},  {8, 1.0, 0.62},
  });
  // clang-format on
  return *kDefault;
}

double TargetWorkload::SingleSliceTerm(double free) const {
  if (free <= 0) return 0.0;
  // The single-slice shapes this device is too small for: those whose fraction exceeds its free capacity.
  size_t first =
      std::upper_bound(single_fractions_.begin(), single_fractions_.end(), free + kEps) - single_fractions_.begin();
  return free * single_weight_from_[first];
}

double TargetWorkload::FragmentationOf(const double* free, size_t devices) const {
  double total = 0, frag = 0;
  for (size_t i = 0; i < devices; ++i) {
    total += free[i];
    frag += SingleSliceTerm(free[i]);
  }
  for (const WorkloadShape& m : multi_) {
    int at_least = 0;
    double below = 0;
    for (size_t i = 0; i < devices; ++i) {
      if (free[i] >= m.fraction - kEps) {
        ++at_least;
      } else {
        below += free[i];
      }
    }
    frag += m.weight * (at_least >= m.count ? below : total);
  }
  return frag;
}

double TargetWorkload::Fragmentation(const ServerView& server) const {
  std::vector<double> free;
  free.reserve(server.devices.size());
  for (const DeviceView& d : server.devices) free.push_back(FreeFraction(d.memory_free, d.memory_total, d.share_free));
  return FragmentationOf(free.data(), free.size());
}

double TargetWorkload::Stranded(const ServerView& server) const {
  double stranded = 0;
  for (const DeviceView& d : server.devices) {
    double v = FreeFraction(d.memory_free, d.memory_total, d.share_free);
    if (v > 0 && v < smallest_ - kEps) stranded += v;
  }
  return stranded;
}

void SliceSize(const Request& r, uint64_t memory_total, uint64_t* memory, uint32_t* share) {
  if (r.memory_bytes) {
    *memory = *r.memory_bytes;
    double fraction = static_cast<double>(*r.memory_bytes) / static_cast<double>(memory_total);
    // Round the derived share up to whole millionths so that memory and compute stay in step.
    uint32_t derived = static_cast<uint32_t>(std::min(1.0, std::ceil(fraction * kShareWhole - 1e-6) / kShareWhole) *
                                             kShareWhole);
    *share = std::max(derived, ShareFromFraction(kMinFraction));
  } else {
    // Memory rounds down so that slices which add up to 1 always fit together.
    *memory = r.fraction >= 1.0 ? memory_total
                                : static_cast<uint64_t>(std::floor(r.fraction * static_cast<double>(memory_total)));
    *share = ShareFromFraction(r.fraction);
  }
  if (r.compute_share) *share = ShareFromFraction(*r.compute_share);
  if (*share > kShareWhole) *share = kShareWhole;
}

Result<std::vector<Assignment>> Place(const Request& r, const std::vector<ServerView>& servers) {
  return Place(r, servers, PlacementOptions{});
}

Result<std::vector<Assignment>> Place(const Request& r, const std::vector<ServerView>& servers,
                                      const PlacementOptions& options) {
  const size_t n = static_cast<size_t>(r.count);
  const bool fgd = options.policy == PlacementPolicy::kFragmentationAware;
  std::optional<ServerFragmentation> frag;
  if (fgd) frag.emplace(options.target != nullptr ? *options.target : TargetWorkload::Default());
  if (n == 1 && r.spread != Spread::kSpread) {
    if (auto one = PlaceOne(r, servers, options, frag ? &*frag : nullptr)) {
      return std::vector<Assignment>{*one};
    }
    // None can: the general path below words the refusal.
  }
  std::vector<std::vector<Candidate>> cands;
  cands.reserve(servers.size());
  size_t total = 0, best_single = 0;
  for (const ServerView& s : servers) {
    cands.push_back(Candidates(r, s, options, frag ? &*frag : nullptr));
    total += cands.back().size();
    best_single = std::max(best_single, cands.back().size());
  }
  std::vector<Assignment> out;
  const auto too_few = [&] {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("{} device(s) can take such a slice now; {} needed", total, n));
  };
  // The servers, richest (most devices that can take a slice) first.
  const auto richest_first = [&] {
    std::vector<size_t> order(servers.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cands[a].size() > cands[b].size(); });
    return order;
  };

  if (r.spread == Spread::kSpread) {
    if (total < n) return too_few();
    // Round-robin over servers, richest first, taking each server's best candidate in turn.
    const std::vector<size_t> order = richest_first();
    std::vector<size_t> taken(servers.size(), 0);
    while (out.size() < n) {
      for (size_t i : order) {
        if (out.size() == n) break;
        if (taken[i] < cands[i].size()) out.push_back(Assign(servers[i].server, cands[i][taken[i]++]));
      }
    }
    return out;
  }

  // One server, if any can hold it all: the one the policy ranks first (least growth of fragmentation; tightest
  // fit), then fewer usable devices (leave the emptiest servers for big requests), then chance.
  size_t best = SIZE_MAX;
  using Key = std::tuple<int64_t, int, uint64_t, size_t, double>;
  Key best_key;
  std::vector<std::pair<size_t, double>> changes;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (cands[i].size() < n) continue;
    auto [broken, leftover] = Cost(cands[i], n);
    int64_t growth = 0;
    if (fgd) {
      if (n == 1) {
        growth = cands[i][0].growth;
      } else {
        // The n devices that each grow it least, then their growth together (shapes of several slices see them
        // all at once).
        frag->Reset(servers[i]);
        changes.clear();
        for (size_t k = 0; k < n; ++k) changes.emplace_back(cands[i][k].pos, cands[i][k].after);
        growth = Quantize(frag->JointGrowth(changes));
      }
    }
    Key key{growth, broken, leftover, cands[i].size(), Tiebreak(options)};
    if (best == SIZE_MAX || key < best_key) {
      best = i;
      best_key = key;
    }
  }
  if (best != SIZE_MAX) {
    for (size_t k = 0; k < n; ++k) out.push_back(Assign(servers[best].server, cands[best][k]));
    return out;
  }
  if (r.spread == Spread::kSameServer) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("no single server can take {} such slice(s) now (at most {} on one server)", n,
                              best_single));
  }
  if (total < n) return too_few();
  // Span servers: fewest servers first (the richest), each contributing its best devices.
  for (size_t i : richest_first()) {
    for (const Candidate& c : cands[i]) {
      if (out.size() == n) break;
      out.push_back(Assign(servers[i].server, c));
    }
  }
  return out;
}

Status CheckSatisfiable(const Request& r, const std::vector<ServerView>& servers) {
  std::vector<ServerView> empty = servers;
  size_t devices = 0, matching = 0, big_enough = 0, max_per_server = 0;
  for (ServerView& s : empty) {
    size_t per_server = 0;
    for (DeviceView& d : s.devices) {
      d.memory_free = d.memory_total;
      d.share_free = kShareWhole;
      d.whole_free = true;
      ++devices;
      if (!ClassMatches(r, d)) continue;
      ++matching;
      uint64_t memory = 0;
      uint32_t share = 0;
      SliceSize(r, d.memory_total, &memory, &share);
      if (memory <= d.memory_total) {
        ++big_enough;
        ++per_server;
      }
    }
    max_per_server = std::max(max_per_server, per_server);
  }
  if (Place(r, empty).ok()) return Status::Ok();
  const size_t n = static_cast<size_t>(r.count);
  std::string why;
  if (devices == 0) {
    why = "the pool has no devices on the servers that answered";
  } else if (matching == 0) {
    why = fmt::format("no device of class '{}' in the pool", r.device_class);
  } else if (big_enough == 0) {
    why = fmt::format("{} is more memory than any{} device has", FormatMemorySize(r.memory_bytes.value_or(0)),
                      r.device_class.empty() ? "" : " matching");
  } else if (r.spread == Spread::kSameServer && max_per_server < n) {
    why = fmt::format("asked for {} devices on one server; the largest server has {}", n, max_per_server);
  } else {
    why = fmt::format("asked for {} devices; the pool has {}{}", n, big_enough,
                      r.device_class.empty() ? "" : fmt::format(" of class '{}'", r.device_class));
  }
  return Status(StatusCode::kUnsatisfiable, fmt::format("{} can never be granted: {}", DescribeRequest(r), why));
}

}  // namespace gpupool::internal
