#include "agent/worker_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/log.h"

namespace gpupool::agent {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `value` to a cgroup control file as one write, as the kernel parses it; errno-style message on failure.
Status WriteControl(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Status(StatusCode::kInternal, fmt::format("open {}: {}", path, std::strerror(errno)));
  ssize_t n = write(fd, value.data(), value.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return Status(StatusCode::kInternal, fmt::format("writing '{}' to {}: {}", value, path,
                                                     n < 0 ? std::strerror(err) : "short write"));
  }
  return Status::Ok();
}

bool HasWord(const std::string& list, std::string_view word) {
  std::istringstream words(list);
  for (std::string w; words >> w;) {
    if (w == word) return true;
  }
  return false;
}

// Where a cgroup hierarchy is mounted and which group is its mounted root (/proc/self/mountinfo: fields, " - ", the
// type, the source, the super options): the v2 hierarchy (`type` "cgroup2", no `controller`), or the v1 hierarchy
// whose super options name `controller` (type "cgroup"). Both "" when there is none.
struct CgroupMount {
  std::string mount, root;
};
CgroupMount FindCgroupMount(std::string_view type, std::string_view controller) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string mounted_type, source, options;
    tail >> mounted_type >> source >> options;
    std::replace(options.begin(), options.end(), ',', ' ');
    if (mounted_type != type || (!controller.empty() && !HasWord(options, controller))) continue;
    std::istringstream fields(line);
    std::string id, parent, device, root, mount;
    fields >> id >> parent >> device >> root >> mount;
    return {mount, root};
  }
  return {};
}

// The agent's own group ("ID:CONTROLLERS:PATH" in /proc/self/cgroup): on the v2 hierarchy ("0::PATH", no
// `controller`), or in the v1 hierarchy whose controllers include `controller`. "" when there is none.
std::string OwnGroup(std::string_view controller) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::replace(controllers.begin(), controllers.end(), ',', ' ');
    const bool unified = line.compare(0, first, "0") == 0 && controllers.empty();
    if (controller.empty() ? unified : HasWord(controllers, controller)) return line.substr(second + 1);
  }
  return "";
}

// The processes in `group` (cgroup.procs).
std::vector<std::string> Processes(const std::string& group) {
  std::istringstream procs(ReadFile(group + "/cgroup.procs"));
  std::vector<std::string> out;
  for (std::string pid; procs >> pid;) out.push_back(pid);
  return out;
}

// Groups of workers an earlier agent left behind (it was killed before it reaped them): empty, so removable. Only
// those whose worker is gone: another agent sharing the parent (tests, two agents in one unit) may have made a group
// for a live worker it has not moved in yet.
void RemoveLeftWorkerGroups(const std::string& parent) {
  if (DIR* d = opendir(parent.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "worker-", 7) != 0) continue;
      char* end = nullptr;
      long pid = std::strtol(e->d_name + 7, &end, 10);
      if (pid <= 0 || *end != '\0' || (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
        rmdir(fmt::format("{}/{}", parent, e->d_name).c_str());
      }
    }
    closedir(d);
  }
}

// Shows that workers' groups can be made under `parent` and limited there: makes a group, sets its `control` (the
// memory limit's file) to `unlimited`, removes it again; then removes groups that workers of an earlier agent left.
Status ProbeMemoryLimit(const std::string& parent, const char* control, const char* unlimited) {
  const std::string probe = fmt::format("{}/probe-{}", parent, getpid());
  if (mkdir(probe.c_str(), 0755) != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("cannot create groups under {}: {}", parent, std::strerror(errno)));
  }
  Status s = WriteControl(probe + "/" + control, unlimited);
  rmdir(probe.c_str());
  if (!s.ok()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("cannot set {} under {}: {}", control, parent, s.message()));
  }
  RemoveLeftWorkerGroups(parent);
  return Status::Ok();
}

// Makes `parent` able to hold workers' groups with the memory controller: memory enabled in its subtree_control,
// and a group made and removed there to show that memory.max can be set. With `move_self`, the agent's own group:
// cgroup v2 enables a controller for the children of a group only while no process is in it (the root group
// aside), so the agent first moves itself into a leaf group, "agent"; only when it is alone in its group (one
// delegated to it, as systemd's Delegate= does), never taking a shell or another program along.
Status Prepare(const std::string& parent, bool move_self, bool may_enable) {
  const std::string controllers = ReadFile(parent + "/cgroup.controllers");
  if (!HasWord(controllers, "memory")) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the memory controller is not available in {} (its cgroup.controllers: '{}'): on a "
                              "cgroup v1 or hybrid system memory is a v1 controller, and a cgroup v2 group has it "
                              "only when its parent delegates it",
                              parent, controllers.substr(0, controllers.find_last_not_of(" \n") + 1)));
  }
  if (!HasWord(ReadFile(parent + "/cgroup.subtree_control"), "memory")) {
    if (!may_enable) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("the memory controller is not enabled for the groups of {} (the root group: not "
                                "changed unless [workers] cgroup names it)",
                                parent));
    }
    const std::vector<std::string> procs = Processes(parent);
    if (move_self && !procs.empty()) {
      if (procs.size() > 1 || procs[0] != std::to_string(getpid())) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("the agent's group {} holds {} other process(es): it was not delegated to the "
                                  "agent alone (systemd: Delegate= in its unit; or set [workers] cgroup to a group "
                                  "made for the workers)",
                                  parent, procs.size() - 1));
      }
      const std::string leaf = parent + "/agent";
      if (mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("cannot create {} to leave {} to its workers: {}", leaf, parent,
                                  std::strerror(errno)));
      }
      if (Status s = WriteControl(leaf + "/cgroup.procs", procs[0]); !s.ok()) {
        return Status(StatusCode::kInvalidArgument, "cannot move the agent into a leaf group: " + s.message());
      }
    }
    if (Status s = WriteControl(parent + "/cgroup.subtree_control", "+memory"); !s.ok()) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("cannot enable the memory controller for groups under {}: {}", parent, s.message()));
    }
  }
  return ProbeMemoryLimit(parent, "memory.max", "max");
}

// Makes `parent`, a group of the cgroup v1 memory hierarchy, hold workers' groups: v1 has no controllers to enable
// and no rule against processes beside child groups, so it needs only a group made and removed there to show that
// memory.limit_in_bytes can be set.
Status PrepareMemoryV1(const std::string& parent) {
  return ProbeMemoryLimit(parent, "memory.limit_in_bytes", "-1");
}

}  // namespace

Result<WorkerCgroups> WorkerCgroups::Resolve(std::string_view setting) {
  WorkerCgroups cgroups;
  if (setting == kWorkerCgroupOff) {
    cgroups.reason_ = "[workers] cgroup = \"off\"";
    return cgroups;
  }
  if (setting != kWorkerCgroupAuto) {
    std::string path(setting);
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const std::string mount = FindCgroupMount("cgroup2", "").mount;
    const std::string v1_mount = FindCgroupMount("cgroup", "memory").mount;
    auto under = [&](const std::string& m) { return !m.empty() && (path == m || path.rfind(m + "/", 0) == 0); };
    if (under(v1_mount)) {
      if (Status s = PrepareMemoryV1(path); !s.ok()) {
        return Status(StatusCode::kInvalidArgument, fmt::format("[workers] cgroup: {}", s.message()));
      }
      cgroups.parent_ = path;
      cgroups.memory_v1_ = true;
      return cgroups;
    }
    if (!under(mount)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("[workers] cgroup '{}' is neither a group of the cgroup v2 hierarchy{} nor one of "
                                "the cgroup v1 memory hierarchy{}",
                                path, mount.empty() ? " (none is mounted)" : fmt::format(" (mounted at {})", mount),
                                v1_mount.empty() ? " (none is mounted)" : fmt::format(" (mounted at {})", v1_mount)));
    }
    if (Status s = Prepare(path, false, true); !s.ok()) {
      return Status(StatusCode::kInvalidArgument, fmt::format("[workers] cgroup: {}", s.message()));
    }
    cgroups.parent_ = path;
    return cgroups;
  }
  std::string unified_reason;
  const std::string mount = FindCgroupMount("cgroup2", "").mount, own = OwnGroup("");
  if (mount.empty() || own.empty()) {
    unified_reason = mount.empty() ? "no cgroup v2 hierarchy is mounted" : "the agent is in no cgroup v2 group";
  } else {
    const std::string parent = own == "/" ? mount : mount + own;
    Status s = Prepare(parent, own != "/", own != "/");
    if (s.ok()) {
      cgroups.parent_ = parent;
      return cgroups;
    }
    unified_reason = s.message();
  }
  // A cgroup v1 or hybrid system (memory is a v1 controller): the agent's own group in the memory hierarchy, where
  // the agent may make groups (a root agent, or one given the group).
  auto [v1_mount, v1_root] = FindCgroupMount("cgroup", "memory");
  std::string v1_own = OwnGroup("memory");
  std::string v1_reason;
  if (v1_mount.empty() || v1_own.empty()) {
    v1_reason = v1_mount.empty() ? "no cgroup v1 memory hierarchy is mounted" : "the agent is in no v1 memory group";
  } else {
    // Inside a container the hierarchy's mounted root is the container's own group, which /proc/self/cgroup names.
    if (v1_root != "/" && (v1_own == v1_root || v1_own.rfind(v1_root + "/", 0) == 0)) {
      v1_own = v1_own.substr(v1_root.size());
    }
    const std::string parent = v1_own == "/" || v1_own.empty() ? v1_mount : v1_mount + v1_own;
    Status s = PrepareMemoryV1(parent);
    if (s.ok()) {
      cgroups.parent_ = parent;
      cgroups.memory_v1_ = true;
      return cgroups;
    }
    v1_reason = s.message();
  }
  cgroups.reason_ = fmt::format("cgroup v2: {}; cgroup v1: {}", unified_reason, v1_reason);
  return cgroups;
}

Result<std::string> WorkerCgroups::Confine(pid_t pid, uint64_t max_bytes) const {
  const std::string group = fmt::format("{}/worker-{}", parent_, pid);
  if (mkdir(group.c_str(), 0755) != 0) {
    return Status(StatusCode::kInternal, fmt::format("cannot create the worker's group {}: {}", group,
                                                     std::strerror(errno)));
  }
  // Swap would let a worker hold its cap again on disk: v2 caps it at 0, v1 caps memory and swap together at the
  // same figure (memsw, after the memory limit: v1 refuses a memsw limit below it). Absent where the kernel does
  // not account swap.
  const std::string limit = memory_v1_ ? "/memory.limit_in_bytes" : "/memory.max";
  const std::string swap_limit = memory_v1_ ? "/memory.memsw.limit_in_bytes" : "/memory.swap.max";
  Status s = WriteControl(group + limit, std::to_string(max_bytes));
  if (s.ok()) {
    Status swap = WriteControl(group + swap_limit, memory_v1_ ? std::to_string(max_bytes) : "0");
    if (!swap.ok() && access((group + swap_limit).c_str(), F_OK) == 0) s = swap;
  }
  if (s.ok()) s = WriteControl(group + "/cgroup.procs", std::to_string(pid));
  if (!s.ok()) {
    rmdir(group.c_str());
    return Status(StatusCode::kInternal, "cannot cap the session worker's memory: " + s.message());
  }
  return group;
}

void WorkerCgroups::Remove(const std::string& group) {
  if (rmdir(group.c_str()) != 0 && errno != ENOENT) {
    GP_WARN("session", "cannot remove the session worker's group {}: {}", group, std::strerror(errno));
  }
}

}  // namespace gpupool::agent
