// A session worker's confinement (agent/worker_sandbox.h), applied to a forked child of the test as a worker
// applies it to itself: the calls a taken-over worker could escape or reach its neighbours with fail, the calls a
// worker needs still work, the memory cap holds, and under a root test the user is dropped for good.
#include "agent/worker_sandbox.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "agent/agent_config.h"
#include "support/proc_status.h"

namespace gpupool::agent {
namespace {

using gpupool::testing::ProcStatusField;

// Runs `body` in a forked child after applying `sandbox` there; returns what the child reported (one line per
// failed expectation), or why the child could not report.
std::string InConfinedChild(const WorkerSandbox& sandbox, const std::function<void(std::string&)>& body) {
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    std::string failures;
    Status s = ApplyWorkerSandbox(sandbox);
    if (!s.ok()) {
      failures = "ApplyWorkerSandbox: " + s.message() + "\n";
    } else {
      body(failures);
    }
    ssize_t ignored = write(out[1], failures.data(), failures.size());
    (void)ignored;
    _exit(0);
  }
  close(out[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) > 0;) report.append(buffer, n);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) report += "the child died: wait status " + std::to_string(status);
  return report;
}

// `call` must fail with `errno_wanted`.
void ExpectFails(std::string& failures, const char* what, long result, int errno_wanted = EPERM) {
  int e = errno;
  if (result != -1 || e != errno_wanted) {
    failures += std::string(what) + ": returned " + std::to_string(result) + " (" + std::strerror(e) + "), expected " +
                std::strerror(errno_wanted) + "\n";
  }
}

void ExpectWorks(std::string& failures, const char* what, long result) {
  if (result < 0) failures += std::string(what) + ": " + std::strerror(errno) + "\n";
}

WorkerSandbox FilterOnly() {
  WorkerSandbox s;
  s.seccomp = true;
  return s;
}

// Every call below is made so that, should the filter let it through, it does no harm outside the child and fails
// with another error (or succeeds): the test then fails, as it must, without mounting, exec'ing or forking.
TEST(WorkerSandbox, ForbiddenSyscallsFailWithEperm) {
  std::string report = InConfinedChild(FilterOnly(), [](std::string& f) {
    // Namespaces: the way out of a filter via a user namespace's root, and into another network.
    ExpectFails(f, "unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER));
    ExpectFails(f, "unshare(CLONE_NEWNET)", unshare(CLONE_NEWNET));
    // CLONE_NEWNS with CLONE_FS is invalid (EINVAL) unless the filter answers first.
    ExpectFails(f, "clone(CLONE_NEWNS)", syscall(SYS_clone, CLONE_NEWNS | CLONE_FS | SIGCHLD, 0, 0, 0, 0));
    ExpectFails(f, "setns", setns(0, 0));
    ExpectFails(f, "ptrace(TRACEME)", ptrace(PTRACE_TRACEME, 0, nullptr, nullptr));
    ExpectFails(f, "mount", mount("none", "/nonexistent-gpupool-test", "tmpfs", 0, nullptr));
    ExpectFails(f, "bpf", syscall(SYS_bpf, 0, nullptr, 0));
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    ExpectFails(f, "perf_event_open", syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
    ExpectFails(f, "keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));
    ExpectFails(f, "kexec_load", syscall(SYS_kexec_load, 0, 0, nullptr, 0xffffffffu));  // Invalid flags: EINVAL.
    ExpectFails(f, "open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, nullptr, 0));
    char byte = 0;
    iovec local{&byte, 1}, remote{&byte, 1};
    ExpectFails(f, "process_vm_readv", syscall(SYS_process_vm_readv, getppid(), &local, 1, &remote, 1, 0));
    ExpectFails(f, "socket(AF_NETLINK)", socket(AF_NETLINK, SOCK_RAW, 0));
    ExpectFails(f, "socket(AF_PACKET)", socket(AF_PACKET, SOCK_RAW, 0));
    ExpectFails(f, "socketpair(AF_INET)", [] {
      int sv[2];
      return socketpair(AF_INET, SOCK_STREAM, 0, sv);
    }());
    // Other processes of the same user (the agent, the other workers) are out of reach.
    ExpectFails(f, "kill(parent)", kill(getppid(), 0));
    ExpectFails(f, "kill(0)", kill(0, 0));
    ExpectFails(f, "prctl(PR_SET_DUMPABLE, 1)", prctl(PR_SET_DUMPABLE, 1));
    ExpectFails(f, "setpriority(parent)", setpriority(PRIO_PROCESS, getppid(), getpriority(PRIO_PROCESS, getppid())));
    char* argv[] = {const_cast<char*>("true"), nullptr};
    ExpectFails(f, "execve", execve("/nonexistent-gpupool-test/true", argv, environ));
    // clone3 says ENOSYS, so that glibc takes clone, whose flags the filter reads.
    ExpectFails(f, "clone3", syscall(SYS_clone3, nullptr, 0), ENOSYS);
  });
  EXPECT_EQ(report, "");
}

TEST(WorkerSandbox, WhatAWorkerNeedsStillWorks) {
  std::string report = InConfinedChild(FilterOnly(), [](std::string& f) {
    if (std::string v = ProcStatusField("self", "NoNewPrivs"); v != "1") f += "NoNewPrivs is " + v + "\n";
    if (std::string v = ProcStatusField("self", "Seccomp"); v != "2") f += "Seccomp is " + v + "\n";
    int sv[2];
    ExpectWorks(f, "socketpair(AF_UNIX)", socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    int tcp = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ExpectWorks(f, "socket(AF_INET6)", tcp);
    ExpectWorks(f, "socket(AF_INET)", socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int memfd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ExpectWorks(f, "memfd_create", memfd);
    ExpectWorks(f, "ftruncate(memfd)", ftruncate(memfd, 1 << 20));
    void* p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (p == MAP_FAILED) f += std::string("mmap(memfd): ") + std::strerror(errno) + "\n";
    ExpectWorks(f, "epoll_create1", epoll_create1(EPOLL_CLOEXEC));
    ExpectWorks(f, "kill(self, 0)", kill(getpid(), 0));
    ExpectWorks(f, "open(/proc/self/maps)", open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
    char random[16];
    ExpectWorks(f, "getrandom", syscall(SYS_getrandom, random, sizeof(random), 0));
    ExpectWorks(f, "prctl(PR_SET_NAME)", prctl(PR_SET_NAME, "worker"));
    ExpectWorks(f, "setpriority(self)", setpriority(PRIO_PROCESS, 0, 1));
    // Threads: glibc's clone3 is refused with ENOSYS and it falls back to clone.
    bool ran = false;
    std::thread([&] { ran = true; }).join();
    if (!ran) f += "a thread did not run\n";
  });
  EXPECT_EQ(report, "");
}

TEST(WorkerSandbox, TheAddressSpaceIsCapped) {
  WorkerSandbox capped;
  capped.seccomp = false;
  capped.address_space_limit = 1ull << 30;
  std::string report = InConfinedChild(capped, [](std::string& f) {
    void* big = mmap(nullptr, 2ull << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (big != MAP_FAILED) f += "a 2 GiB mapping succeeded under a 1 GiB cap\n";
    void* small = mmap(nullptr, 64ull << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (small == MAP_FAILED) f += "a 64 MiB mapping failed under a 1 GiB cap\n";
    rlimit raised{2ull << 30, 2ull << 30};
    ExpectFails(f, "raising RLIMIT_AS", setrlimit(RLIMIT_AS, &raised));
  });
  EXPECT_EQ(report, "");
}

TEST(WorkerSandbox, ARootWorkerBecomesTheWorkerUserForGood) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the test drops from root to the workers' user";
  auto sandbox = ResolveWorkerSandbox(WorkersConfig{});
  if (!sandbox.ok()) GTEST_SKIP() << sandbox.status().message() << " (scripts/setup.sh creates the user)";
  ASSERT_TRUE(sandbox->switch_user);
  ASSERT_NE(sandbox->uid, 0u);
  uid_t uid = sandbox->uid;
  std::string report = InConfinedChild(*sandbox, [uid](std::string& f) {
    if (getuid() != uid || geteuid() != uid) f += "still uid " + std::to_string(geteuid()) + "\n";
    if (getgid() == 0 || getegid() == 0) f += "still gid 0\n";
    gid_t groups[256];
    int n = getgroups(256, groups);
    for (int i = 0; i < n; ++i) {
      if (groups[i] == 0) f += "still in group 0\n";
    }
    ExpectFails(f, "setuid(0)", setuid(0));
    if (std::string v = ProcStatusField("self", "CapEff"); v != "0000000000000000") {
      f += "capabilities left: " + v + "\n";
    }
    // The death signal survives the change of user (setuid clears it; the sandbox sets it again).
    int signal_on_death = 0;
    prctl(PR_GET_PDEATHSIG, &signal_on_death);
    if (signal_on_death != SIGKILL) f += "PR_SET_PDEATHSIG lost: " + std::to_string(signal_on_death) + "\n";
    if (prctl(PR_GET_DUMPABLE) != 0) f += "still dumpable\n";
  });
  EXPECT_EQ(report, "");
}

TEST(WorkerSandbox, RefusesAMissingUserUnderARootAgent) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: a non-root agent's workers run as itself";
  WorkersConfig config;
  config.user = "gpupool-no-such-user";
  auto sandbox = ResolveWorkerSandbox(config);
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sandbox.status().message().find("useradd --system"), std::string::npos) << sandbox.status().message();
  EXPECT_NE(sandbox.status().message().find("[workers] user = \"root\""), std::string::npos)
      << sandbox.status().message();
}

TEST(WorkerSandbox, EncodesAndParsesBack) {
  WorkerSandbox s;
  s.switch_user = true;
  s.uid = 998;
  s.gid = 997;
  s.groups = {44, 997};
  s.seccomp = false;
  s.address_space_limit = 12ull << 30;
  s.door_listen = "unix:/run/gpupool/a:b.sock.session";
  auto back = WorkerSandbox::Parse(s.Encode());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->switch_user);
  EXPECT_EQ(back->uid, 998u);
  EXPECT_EQ(back->gid, 997u);
  EXPECT_EQ(back->groups, (std::vector<gid_t>{44, 997}));
  EXPECT_FALSE(back->seccomp);
  EXPECT_EQ(back->address_space_limit, 12ull << 30);
  EXPECT_EQ(back->door_listen, s.door_listen);
  for (const char* bad : {"", "v1", "v2:0:0:0::1:0:", "v1:2:0:0::1:0:", "v1:1:x:0::1:0:", "v1:1:0:0:1,,2:1:0:",
                          "v1:1:0:0::1:-1:", "v1:1:4294967295:0::1:0:"}) {
    EXPECT_FALSE(WorkerSandbox::Parse(bad).ok()) << bad;
  }
}

TEST(WorkerSandbox, AgentConfigReadsWorkers) {
  AgentConfig c;
  ASSERT_TRUE(ParseAgentConfig("[workers]\nuser = \"gpu\"\nseccomp = false\nmemory_limit = \"2GiB\"\n", "t", &c).ok());
  EXPECT_EQ(c.workers.user, "gpu");
  EXPECT_TRUE(c.workers.user_set);
  EXPECT_FALSE(c.workers.seccomp);
  EXPECT_EQ(c.workers.memory_limit, 2ull << 30);
  AgentConfig defaults;
  ASSERT_TRUE(ParseAgentConfig("", "t", &defaults).ok());
  EXPECT_EQ(defaults.workers.user, "gpupool");
  EXPECT_FALSE(defaults.workers.user_set);
  EXPECT_TRUE(defaults.workers.seccomp);
  EXPECT_EQ(defaults.workers.memory_limit, kDefaultWorkerMemoryLimit);
  AgentConfig uncapped;
  ASSERT_TRUE(ParseAgentConfig("[workers]\nmemory_limit = \"0\"\n", "t", &uncapped).ok());
  EXPECT_EQ(uncapped.workers.memory_limit, 0u);
  AgentConfig small;
  Status s = ParseAgentConfig("[workers]\nmemory_limit = \"1MiB\"\n", "t", &small);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("at least 256 MiB"), std::string::npos) << s.message();
  EXPECT_FALSE(ParseAgentConfig("[workers]\nusr = \"x\"\n", "t", &small).ok());
  EXPECT_FALSE(ParseAgentConfig("[workers]\nuser = \"\"\n", "t", &small).ok());
}

TEST(WorkerSandbox, AgentConfigReadsTheWorkersCgroup) {
  AgentConfig defaults;
  ASSERT_TRUE(ParseAgentConfig("", "t", &defaults).ok());
  EXPECT_EQ(defaults.workers.cgroup, "auto");
  for (const char* value : {"auto", "off", "/sys/fs/cgroup/gpupool"}) {
    AgentConfig c;
    ASSERT_TRUE(ParseAgentConfig(std::string("[workers]\ncgroup = \"") + value + "\"\n", "t", &c).ok()) << value;
    EXPECT_EQ(c.workers.cgroup, value);
  }
  for (const char* value : {"", "on", "gpupool", "sys/fs/cgroup"}) {
    AgentConfig c;
    Status s = ParseAgentConfig(std::string("[workers]\ncgroup = \"") + value + "\"\n", "t", &c);
    EXPECT_FALSE(s.ok()) << value;
    EXPECT_NE(s.message().find("[workers] cgroup must be \"auto\", \"off\" or the absolute path"), std::string::npos)
        << s.message();
  }
}

}  // namespace
}  // namespace gpupool::agent
