// The emulated GPU's work queue as a waiter sees it: WhenNearlyReached tells a waiter ahead of WhenReached's callback,
// by no more than about its lead, and never where the work is done first. Pieces of work are host functions that
// take a known time (LaunchHostFunc counts as the stream's work, as kernels and copies do).
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "emu/device.h"

namespace gpupool::emu {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kPiece = milliseconds(4);

// Queues `count` pieces of kPiece each; `done` counts those that ran.
void QueuePieces(Device& device, int count, std::atomic<int>* done) {
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE(device.LaunchHostFunc(nullptr, [done] {
                        std::this_thread::sleep_for(kPiece);
                        if (done) ++*done;
                      }).ok());
  }
}

// So that the device knows how long a piece takes.
void Warm(Device& device) {
  QueuePieces(device, 12, nullptr);
  ASSERT_TRUE(device.StreamSynchronize(nullptr).ok());
}

TEST(DeviceQueue, AWaiterIsToldAheadOfItsCallbackByAboutItsLead) {
  Device device(DeviceOptions{.memory_bytes = 16ull << 20});
  ASSERT_TRUE(device.StartupStatus().ok());
  Warm(device);
  constexpr int kPieces = 12;
  std::atomic<int> ran{0}, ran_when_told{-1};
  std::promise<Clock::time_point> told, reached;
  QueuePieces(device, kPieces, &ran);
  ASSERT_TRUE(device.WhenReached(nullptr, [&] { reached.set_value(Clock::now()); }).ok());
  // Two pieces and a half: told as the last but one piece starts (the pieces after it, the callback counted as
  // one, fit in the lead), not earlier.
  device.WhenNearlyReached(nullptr, kPiece * 5 / 2, [&] {
    ran_when_told = ran.load();
    told.set_value(Clock::now());
  });
  auto told_at = told.get_future(), reached_at = reached.get_future();
  ASSERT_EQ(reached_at.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  ASSERT_EQ(told_at.wait_for(milliseconds(0)), std::future_status::ready) << "never told before the callback";
  const auto ahead = reached_at.get() - told_at.get();
  EXPECT_GE(ahead, kPiece) << "told less than a piece ahead of the callback";
  EXPECT_LE(ahead, kPiece * 6) << "told far more than the lead ahead";
  EXPECT_GE(ran_when_told.load(), kPieces - 4) << "told while most of the work was still to run";
}

TEST(DeviceQueue, AWaiterWhoseEndIsWithinItsLeadIsToldAtOnce) {
  Device device(DeviceOptions{.memory_bytes = 16ull << 20});
  ASSERT_TRUE(device.StartupStatus().ok());
  Warm(device);
  QueuePieces(device, 2, nullptr);
  ASSERT_TRUE(device.WhenReached(nullptr, [] {}).ok());
  std::thread::id told_on;
  device.WhenNearlyReached(nullptr, kPiece * 10, [&] { told_on = std::this_thread::get_id(); });
  EXPECT_EQ(told_on, std::this_thread::get_id()) << "not told at once, on the caller's thread";
  ASSERT_TRUE(device.StreamSynchronize(nullptr).ok());
}

TEST(DeviceQueue, AWaiterIsNeverToldWhenTheWorkIsDoneFirst) {
  Device device(DeviceOptions{.memory_bytes = 16ull << 20});
  ASSERT_TRUE(device.StartupStatus().ok());
  // Nothing queued: dropped at once.
  auto held = std::make_shared<int>(0);
  bool told = false;
  device.WhenNearlyReached(nullptr, milliseconds(100), [&told, held] { told = true; });
  EXPECT_FALSE(told);
  EXPECT_EQ(held.use_count(), 1) << "the dropped hint is still held";

  // A lead shorter than any piece: the work's end comes before the hint would, and the hint goes with it.
  Warm(device);
  std::atomic<bool> told_late{false};
  QueuePieces(device, 3, nullptr);
  ASSERT_TRUE(device.WhenReached(nullptr, [] {}).ok());
  device.WhenNearlyReached(nullptr, std::chrono::microseconds(1), [&told_late, held] { told_late = true; });
  ASSERT_TRUE(device.StreamSynchronize(nullptr).ok());  // The hint goes as the callback comes up.
  EXPECT_FALSE(told_late.load());
  EXPECT_EQ(held.use_count(), 1) << "the hint outlived its wait";
}

}  // namespace
}  // namespace gpupool::emu
