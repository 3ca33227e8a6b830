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

kj::Promise<void> WakeAhead(DeviceBackend& backend, StreamRef stream, std::shared_ptr<DeviceWait> wait,
                            kj::Promise<void> done) {
  if (!backend.CanTellNearlyReached() || wait->reached.load(std::memory_order_acquire)) return done;
  auto soon = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto soon_fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(kj::mv(soon.fulfiller));
  const Clock::duration lead = WakeLead();
  backend.WhenNearlyReached(stream, lead, [wait, soon_fulfiller] {
    wait->Soon();
    (*soon_fulfiller)->fulfill();
  });
  // Told at once, the wait takes no wakeup: nothing to learn of the thread's wakeups.
  const bool at_once = wait->SaidSoon();
  auto awake = soon.promise.then([wait, at_once, lead] { AwaitCallback(*wait, !at_once, lead); },
                                 [](kj::Exception&&) {});
  return done.attach(awake.eagerlyEvaluate(nullptr));
}

}  // namespace gpupool::backend
