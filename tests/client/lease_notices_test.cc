// What gp-run and gp-lease say while --wait waits (tools/lease_notices.h): once what they wait for and why, then only
// when the reason changes (a line every 5 s at most) or each minute, not at each retry.
#include "lease_notices.h"

#include <gtest/gtest.h>

namespace gpupool::tools {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(WaitNotices, OnceThenOnChangeOrEachMinute) {
  Request request;
  request.wait = std::chrono::minutes(5);
  WaitNotices notices("gp-run", request);
  const auto t0 = std::chrono::steady_clock::now();
  const Status busy(StatusCode::kResourceExhausted, "pool busy: no GPU is free");
  const Status policy(StatusCode::kResourceExhausted, "agent a: personality day allows slices of at most 0.5");
  auto first = notices.Notice(busy, seconds(300), t0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, "gp-run: waiting up to 5m for 1 x GPU: pool busy: no GPU is free\n");
  // Retries for the same reason say nothing for a minute.
  for (int s = 1; s < 60; ++s) EXPECT_FALSE(notices.Notice(busy, seconds(300 - s), t0 + seconds(s))) << s;
  auto minute = notices.Notice(busy, seconds(240), t0 + seconds(60));
  ASSERT_TRUE(minute.has_value());
  EXPECT_EQ(*minute, "gp-run: still waiting (4m left) for 1 x GPU: pool busy: no GPU is free\n");
  // A new reason is said, but not within 5 s of the last line; then it is said at the next retry.
  EXPECT_FALSE(notices.Notice(policy, seconds(238), t0 + seconds(62)));
  auto changed = notices.Notice(policy, milliseconds(234500), t0 + seconds(65) + milliseconds(500));
  ASSERT_TRUE(changed.has_value());
  EXPECT_EQ(*changed, "gp-run: still waiting (3m55s left) for 1 x GPU: agent a: personality day allows slices of at "
                      "most 0.5\n");
  EXPECT_FALSE(notices.Notice(policy, seconds(230), t0 + seconds(70)));
}

}  // namespace
}  // namespace gpupool::tools
