#include "client/placement.h"

#include <algorithm>
#include <cmath>
#include <strings.h>

#include <tuple>

#include <fmt/format.h>

#include "core/util.h"
#include "gpupool/units.h"

namespace gpupool::internal {
namespace {

bool ClassMatches(const Request& r, const DeviceView& d) {
  if (r.device_class.empty()) return true;
  return r.device_class == d.device_class || strcasecmp(r.device_class.c_str(), d.model.c_str()) == 0;
}

struct Candidate {
  uint32_t device;
  uint64_t memory;
  uint32_t share;
  uint32_t leftover_share;  // Share free on the device after this slice: lower is a tighter fit.
  uint64_t leftover_memory;
  bool breaks_whole;        // Takes part of a device that was whole.
  double tiebreak;          // Random: clients racing for equal devices pick different ones.
};

// Devices of one server that can take one slice now, best fit first: already-split devices before whole ones,
// tighter fits before looser.
std::vector<Candidate> Candidates(const Request& r, const ServerView& server) {
  std::vector<Candidate> out;
  for (const DeviceView& d : server.devices) {
    if (!ClassMatches(r, d)) continue;
    uint64_t memory = 0;
    uint32_t share = 0;
    SliceSize(r, d.memory_total, &memory, &share);
    if (memory == 0 || memory > d.memory_free || share > d.share_free) continue;
    bool whole_slice = memory == d.memory_total && share == kShareWhole;
    out.push_back({d.index, memory, share, d.share_free - share, d.memory_free - memory,
                   d.whole_free && !whole_slice, RandomUnit()});
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.breaks_whole != b.breaks_whole) return !a.breaks_whole;
    if (a.leftover_share != b.leftover_share) return a.leftover_share < b.leftover_share;
    if (a.leftover_memory != b.leftover_memory) return a.leftover_memory < b.leftover_memory;
    return a.tiebreak < b.tiebreak;
  });
  return out;
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
  const size_t n = static_cast<size_t>(r.count);
  std::vector<std::vector<Candidate>> cands;
  size_t total = 0, best_single = 0;
  for (const ServerView& s : servers) {
    cands.push_back(Candidates(r, s));
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

  // One server, if any can hold it all: the one where it fits tightest.
  size_t best = SIZE_MAX;
  std::tuple<int, uint64_t, size_t, double> best_key;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (cands[i].size() < n) continue;
    auto [broken, leftover] = Cost(cands[i], n);
    // Then fewer usable devices (leave the emptiest servers for big requests), then chance.
    std::tuple<int, uint64_t, size_t, double> key{broken, leftover, cands[i].size(), RandomUnit()};
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
  // Span servers: fewest servers first (the richest), each contributing its best-fitting devices.
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
