// First-fit placement of ranges in one address space (a device arena, a GPU address window): free ranges are
// kept sorted and coalesced. Thread safety: none; callers lock.
#ifndef GPUPOOL_CORE_RANGE_ALLOCATOR_H_
#define GPUPOOL_CORE_RANGE_ALLOCATOR_H_

#include <cstdint>
#include <iterator>
#include <map>

namespace gpupool {

class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t size = 0) { Reset(size); }

  // Everything free again.
  void Reset(uint64_t size) {
    free_.clear();
    if (size) free_[0] = size;
  }

  // Places `size` bytes at an offset that is a multiple of `align`; false when no free range holds them.
  bool Take(uint64_t size, uint64_t align, uint64_t* offset) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      uint64_t start = align <= 1 ? it->first : (it->first + align - 1) / align * align;
      if (start + size > it->first + it->second) continue;
      uint64_t block_start = it->first, block_end = it->first + it->second;
      free_.erase(it);
      if (start > block_start) free_[block_start] = start - block_start;
      if (start + size < block_end) free_[start + size] = block_end - start - size;
      *offset = start;
      return true;
    }
    return false;
  }

  // Takes exactly [offset, offset + size); false when any of it is taken already.
  bool TakeAt(uint64_t offset, uint64_t size) {
    auto it = free_.upper_bound(offset);
    if (it == free_.begin()) return false;
    --it;
    uint64_t block_start = it->first, block_end = it->first + it->second;
    if (size == 0 || offset + size < offset || offset + size > block_end) return false;
    free_.erase(it);
    if (offset > block_start) free_[block_start] = offset - block_start;
    if (offset + size < block_end) free_[offset + size] = block_end - offset - size;
    return true;
  }

  // Returns a range taken before, merging it with its free neighbours.
  void Give(uint64_t offset, uint64_t size) {
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + size == next->first) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return;
      }
    }
    free_[offset] = size;
  }

 private:
  std::map<uint64_t, uint64_t> free_;  // offset -> size
};

}  // namespace gpupool

#endif  // GPUPOOL_CORE_RANGE_ALLOCATOR_H_
