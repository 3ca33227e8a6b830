// The agent's log of policy refusals: a client that retries (gp-run --wait) gets its first refusal logged, then a
// summary at most once a minute or when the reason changes, not a line per retry (issue 41: 186 lines in 136 s).
#include "agent/refusal_log.h"

#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RefusalLog, ARetryingClientGetsOneLineThenASummaryAMinute) {
  RefusalLog log;
  const auto t0 = RefusalLog::Clock::now();
  const std::string client = "alice@host pid 7", why = "agent a: personality day allows slices of at most 0.5";
  auto first = log.Refused(client, why, t0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, "refused alice@host pid 7's reservation: " + why);
  // Retries every 700 ms for 136 s: 194 refusals, the first logged, then a summary at each minute.
  int lines = 0;
  std::string last;
  for (int i = 1; i <= 194; ++i) {
    if (auto line = log.Refused(client, why, t0 + milliseconds(700) * i)) {
      ++lines;
      last = *line;
    }
  }
  EXPECT_EQ(lines, 2);
  EXPECT_EQ(last.rfind("refused alice@host pid 7's reservation ", 0), 0u) << last;
  EXPECT_NE(last.find(" more time(s) in the last 1m"), std::string::npos) << last;
  EXPECT_NE(last.find("for the same reason: " + why), std::string::npos) << last;
  // Another client is logged on its own.
  EXPECT_TRUE(log.Refused("bob@host pid 8", why, t0 + seconds(136)).has_value());
  // A new reason is logged at once.
  auto changed = log.Refused(client, "agent a: personality day allows leases of at most 2h", t0 + seconds(137));
  ASSERT_TRUE(changed.has_value());
  EXPECT_NE(changed->find("leases of at most 2h"), std::string::npos);
  // The grant ends the run, saying how long it lasted; the client's next refusal is a first one again.
  auto allowed = log.Allowed(client, t0 + seconds(140));
  ASSERT_TRUE(allowed.has_value());
  EXPECT_EQ(*allowed, "allowed alice@host pid 7's reservation after 196 refusal(s) over 2m20s");
  EXPECT_FALSE(log.Allowed(client, t0 + seconds(141)).has_value());
  EXPECT_TRUE(log.Refused(client, why, t0 + seconds(142)).has_value());
}

TEST(RefusalLog, RemembersABoundedNumberOfClients) {
  RefusalLog log;
  const auto t0 = RefusalLog::Clock::now();
  // A client that varies what it claims (its pid) is a new client each time: bounded all the same.
  for (size_t i = 0; i < RefusalLog::kMaxClients + 100; ++i) {
    EXPECT_TRUE(log.Refused("mallory@host pid " + std::to_string(i), "no", t0 + milliseconds(i)).has_value());
  }
  EXPECT_EQ(log.clients(), RefusalLog::kMaxClients);
  // Those not refused for kForgetAfter are forgotten.
  log.Refused("alice@host pid 1", "no", t0 + RefusalLog::kForgetAfter + seconds(2));
  EXPECT_EQ(log.clients(), 1u);
}

}  // namespace
}  // namespace gpupool::agent
