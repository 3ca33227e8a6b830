// Address-space helpers shared by the client (its slices' windows) and the emulator (its arena and reservations).
// Header-only: the emulator links none of core's sources.
#ifndef GPUPOOL_CORE_MAPPING_H_
#define GPUPOOL_CORE_MAPPING_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace gpupool {

// Maps `bytes` of private anonymous memory (nothing committed until touched) with `prot` at exactly `at`; nullptr
// where any of that range is mapped already, or where the kernel would map it elsewhere (kernels before 4.17 ignore
// MAP_FIXED_NOREPLACE and take it as a hint).
inline void* MapAnonymousAt(uint64_t at, size_t bytes, int prot) {
  void* want = reinterpret_cast<void*>(at);
  void* p = mmap(want, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (p != want) {
    munmap(p, bytes);
    return nullptr;
  }
  return p;
}

// As MapAnonymousAt, but `bytes` of the shared memory file `fd` from its start, which may be mapped by another
// process too (a session's memory handed from one worker to the next).
inline void* MapSharedAt(uint64_t at, size_t bytes, int prot, int fd) {
  void* want = reinterpret_cast<void*>(at);
  void* p = mmap(want, bytes, prot, MAP_SHARED | MAP_NORESERVE | MAP_FIXED_NOREPLACE, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  if (p != want) {
    munmap(p, bytes);
    return nullptr;
  }
  return p;
}

}  // namespace gpupool

#endif  // GPUPOOL_CORE_MAPPING_H_
