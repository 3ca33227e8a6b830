// Memory caps for session workers through cgroups ([workers] cgroup): each worker in a group of its own, under a
// parent group the agent may create groups in, with its cap on memory and swap, removed when the worker ends. On
// cgroup v2 that is memory.max at the cap and memory.swap.max 0; on the cgroup v1 memory hierarchy (v1 and hybrid
// systems, still common on GPU servers) memory.limit_in_bytes and memory.memsw.limit_in_bytes both at the cap.
// Unlike RLIMIT_AS, these count what a worker makes resident, not the address space it reserves, so they cap
// workers of physical GPUs too (the CUDA driver reserves address space far beyond its use).
//
// The parent is the agent's own group when the agent runs on a cgroup v2 hierarchy whose memory controller it was
// delegated (systemd: Delegate= in gp-agent.service), else its own group in the v1 memory hierarchy where it may
// make groups there, or a group named in the configuration. Where none is so (no delegation, a read-only
// /sys/fs/cgroup), the agent falls back to RLIMIT_AS for workers of emulated devices and says once in its log that
// workers of GPUs are not capped, and why.
#ifndef GPUPOOL_AGENT_WORKER_CGROUP_H_
#define GPUPOOL_AGENT_WORKER_CGROUP_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "gpupool/status.h"

namespace gpupool::agent {

// [workers] cgroup: "auto" (the default), "off", or the absolute path of a cgroup v2 group or of a group in the
// cgroup v1 memory hierarchy.
inline constexpr const char kWorkerCgroupAuto[] = "auto";
inline constexpr const char kWorkerCgroupOff[] = "off";

// Where the agent puts its workers' groups, as it found it at start. Thread safety: const methods only.
class WorkerCgroups {
 public:
  // Resolves `setting` ([workers] cgroup). "off": no group. "auto": the agent's own group on the cgroup v2
  // hierarchy, if its memory controller is available there and the agent may enable it for groups it creates (when
  // the agent's own group holds processes, the agent first moves itself into a leaf group of its own, "agent", as
  // cgroup v2 requires of a delegated group); otherwise no group, and reason() says why. A PATH: that group, which
  // must be so; kInvalidArgument saying what is missing otherwise (the agent refuses to start). Without a usable v2
  // group, "auto" takes the agent's own group in the cgroup v1 memory hierarchy if the agent may make groups there.
  static Result<WorkerCgroups> Resolve(std::string_view setting);

  // Whether workers get groups; else reason() says why not.
  bool usable() const { return !parent_.empty(); }
  const std::string& parent() const { return parent_; }
  const std::string& reason() const { return reason_; }
  // Whether the groups are the cgroup v1 memory hierarchy's (memory.limit_in_bytes) rather than v2's (memory.max).
  bool memory_v1() const { return memory_v1_; }

  // Makes the group of worker `pid` under the parent, caps its memory at `max_bytes` and its swap (where the kernel
  // accounts swap), and moves `pid` into it. Returns the group's path; on failure nothing is left.
  // REQUIRES: usable().
  Result<std::string> Confine(pid_t pid, uint64_t max_bytes) const;

  // Removes a worker's group once its processes have ended (rmdir); failures are logged, not returned.
  static void Remove(const std::string& group);

 private:
  std::string parent_;
  std::string reason_;
  bool memory_v1_ = false;
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_WORKER_CGROUP_H_
