// Process-shared tables in anonymous shared memory, for the agent and its session workers: a memfd the agent
// creates and hands to each worker, mapped by all of them; robust mutexes, so that a worker killed while it holds
// one (SIGKILL mid-call) leaves the table usable. Used by the device turns table (device_turns.h) and the slice
// quota (slice_quota.h).
#ifndef GPUPOOL_BACKEND_SHARED_SEGMENT_H_
#define GPUPOOL_BACKEND_SHARED_SEGMENT_H_

#include <pthread.h>

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "gpupool/status.h"

namespace gpupool::backend {

// A new memfd of `bytes` zero bytes named `name` (close-on-exec).
Result<int> CreateSharedSegment(const char* name, size_t bytes);
// Maps the segment behind `fd` read-write; fails unless it holds at least `bytes`. `what` names it in errors.
Result<void*> MapSharedSegment(int fd, size_t bytes, const char* what);
// Maps the segment behind `fd` as a table of type T (a struct whose field `magic` says what it is): fails, unmapped
// again, unless it holds a whole T with `magic` there. `what` names the table in errors, as MapSharedSegment's.
template <typename T>
Result<T*> MapSharedTable(int fd, uint64_t magic, const char* what) {
  auto p = MapSharedSegment(fd, sizeof(T), what);
  if (!p.ok()) return p.status();
  auto* table = static_cast<T*>(*p);
  if (table->magic != magic) {
    munmap(table, sizeof(T));
    return Status(StatusCode::kInvalidArgument, std::string("the ") + what + " descriptor is not a " + what);
  }
  return table;
}

// A new segment of `bytes` whose table `init` lays out (mapped for it, unmapped after): returns its descriptor.
Result<int> CreateSharedTable(const char* name, size_t bytes, const char* what,
                              const std::function<void(void*)>& init);

// Initialises a process-shared robust mutex in shared memory.
void InitRobustMutex(pthread_mutex_t* m);
// Locks a robust mutex. A holder that died left fields that are each consistent on their own (the tables use
// plain stores only), so the mutex is made consistent and taken over.
void LockRobustMutex(pthread_mutex_t* m);

// Whether the member that locks `life` for its whole life still lives (EBUSY on a try). A mutex that could be
// taken (the member died, or left without unlocking) is released again: the slot is free.
bool MemberLives(pthread_mutex_t* life);

// Holds a robust mutex for a scope.
class RobustLock {
 public:
  explicit RobustLock(pthread_mutex_t* m) : m_(m) { LockRobustMutex(m_); }
  ~RobustLock() { pthread_mutex_unlock(m_); }
  RobustLock(const RobustLock&) = delete;
  RobustLock& operator=(const RobustLock&) = delete;

 private:
  pthread_mutex_t* m_;
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_SHARED_SEGMENT_H_
