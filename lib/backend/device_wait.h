// How a session worker waits for its device with little latency: a wait for the device's callback, and the poll
// that replaces the last wakeup of a wait a client is waiting on. Scheduling of the worker's own time, kept apart
// from the session server's checks (session_server.cc), which only decides when a wait is worth it.
#ifndef GPUPOOL_BACKEND_DEVICE_WAIT_H_
#define GPUPOOL_BACKEND_DEVICE_WAIT_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include <memory>

#include <kj/async.h>

#include "backend/device_backend.h"

namespace gpupool::backend {

// A wait for the device's callback, shared by the callbacks that end it (on the device's thread) and the session.
struct DeviceWait {
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> done;
  std::atomic<bool> reached{false};  // Set once `done` is fulfilled: the event loop has the news by then.
  std::atomic<int64_t> soon_at{0};   // When the device said the wait was about to end (steady clock ticks).
  void Fulfil() {
    done->fulfill();
    reached.store(true, std::memory_order_release);
  }
  // The device says now that the wait is about to end.
  void Soon() { soon_at.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed); }
  bool SaidSoon() const { return soon_at.load(std::memory_order_relaxed) != 0; }
};

// How far ahead of a wait's end the event loop asks to be woken: the typical wakeup of this process's threads and a
// half, and a margin, between 20 and 200 us (30 us assumed before any wakeup was measured).
std::chrono::steady_clock::duration WakeLead();

// The device said that `wait` ends within `lead`: polls for its callback rather than sleep through the wait's last
// microseconds (and pay a wakeup after them, 10-50 us where an idle CPU must be woken, on a virtual machine an exit to
// the hypervisor), for about as long as the lead, yielding the CPU at each turn, and only while the host has a CPU to
// spare. `woken`: this thread was woken for the hint, and tells how long that took (WakeLead learns from it).
void AwaitCallback(const DeviceWait& wait, bool woken, std::chrono::steady_clock::duration lead);

// `done`, the end of `wait` (a wait for the callback of work on `stream` of `backend`; null stream: the device's),
// for a wait a client is waiting on: where the device can tell when that work will end
// (DeviceBackend::WhenNearlyReached), the event loop is woken WakeLead() ahead of the callback and polls for it
// (AwaitCallback) rather than sleep through the wait's last microseconds.
kj::Promise<void> WakeAhead(DeviceBackend& backend, StreamRef stream, std::shared_ptr<DeviceWait> wait,
                            kj::Promise<void> done);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_DEVICE_WAIT_H_
