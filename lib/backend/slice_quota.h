// The memory quota of one slice of a lease, shared by every session that the lease's processes open on it.
//
// A lease's slice may be used by several processes at once: torchrun's ranks, torch.multiprocessing children,
// a program and the helpers it starts. Each process opens its own session (its own worker, context and address
// window), but the slice's memory belongs to the lease: together they may hold `-m`/`-p` worth of it, not each.
// The agent creates one quota table per (lease, device) (CreateSegment) and hands its descriptor to every worker
// of that slice; each worker joins it (Join) and takes and gives back bytes through it.
//
// A worker may die at any moment (SIGKILL, a crash): its memory died with it (the process held the device memory
// or the context), so its bytes go back to the quota as soon as another member finds it dead (a robust mutex
// each member holds for its whole life), before that member is ever refused for lack of room.
#ifndef GPUPOOL_BACKEND_SLICE_QUOTA_H_
#define GPUPOOL_BACKEND_SLICE_QUOTA_H_

#include <cstdint>
#include <memory>

#include "gpupool/status.h"

namespace gpupool::backend {

struct QuotaTable;  // The shared memory layout, internal to slice_quota.cc.

class SliceQuota {
 public:
  // Most sessions that may share one slice's quota at once.
  static constexpr int kMaxMembers = 64;

  // A new quota table of `limit_bytes` with no members, in anonymous shared memory: returns its descriptor
  // (close-on-exec; the agent passes it to each worker of the slice and closes it when the lease ends).
  static Result<int> CreateSegment(uint64_t limit_bytes);
  // Joins the table behind `fd`. Called on a thread that lives as long as the process: membership is held by it.
  static Result<std::unique_ptr<SliceQuota>> Join(int fd);
  // A quota of `limit_bytes` for one session alone (a session hosted without an agent, as in tests).
  static std::unique_ptr<SliceQuota> Private(uint64_t limit_bytes);
  ~SliceQuota();
  SliceQuota(const SliceQuota&) = delete;
  SliceQuota& operator=(const SliceQuota&) = delete;

  // Takes `bytes` for this member if they fit beside what all members hold; all or nothing.
  bool Take(uint64_t bytes);
  // Gives back `bytes` this member took. REQUIRES: at most what it holds.
  void Give(uint64_t bytes);
  // Gives back everything this member holds (its session was reset).
  void GiveAll();

  uint64_t limit() const;
  // Bytes held by all live members together, and by this member.
  uint64_t used() const;
  uint64_t mine() const;

 private:
  SliceQuota(QuotaTable* table, int slot, bool shared) : table_(table), slot_(slot), shared_(shared) {}

  QuotaTable* table_;
  int slot_;
  bool shared_;  // Mapped from a segment (unmapped at the end), or this process's own (deleted).
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_SLICE_QUOTA_H_
