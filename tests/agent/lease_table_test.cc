#include "agent/lease_table.h"

#include <gtest/gtest.h>

#include "core/util.h"

namespace gpupool::agent {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

class LeaseTableTest : public ::testing::Test {
 protected:
  LeaseTableTest() : table_({{16 * kGiB}, {16 * kGiB}}, Timing()) {}
  static LeaseTiming Timing() {
    LeaseTiming t;
    t.reservation_ttl = std::chrono::seconds(2);
    t.lease_ttl = std::chrono::seconds(20);
    return t;
  }
  Status Reserve(const std::string& id, std::vector<SliceGrant> slices) {
    return table_.Reserve(id, "s-" + id, {"u", "h", "l", 1}, slices, now_);
  }
  LeaseTable table_;
  Clock::time_point now_ = Clock::now();
};

TEST_F(LeaseTableTest, NeverGrantsTheSameCapacityTwice) {
  ASSERT_TRUE(Reserve("a", {{0, 8 * kGiB, kShareWhole / 2}}).ok());
  ASSERT_TRUE(Reserve("b", {{0, 8 * kGiB, kShareWhole / 2}}).ok());
  Status third = Reserve("c", {{0, 1 * kGiB, kShareWhole / 20}});
  EXPECT_EQ(third.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(table_.usage()[0].memory_bytes, 16 * kGiB);
  EXPECT_EQ(table_.usage()[0].share, kShareWhole);
  EXPECT_EQ(table_.usage()[1].memory_bytes, 0u);
}

// Issue 43: a move takes the slices' capacity on the target before it gives it back on the source, all or nothing,
// and moving back undoes it exactly.
TEST_F(LeaseTableTest, SlicesMoveToAnotherDeviceOnlyWhereTheyFit) {
  ASSERT_TRUE(Reserve("a", {{0, 6 * kGiB, kShareWhole / 2}}).ok());
  ASSERT_TRUE(table_.Commit("a", "s-a", now_).ok());
  ASSERT_TRUE(Reserve("b", {{1, 12 * kGiB, kShareWhole / 4}}).ok());
  ASSERT_TRUE(table_.Commit("b", "s-b", now_).ok());
  EXPECT_EQ(table_.MoveSlices("a", 0, 1).code(), StatusCode::kResourceExhausted) << "6 GiB do not fit beside 12";
  EXPECT_EQ(table_.Find("a")->slices[0].device, 0u);
  EXPECT_EQ(table_.usage()[0].memory_bytes, 6 * kGiB);
  ASSERT_TRUE(table_.MoveSlices("b", 1, 0).code() == StatusCode::kResourceExhausted);
  ASSERT_TRUE(table_.Release("b", "s-b").ok());
  ASSERT_TRUE(table_.MoveSlices("a", 0, 1).ok());
  EXPECT_EQ(table_.Find("a")->slices[0].device, 1u);
  EXPECT_EQ(table_.usage()[0].memory_bytes, 0u);
  EXPECT_EQ(table_.usage()[0].share, 0u);
  EXPECT_EQ(table_.usage()[1].memory_bytes, 6 * kGiB);
  EXPECT_EQ(table_.usage()[1].share, kShareWhole / 2);
  table_.SetCordoned(0, true);
  EXPECT_EQ(table_.MoveSlices("a", 1, 0).code(), StatusCode::kUnavailable);
  EXPECT_EQ(table_.MoveSlices("a", 0, 1).code(), StatusCode::kInvalidArgument) << "nothing of it on device 0";
  EXPECT_EQ(table_.MoveSlices("a", 1, 7).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(table_.MoveSlices("nobody", 1, 0).code(), StatusCode::kInvalidArgument);
}

// A suspended lease holds nothing of its devices (another lease may take them), and is placed again, all or
// nothing, where it fits: on its old devices when it can, else on others the caller accepts.
TEST_F(LeaseTableTest, ASuspendedLeaseGivesItsCapacityBackAndIsPlacedAgainWhereItFits) {
  ASSERT_TRUE(Reserve("a", {{0, 10 * kGiB, kShareWhole / 2}}).ok());
  ASSERT_TRUE(table_.Commit("a", "s-a", now_).ok());
  EXPECT_EQ(table_.Suspend("a-not").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(table_.Suspend("a").ok());
  EXPECT_EQ(table_.Suspend("a").code(), StatusCode::kInvalidArgument) << "twice";
  EXPECT_EQ(table_.usage()[0].memory_bytes, 0u);
  EXPECT_TRUE(table_.Find("a")->suspended);
  EXPECT_TRUE(table_.Renew("a", "s-a", now_).ok()) << "a suspended lease is its holder's still";
  // Its device fills up: it goes to the other one, if the caller takes that one as alike.
  ASSERT_TRUE(Reserve("b", {{0, 8 * kGiB, kShareWhole / 2}}).ok());
  ASSERT_TRUE(Reserve("c", {{1, 8 * kGiB, kShareWhole / 2}}).ok());
  auto any = [](uint32_t, uint32_t) { return true; };
  auto none = [](uint32_t, uint32_t) { return false; };
  EXPECT_EQ(table_.Unsuspend("a", none).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(table_.Unsuspend("a", any).code(), StatusCode::kResourceExhausted) << "8 GiB free on each, 10 wanted";
  EXPECT_TRUE(table_.Find("a")->suspended);
  ASSERT_TRUE(table_.Cancel("c", "s-c").ok());
  ASSERT_TRUE(table_.Unsuspend("a", any).ok());
  EXPECT_FALSE(table_.Find("a")->suspended);
  EXPECT_EQ(table_.Find("a")->slices[0].device, 1u);
  EXPECT_EQ(table_.usage()[1].memory_bytes, 10 * kGiB);
  // Its release frees what it holds now, once.
  ASSERT_TRUE(table_.Suspend("a").ok());
  ASSERT_TRUE(table_.Release("a", "s-a").ok());
  EXPECT_EQ(table_.usage()[1].memory_bytes, 0u);
  EXPECT_EQ(table_.usage()[0].memory_bytes, 8 * kGiB);
}

TEST_F(LeaseTableTest, ComputeShareIsCheckedApartFromMemory) {
  ASSERT_TRUE(Reserve("a", {{0, 1 * kGiB, kShareWhole}}).ok());
  EXPECT_EQ(Reserve("b", {{0, 1 * kGiB, kShareWhole / 20}}).code(), StatusCode::kResourceExhausted);
}

TEST_F(LeaseTableTest, AllOrNothing) {
  ASSERT_TRUE(Reserve("a", {{1, 16 * kGiB, kShareWhole}}).ok());
  EXPECT_FALSE(Reserve("b", {{0, 16 * kGiB, kShareWhole}, {1, 1 * kGiB, kShareWhole / 20}}).ok());
  EXPECT_EQ(table_.usage()[0].memory_bytes, 0u);  // Device 0 untouched by the failed request.
  // Two slices of one request on one device are summed before checking.
  EXPECT_FALSE(Reserve("c", {{0, 10 * kGiB, kShareWhole / 2}, {0, 10 * kGiB, kShareWhole / 2}}).ok());
  EXPECT_EQ(table_.entries().size(), 1u);
}

TEST_F(LeaseTableTest, RejectsAbsurdSlices) {
  EXPECT_EQ(Reserve("a", {{7, kGiB, kShareWhole}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Reserve("b", {{0, kGiB, kShareWhole / 100}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Reserve("c", {{0, 17 * kGiB, kShareWhole}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Reserve("d", {{0, 0, kShareWhole}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Reserve("e", {}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(Reserve("f", {{0, kGiB, kShareWhole / 20}}).ok());
  EXPECT_EQ(Reserve("f", {{1, kGiB, kShareWhole / 20}}).code(), StatusCode::kInvalidArgument);
}

// 4,295 whole-device slices summed in 32 bits of millionths wrapped to 3.3 % of the device, and were granted.
TEST_F(LeaseTableTest, ThousandsOfWholeSlicesAreNotAccountedAsAFewPercent) {
  std::vector<SliceGrant> whole(4295, SliceGrant{0, 1, kShareWhole});
  Status s = Reserve("a", whole);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("more than 20 slices of device 0"), std::string::npos) << s.message();
  EXPECT_EQ(table_.usage()[0].share, 0u);
  EXPECT_EQ(table_.usage()[0].memory_bytes, 0u);
  // Twenty slices of a twentieth fill a device; one more is one too many, however it is asked for.
  ASSERT_TRUE(Reserve("b", std::vector<SliceGrant>(20, SliceGrant{0, kGiB / 2, kShareWhole / 20})).ok());
  EXPECT_EQ(table_.usage()[0].share, kShareWhole);
  EXPECT_EQ(Reserve("c", {{0, 1, kShareWhole / 20}}).code(), StatusCode::kResourceExhausted);
}

TEST_F(LeaseTableTest, ReservationExpiresUnlessCommitted) {
  ASSERT_TRUE(Reserve("a", {{0, kGiB, kShareWhole / 4}}).ok());
  ASSERT_TRUE(Reserve("b", {{1, kGiB, kShareWhole / 4}}).ok());
  ASSERT_TRUE(table_.Commit("b", "s-b", now_).ok());
  auto freed = table_.Expire(now_ + std::chrono::seconds(3));
  EXPECT_EQ(freed, (std::vector<LeaseTable::Expired>{{"a", false}}));  // Never committed.
  EXPECT_EQ(table_.usage()[0].memory_bytes, 0u);
  EXPECT_EQ(table_.usage()[1].memory_bytes, kGiB);
}

TEST_F(LeaseTableTest, ExpiresWithoutHeartbeat) {
  ASSERT_TRUE(Reserve("a", {{0, kGiB, kShareWhole / 4}}).ok());
  ASSERT_TRUE(table_.Commit("a", "s-a", now_).ok());
  ASSERT_TRUE(table_.Renew("a", "s-a", now_ + std::chrono::seconds(15)).ok());
  EXPECT_TRUE(table_.Expire(now_ + std::chrono::seconds(30)).empty());  // Renewed at 15 s: lives to 35 s.
  EXPECT_EQ(table_.Expire(now_ + std::chrono::seconds(36)), (std::vector<LeaseTable::Expired>{{"a", true}}));
  EXPECT_EQ(table_.usage()[0].share, 0u);
  EXPECT_EQ(table_.Renew("a", "s-a", now_).code(), StatusCode::kNotFound);
}

TEST_F(LeaseTableTest, SecretIsRequired) {
  ASSERT_TRUE(Reserve("a", {{0, kGiB, kShareWhole / 4}}).ok());
  EXPECT_EQ(table_.Commit("a", "wrong", now_).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(table_.Release("a", "wrong").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(table_.entries().size(), 1u);
}

TEST_F(LeaseTableTest, CancelOnlyDropsReservations) {
  ASSERT_TRUE(Reserve("a", {{0, kGiB, kShareWhole / 4}}).ok());
  ASSERT_TRUE(table_.Commit("a", "s-a", now_).ok());
  EXPECT_FALSE(table_.Cancel("a", "s-a").ok());
  EXPECT_TRUE(table_.Release("a", "s-a").ok());
  EXPECT_TRUE(table_.entries().empty());
  EXPECT_EQ(table_.usage()[0].memory_bytes, 0u);
}

TEST_F(LeaseTableTest, DrainingRefusesNewReservations) {
  table_.SetDraining(true);
  EXPECT_EQ(Reserve("a", {{0, kGiB, kShareWhole / 4}}).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gpupool::agent
