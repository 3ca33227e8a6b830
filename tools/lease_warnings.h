// Shared by the tools that hold a lease while something else uses it (gp-run, gp-lease hold): the warning that an
// agent's policy is about to end the lease, given while there is still time to save work.
#ifndef GPUPOOL_TOOLS_LEASE_WARNINGS_H_
#define GPUPOOL_TOOLS_LEASE_WARNINGS_H_

#include <chrono>
#include <string>

#include "gpupool/lease.h"
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

}  // namespace gpupool::tools

#endif  // GPUPOOL_TOOLS_LEASE_WARNINGS_H_
