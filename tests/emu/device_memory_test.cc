// Device memory of the emulated GPU, without kernels: what one allocation's life does to its neighbours.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "emu/device.h"

namespace gpupool::emu {
namespace {

uint8_t Pattern(size_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 7) | 1; }

// Freeing a large allocation gives its pages back to the host, but only its own: allocations are 256-byte aligned,
// so a neighbour may start inside the freed allocation's last page (it used to read zeros there afterwards).
TEST(DeviceMemory, FreeingAnAllocationLeavesItsNeighboursBytesAlone) {
  for (uint64_t first_bytes : {(uint64_t{5} << 20) + 1, (uint64_t{3} << 20) + 4095, uint64_t{2} << 20}) {
    // A fresh device each time, so that the freed allocation starts on a page (its start, at least, is then freed).
    Device device(DeviceOptions{.memory_bytes = 64ull << 20});
    ASSERT_TRUE(device.StartupStatus().ok());
    uint64_t first = 0, after = 0;
    ASSERT_TRUE(device.Malloc(first_bytes, &first).ok());
    ASSERT_TRUE(device.Malloc(8192, &after).ok());
    std::vector<uint8_t> want(8192);
    for (size_t i = 0; i < want.size(); ++i) want[i] = Pattern(i);
    ASSERT_TRUE(device.CopyToDevice(after, want.data(), want.size()).ok());
    ASSERT_TRUE(device.Free(first).ok());

    std::vector<uint8_t> got(8192, 0);
    ASSERT_TRUE(device.CopyFromDevice(got.data(), after, got.size()).ok());
    EXPECT_EQ(got, want) << "the allocation after one of " << first_bytes << " bytes, once that was freed";
    ASSERT_TRUE(device.Free(after).ok());
  }
}

}  // namespace
}  // namespace gpupool::emu
