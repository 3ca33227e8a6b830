// Comparison helpers for the kernel tests: bit-exact array comparison that reports the first mismatches.
#ifndef GPUPOOL_TESTS_EMU_KERNEL_CHECK_H_
#define GPUPOOL_TESTS_EMU_KERNEL_CHECK_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace gpupool::emu::test {

template <typename T>
bool SameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
std::string Show(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_floating_point_v<T>) {
    os.precision(std::is_same_v<T, float> ? 9 : 17);
    os << v << " (" << std::hexfloat << v << ")";
  } else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char>) {
    os << static_cast<int>(v);
  } else {
    os << v << " (0x" << std::hex << +v << ")";
  }
  return os.str();
}

// Every element bit-identical; on failure lists up to 10 mismatches with their index and what they depend on.
template <typename T>
::testing::AssertionResult ArraysEqual(const std::vector<T>& got, const std::vector<T>& want,
                                       const std::string& what = "") {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  }
  size_t bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < got.size(); ++i) {
    if (SameBits(got[i], want[i])) continue;
    if (++bad <= 10) os << "\n  [" << i << "] got " << Show(got[i]) << ", want " << Show(want[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size() << " elements differ" << os.str();
}

}  // namespace gpupool::emu::test

#endif  // GPUPOOL_TESTS_EMU_KERNEL_CHECK_H_
