// Admin policies: personalities by day and hour, and what each allows, with an injected clock and group lookup.
#include "agent/policy.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace gpupool::agent {
namespace {

constexpr char kPolicy[] = R"(
[groups]
researchers = ["alice", "@gpu-research"]
developers = ["carol"]

[[personality]]
name = "day"
days = ["mon", "tue", "wed", "thu", "fri"]
hours = "08:00-20:00"
max_lease = "2h"
max_fraction = 0.5
max_gpus_per_user = 2
max_share_per_user = 0.75
on_change = "10m"
[personality.classes]
a100 = ["researchers"]
"*" = ["researchers", "developers"]

[[personality]]
name = "night"
hours = "20:00-08:00"
max_lease = "24h"
)";

// 2026-11-23 is a Monday. Local time is UTC in these tests.
std::time_t At(int day, int hour, int minute = 0) {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 23 + day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  return timegm(&tm);
}

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TZ", "UTC", 1);
    tzset();
    auto file = TomlFile::Parse(kPolicy, "agent.toml");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto policy = Policy::Read(*file);
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    policy_ = std::move(policy).value();
  }
  // bob is in the Unix group gpu-research; nobody else is in any.
  static bool Groups(const std::string& user, const std::string& group) {
    return user == "bob" && group == "gpu-research";
  }
  PolicyRequest Ask(std::string user, std::string cls, double fraction, int held = 0) {
    PolicyRequest r;
    r.user = std::move(user);
    r.slice_classes = {std::move(cls)};
    r.slice_fractions = {fraction};
    r.gpus_held = held;
    return r;
  }
  Policy policy_;
};

TEST_F(PolicyTest, PersonalitiesFollowTheWeekAndTheClock) {
  EXPECT_EQ(policy_.ActiveAt(At(0, 9))->name, "day");     // Monday 09:00.
  EXPECT_EQ(policy_.ActiveAt(At(0, 7, 59))->name, "night");
  EXPECT_EQ(policy_.ActiveAt(At(0, 20))->name, "night");   // [from, to): 20:00 is night.
}

TEST_F(PolicyTest, SaturdayNoonHasNoPersonalityWhenNightIsHoursOnly) {
  // Night is 20:00-08:00 every day; Saturday noon matches neither: nothing is restricted then.
  EXPECT_EQ(policy_.ActiveAt(At(5, 12)), nullptr);
  EXPECT_TRUE(policy_.Check(Ask("dave", "a100", 1.0), At(5, 12), Groups).ok());
}

TEST_F(PolicyTest, RefusalsNameTheRuleAndWhenItWouldAllow) {
  // Monday 10:00, day: half a GPU at most; night (from 20:00) allows a whole one.
  Status big = policy_.Check(Ask("alice", "a100", 1.0), At(0, 10), Groups);
  EXPECT_EQ(big.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.message().find("personality day allows slices of at most 0.5 of a GPU, not 1"), std::string::npos)
      << big.message();
  EXPECT_NE(big.message().find("from Mon 20:00 personality night would allow it"), std::string::npos) << big.message();
  // Classes: an a100 is for researchers (alice by name, bob by Unix group); carol may use other GPUs only.
  EXPECT_TRUE(policy_.Check(Ask("alice", "a100", 0.5), At(0, 10), Groups).ok());
  EXPECT_TRUE(policy_.Check(Ask("bob", "a100", 0.5), At(0, 10), Groups).ok());
  Status carol = policy_.Check(Ask("carol", "a100", 0.5), At(0, 10), Groups);
  EXPECT_EQ(carol.code(), StatusCode::kResourceExhausted);  // Night names no classes: anyone then.
  EXPECT_NE(carol.message().find("GPUs of class a100 are for researchers; carol is not among them"), std::string::npos)
      << carol.message();
  EXPECT_TRUE(policy_.Check(Ask("carol", "t4", 0.5), At(0, 10), Groups).ok());
  // Per user at once: slices, and compute.
  Status many = policy_.Check(Ask("alice", "t4", 0.25, 2), At(0, 10), Groups);
  EXPECT_NE(many.message().find("at most 2 GPU slice(s) at once"), std::string::npos) << many.message();
  PolicyRequest more = Ask("alice", "t4", 0.5, 1);
  more.share_held = 0.5;
  Status share = policy_.Check(more, At(0, 10), Groups);
  EXPECT_NE(share.message().find("at most 0.75 GPU(s) of compute at once on this agent; 0.5 held, 0.5 asked"),
            std::string::npos)
      << share.message();
  more.share_held = 0.25;
  EXPECT_TRUE(policy_.Check(more, At(0, 10), Groups).ok());
  // At night, all of it.
  EXPECT_TRUE(policy_.Check(Ask("carol", "a100", 1.0, 5), At(0, 22), Groups).ok());
}

TEST_F(PolicyTest, WhatNoPersonalityAllowsIsRefusedForGood) {
  auto file = TomlFile::Parse(R"(
[[personality]]
name = "always"
[personality.classes]
a100 = ["alice"]
)", "agent.toml");
  ASSERT_TRUE(file.ok());
  auto policy = Policy::Read(*file);
  ASSERT_TRUE(policy.ok());
  Status s = policy->Check(Ask("carol", "a100", 1.0), At(0, 10), Groups);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("no personality of the week allows it"), std::string::npos) << s.message();
}

TEST_F(PolicyTest, NextChangeAndLeasesThatBreakANewPersonality) {
  EXPECT_EQ(policy_.NextChange(At(0, 10)), At(0, 20));
  EXPECT_EQ(policy_.NextChange(At(0, 21)), At(1, 8));
  EXPECT_EQ(policy_.InForceSince(At(0, 10, 30)), At(0, 8));
  EXPECT_EQ(policy_.InForceSince(At(1, 3)), At(0, 20));
  const Personality& day = policy_.personalities()[0];
  // A whole GPU taken at night breaks the day's rules; half a GPU held for 3 h breaks its max_lease.
  EXPECT_NE(policy_.Breaks(day, Ask("alice", "a100", 1.0), std::chrono::minutes(5), Groups), "");
  EXPECT_NE(policy_.Breaks(day, Ask("alice", "a100", 0.5), std::chrono::hours(3), Groups).find("at most 2h"),
            std::string::npos);
  EXPECT_EQ(policy_.Breaks(day, Ask("alice", "a100", 0.5), std::chrono::minutes(5), Groups), "");
  EXPECT_NE(policy_.Describe().find("day: mon,tue,wed,thu,fri 08:00-20:00, leases up to 2h"), std::string::npos)
      << policy_.Describe();
}

TEST_F(PolicyTest, MalformedPoliciesAreRefusedWithTheirLine) {
  for (const char* bad : {"[[personality]]\nname = \"x\"\nhours = \"25:00-08:00\"\n",
                          "[[personality]]\nname = \"x\"\ndays = [\"someday\"]\n",
                          "[[personality]]\nname = \"x\"\nmax_fraction = 2.0\n",
                          "[[personality]]\nname = \"x\"\non_change = \"sometimes\"\n",
                          "[[personality]]\nname = \"x\"\n[[personality]]\nname = \"x\"\n",
                          "[[personality]]\nname = \"x\"\nmax_gpus = 2\n"}) {
    auto file = TomlFile::Parse(bad, "agent.toml");
    ASSERT_TRUE(file.ok()) << bad;
    auto policy = Policy::Read(*file);
    EXPECT_FALSE(policy.ok()) << bad;
    if (!policy.ok()) EXPECT_NE(policy.status().message().find("agent.toml:"), std::string::npos) << policy.status().message();
  }
}

}  // namespace
}  // namespace gpupool::agent
