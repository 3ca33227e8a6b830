#include "backend/session_meter.h"

#include <sys/mman.h>

#include "backend/shared_segment.h"

namespace gpupool::backend {

namespace {
constexpr uint64_t kMagic = 0x67706d6574657231ull;  // "gpmeter1"
}  // namespace

struct MeterCounters {
  uint64_t magic;
  std::atomic<uint64_t> calls, bytes_to_device, bytes_from_device, busy_nanos, memory_bytes;
  std::atomic<int64_t> last_call_unix_ms;
  std::atomic<bool> busy_measured;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counters are shared between processes");

Result<int> SessionMeter::CreateSegment() {
  return CreateSharedTable("gpupool-session-meter", sizeof(MeterCounters), "session meter",
                           [](void* p) { new (p) MeterCounters{kMagic, {}, {}, {}, {}, {}, {}, {}}; });
}

Result<std::unique_ptr<SessionMeter>> SessionMeter::Map(int fd) {
  auto mapped = MapSharedTable<MeterCounters>(fd, kMagic, "session meter");
  if (!mapped.ok()) return mapped.status();
  MeterCounters* c = *mapped;
  return std::unique_ptr<SessionMeter>(new SessionMeter(c, true));
}

std::unique_ptr<SessionMeter> SessionMeter::Private() {
  return std::unique_ptr<SessionMeter>(
      new SessionMeter(new MeterCounters{kMagic, {}, {}, {}, {}, {}, {}, {}}, false));
}

SessionMeter::~SessionMeter() {
  if (shared_) {
    munmap(counters_, sizeof(MeterCounters));
  } else {
    delete counters_;
  }
}

void SessionMeter::CountCalls(uint64_t n) {
  counters_->calls.fetch_add(n, std::memory_order_relaxed);
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  counters_->last_call_unix_ms.store(now.count(), std::memory_order_relaxed);
}

void SessionMeter::CountBytesToDevice(uint64_t n) {
  counters_->bytes_to_device.fetch_add(n, std::memory_order_relaxed);
}

void SessionMeter::CountBytesFromDevice(uint64_t n) {
  counters_->bytes_from_device.fetch_add(n, std::memory_order_relaxed);
}

void SessionMeter::CountBusy(std::chrono::nanoseconds d) {
  if (d.count() > 0) counters_->busy_nanos.fetch_add(static_cast<uint64_t>(d.count()), std::memory_order_relaxed);
}

void SessionMeter::MeasuresBusy() { counters_->busy_measured.store(true, std::memory_order_relaxed); }

void SessionMeter::SetMemory(uint64_t bytes) { counters_->memory_bytes.store(bytes, std::memory_order_relaxed); }

MeterReading SessionMeter::Read() const {
  MeterReading r;
  r.calls = counters_->calls.load(std::memory_order_relaxed);
  r.bytes_to_device = counters_->bytes_to_device.load(std::memory_order_relaxed);
  r.bytes_from_device = counters_->bytes_from_device.load(std::memory_order_relaxed);
  r.busy_nanos = counters_->busy_nanos.load(std::memory_order_relaxed);
  r.memory_bytes = counters_->memory_bytes.load(std::memory_order_relaxed);
  r.last_call_unix_ms = counters_->last_call_unix_ms.load(std::memory_order_relaxed);
  r.busy_measured = counters_->busy_measured.load(std::memory_order_relaxed);
  return r;
}

}  // namespace gpupool::backend
