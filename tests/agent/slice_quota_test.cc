// The slice quota across real processes: members of one table are forked children, as the session workers of one
// lease's processes are.
#include "backend/slice_quota.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace gpupool::backend {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class SliceQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fd = SliceQuota::CreateSegment(100 * kMiB);
    ASSERT_TRUE(fd.ok()) << fd.status().message();
    fd_ = *fd;
  }
  void TearDown() override { close(fd_); }

  // Forks a member that takes `bytes`, tells the parent through a pipe whether it could, then waits to be killed.
  pid_t MemberHolding(uint64_t bytes, bool* took) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      auto quota = SliceQuota::Join(fd_);
      char answer = !quota.ok() ? 'e' : (*quota)->Take(bytes) ? 'y' : 'n';
      if (write(p[1], &answer, 1) != 1) _exit(3);
      pause();
      _exit(0);
    }
    close(p[1]);
    char answer = 0;
    EXPECT_EQ(read(p[0], &answer, 1), 1);
    close(p[0]);
    EXPECT_NE(answer, 'e');
    *took = answer == 'y';
    return pid;
  }

  int fd_ = -1;
};

TEST_F(SliceQuotaTest, MembersShareOneLimit) {
  auto a = SliceQuota::Join(fd_);
  ASSERT_TRUE(a.ok());
  bool took = false;
  pid_t b = MemberHolding(70 * kMiB, &took);
  EXPECT_TRUE(took);
  EXPECT_EQ((*a)->used(), 70 * kMiB);
  EXPECT_EQ((*a)->mine(), 0u);
  // 40 MiB would fit in the slice alone, not beside the other process's 70.
  EXPECT_FALSE((*a)->Take(40 * kMiB));
  EXPECT_TRUE((*a)->Take(30 * kMiB));
  EXPECT_EQ((*a)->used(), 100 * kMiB);
  EXPECT_FALSE((*a)->Take(1));
  (*a)->Give(10 * kMiB);
  EXPECT_TRUE((*a)->Take(10 * kMiB));
  kill(b, SIGKILL);
  waitpid(b, nullptr, 0);
}

TEST_F(SliceQuotaTest, AKilledMembersBytesComeBack) {
  bool took = false;
  pid_t b = MemberHolding(90 * kMiB, &took);
  ASSERT_TRUE(took);
  auto a = SliceQuota::Join(fd_);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE((*a)->Take(20 * kMiB));
  kill(b, SIGKILL);
  waitpid(b, nullptr, 0);
  // Its memory died with it: no figure counts it any more (the session server checks room by used() before it
  // allocates), and the room is there to take.
  EXPECT_EQ((*a)->used(), 0u);
  EXPECT_TRUE((*a)->Take(100 * kMiB));
}

TEST_F(SliceQuotaTest, AMemberThatLeavesGivesItsBytesBack) {
  auto a = SliceQuota::Join(fd_);
  ASSERT_TRUE(a.ok());
  {
    auto b = SliceQuota::Join(fd_);
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE((*b)->Take(60 * kMiB));
    EXPECT_FALSE((*a)->Take(60 * kMiB));
  }
  EXPECT_TRUE((*a)->Take(60 * kMiB));
  (*a)->GiveAll();
  EXPECT_EQ((*a)->used(), 0u);
}

TEST_F(SliceQuotaTest, APrivateQuotaIsItsOwn) {
  auto q = SliceQuota::Private(10 * kMiB);
  EXPECT_TRUE(q->Take(10 * kMiB));
  EXPECT_FALSE(q->Take(1));
  auto other = SliceQuota::Join(fd_);  // Another table altogether.
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->Take(100 * kMiB));
}

TEST(SliceQuota, ADescriptorThatIsNoQuotaTableIsRefused) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  auto q = SliceQuota::Join(p[0]);
  EXPECT_FALSE(q.ok());
  close(p[0]);
  close(p[1]);
}

}  // namespace
}  // namespace gpupool::backend
