#include "agent/worker_sandbox.h"

#include <dirent.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "core/log.h"

namespace gpupool::agent {
namespace {

Status Failed(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

Status Errno(std::string_view what) {
  return Status(StatusCode::kInternal, fmt::format("session worker sandbox: {}: {}", what, std::strerror(errno)));
}

// The groups owning the NVIDIA device files, so that a worker reaches the GPU as the agent's user would on a
// server whose device files are 0660 root:video (or similar). Root's group is never handed out.
std::vector<gid_t> DeviceFileGroups() {
  std::vector<gid_t> out;
  for (const char* dir : {"/dev", "/dev/nvidia-caps"}) {
    DIR* d = opendir(dir);
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "nvidia", 6) != 0) continue;
      struct stat st;
      if (stat(fmt::format("{}/{}", dir, e->d_name).c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_gid != 0) {
        out.push_back(st.st_gid);
      }
    }
    closedir(d);
  }
  return out;
}

std::string UserName(uid_t uid) {
  struct passwd pw, *found = nullptr;
  char buffer[4096];
  if (getpwuid_r(uid, &pw, buffer, sizeof(buffer), &found) == 0 && found != nullptr) return found->pw_name;
  return std::to_string(uid);
}

bool ParseNumber(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// ---- The syscall filter. ----
//
// Denied calls fail with EPERM rather than killing the worker: glibc and the CUDA driver probe for calls and take
// another way when one fails (a newer driver's new call would otherwise kill every session on the upgraded
// server), and what a denied call would have done is not done either way. A syscall of a foreign ABI (i386 via
// int 0x80, x32) is no probe: the worker is killed.

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
constexpr uint32_t kX32SyscallBit = 0x40000000;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#endif

#if defined(__x86_64__) || defined(__aarch64__)
// What a worker does: the KJ event loop (epoll, eventfd, signals, timers), threads (the emulator's and the
// driver's), memory (mmap, memfds it receives, the shared tables), its sockets (the agent's, the door it accepts
// on, the direct connection), the CUDA driver (dlopen: open, read, mmap; ioctl on /dev/nvidia*; NUMA policy), and
// the process's own bookkeeping. Calls taking a pid, a family, flags or a request (ioctl, prctl) are checked
// below, not here.
constexpr int kAllowedSyscalls[] = {
    // I/O on descriptors.
    SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_pread64, SYS_pwrite64, SYS_preadv, SYS_pwritev, SYS_preadv2,
    SYS_pwritev2, SYS_close, SYS_close_range, SYS_lseek, SYS_fstat, SYS_newfstatat, SYS_statx, SYS_fstatfs,
    SYS_statfs, SYS_fcntl, SYS_flock, SYS_fsync, SYS_fdatasync, SYS_ftruncate, SYS_fallocate, SYS_fadvise64,
    SYS_dup, SYS_dup3, SYS_pipe2, SYS_getdents64, SYS_openat, SYS_faccessat, SYS_faccessat2,
    SYS_readlinkat, SYS_getcwd, SYS_unlinkat, SYS_fchmod, SYS_fchmodat, SYS_memfd_create, SYS_sendfile,
    SYS_copy_file_range, SYS_splice,
    // Memory.
    SYS_mmap, SYS_munmap, SYS_mprotect, SYS_mremap, SYS_madvise, SYS_msync, SYS_mincore, SYS_mlock, SYS_munlock,
    SYS_brk, SYS_membarrier, SYS_mbind, SYS_get_mempolicy, SYS_set_mempolicy,
    // Events, timers and waiting.
    SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_pwait, SYS_epoll_pwait2, SYS_ppoll, SYS_pselect6, SYS_eventfd2,
    SYS_timerfd_create, SYS_timerfd_settime, SYS_timerfd_gettime, SYS_signalfd4, SYS_futex, SYS_futex_waitv,
    SYS_nanosleep, SYS_clock_nanosleep, SYS_clock_gettime, SYS_clock_getres, SYS_gettimeofday, SYS_sched_yield,
    SYS_restart_syscall,
    // Signals (to itself: kill and tgkill are checked below).
    SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_rt_sigtimedwait, SYS_rt_sigsuspend,
    SYS_rt_sigpending, SYS_sigaltstack,
    // Sockets (socket and socketpair are checked below).
    SYS_connect, SYS_accept, SYS_accept4, SYS_bind, SYS_listen, SYS_getsockname, SYS_getpeername, SYS_setsockopt,
    SYS_getsockopt, SYS_sendto, SYS_recvfrom, SYS_sendmsg, SYS_recvmsg, SYS_sendmmsg, SYS_recvmmsg, SYS_shutdown,
    // Threads and the process itself.
    SYS_set_robust_list, SYS_get_robust_list, SYS_set_tid_address, SYS_rseq, SYS_exit, SYS_exit_group,
    SYS_getpid, SYS_gettid, SYS_getppid, SYS_getuid, SYS_geteuid, SYS_getgid, SYS_getegid, SYS_getgroups,
    SYS_getresuid, SYS_getresgid, SYS_getpgid, SYS_getsid, SYS_capget, SYS_uname, SYS_sysinfo, SYS_getrandom,
    SYS_getrusage, SYS_times, SYS_getcpu, SYS_sched_getaffinity, SYS_sched_getparam, SYS_sched_getscheduler,
    SYS_sched_get_priority_max, SYS_sched_get_priority_min, SYS_getpriority, SYS_umask, SYS_wait4, SYS_waitid,
#if defined(__x86_64__)
    // The x86-64 forms glibc and older drivers still use.
    SYS_open, SYS_stat, SYS_lstat, SYS_access, SYS_readlink, SYS_unlink, SYS_chmod, SYS_poll, SYS_select,
    SYS_pipe, SYS_dup2, SYS_epoll_create, SYS_epoll_wait, SYS_eventfd, SYS_signalfd, SYS_getdents, SYS_time,
    SYS_arch_prctl, SYS_getrlimit,
#endif
};

// The namespace flags: a worker makes no namespaces (the way out of a seccomp jail via a user namespace's root).
constexpr uint32_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                                     CLONE_NEWNET | CLONE_NEWCGROUP;

// The low 32 bits of argument `i` (little-endian: both supported ABIs).
constexpr uint32_t ArgLow(int i) { return offsetof(struct seccomp_data, args) + 8 * i; }
constexpr uint32_t ArgHigh(int i) { return ArgLow(i) + 4; }

class FilterBuilder {
 public:
  void Load(uint32_t offset) { code_.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offset)); }
  void Return(uint32_t action) { code_.push_back(BPF_STMT(BPF_RET | BPF_K, action)); }
  // If A == k, go on; else skip `skip` instructions.
  void IfEqual(uint32_t k, uint8_t skip) { code_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, 0, skip)); }
  // If A & k, go on; else skip `skip`.
  void IfAnyBit(uint32_t k, uint8_t skip) { code_.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, k, 0, skip)); }
  std::vector<sock_filter>& code() { return code_; }

 private:
  std::vector<sock_filter> code_;
};

constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
constexpr uint32_t kDeny = SECCOMP_RET_ERRNO | EPERM;

// `syscall` is allowed when its argument `arg` (64 bits) equals `value`; denied otherwise. Reloads the number.
void AllowIfArgEquals(FilterBuilder& f, int syscall, int arg, uint64_t value) {
  f.Load(offsetof(struct seccomp_data, nr));
  f.IfEqual(static_cast<uint32_t>(syscall), 6);
  f.Load(ArgHigh(arg));
  f.IfEqual(static_cast<uint32_t>(value >> 32), 3);
  f.Load(ArgLow(arg));
  f.IfEqual(static_cast<uint32_t>(value), 1);
  f.Return(kAllow);
  f.Return(kDeny);
}

// `syscall` gets `if_in` when the low word of its argument `arg` is one of `values`, `if_not` otherwise. Reloads the
// number, so that any block may follow.
void ByArgIn(FilterBuilder& f, int syscall, int arg, std::initializer_list<uint32_t> values, uint32_t if_in,
             uint32_t if_not) {
  const size_t n = values.size();
  f.Load(offsetof(struct seccomp_data, nr));
  f.IfEqual(static_cast<uint32_t>(syscall), static_cast<uint8_t>(n + 3));  // Past the load, the tests, the returns.
  f.Load(ArgLow(arg));
  size_t i = 0;
  for (uint32_t v : values) {
    // Equal: on to the second return (n - i instructions ahead), past the remaining tests and the first.
    f.code().push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, v, static_cast<uint8_t>(n - i), 0));
    ++i;
  }
  f.Return(if_not);
  f.Return(if_in);
}

std::vector<sock_filter> BuildFilter() {
  FilterBuilder f;
  const uint32_t self = static_cast<uint32_t>(getpid());
  f.Load(offsetof(struct seccomp_data, arch));
  f.code().push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0));  // Native: past the kill.
  f.Return(SECCOMP_RET_KILL_PROCESS);
  f.Load(offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
  f.code().push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, kX32SyscallBit, 0, 1));
  f.Return(SECCOMP_RET_KILL_PROCESS);
#endif
  for (int nr : kAllowedSyscalls) {
    f.IfEqual(static_cast<uint32_t>(nr), 1);
    f.Return(kAllow);
  }
  // clone3 passes its flags in memory the filter cannot read: ENOSYS sends glibc to clone, whose flags it can.
  f.IfEqual(SYS_clone3, 1);
  f.Return(SECCOMP_RET_ERRNO | ENOSYS);
  // Threads (and a driver's helper processes) but no namespaces. x86-64 and arm64 both pass the flags first.
  f.IfEqual(SYS_clone, 4);
  f.Load(ArgLow(0));
  f.IfAnyBit(kNamespaceFlags, 1);
  f.Return(kDeny);
  f.Return(kAllow);
  // Unix and IP sockets only: no netlink, packet, vsock, alg... Either may carry SOCK_CLOEXEC in `type`, not here.
  ByArgIn(f, SYS_socket, 0, {AF_UNIX, AF_INET, AF_INET6}, kAllow, kDeny);
  ByArgIn(f, SYS_socketpair, 0, {AF_UNIX}, kAllow, kDeny);
  // Signals to itself only: workers share a user, and must not signal (or stop) each other or the agent.
  AllowIfArgEquals(f, SYS_kill, 0, self);
  AllowIfArgEquals(f, SYS_tgkill, 0, self);
  // Limits and priorities of itself only (pid / who 0).
  AllowIfArgEquals(f, SYS_prlimit64, 0, 0);
  AllowIfArgEquals(f, SYS_setpriority, 1, 0);
  AllowIfArgEquals(f, SYS_sched_setaffinity, 0, 0);
  // Dumpable again would let another worker of the same user read this one's memory (/proc/PID/mem); a ptracer
  // exception likewise.
  ByArgIn(f, SYS_prctl, 0, {PR_SET_DUMPABLE, PR_SET_PTRACER, PR_SET_MM}, kDeny, kAllow);
  // Typing into the terminal the worker's stderr may be (gp-run's private agent shares its user's).
  ByArgIn(f, SYS_ioctl, 1, {TIOCSTI, TIOCLINUX}, kDeny, kAllow);
  f.Return(kDeny);
  return std::move(f.code());
}
#endif

}  // namespace

std::string WorkerSandbox::Encode() const {
  std::string groups_text;
  for (gid_t g : groups) groups_text += (groups_text.empty() ? "" : ",") + std::to_string(g);
  // The door's path comes last: it may hold any character but NUL.
  return fmt::format("v1:{}:{}:{}:{}:{}:{}:{}", switch_user ? 1 : 0, uid, gid, groups_text, seccomp ? 1 : 0,
                     address_space_limit, door_listen);
}

Result<WorkerSandbox> WorkerSandbox::Parse(std::string_view word) {
  auto bad = [&] {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("session worker sandbox: malformed '{}' (v1:SWITCH:UID:GID:GROUPS:SECCOMP:AS:DOOR)", word));
  };
  std::vector<std::string_view> fields;
  std::string_view rest = word;
  for (int i = 0; i < 7; ++i) {
    size_t colon = rest.find(':');
    if (colon == std::string_view::npos) return bad();
    fields.push_back(rest.substr(0, colon));
    rest.remove_prefix(colon + 1);
  }
  if (fields[0] != "v1") return bad();
  WorkerSandbox s;
  uint64_t flag = 0, uid = 0, gid = 0, seccomp = 0;
  if (!ParseNumber(fields[1], &flag) || flag > 1 || !ParseNumber(fields[2], &uid) || uid > UINT32_MAX - 1 ||
      !ParseNumber(fields[3], &gid) || gid > UINT32_MAX - 1 || !ParseNumber(fields[5], &seccomp) || seccomp > 1 ||
      !ParseNumber(fields[6], &s.address_space_limit)) {
    return bad();
  }
  s.switch_user = flag == 1;
  s.uid = static_cast<uid_t>(uid);
  s.gid = static_cast<gid_t>(gid);
  s.seccomp = seccomp == 1;
  for (std::string_view list = fields[4]; !list.empty();) {
    size_t comma = list.find(',');
    uint64_t g = 0;
    if (!ParseNumber(list.substr(0, comma), &g) || g > UINT32_MAX - 1 || s.groups.size() >= NGROUPS_MAX) return bad();
    s.groups.push_back(static_cast<gid_t>(g));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  if (rest.find('\0') != std::string_view::npos) return bad();
  s.door_listen = std::string(rest);
  return s;
}

Result<WorkerSandbox> ResolveWorkerSandbox(const WorkersConfig& config) {
  WorkerSandbox s;
  s.seccomp = config.seccomp;
  if (geteuid() != 0) {
    std::string self = UserName(geteuid());
    if (config.user_set && config.user != self) {
      return Failed(fmt::format("[workers] user = \"{}\": the agent runs as {}, not root, and cannot switch users "
                                "(remove the key: its workers then run as {})",
                                config.user, self, self));
    }
    return s;
  }
  struct passwd pw, *found = nullptr;
  char buffer[4096];
  int err = getpwnam_r(config.user.c_str(), &pw, buffer, sizeof(buffer), &found);
  if (err != 0 || found == nullptr) {
    return Failed(fmt::format(
        "session workers would run as root: user '{}' ([workers] user) does not exist. Create it (as `cmake "
        "--install` does: useradd --system --no-create-home --shell /usr/sbin/nologin {}), or set [workers] user = "
        "\"root\" in agent.toml to run them as root",
        config.user, config.user));
  }
  if (found->pw_uid == 0) {
    if (!config.user_set) return Failed(fmt::format("[workers] user '{}' is root: say user = \"root\"", config.user));
    GP_WARN("agent", "session workers run as root ([workers] user = \"{}\"): a tenant who takes one over owns this "
            "server", config.user);
    return s;
  }
  s.switch_user = true;
  s.uid = found->pw_uid;
  s.gid = found->pw_gid;
  int count = 64;
  std::vector<gid_t> groups(count);
  while (getgrouplist(found->pw_name, found->pw_gid, groups.data(), &count) < 0) groups.resize(count);
  groups.resize(count);
  for (gid_t g : DeviceFileGroups()) groups.push_back(g);
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  // Root's group opens root's group-readable files: never a worker's.
  groups.erase(std::remove(groups.begin(), groups.end(), gid_t{0}), groups.end());
  if (s.gid == 0) return Failed(fmt::format("[workers] user '{}' has root's group as its own", config.user));
  s.groups = std::move(groups);
  return s;
}

Status InstallWorkerSyscallFilter() {
#if defined(__x86_64__) || defined(__aarch64__)
  std::vector<sock_filter> code = BuildFilter();
  sock_fprog program{static_cast<unsigned short>(code.size()), code.data()};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) return Errno("installing the seccomp filter");
  return Status::Ok();
#else
  return Status(StatusCode::kInvalidArgument,
                "session worker sandbox: no seccomp filter for this architecture (set [workers] seccomp = false)");
#endif
}

Status ApplyWorkerSandbox(const WorkerSandbox& s) {
  if (s.address_space_limit > 0) {
    // Hard as well as soft: the worker cannot raise it again.
    struct rlimit limit {s.address_space_limit, s.address_space_limit};
    if (setrlimit(RLIMIT_AS, &limit) != 0) return Errno(fmt::format("RLIMIT_AS {}", s.address_space_limit));
  }
  if (s.switch_user) {
    // This order: the groups and the group need root, which setuid gives up.
    if (setgroups(s.groups.size(), s.groups.data()) != 0) return Errno("setgroups");
    if (setgid(s.gid) != 0) return Errno(fmt::format("setgid {}", s.gid));
    if (setuid(s.uid) != 0) return Errno(fmt::format("setuid {}", s.uid));
    // setuid from root to someone else drops every capability; make sure no way back is left.
    if (setuid(0) == 0 || getuid() != s.uid || geteuid() != s.uid) {
      return Status(StatusCode::kInternal, "session worker sandbox: root could be regained after setuid");
    }
    // A change of user clears the death signal: the worker must still not outlive its agent.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return Errno("PR_SET_PDEATHSIG");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Errno("PR_SET_NO_NEW_PRIVS");
  // Workers share a user: not dumpable keeps the others out of this one's /proc/PID/mem and ptrace.
  if (prctl(PR_SET_DUMPABLE, 0) != 0) return Errno("PR_SET_DUMPABLE");
  if (s.seccomp) return InstallWorkerSyscallFilter();
  return Status::Ok();
}

}  // namespace gpupool::agent
