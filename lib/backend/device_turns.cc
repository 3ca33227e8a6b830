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
constexpr int kSlots = DeviceTurns::kMaxMembers;
// A session that used the device less than this long ago is busy (a round trip to its client between batches
// is no pause): it keeps all its credit. One back from a longer pause keeps at most kIdleCreditNanos of device
// time over the neighbour that has used least, so that an absence does not buy it a monopoly.
constexpr int64_t kIdleNanos = 100'000'000;
constexpr double kIdleCreditNanos = 50e6;
// How often a waiting session looks for members that died (their turns and slots are taken back).
constexpr int64_t kWaitPollNanos = 20'000'000;
// A member that ends its turn with more work queued while it is still the one with least use keeps the next turn
// this long: between two kernels (or when the OS preempts it right after) it is not waiting for an instant, and a
// neighbour would otherwise take every such turn, whatever the shares. As long as a slice: on a busy host the OS
// may keep the member from its next kernel for a scheduler tick or two, and it comes back at once otherwise.
constexpr int64_t kReserveNanos = 10'000'000;
// How often a throttled submission looks again whether its lease is still ahead (neighbours catch up as their work
// runs, which wakes nobody).
constexpr long kThrottlePollNanos = 1'000'000;

int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

// Process-shared, in a memfd mapped by the agent and every worker of one device. Condition variables are not used:
// glibc's can block a signaller forever when a waiter dies inside them; a futex on `sequence` cannot.
struct TurnsTable {
  // A lease's sessions on the device: what they have used together, for their one share. In use while a slot with
  // a member (pid != 0) names it.
  struct Group {
    uint64_t key;          // The agent's number for the lease; 0: a member alone.
    uint32_t weight;       // Share in millionths.
    double vtime;          // Device time its members used / share.
    int64_t last_used;     // CLOCK_MONOTONIC of its members' last turn's end.
  };
  struct Slot {
    pthread_mutex_t life;  // Robust; locked by the member for its whole life: EOWNERDEAD means it died.
    int32_t pid;           // 0: free.
    int32_t group;         // Index into groups.
    int32_t waiting;
    double vtime;          // This member's own device time / its group's share: who goes first within the group.
    uint64_t used_nanos;
    int32_t in_flight;     // Submission path: this member has work on the device.
    double in_flight_from; // Submission path: shared_nanos when it was last charged for that work.
  };
  uint64_t magic;
  pthread_mutex_t mu;      // Robust; guards everything below.
  uint32_t sequence;       // Bumped (and woken) whenever the turn is free to take.
  int32_t waiters;
  int32_t holder;          // Slot index, -1: nobody.
  int64_t turn_start;      // CLOCK_MONOTONIC of the holder's turn (or of its last charge).
  int32_t reserved_for;    // While holder is -1: the slot the next turn is kept for until reserved_until; -1: none.
  int64_t reserved_until;
  // The submission path: how many members have work in flight, and the device time each of them has had since the
  // table began (each gets 1 / in_flight of the device meanwhile: a time-slicing device's fair share), as of
  // shared_at (CLOCK_MONOTONIC).
  int32_t in_flight;
  double shared_nanos;
  int64_t shared_at;
  int64_t last_drained;        // CLOCK_MONOTONIC when a member last had no work left in flight,
  int32_t last_drained_group;  // and its group.
  Slot slots[kSlots];
  Group groups[kSlots];    // Never more groups than members.
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

double GroupVtime(const TurnsTable* t, int slot) { return t->groups[t->slots[slot].group].vtime; }

// With the table locked: whether member `a` goes before member `b`: its lease has used less for its share, or the
// same (two members of one lease) and it has used less itself; on a tie, the lower slot.
bool Before(const TurnsTable* t, int a, int b) {
  const double ga = GroupVtime(t, a), gb = GroupVtime(t, b);
  if (ga != gb) return ga < gb;
  if (t->slots[a].vtime != t->slots[b].vtime) return t->slots[a].vtime < t->slots[b].vtime;
  return a < b;
}

// With the table locked: the member other than `exclude` for which `counts(index, slot)` holds that goes first
// (Before), or -1 if none.
template <typename Counts>
int Least(const TurnsTable* t, int exclude, Counts counts) {
  int best = -1;
  for (int j = 0; j < kSlots; ++j) {
    const TurnsTable::Slot& o = t->slots[j];
    if (j == exclude || o.pid == 0 || !counts(j, o)) continue;
    if (best < 0 || Before(t, j, best)) best = j;
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

// With the table locked: brings the device time each member with work in flight has had up to `now`.
void AdvanceShared(TurnsTable* t, int64_t now) {
  if (t->in_flight > 0 && now > t->shared_at) t->shared_nanos += static_cast<double>(now - t->shared_at) / t->in_flight;
  t->shared_at = now;
}

// With the table locked: slot `s` has work in flight, or no longer has.
void StartInFlight(TurnsTable* t, TurnsTable::Slot& s, int64_t now) {
  if (s.in_flight != 0) return;
  AdvanceShared(t, now);
  s.in_flight_from = t->shared_nanos;
  ++t->in_flight;
  s.in_flight = 1;
}
void StopInFlight(TurnsTable* t, TurnsTable::Slot& s, int64_t now) {
  if (s.in_flight == 0) return;
  AdvanceShared(t, now);
  s.in_flight = 0;
  --t->in_flight;
}

// With the table locked: whether slot `i`'s member lives; a dead one's slot is freed (and its turn, if held).
bool Alive(TurnsTable* t, int i) {
  TurnsTable::Slot& s = t->slots[i];
  if (s.pid == 0) return false;
  if (MemberLives(&s.life)) return true;
  s.pid = 0;
  StopWaiting(t, s);  // A member killed while it waited for a turn.
  StopInFlight(t, s, NowNanos());  // Its work died with it.
  if (t->holder == i) {
    t->holder = -1;
    WakeAll(t);
  }
  return false;
}

// With the table locked: takes a free slot for this process in the group `group` (see DeviceTurns::Join); -1 if
// every slot is taken.
int JoinLocked(TurnsTable* t, uint32_t share, uint64_t group) {
  // The groups of the live members, and this member's lease among them.
  bool group_used[kSlots] = {};
  int joined_group = -1;
  for (int i = 0; i < kSlots; ++i) {
    if (!Alive(t, i)) continue;
    const int g = t->slots[i].group;
    group_used[g] = true;
    if (group != 0 && t->groups[g].key == group) joined_group = g;
  }
  for (int i = 0; i < kSlots; ++i) {
    TurnsTable::Slot& s = t->slots[i];
    if (s.pid != 0) continue;
    // Never block with the table locked: every session of the device would wait behind this one. A life mutex
    // still held by a live thread (a member that left from another thread than the one that joined) marks a slot
    // not to reuse; one held by a member that died (killed between taking it and writing its pid) is taken over.
    int rc = pthread_mutex_trylock(&s.life);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&s.life);
    if (rc != 0 && rc != EOWNERDEAD) continue;
    if (joined_group < 0) {
      joined_group = 0;
      while (group_used[joined_group]) ++joined_group;  // A free one exists: fewer live groups than live members.
      TurnsTable::Group& g = t->groups[joined_group];
      g.key = group;
      g.weight = std::max(1u, std::min(1000000u, share));
      g.last_used = 0;
      // A newcomer starts level with the lease that has used least: no credit, no debt.
      int least = Least(t, i, [](int, const TurnsTable::Slot&) { return true; });
      g.vtime = least < 0 ? 0 : GroupVtime(t, least);
      s.vtime = 0;
    } else {
      // Level with the lease's member that has used least.
      int least = Least(t, i, [&](int, const TurnsTable::Slot& o) { return o.group == joined_group; });
      s.vtime = least < 0 ? 0 : t->slots[least].vtime;
    }
    s.group = joined_group;
    StopWaiting(t, s);
    StopInFlight(t, s, NowNanos());
    s.used_nanos = 0;
    s.pid = getpid();  // Last: a member killed before this line left a free slot.
    return i;
  }
  return -1;
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

Result<std::unique_ptr<DeviceTurns>> DeviceTurns::Join(int fd, uint32_t share_micros, uint64_t group) {
  auto mapped = MapSharedTable<TurnsTable>(fd, kMagic, "device turns table");
  if (!mapped.ok()) return mapped.status();
  TurnsTable* t = *mapped;
  int slot;
  {
    TableLock lock(t);
    slot = JoinLocked(t, share_micros, group);
  }
  if (slot < 0) {
    // Only once the lock is released: a mutex unmapped while held cannot be released, nor, should this process
    // die, handed on by the kernel (it finds a robust mutex's owner gone through the mapping): the table's lock
    // would stay taken for good, and every session of the device wait on it.
    munmap(t, sizeof(TurnsTable));
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("more than {} sessions on one device (its turns table is full)", kSlots));
  }
  return std::unique_ptr<DeviceTurns>(new DeviceTurns(t, slot));
}

void DeviceTurns::LockTableForTesting(int fd) {
  auto p = MapSharedSegment(fd, sizeof(TurnsTable), "device turns table");
  if (p.ok()) LockRobustMutex(&static_cast<TurnsTable*>(*p)->mu);
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
    StopInFlight(table_, s, NowNanos());
    s.pid = 0;
    pthread_mutex_unlock(&s.life);
  }
  munmap(table_, sizeof(TurnsTable));
}

void DeviceTurns::ChargeLocked(int64_t now) {
  ChargeNanosLocked(now - table_->turn_start, now);
  table_->turn_start = now;
}

void DeviceTurns::ChargeNanosLocked(int64_t nanos, int64_t now) {
  TurnsTable::Slot& s = table_->slots[slot_];
  TurnsTable::Group& g = table_->groups[s.group];
  int64_t used = std::max<int64_t>(0, nanos);
  s.used_nanos += static_cast<uint64_t>(used);
  if (meter_) meter_->CountBusy(std::chrono::nanoseconds(used));
  g.vtime += static_cast<double>(used) / g.weight;
  s.vtime += static_cast<double>(used) / g.weight;
  g.last_used = now;
}

void DeviceTurns::ChargeInFlightLocked(int64_t now) {
  TurnsTable::Slot& s = table_->slots[slot_];
  if (s.in_flight == 0) return;
  AdvanceShared(table_, now);
  ChargeNanosLocked(static_cast<int64_t>(table_->shared_nanos - s.in_flight_from), now);
  s.in_flight_from = table_->shared_nanos;
}

void DeviceTurns::WaitForShare(const std::atomic<bool>& cancel) {
  TurnsTable* t = table_;
  TableLock lock(t);
  TurnsTable::Slot& me = t->slots[slot_];
  TurnsTable::Group& mine = t->groups[me.group];
  int64_t now = NowNanos();
  AdvanceShared(t, now);
  ChargeInFlightLocked(now);
  // Nobody else has work in flight or waits, and no other lease had work in flight lately (its member that drained
  // last may be between two submissions: see below): nothing to share (the usual case costs no walk over the
  // slots).
  if (t->in_flight - me.in_flight <= 0 && LeastWaiting(t, slot_) < 0 &&
      (now - t->last_drained >= kIdleNanos || t->last_drained_group == me.group)) {
    return;
  }
  if (me.in_flight == 0 && now - mine.last_used > kIdleNanos) {
    // The lease is back from idle: level with the other leases that want the device, less a little credit.
    int least = Least(t, slot_, [&me](int, const TurnsTable::Slot& o) {
      return o.group != me.group && (o.waiting || o.in_flight);
    });
    if (least >= 0) mine.vtime = std::max(mine.vtime, GroupVtime(t, least) - kIdleCreditNanos / mine.weight);
  }
  StartWaiting(t, me);
  for (int64_t polls = 0;; ++polls) {
    if (cancel.load(std::memory_order_relaxed)) break;
    // Each lease's use so far, counting what its work in flight has had and is not charged yet.
    double vtime[kSlots];
    bool wants[kSlots] = {}, owed[kSlots] = {};
    int mine_in_flight = me.in_flight != 0 ? 1 : 0;  // Members of this lease with work in flight.
    bool sibling_first = false;  // A member of this lease that has used less waits too.
    for (int g = 0; g < kSlots; ++g) vtime[g] = t->groups[g].vtime;
    for (int j = 0; j < kSlots; ++j) {
      TurnsTable::Slot& o = t->slots[j];
      if (o.pid == 0 || j == slot_) continue;
      if (polls % 16 == 15 && !Alive(t, j)) continue;  // Now and then: members that died.
      if (o.in_flight) vtime[o.group] += (t->shared_nanos - o.in_flight_from) / t->groups[o.group].weight;
      if (o.group == me.group) {
        mine_in_flight += o.in_flight != 0 ? 1 : 0;
        sibling_first = sibling_first || (o.waiting && o.vtime < me.vtime);
      }
      // A lease whose work ran within the last slice still wants the device: its client is between two
      // submissions (or its process waits for a CPU), and would otherwise lose its share in every such gap.
      const int64_t since = now - t->groups[o.group].last_used;
      wants[o.group] = wants[o.group] || o.waiting || o.in_flight || since < kSliceNanos;
      // One that ran within kIdleNanos is still owed its share (past that, it is levelled when it comes back).
      owed[o.group] = owed[o.group] || wants[o.group] || since < kIdleNanos;
    }
    double least_other = -1, least_owed = -1;
    for (int g = 0; g < kSlots; ++g) {
      if (g == me.group) continue;
      if (wants[g] && (least_other < 0 || vtime[g] < least_other)) least_other = vtime[g];
      if (owed[g] && (least_owed < 0 || vtime[g] < least_owed)) least_owed = vtime[g];
    }
    // vtime[me.group] counts this member's charges and its siblings' work in flight.
    const bool over_slice =
        least_other >= 0 && vtime[me.group] > least_other + static_cast<double>(kSliceNanos) / mine.weight;
    // A lease ahead of a neighbour that is owed device time keeps one submission's work in flight at most. Work
    // cannot be paused once it runs, and a time-slicing device gives every context with work an equal part: the
    // eight processes of one small lease, let through together in the moment their neighbour was between two
    // submissions, would take 8/9 of the device until all their work had run, whatever its share. One at a time,
    // a lease's overrun is bounded by one submission's work.
    // Which of its members goes next: the one that has used least (else the member whose process ran last, its
    // next submission ready at once, would take every turn and its siblings wait for seconds).
    const bool ahead = least_owed >= 0 && vtime[me.group] > least_owed;
    const bool over_depth = ahead && (mine_in_flight > 0 || sibling_first);
    if (!over_slice && !over_depth) break;
    // Ahead: the neighbours catch up as their work runs, and this lease's own work drains.
    uint32_t seen = __atomic_load_n(&t->sequence, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&t->mu);
    timespec timeout{0, kThrottlePollNanos};
    syscall(SYS_futex, &t->sequence, FUTEX_WAIT, seen, &timeout, nullptr, 0);
    LockRobustMutex(&t->mu);
    now = NowNanos();
    AdvanceShared(t, now);
    ChargeInFlightLocked(now);  // This member's own work in flight, if any, ran meanwhile too.
  }
  StopWaiting(t, me);
}

void DeviceTurns::WorkStarted() {
  TableLock lock(table_);
  StartInFlight(table_, table_->slots[slot_], NowNanos());
}

void DeviceTurns::WorkDrained() {
  TableLock lock(table_);
  int64_t now = NowNanos();
  ChargeInFlightLocked(now);
  StopInFlight(table_, table_->slots[slot_], now);
  table_->last_drained = now;
  table_->last_drained_group = table_->slots[slot_].group;
  WakeAll(table_);  // A throttled neighbour may now be alone.
}

void DeviceTurns::AcquireLocked(const std::atomic<bool>& cancel) {
  TurnsTable* t = table_;
  TurnsTable::Slot& me = t->slots[slot_];
  TurnsTable::Group& mine = t->groups[me.group];
  if (NowNanos() - mine.last_used > kIdleNanos) {
    // The lease is back from idle: level with the other leases that want the device, less a little credit.
    int least = Least(t, slot_, [t, &me](int j, const TurnsTable::Slot& o) {
      return o.group != me.group && (o.waiting || t->holder == j);
    });
    if (least >= 0) mine.vtime = std::max(mine.vtime, GroupVtime(t, least) - kIdleCreditNanos / mine.weight);
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
      if (other < 0 || Before(t, slot_, other)) {
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
  if (more_queued && (other < 0 || Before(table_, slot_, other))) {
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
  if (other >= 0 && Before(table_, other, slot_)) {
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
