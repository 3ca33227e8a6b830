// How compute shares map onto the scheduler's weights (agent/session_worker.h).
#include "agent/session_worker.h"

#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

TEST(NiceForShare, AWholeDeviceRunsAtNormalPriority) { EXPECT_EQ(NiceForShare(1000000), 0); }

TEST(NiceForShare, WeightsFollowTheShares) {
  // CFS weights: nice 1 = 820, nice 6 = 272 (3.01 : 1 for shares 0.75 : 0.25); nice 3 = 526 for a half.
  EXPECT_EQ(NiceForShare(750000), 1);
  EXPECT_EQ(NiceForShare(250000), 6);
  EXPECT_EQ(NiceForShare(500000), 3);
  EXPECT_EQ(NiceForShare(50000), 13);  // The smallest slice, 1/20: weight 56 of 1024.
}

TEST(NiceForShare, SmallerSharesNeverGetHigherPriority) {
  int last = 0;
  for (uint32_t share = 1000000; share >= 10000; share -= 10000) {
    int nice = NiceForShare(share);
    EXPECT_GE(nice, last) << share;
    EXPECT_LE(nice, 19);
    last = nice;
  }
  EXPECT_EQ(NiceForShare(0), 19);  // Absurd input still gives a valid nice value.
}

}  // namespace
}  // namespace gpupool::agent
