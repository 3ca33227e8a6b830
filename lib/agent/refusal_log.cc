#include "agent/refusal_log.h"

#include <algorithm>

#include <fmt/format.h>

#include "gpupool/units.h"

namespace gpupool::agent {
namespace {

std::string Since(RefusalLog::Clock::duration d) {
  return FormatDuration(std::chrono::duration_cast<std::chrono::milliseconds>(d));
}

}  // namespace

std::optional<std::string> RefusalLog::Refused(const std::string& client, const std::string& reason,
                                               Clock::time_point now) {
  for (auto it = clients_.begin(); it != clients_.end();) {
    it = now - it->second.last > kForgetAfter ? clients_.erase(it) : std::next(it);
  }
  auto it = clients_.find(client);
  if (it == clients_.end()) {
    if (clients_.size() >= kMaxClients) {
      clients_.erase(std::min_element(clients_.begin(), clients_.end(),
                                      [](const auto& a, const auto& b) { return a.second.last < b.second.last; }));
    }
    it = clients_.emplace(client, Refusals{"", now, now, now}).first;
  }
  Refusals& r = it->second;
  ++r.total;
  r.last = now;
  if (r.reason != reason) {
    r.reason = reason;
    r.logged = now;
    r.unlogged = 0;
    return fmt::format("refused {}'s reservation: {}", client, reason);
  }
  ++r.unlogged;
  if (now - r.logged < kSummaryEvery) return std::nullopt;
  std::string line = fmt::format("refused {}'s reservation {} more time(s) in the last {} ({} in all), for the same "
                                 "reason: {}",
                                 client, r.unlogged, Since(now - r.logged), r.total, reason);
  r.logged = now;
  r.unlogged = 0;
  return line;
}

std::optional<std::string> RefusalLog::Allowed(const std::string& client, Clock::time_point now) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return std::nullopt;
  std::string line = fmt::format("allowed {}'s reservation after {} refusal(s) over {}", client, it->second.total,
                                 Since(now - it->second.first));
  clients_.erase(it);
  return line;
}

}  // namespace gpupool::agent
