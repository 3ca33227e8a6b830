#include "backend/slice_quota.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "backend/shared_segment.h"

namespace gpupool::backend {

namespace {
constexpr uint64_t kMagic = 0x6770717569746131ull;  // "gpquita1"
}  // namespace

struct QuotaTable {
  struct Member {
    pthread_mutex_t life;  // Robust; locked by the member for its whole life: EOWNERDEAD means it died.
    int32_t pid;           // 0: free.
    uint64_t used;         // Bytes this member holds.
  };
  uint64_t magic;
  uint64_t limit;
  pthread_mutex_t mu;  // Robust; guards the members.
  Member members[SliceQuota::kMaxMembers];
};

namespace {

void InitTable(QuotaTable* t, uint64_t limit_bytes) {
  InitRobustMutex(&t->mu);
  for (auto& m : t->members) InitRobustMutex(&m.life);
  t->limit = limit_bytes;
  t->magic = kMagic;
}

// With the table locked: whether member `i` lives; a dead one's slot is freed, and its bytes with it (they died
// with its process).
bool Alive(QuotaTable* t, int i) {
  QuotaTable::Member& m = t->members[i];
  if (m.pid == 0) return false;
  if (MemberLives(&m.life)) return true;
  m.pid = 0;
  m.used = 0;
  return false;
}

// With the table locked: the bytes held by live members. `reclaim`: find dead members first (a cost of one
// try-lock per member, paid only when the quota looks full).
uint64_t UsedLocked(QuotaTable* t, int self, bool reclaim) {
  uint64_t used = 0;
  for (int i = 0; i < SliceQuota::kMaxMembers; ++i) {
    if (reclaim && i != self) Alive(t, i);
    used += t->members[i].pid != 0 ? t->members[i].used : 0;
  }
  return used;
}

// With the table locked: takes a free (or dead member's) slot for this process; -1 if all are taken.
int JoinLocked(QuotaTable* t) {
  for (int i = 0; i < SliceQuota::kMaxMembers; ++i) {
    if (Alive(t, i)) continue;
    QuotaTable::Member& m = t->members[i];
    // Never block here (the table is locked): a life mutex still held, by a member that left from another thread
    // than the one that joined, marks a slot not to reuse.
    int rc = pthread_mutex_trylock(&m.life);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&m.life);
    if (rc != 0 && rc != EOWNERDEAD) continue;
    m.pid = getpid();
    m.used = 0;
    return i;
  }
  return -1;
}

}  // namespace

Result<int> SliceQuota::CreateSegment(uint64_t limit_bytes) {
  return CreateSharedTable("gpupool-slice-quota", sizeof(QuotaTable), "slice quota table",
                           [limit_bytes](void* p) { InitTable(static_cast<QuotaTable*>(p), limit_bytes); });
}

Result<std::unique_ptr<SliceQuota>> SliceQuota::Join(int fd) {
  auto mapped = MapSharedTable<QuotaTable>(fd, kMagic, "slice quota table");
  if (!mapped.ok()) return mapped.status();
  QuotaTable* t = *mapped;
  int slot;
  {
    RobustLock lock(&t->mu);
    slot = JoinLocked(t);
  }
  if (slot < 0) {
    munmap(t, sizeof(QuotaTable));
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("more than {} sessions share this slice: close some first", kMaxMembers));
  }
  return std::unique_ptr<SliceQuota>(new SliceQuota(t, slot, true));
}

std::unique_ptr<SliceQuota> SliceQuota::Private(uint64_t limit_bytes) {
  auto* t = new QuotaTable{};
  InitTable(t, limit_bytes);
  RobustLock lock(&t->mu);
  return std::unique_ptr<SliceQuota>(new SliceQuota(t, JoinLocked(t), false));
}

SliceQuota::~SliceQuota() {
  {
    RobustLock lock(&table_->mu);
    QuotaTable::Member& m = table_->members[slot_];
    m.used = 0;
    m.pid = 0;
    pthread_mutex_unlock(&m.life);
  }
  if (shared_) {
    munmap(table_, sizeof(QuotaTable));
  } else {
    delete table_;
  }
}

bool SliceQuota::Take(uint64_t bytes) {
  RobustLock lock(&table_->mu);
  uint64_t used = UsedLocked(table_, slot_, false);
  if (bytes > table_->limit - std::min(table_->limit, used)) {
    used = UsedLocked(table_, slot_, true);  // Members that died gave their bytes back.
    if (bytes > table_->limit - std::min(table_->limit, used)) return false;
  }
  table_->members[slot_].used += bytes;
  return true;
}

void SliceQuota::Give(uint64_t bytes) {
  RobustLock lock(&table_->mu);
  QuotaTable::Member& m = table_->members[slot_];
  m.used -= std::min(m.used, bytes);
}

void SliceQuota::GiveAll() {
  RobustLock lock(&table_->mu);
  table_->members[slot_].used = 0;
}

uint64_t SliceQuota::limit() const { return table_->limit; }

uint64_t SliceQuota::used() const {
  RobustLock lock(&table_->mu);
  return UsedLocked(table_, slot_, true);  // Dead members' bytes never count: callers decide by this figure.
}

uint64_t SliceQuota::mine() const {
  RobustLock lock(&table_->mu);
  return table_->members[slot_].used;
}

}  // namespace gpupool::backend
