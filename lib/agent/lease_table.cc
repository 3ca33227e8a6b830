#include "agent/lease_table.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/util.h"
#include "gpupool/request.h"
#include "gpupool/units.h"

namespace gpupool::agent {

LeaseTable::LeaseTable(std::vector<DeviceCapacity> devices, LeaseTiming timing)
    : devices_(std::move(devices)), timing_(timing), usage_(devices_.size()), cordoned_(devices_.size(), false) {}

Status LeaseTable::MoveSlices(const std::string& id, uint32_t from, uint32_t to) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.committed) {
    return Status(StatusCode::kInvalidArgument, fmt::format("no lease {} is held here", id));
  }
  if (from >= devices_.size() || to >= devices_.size()) {
    return Status(StatusCode::kInvalidArgument, fmt::format("no device {} here (this agent has {})",
                                                            std::max(from, to), devices_.size()));
  }
  DeviceUsage moving;
  size_t count = 0, already = 0;
  for (const SliceGrant& s : it->second.slices) {
    if (s.device == from) {
      moving.memory_bytes += s.memory_bytes;
      moving.share += s.share;
      ++count;
    }
    if (s.device == to) ++already;
  }
  if (it->second.suspended) return Status(StatusCode::kInvalidArgument, fmt::format("lease {} is suspended", id));
  if (count == 0) return Status(StatusCode::kInvalidArgument, fmt::format("lease {} holds nothing on device {}", id, from));
  if (from == to) return Status::Ok();
  if (cordoned_[to]) {
    return Status(StatusCode::kUnavailable, fmt::format("device {} is cordoned by an administrator", to));
  }
  if (count + already > kMaxSlicesPerDevice) {
    return Status(StatusCode::kResourceExhausted, fmt::format("device {} would hold more than {} slices of lease {}",
                                                              to, kMaxSlicesPerDevice, id));
  }
  const uint64_t free_memory = devices_[to].memory_bytes - std::min(devices_[to].memory_bytes, usage_[to].memory_bytes);
  const uint64_t free_share = kShareWhole - std::min<uint64_t>(kShareWhole, usage_[to].share);
  if (moving.memory_bytes > free_memory || moving.share > free_share) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("device {} has {} and {:.0f}% compute free; lease {} needs {} and {:.0f}% there", to,
                              FormatMemorySize(free_memory), static_cast<double>(free_share) / kShareWhole * 100, id,
                              FormatMemorySize(moving.memory_bytes),
                              static_cast<double>(moving.share) / kShareWhole * 100));
  }
  for (SliceGrant& s : it->second.slices) {
    if (s.device == from) s.device = to;
  }
  usage_[from].memory_bytes -= std::min(usage_[from].memory_bytes, moving.memory_bytes);
  usage_[from].share -= std::min(usage_[from].share, moving.share);
  usage_[to].memory_bytes += moving.memory_bytes;
  usage_[to].share += moving.share;
  return Status::Ok();
}

Status LeaseTable::Suspend(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.committed) {
    return Status(StatusCode::kInvalidArgument, fmt::format("no lease {} is held here", id));
  }
  if (it->second.suspended) return Status(StatusCode::kInvalidArgument, fmt::format("lease {} is suspended already", id));
  for (const SliceGrant& s : it->second.slices) {
    usage_[s.device].memory_bytes -= std::min(usage_[s.device].memory_bytes, s.memory_bytes);
    usage_[s.device].share -= std::min<uint64_t>(usage_[s.device].share, s.share);
  }
  it->second.suspended = true;
  return Status::Ok();
}

Status LeaseTable::Unsuspend(const std::string& id, const std::function<bool(uint32_t from, uint32_t to)>& alike) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.suspended) {
    return Status(StatusCode::kInvalidArgument, fmt::format("no suspended lease {} here", id));
  }
  // What each of its devices held, placed device by device on a copy of the usage.
  std::map<uint32_t, DeviceUsage> wanted;
  for (const SliceGrant& s : it->second.slices) {
    wanted[s.device].memory_bytes += s.memory_bytes;
    wanted[s.device].share += s.share;
  }
  std::vector<DeviceUsage> usage = usage_;
  std::map<uint32_t, uint32_t> placed;
  std::vector<bool> taken(devices_.size(), false);
  for (const auto& [from, need] : wanted) {
    auto fits = [&](uint32_t to) {
      return to < devices_.size() && !cordoned_[to] && !taken[to] &&
             need.memory_bytes <= devices_[to].memory_bytes - std::min(devices_[to].memory_bytes, usage[to].memory_bytes) &&
             need.share <= kShareWhole - std::min<uint64_t>(kShareWhole, usage[to].share);
    };
    std::optional<uint32_t> to;
    if (fits(from)) to = from;
    for (uint32_t d = 0; !to && d < devices_.size(); ++d) {
      if (d != from && alike(from, d) && fits(d)) to = d;
    }
    if (!to) {
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("no device here has {} and {:.0f}% compute free for lease {} now", 
                                FormatMemorySize(need.memory_bytes),
                                static_cast<double>(need.share) / kShareWhole * 100, id));
    }
    taken[*to] = true;
    placed[from] = *to;
    usage[*to].memory_bytes += need.memory_bytes;
    usage[*to].share += need.share;
  }
  for (SliceGrant& s : it->second.slices) s.device = placed.at(s.device);
  usage_ = std::move(usage);
  it->second.suspended = false;
  return Status::Ok();
}

Status LeaseTable::Reserve(const std::string& id, const std::string& secret, const LeaseOwner& owner,
                           const std::vector<SliceGrant>& slices, Clock::time_point now) {
  if (draining_) return Status(StatusCode::kUnavailable, "agent is draining: it takes no new leases");
  if (id.empty() || secret.empty()) return Status(StatusCode::kInvalidArgument, "lease id and secret are required");
  if (slices.empty()) return Status(StatusCode::kInvalidArgument, "a reservation needs at least one slice");
  if (entries_.count(id)) return Status(StatusCode::kInvalidArgument, fmt::format("lease id {} is already in use", id));

  // Sum per device first, so a request with two slices on one device is checked as a whole.
  std::vector<DeviceUsage> wanted(devices_.size());
  std::vector<size_t> slices_of(devices_.size(), 0);
  const uint32_t min_share = ShareFromFraction(kMinFraction);
  for (const SliceGrant& s : slices) {
    if (s.device >= devices_.size()) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("device {} does not exist (this agent has {})", s.device, devices_.size()));
    }
    const uint64_t total = devices_[s.device].memory_bytes;
    if (cordoned_[s.device]) {
      return Status(StatusCode::kUnavailable,
                    fmt::format("device {} is cordoned by an administrator: it takes no new leases", s.device));
    }
    if (s.share < min_share || s.share > kShareWhole) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("compute share {:.3f} of device {} is outside [0.05, 1]", FractionFromShare(s.share),
                                s.device));
    }
    if (s.memory_bytes == 0 || s.memory_bytes > total) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("slice of {} on device {} does not fit its {} of memory",
                                FormatMemorySize(s.memory_bytes), s.device, FormatMemorySize(total)));
    }
    // A count no request can need is refused before anything is summed: with it the sums below stay far from
    // wrapping (20 whole devices' memory and shares per device at most).
    if (++slices_of[s.device] > kMaxSlicesPerDevice) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("more than {} slices of device {} in one reservation (a slice is at least 1/{} of a "
                                "device)", kMaxSlicesPerDevice, s.device, kMaxSlicesPerDevice));
    }
    wanted[s.device].memory_bytes += s.memory_bytes;
    wanted[s.device].share += s.share;
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (wanted[d].memory_bytes == 0 && wanted[d].share == 0) continue;
    const uint64_t free_memory = devices_[d].memory_bytes - std::min(devices_[d].memory_bytes, usage_[d].memory_bytes);
    const uint64_t free_share = kShareWhole - std::min<uint64_t>(kShareWhole, usage_[d].share);
    if (wanted[d].memory_bytes > free_memory || wanted[d].share > free_share) {
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("device {} has {} and {:.0f}% compute free; asked for {} and {:.0f}%", d,
                                FormatMemorySize(free_memory), static_cast<double>(free_share) / kShareWhole * 100,
                                FormatMemorySize(wanted[d].memory_bytes),
                                static_cast<double>(wanted[d].share) / kShareWhole * 100));
    }
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    usage_[d].memory_bytes += wanted[d].memory_bytes;
    usage_[d].share += wanted[d].share;
  }
  // Boilerplate by nature: field by field into the entry.
  LeaseEntry entry;
  entry.id = id;
  entry.secret = secret;
  entry.owner = owner;
  entry.slices = slices;
  entry.created = now;
  entry.expires = now + timing_.reservation_ttl;
  entries_.emplace(id, std::move(entry));
  return Status::Ok();
}

Result<LeaseEntry*> LeaseTable::Lookup(const std::string& id, const std::string& secret) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return Status(StatusCode::kNotFound,
                  fmt::format("lease {} is not held here (released, expired, or the agent restarted)", id));
  }
  if (!ConstantTimeEquals(it->second.secret, secret)) {
    return Status(StatusCode::kPermissionDenied, fmt::format("wrong secret for lease {}", id));
  }
  return &it->second;
}

Status LeaseTable::Commit(const std::string& id, const std::string& secret, Clock::time_point now) {
  auto entry = Lookup(id, secret);
  if (!entry.ok()) return entry.status();
  (*entry)->committed = true;
  (*entry)->expires = now + timing_.lease_ttl;
  return Status::Ok();
}

Status LeaseTable::Renew(const std::string& id, const std::string& secret, Clock::time_point now) {
  auto entry = Lookup(id, secret);
  if (!entry.ok()) return entry.status();
  if (!(*entry)->committed) {
    return Status(StatusCode::kInvalidArgument, fmt::format("lease {} is only reserved; commit it first", id));
  }
  (*entry)->expires = now + timing_.lease_ttl;
  return Status::Ok();
}

void LeaseTable::Free(std::map<std::string, LeaseEntry>::iterator it) {
  for (const SliceGrant& s : it->second.slices) {
    if (it->second.suspended) break;  // Its slices hold nothing.
    usage_[s.device].memory_bytes -= s.memory_bytes;
    usage_[s.device].share -= s.share;
  }
  entries_.erase(it);
}

Status LeaseTable::Release(const std::string& id, const std::string& secret) {
  auto entry = Lookup(id, secret);
  if (!entry.ok()) return entry.status();
  Free(entries_.find(id));
  return Status::Ok();
}

Status LeaseTable::Revoke(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return Status(StatusCode::kNotFound, fmt::format("no lease {} here", id));
  Free(it);
  return Status::Ok();
}

Status LeaseTable::Cancel(const std::string& id, const std::string& secret) {
  auto entry = Lookup(id, secret);
  if (!entry.ok()) return entry.status();
  if ((*entry)->committed) {
    return Status(StatusCode::kInvalidArgument, fmt::format("lease {} is committed; release it instead", id));
  }
  Free(entries_.find(id));
  return Status::Ok();
}

std::vector<LeaseTable::Expired> LeaseTable::Expire(Clock::time_point now) {
  std::vector<Expired> freed;
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.expires <= now) {
      freed.push_back({it->first, it->second.committed});
      Free(it);
    }
    it = next;
  }
  return freed;
}

const LeaseEntry* LeaseTable::Find(const std::string& id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace gpupool::agent
