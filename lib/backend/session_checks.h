// Checks every session backend makes on what a client sends before anything reaches the device: sizes, device
// ranges and kernel parameter buffers. The agent never trusts its clients (shared/design/ARCHITECTURE.md, section
// 4): a bad argument gets CUDA_ERROR_INVALID_VALUE with a message naming what was wrong, never a crash, and never
// an access outside the session's own memory. Pure functions of their arguments, no state: thread-safe, and the
// same whether a session runs in the agent or in a worker process.
#ifndef GPUPOOL_BACKEND_SESSION_CHECKS_H_
#define GPUPOOL_BACKEND_SESSION_CHECKS_H_

#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace gpupool::backend {

// The most one copyFromDevice reply carries (clients cut larger copies into chunks of a few MiB).
constexpr uint64_t kMaxCopyBytes = 64ull << 20;

// No GPU maps more than 2^48 bytes (256 TiB) of virtual address space: a larger allocation request is not
// "out of memory" but nonsense, and sizes near 2^64 would overflow the backends' alignment arithmetic.
constexpr uint64_t kMaxAllocBytes = 1ull << 48;

// Whether [address, address + bytes) lies inside [base, base + size). Never overflows: address + bytes may
// exceed 2^64. An empty range must still start inside (or at the end of) the outer one.
inline bool RangeInside(uint64_t address, uint64_t bytes, uint64_t base, uint64_t size) {
  if (address < base) return false;
  uint64_t offset = address - base;
  return offset <= size && bytes <= size - offset;
}

// Whether [address, address + bytes) lies inside one of `ranges`, a map from a range's start to something
// `size_of` turns into its length (an allocation, a module variable). Ranges must not overlap.
template <typename Map, typename SizeOf>
bool InsideOneOf(const Map& ranges, uint64_t address, uint64_t bytes, SizeOf size_of) {
  auto it = ranges.upper_bound(address);
  if (it == ranges.begin()) return false;
  --it;
  return RangeInside(address, bytes, it->first, size_of(it->second));
}

// "device range 0x...+N" for error messages.
inline std::string DescribeRange(uint64_t address, uint64_t bytes) {
  return fmt::format("device range 0x{:x}+{}", address, bytes);
}

// The bytes a memset of `count` elements of `element_size` bytes touches; false (with `*error` set) when the
// element size is not 1, 2 or 4 or the product does not fit in 64 bits.
inline bool MemsetBytes(uint32_t element_size, uint64_t count, uint64_t* bytes, std::string* error) {
  if (element_size != 1 && element_size != 2 && element_size != 4) {
    *error = fmt::format("memset element size must be 1, 2 or 4 bytes, not {}", element_size);
    return false;
  }
  if (count > UINT64_MAX / element_size) {
    *error = fmt::format("memset of {} elements of {} bytes overflows", count, element_size);
    return false;
  }
  *bytes = count * element_size;
  return true;
}

// Whether a packed kernel parameter buffer of `buffer_bytes` holds every parameter of `params` (a range of
// objects with offset and size, as `offset_of`/`size_of` read them); `*error` says which one it cuts short.
template <typename Params, typename OffsetOf, typename SizeOf>
bool ParamsFit(const Params& params, uint64_t buffer_bytes, OffsetOf offset_of, SizeOf size_of, std::string* error) {
  size_t index = 0;
  for (const auto& p : params) {
    uint64_t offset = offset_of(p), size = size_of(p);
    if (!RangeInside(offset, size, 0, buffer_bytes)) {
      *error = fmt::format("kernel parameter {} (bytes {}..{}) lies beyond the {}-byte parameter buffer", index,
                           offset, offset + size, buffer_bytes);
      return false;
    }
    ++index;
  }
  return true;
}

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_SESSION_CHECKS_H_
