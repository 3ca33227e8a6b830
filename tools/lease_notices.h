// Shared by the tools that take a lease for something else to use (gp-run, gp-lease hold): what they say on stderr
// while they wait for it (--wait), and the warning that an agent's policy is about to end it, given while there is
// still time to save work.
#ifndef GPUPOOL_TOOLS_LEASE_NOTICES_H_
#define GPUPOOL_TOOLS_LEASE_NOTICES_H_

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "gpupool/lease.h"
#include "gpupool/request.h"
#include "gpupool/units.h"
#include "output.h"

namespace gpupool::tools {

// How long before an end announced by a policy (Lease::PolicyEnd) its holder is warned: soon enough to save work,
// late enough that a long grace does not warn of something an hour away. An end announced with less left is warned
// of at once.
constexpr std::chrono::minutes kPolicyEndWarning{10};

// Says once on stderr, as "TOOL: warning: lease ID ends in N s: WHY", that an agent's policy will end the lease, and
// again only if the reason changes. Call it on every look at the lease's health.
class PolicyEndWarning {
 public:
  explicit PolicyEndWarning(std::string tool) : tool_(std::move(tool)) {}

  void Check(const Lease& lease) {
    std::optional<LeaseEnd> end = lease.PolicyEnd();
    if (!end || end->in > kPolicyEndWarning || end->why == warned_) return;
    warned_ = end->why;
    const auto seconds = std::chrono::ceil<std::chrono::seconds>(end->in).count();
    PrintError("{}: warning: lease {} ends in {} s: {}\n", tool_, lease.id(), seconds, end->why);
  }

 private:
  std::string tool_;
  std::string warned_;  // The reason last warned of.
};

// While a request waits for capacity (Request::on_wait): says once what it waits for and why, as
// "TOOL: waiting up to 5m for 2 x 50% of a GPU: WHY", then again only when the reason changes (a line every
// kWaitNoticeGap at most) or every kWaitNoticeEvery.
constexpr std::chrono::seconds kWaitNoticeGap{5};
constexpr std::chrono::minutes kWaitNoticeEvery{1};

class WaitNotices {
 public:
  WaitNotices(std::string tool, const Request& request) : tool_(std::move(tool)), what_(DescribeRequest(request)),
                                                          wait_(request.wait) {}

  void operator()(const Status& why, std::chrono::milliseconds left) {
    if (auto line = Notice(why, left, std::chrono::steady_clock::now())) PrintError("{}", *line);
  }

  // The line due at `now` for a pause with `left` of the wait to go, if any: what operator() prints.
  std::optional<std::string> Notice(const Status& why, std::chrono::milliseconds left,
                                    std::chrono::steady_clock::time_point now) {
    const bool changed = why.message() != said_;
    if (said_any_ && !(changed && now - said_at_ >= kWaitNoticeGap) && now - said_at_ < kWaitNoticeEvery) {
      return std::nullopt;
    }
    std::string line = said_any_ ? fmt::format("{}: still waiting ({} left) for {}: {}\n", tool_,
                                               FormatDuration(std::chrono::ceil<std::chrono::seconds>(left)), what_,
                                               why.message())
                                 : fmt::format("{}: waiting up to {} for {}: {}\n", tool_, FormatDuration(wait_),
                                               what_, why.message());
    said_any_ = true;
    said_ = why.message();
    said_at_ = now;
    return line;
  }

 private:
  std::string tool_, what_;
  std::chrono::milliseconds wait_;
  bool said_any_ = false;
  std::string said_;  // The reason last said.
  std::chrono::steady_clock::time_point said_at_;
};

}  // namespace gpupool::tools

#endif  // GPUPOOL_TOOLS_LEASE_NOTICES_H_
