// Questions about non-overlapping address ranges kept in a std::map from start to a value that `size_of` turns
// into the range's length (virtual memory mappings: in the emulated device, the session server and the client).
// Ranges that follow each other without a gap count as one span, as a GPU's mappings do.
#ifndef GPUPOOL_CORE_RANGE_MAP_H_
#define GPUPOOL_CORE_RANGE_MAP_H_

#include <cstdint>
#include <iterator>
#include <map>

namespace gpupool {

// Whether [address, address + bytes) lies inside ranges that follow each other without a gap.
template <typename V, typename SizeOf>
bool InsideAdjacentRanges(const std::map<uint64_t, V>& ranges, uint64_t address, uint64_t bytes, SizeOf size_of) {
  if (address + bytes < address) return false;
  auto it = ranges.upper_bound(address);
  if (it == ranges.begin()) return false;
  --it;
  uint64_t end = it->first + size_of(it->second);
  if (address >= end) return false;
  while (end < address + bytes) {
    auto next = ranges.find(end);
    if (next == ranges.end()) return false;
    end += size_of(next->second);
  }
  return true;
}

// Whether any range overlaps [address, address + bytes).
template <typename V, typename SizeOf>
bool OverlapsAnyRange(const std::map<uint64_t, V>& ranges, uint64_t address, uint64_t bytes, SizeOf size_of) {
  auto next = ranges.lower_bound(address);
  if (next != ranges.end() && next->first < address + bytes) return true;
  return next != ranges.begin() && std::prev(next)->first + size_of(std::prev(next)->second) > address;
}

// The ranges that make up [address, address + bytes) exactly, whole and back to back, as [*first, *last); false
// when it is not such a run.
template <typename Map, typename SizeOf>
bool WholeRangesRun(Map& ranges, uint64_t address, uint64_t bytes, SizeOf size_of,
                    typename Map::iterator* first, typename Map::iterator* last) {
  auto it = ranges.find(address);
  *first = it;
  uint64_t end = address;
  while (it != ranges.end() && it->first == end && end - address < bytes) {
    end += size_of(it->second);
    ++it;
  }
  *last = it;
  return *first != ranges.end() && end - address == bytes;
}

}  // namespace gpupool

#endif  // GPUPOOL_CORE_RANGE_MAP_H_
