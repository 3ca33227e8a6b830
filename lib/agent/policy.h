// Admin policies: who may use which GPUs of an agent, how much, and for how long, with personalities that switch
// the rules by day of week and hour (e.g. short half-GPU leases by day, long whole-GPU training at night).
//
//   [groups]
//   researchers = ["alice", "@gpu-research"]   # users, and Unix groups as "@name"
//   [[personality]]
//   name = "day"
//   days = ["mon", "tue", "wed", "thu", "fri"] # default: every day
//   hours = "08:00-20:00"                      # local time, [from, to); may wrap past midnight; default: all day
//   max_lease = "2h"                           # longest a lease may live; default: no limit
//   max_fraction = 0.5                         # largest slice of a GPU; default 1
//   max_gpus_per_user = 2                      # slices one user may hold at once on this agent; default: no limit
//   max_share_per_user = 1.5                   # GPUs' worth of compute one user may hold at once; default: no limit
//   on_change = "keep"                         # leases granted under another personality: "keep" them under
//                                              # their own rules, or a grace duration ("10m") after which those
//                                              # that break this personality's rules are revoked, or "migrate":
//                                              # those are moved off their GPUs at once instead of ended (on
//                                              # one agent: suspended, their state kept, and resumed on any GPU
//                                              # of the agent when the rules in force allow them again)
//   [personality.classes]                      # who may use GPUs of which class ("*": any other class);
//   a100 = ["researchers"]                     # default: everyone may use every GPU
//
// The first personality whose days and hours hold now is the active one; when none does, nothing is restricted.
// Pure logic with an injected clock and group lookup, so every rule is tested without sleeping or Unix groups.
#ifndef GPUPOOL_AGENT_POLICY_H_
#define GPUPOOL_AGENT_POLICY_H_

#include <chrono>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/toml_config.h"
#include "gpupool/status.h"

namespace gpupool::agent {

struct Personality {
  std::string name;
  std::vector<int> days;      // 0 = Sunday .. 6; empty: every day.
  int from_minute = 0;        // Of the day, local time: [from, to); from > to wraps past midnight.
  int to_minute = 24 * 60;
  std::optional<std::chrono::milliseconds> max_lease;
  double max_fraction = 1.0;
  std::optional<int> max_gpus_per_user;
  std::optional<double> max_share_per_user;
  std::optional<std::chrono::milliseconds> grace;  // Unset: "keep" (or "migrate").
  bool migrate_on_change = false;  // "migrate": what breaks the rules is moved off its GPUs, not ended.
  std::map<std::string, std::vector<std::string>> classes;  // Class ("*" = any other) -> groups or users.

  bool ActiveAt(const std::tm& local) const;
};

// What a reservation asks for, as the policy sees it.
struct PolicyRequest {
  std::string user;
  std::vector<std::string> slice_classes;  // Each slice's device class.
  std::vector<double> slice_fractions;     // Each slice's compute share.
  int gpus_held = 0;                       // Slices the user holds on this agent already.
  double share_held = 0;                   // Their compute shares, summed.
};

// Whether `user` belongs to Unix group `group`.
using GroupLookup = std::function<bool(const std::string& user, const std::string& group)>;
bool UnixGroupHas(const std::string& user, const std::string& group);

class Policy {
 public:
  // Reads [groups] and [[personality]] from an agent.toml; no such sections: an empty policy (nothing restricted).
  static Result<Policy> Read(const TomlFile& file);
  Policy() = default;

  bool empty() const { return personalities_.empty(); }
  const std::vector<Personality>& personalities() const { return personalities_; }
  // The personality in force at `t` (local time), or null: none, nothing restricted.
  const Personality* ActiveAt(std::time_t t) const;
  // When the personality in force next changes after `t`, within a week; nullopt: never.
  std::optional<std::time_t> NextChange(std::time_t t) const;
  // Since when the personality in force at `t` has been (to the minute, looking back a week at most).
  std::time_t InForceSince(std::time_t t) const;

  // Ok, or why `personality` refuses `request`: kResourceExhausted when another personality of the week would
  // allow it (the message says which and from when), kPermissionDenied when none would.
  Status Check(const PolicyRequest& request, std::time_t now, const GroupLookup& groups) const;
  // Why a lease held under other rules breaks `p`'s (empty: it does not). `age`: since its grant.
  std::string Breaks(const Personality& p, const PolicyRequest& held, std::chrono::milliseconds age,
                     const GroupLookup& groups) const;
  // One line per personality, for `gp-agent ctl list` and logs.
  std::string Describe() const;

 private:
  bool InGroup(const std::string& user, const std::string& member, const GroupLookup& groups) const;
  // Why `p` (null: no personality) refuses `request`; empty: it allows it.
  std::string Refusal(const Personality* p, const PolicyRequest& request, const GroupLookup& groups) const;

  std::map<std::string, std::vector<std::string>> groups_;
  std::vector<Personality> personalities_;
};

// "08:00" for a time of day in minutes; "Mon 08:00" for a time_t (local).
std::string FormatLocal(std::time_t t);

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_POLICY_H_
