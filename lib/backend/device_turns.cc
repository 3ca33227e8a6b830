#include "backend/device_turns.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "backend/shared_segment.h"

namespace gpupool::backend {

namespace {

constexpr uint64_t kMagic = 0x67707475726e7331ull;  // "gpturns1"
constexpr int kSlots = 128;
// A session that used the device less than this long ago is busy (a round trip to its client between batches
// is no pause): it keeps all its credit. One back from a longer pause keeps at most kIdleCreditNanos of device
// time over the neighbour that has used least, so that an absence does not buy it a monopoly.
constexpr int64_t kIdleNanos = 100'000'000;
constexpr double kIdleCreditNanos = 50e6;
// How often a waiting session looks for members that died (their turns and slots are taken back).
constexpr int64_t kWaitPollNanos = 20'000'000;
// A member that ends its turn with more work queued while it is still the one with least use keeps the next turn
// this long: between two kernels (or when the OS preempts it right after) it is not waiting for an instant, and a
// neighbour would otherwise take every such turn, whatever the shares.
constexpr int64_t kReserveNanos = 2'000'000;

int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

// Process-shared, in a memfd mapped by the agent and every worker of one device. Condition variables are not used:
// glibc's can block a signaller forever when a waiter dies inside them; a futex on `sequence` cannot.
struct TurnsTable {
  struct Slot {
    pthread_mutex_t life;  // Robust; locked by the member for its whole life: EOWNERDEAD means it died.
    int32_t pid;           // 0: free.
    uint32_t weight;       // Share in millionths.
    int32_t waiting;
    double vtime;          // Device time used / share.
    uint64_t used_nanos;
    int64_t last_used;     // CLOCK_MONOTONIC of its last turn's end.
  };
  uint64_t magic;
  pthread_mutex_t mu;      // Robust; guards everything below.
  uint32_t sequence;       // Bumped (and woken) whenever the turn is free to take.
  int32_t waiters;
  int32_t holder;          // Slot index, -1: nobody.
  int64_t turn_start;      // CLOCK_MONOTONIC of the holder's turn (or of its last charge).
  int32_t reserved_for;    // While holder is -1: the slot the next turn is kept for until reserved_until; -1: none.
  int64_t reserved_until;
  Slot slots[kSlots];
};

namespace {

class TableLock : public RobustLock {
 public:
  explicit TableLock(TurnsTable* t) : RobustLock(&t->mu) {}
};

void WakeAll(TurnsTable* t) {
  __atomic_add_fetch(&t->sequence, 1, __ATOMIC_SEQ_CST);
  if (t->waiters > 0) syscall(SYS_futex, &t->sequence, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// With the table locked: the member other than `exclude` for which `counts(index, slot)` holds that has used least
// (least vtime, then lowest index), or -1 if none.
template <typename Counts>
int Least(const TurnsTable* t, int exclude, Counts counts) {
  int best = -1;
  for (int j = 0; j < kSlots; ++j) {
    const TurnsTable::Slot& o = t->slots[j];
    if (j == exclude || o.pid == 0 || !counts(j, o)) continue;
    if (best < 0 || o.vtime < t->slots[best].vtime) best = j;
  }
  return best;
}

// With the table locked: the waiting member other than `exclude` that has used least, or -1. Without looking
// through the slots when `waiters` says nobody else waits: the usual case (one session at a time wants the device)
// then costs no more than a kernel launch should, rather than two walks over every slot per kernel.
int LeastWaiting(const TurnsTable* t, int exclude) {
  const int others = t->waiters - (exclude >= 0 && t->slots[exclude].waiting != 0 ? 1 : 0);
  if (others <= 0) return -1;
  return Least(t, exclude, [](int, const TurnsTable::Slot& o) { return o.waiting != 0; });
}

// With the table locked: slot `s` waits, or no longer does. `waiters` may count more members than wait, never
// fewer (LeastWaiting relies on that): it grows before a slot's flag is set and shrinks after the flag is cleared,
// so that a member killed between the two leaves it too high (a walk over the slots the next time), not too low.
void StartWaiting(TurnsTable* t, TurnsTable::Slot& s) {
  ++t->waiters;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s.waiting = 1;
}
void StopWaiting(TurnsTable* t, TurnsTable::Slot& s) {
  if (s.waiting == 0) return;
  s.waiting = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  --t->waiters;
}

// With the table locked: whether slot `i`'s member lives; a dead one's slot is freed (and its turn, if held).
bool Alive(TurnsTable* t, int i) {
  TurnsTable::Slot& s = t->slots[i];
  if (s.pid == 0) return false;
  if (MemberLives(&s.life)) return true;
  s.pid = 0;
  StopWaiting(t, s);  // A member killed while it waited for a turn.
  if (t->holder == i) {
    t->holder = -1;
    WakeAll(t);
  }
  return false;
}

}  // namespace

Result<int> DeviceTurns::CreateSegment() {
  return CreateSharedTable("gpupool-device-turns", sizeof(TurnsTable), "device turns table", [](void* p) {
    auto* t = static_cast<TurnsTable*>(p);
    InitRobustMutex(&t->mu);
    t->holder = -1;
    t->reserved_for = -1;
    for (auto& s : t->slots) InitRobustMutex(&s.life);
    t->magic = kMagic;
  });
}

Result<std::unique_ptr<DeviceTurns>> DeviceTurns::Join(int fd, uint32_t share_micros) {
  auto p = MapSharedSegment(fd, sizeof(TurnsTable), "device turns table");
  if (!p.ok()) return p.status();
  auto* t = static_cast<TurnsTable*>(*p);
  if (t->magic != kMagic) {
    munmap(t, sizeof(TurnsTable));
    return Status(StatusCode::kInvalidArgument, "the device turns descriptor is not a turns table");
  }
  TableLock lock(t);
  for (int i = 0; i < kSlots; ++i) {
    if (Alive(t, i)) continue;
    TurnsTable::Slot& s = t->slots[i];
    LockRobustMutex(&s.life);
    s.pid = getpid();
    s.weight = std::max(1u, std::min(1000000u, share_micros));
    StopWaiting(t, s);
    s.used_nanos = 0;
    s.last_used = 0;
    // A newcomer starts level with the member that has used least: no credit, no debt.
    int least = Least(t, i, [](int, const TurnsTable::Slot&) { return true; });
    s.vtime = least < 0 ? 0 : t->slots[least].vtime;
    return std::unique_ptr<DeviceTurns>(new DeviceTurns(t, i));
  }
  munmap(t, sizeof(TurnsTable));
  return Status(StatusCode::kResourceExhausted, fmt::format("more than {} sessions on one device", kSlots));
}

DeviceTurns::~DeviceTurns() {
  {
    TableLock lock(table_);
    TurnsTable::Slot& s = table_->slots[slot_];
    if (table_->holder == slot_) {
      table_->holder = -1;
      WakeAll(table_);
    }
    StopWaiting(table_, s);
    s.pid = 0;
    pthread_mutex_unlock(&s.life);
  }
  munmap(table_, sizeof(TurnsTable));
}

void DeviceTurns::ChargeLocked(int64_t now) {
  TurnsTable::Slot& s = table_->slots[slot_];
  int64_t used = std::max<int64_t>(0, now - table_->turn_start);
  s.used_nanos += static_cast<uint64_t>(used);
  if (meter_) meter_->CountBusy(std::chrono::nanoseconds(used));
  s.vtime += static_cast<double>(used) / s.weight;
  s.last_used = now;
  table_->turn_start = now;
}

void DeviceTurns::AcquireLocked(const std::atomic<bool>& cancel) {
  TurnsTable* t = table_;
  TurnsTable::Slot& me = t->slots[slot_];
  if (NowNanos() - me.last_used > kIdleNanos) {
    // Back from idle: level with the neighbours that want the device, less a little credit.
    int least = Least(t, slot_, [t](int j, const TurnsTable::Slot& o) { return o.waiting || t->holder == j; });
    if (least >= 0) me.vtime = std::max(me.vtime, t->slots[least].vtime - kIdleCreditNanos / me.weight);
  }
  StartWaiting(t, me);
  for (;;) {
    if (cancel.load(std::memory_order_relaxed)) break;
    if (t->holder >= 0 && t->holder != slot_) Alive(t, t->holder);
    int64_t wait = kWaitPollNanos;
    if (t->holder == -1 && t->reserved_for >= 0) {
      int64_t left = t->reserved_until - NowNanos();
      if (t->reserved_for == slot_ || left <= 0 || !Alive(t, t->reserved_for)) {
        t->reserved_for = -1;
      } else {
        wait = left;  // Kept for a neighbour a moment longer.
      }
    }
    if (t->holder == -1 && (t->reserved_for == -1 || t->reserved_for == slot_)) {
      // First in line: no waiting neighbour has used less (on a tie, the lower slot goes first).
      int other = LeastWaiting(t, slot_);
      const TurnsTable::Slot* o = other < 0 ? nullptr : &t->slots[other];
      if (!o || o->vtime > me.vtime || (o->vtime == me.vtime && other > slot_)) {
        t->holder = slot_;
        t->turn_start = NowNanos();
        break;
      }
    }
    uint32_t seen = __atomic_load_n(&t->sequence, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&t->mu);
    timespec timeout{0, wait};
    long rc = syscall(SYS_futex, &t->sequence, FUTEX_WAIT, seen, &timeout, nullptr, 0);
    bool timed_out = rc != 0 && errno == ETIMEDOUT;
    LockRobustMutex(&t->mu);
    if (timed_out) {
      for (int j = 0; j < kSlots; ++j) {
        if (j != slot_ && t->slots[j].pid != 0) Alive(t, j);
      }
    }
  }
  StopWaiting(t, me);
}

void DeviceTurns::Enter(const std::atomic<bool>& cancel) {
  std::lock_guard<std::mutex> local(local_mu_);
  TableLock lock(table_);
  AcquireLocked(cancel);
  holding_ = table_->holder == slot_;
  slice_end_.store(holding_ ? table_->turn_start + kSliceNanos : 0, std::memory_order_relaxed);
}

void DeviceTurns::Leave(bool more_queued) {
  std::lock_guard<std::mutex> local(local_mu_);
  if (!holding_) return;
  holding_ = false;
  slice_end_.store(0, std::memory_order_relaxed);
  TableLock lock(table_);
  if (table_->holder != slot_) return;  // Taken back: this process was thought dead (cannot happen while alive).
  int64_t now = NowNanos();
  ChargeLocked(now);
  table_->holder = -1;
  int other = LeastWaiting(table_, slot_);
  if (more_queued && (other < 0 || table_->slots[other].vtime >= table_->slots[slot_].vtime)) {
    table_->reserved_for = slot_;
    table_->reserved_until = now + kReserveNanos;
  }
  WakeAll(table_);
}

void DeviceTurns::Checkpoint(const std::atomic<bool>& cancel) {
  if (NowNanos() < slice_end_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> local(local_mu_);
  int64_t now = NowNanos();
  if (!holding_ || now < slice_end_.load(std::memory_order_relaxed)) return;
  TableLock lock(table_);
  ChargeLocked(now);
  int other = LeastWaiting(table_, slot_);
  if (other >= 0 && table_->slots[other].vtime < table_->slots[slot_].vtime) {
    // The other threads of this kernel wait on local_mu_ meanwhile: the whole kernel pauses.
    table_->holder = -1;
    WakeAll(table_);
    AcquireLocked(cancel);
    holding_ = table_->holder == slot_;
  }
  slice_end_.store(holding_ ? table_->turn_start + kSliceNanos : 0, std::memory_order_relaxed);
}

uint64_t DeviceTurns::used_nanos() const {
  TableLock lock(table_);
  return table_->slots[slot_].used_nanos;
}

}  // namespace gpupool::backend
