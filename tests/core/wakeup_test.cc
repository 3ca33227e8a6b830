// The process's measure of its threads' wakeups (core/util.h), which sizes how far ahead a session worker asks to be
// woken before its device's work ends.
#include <chrono>

#include <gtest/gtest.h>

#include "core/util.h"

namespace gpupool {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

// One test, as the measure is the process's: the fallback holds only before anything was noted.
TEST(Wakeup, TheTypicalWakeupFollowsWhatWasNotedAndIgnoresWaitsForATurn) {
  EXPECT_EQ(TypicalWakeup(microseconds(30)), microseconds(30)) << "nothing noted yet: the fallback";
  NoteWakeup(microseconds(40));
  EXPECT_EQ(TypicalWakeup(microseconds(30)), microseconds(40)) << "the first note is the measure";
  for (int i = 0; i < 40; ++i) NoteWakeup(microseconds(8));
  EXPECT_NEAR(TypicalWakeup(microseconds(30)).count(), nanoseconds(microseconds(8)).count(), 500)
      << "the measure moves to what the last wakeups took";
  // A thread that waited milliseconds for its turn on a busy host counts as no more than 200 us.
  NoteWakeup(std::chrono::milliseconds(50));
  EXPECT_LE(TypicalWakeup(microseconds(30)), microseconds(8 + 200 / 4 + 1));
}

}  // namespace
}  // namespace gpupool
