#include "backend/device_wait.h"

#include <algorithm>
#include <thread>

#include "core/util.h"

namespace gpupool::backend {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Clock::duration kMinWakeLead = std::chrono::microseconds(20);
constexpr Clock::duration kMaxWakeLead = std::chrono::microseconds(200);
constexpr Clock::duration kWakeMargin = std::chrono::microseconds(10);
constexpr Clock::duration kFirstWakeup = std::chrono::microseconds(30);

}  // namespace

Clock::duration WakeLead() {
  return std::clamp<Clock::duration>(TypicalWakeup(kFirstWakeup) * 3 / 2 + kWakeMargin, kMinWakeLead, kMaxWakeLead);
}

void AwaitCallback(const DeviceWait& wait, bool woken, Clock::duration lead) {
  const auto woke = Clock::now();
  if (woken) NoteWakeup(woke - Clock::time_point(Clock::duration(wait.soon_at.load(std::memory_order_relaxed))));
  if (!HostHasSpareCpu()) return;
  const auto until = woke + lead + kWakeMargin;
  while (!wait.reached.load(std::memory_order_acquire) && Clock::now() < until) std::this_thread::yield();
}

}  // namespace gpupool::backend
