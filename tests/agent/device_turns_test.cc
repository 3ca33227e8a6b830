// Device turns across real processes: the members of one table are forked children, as session workers are.
#include "backend/device_turns.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace gpupool::backend {
namespace {

using Clock = std::chrono::steady_clock;

// What the children report back: device time each used.
struct Report {
  std::atomic<uint64_t> used[2];
  std::atomic<int> ready;
};

Report* SharedReport() {
  void* p = mmap(nullptr, sizeof(Report), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (p) Report{};
}

// Busy-waits for `d` while holding the turn, passing checkpoints as a running kernel does.
void Work(DeviceTurns& turns, std::chrono::microseconds d, const std::atomic<bool>& cancel) {
  auto end = Clock::now() + d;
  while (Clock::now() < end) turns.Checkpoint(cancel);
}

class DeviceTurnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fd = DeviceTurns::CreateSegment();
    ASSERT_TRUE(fd.ok()) << fd.status().message();
    fd_ = *fd;
    report_ = SharedReport();
  }
  void TearDown() override {
    for (pid_t p : children_) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    close(fd_);
    munmap(report_, sizeof(Report));
  }
  // Forks a member with `share` that runs `body` and exits.
  template <typename Body>
  pid_t Member(uint32_t share, Body body) {
    pid_t pid = fork();
    if (pid == 0) {
      auto turns = DeviceTurns::Join(fd_, share);
      if (!turns.ok()) _exit(2);
      body(**turns);
      _exit(0);
    }
    children_.push_back(pid);
    return pid;
  }
  int fd_ = -1;
  Report* report_ = nullptr;
  std::vector<pid_t> children_;
};

TEST_F(DeviceTurnsTest, BusyMembersGetDeviceTimeInProportionToTheirShares) {
  std::atomic<bool> no_cancel{false};
  for (int i = 0; i < 2; ++i) {
    Member(i == 0 ? 750000 : 250000, [&, i](DeviceTurns& t) {
      ++report_->ready;
      while (report_->ready.load() < 2) std::this_thread::yield();
      auto end = Clock::now() + std::chrono::milliseconds(1500);
      while (Clock::now() < end) {  // Kernels of 3 ms, back to back.
        t.Enter(no_cancel);
        Work(t, std::chrono::microseconds(3000), no_cancel);
        t.Leave(true);
      }
      report_->used[i] = t.used_nanos();
    });
  }
  for (pid_t p : children_) {
    int status = 0;
    ASSERT_EQ(waitpid(p, &status, 0), p);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  children_.clear();
  double big = report_->used[0].load(), small = report_->used[1].load();
  ASSERT_GT(big + small, 0);
  // Hold time is what the table accounts, so the split does not depend on how the OS schedules the children.
  EXPECT_NEAR(big / (big + small), 0.75, 0.05) << "used: 0.75 member " << big / 1e6 << " ms, 0.25 member "
                                                << small / 1e6 << " ms";
}

TEST_F(DeviceTurnsTest, AKernelThatNeverEndsYieldsToItsNeighbourAtCheckpoints) {
  std::atomic<bool> no_cancel{false};
  Member(500000, [&](DeviceTurns& t) {
    t.Enter(no_cancel);
    ++report_->ready;
    for (;;) t.Checkpoint(no_cancel);  // Never leaves.
  });
  while (report_->ready.load() < 1) std::this_thread::yield();
  auto turns = DeviceTurns::Join(fd_, 500000);
  ASSERT_TRUE(turns.ok());
  for (int i = 0; i < 5; ++i) {  // The neighbour's turns keep coming.
    (*turns)->Enter(no_cancel);
    Work(**turns, std::chrono::microseconds(1000), no_cancel);
    (*turns)->Leave(false);
  }
  EXPECT_GT((*turns)->used_nanos(), 0u);
}

TEST_F(DeviceTurnsTest, AMemberKilledWhileHoldingTheTurnGivesItBack) {
  std::atomic<bool> no_cancel{false};
  pid_t holder = Member(1000000, [&](DeviceTurns& t) {
    t.Enter(no_cancel);
    ++report_->ready;
    pause();  // Holds the turn, passing no checkpoint, until killed.
  });
  while (report_->ready.load() < 1) std::this_thread::yield();
  auto turns = DeviceTurns::Join(fd_, 1000000);
  ASSERT_TRUE(turns.ok());
  kill(holder, SIGKILL);
  auto start = Clock::now();
  (*turns)->Enter(no_cancel);
  (*turns)->Leave(false);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

// A member killed while it waits for a turn must not leave the table thinking nobody else waits: its neighbours
// would then stop seeing each other (LeastWaiting skips the slots when the count of waiters says it may).
TEST_F(DeviceTurnsTest, AMemberKilledWhileWaitingLeavesItsNeighboursTheirShares) {
  std::atomic<bool> no_cancel{false};
  auto turns = DeviceTurns::Join(fd_, 500000);
  ASSERT_TRUE(turns.ok());
  (*turns)->Enter(no_cancel);
  pid_t waiter = Member(500000, [&](DeviceTurns& t) {
    ++report_->ready;
    t.Enter(no_cancel);  // Waits: the parent holds the turn.
    pause();
  });
  while (report_->ready.load() < 1) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Inside its wait by now.
  kill(waiter, SIGKILL);
  waitpid(waiter, nullptr, 0);
  children_.clear();
  (*turns)->Leave(false);

  // Two live members, equal shares, both busy: each gets about half of the device's time.
  Member(500000, [&](DeviceTurns& t) {
    ++report_->ready;
    auto end = Clock::now() + std::chrono::milliseconds(1000);
    while (Clock::now() < end) {
      t.Enter(no_cancel);
      Work(t, std::chrono::microseconds(3000), no_cancel);
      t.Leave(true);
    }
    report_->used[1] = t.used_nanos();
  });
  while (report_->ready.load() < 2) std::this_thread::yield();
  const uint64_t before = (*turns)->used_nanos();
  auto end = Clock::now() + std::chrono::milliseconds(1000);
  while (Clock::now() < end) {
    (*turns)->Enter(no_cancel);
    Work(**turns, std::chrono::microseconds(3000), no_cancel);
    (*turns)->Leave(true);
  }
  const double mine = static_cast<double>((*turns)->used_nanos() - before);
  int status = 0;
  ASSERT_EQ(waitpid(children_.back(), &status, 0), children_.back());
  children_.clear();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const double theirs = static_cast<double>(report_->used[1].load());
  ASSERT_GT(mine + theirs, 0);
  EXPECT_NEAR(mine / (mine + theirs), 0.5, 0.1) << "used: this member " << mine / 1e6 << " ms, the other "
                                                 << theirs / 1e6 << " ms";
}

TEST_F(DeviceTurnsTest, CancelEndsAWaitForATurnThatNeverComes) {
  std::atomic<bool> no_cancel{false};
  Member(1000000, [&](DeviceTurns& t) {
    t.Enter(no_cancel);
    ++report_->ready;
    pause();
  });
  while (report_->ready.load() < 1) std::this_thread::yield();
  auto turns = DeviceTurns::Join(fd_, 1000000);
  ASSERT_TRUE(turns.ok());
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel = true;
  });
  (*turns)->Enter(cancel);  // Returns without the turn.
  canceller.join();
  (*turns)->Leave(false);
  EXPECT_EQ((*turns)->used_nanos(), 0u);
}

TEST_F(DeviceTurnsTest, ADescriptorThatIsNotATurnsTableIsRefused) {
  int fd = memfd_create("not-turns", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  auto turns = DeviceTurns::Join(fd, 500000);
  EXPECT_FALSE(turns.ok());
  close(fd);
}

}  // namespace
}  // namespace gpupool::backend
