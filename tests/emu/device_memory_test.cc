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

// A module's variables are device memory: counted as used, reported by ModuleBytes (a session server charges them
// to the slice's quota), and given back when the module is unloaded.
TEST(DeviceMemory, ModuleVariablesAreCountedUntilTheModuleIsUnloaded) {
  Device device(DeviceOptions{.memory_bytes = 64ull << 20});
  ASSERT_TRUE(device.StartupStatus().ok());
  constexpr char kPtx[] = R"(
.version 7.0
.target sm_75
.address_size 64
.global .align 4 .b8 table[3000000];
.visible .entry touch() { ret; }
)";
  uint64_t free_before = 0, free_loaded = 0, free_after = 0, total = 0;
  device.MemInfo(&free_before, &total);
  Module* module = nullptr;
  ASSERT_TRUE(device.LoadPtx(kPtx, &module).ok());
  EXPECT_GE(device.ModuleBytes(), 3000000u);
  EXPECT_LT(device.ModuleBytes(), 3000000u + 4096);
  device.MemInfo(&free_loaded, &total);
  EXPECT_EQ(free_before - free_loaded, device.ModuleBytes());
  ASSERT_TRUE(device.UnloadModule(module).ok());
  EXPECT_EQ(device.ModuleBytes(), 0u);
  device.MemInfo(&free_after, &total);
  EXPECT_EQ(free_after, free_before);
}

// A device whose owner enforces the memory limit (a session server's quota) is not a second limit: it places what
// its arena holds, and refuses only what the arena cannot place, naming the arena.
TEST(DeviceMemory, ADeviceWhoseOwnerEnforcesTheLimitRefusesOnlyWhatItsArenaCannotPlace) {
  constexpr uint64_t kMemory = 16ull << 20;
  Device own(DeviceOptions{.memory_bytes = kMemory});
  Device owned(DeviceOptions{.memory_bytes = kMemory, .enforce_capacity = false});
  ASSERT_TRUE(own.StartupStatus().ok());
  ASSERT_TRUE(owned.StartupStatus().ok());
  uint64_t a = 0, b = 0;
  EXPECT_EQ(own.Malloc(kMemory + (1 << 20), &a).code(), cu::kOutOfMemory);
  ASSERT_TRUE(owned.Malloc(kMemory + (1 << 20), &b).ok()) << "the owner's quota, not the device, decides";
  ASSERT_TRUE(owned.Free(b).ok());
  CallStatus beyond = owned.Malloc(4 * kMemory, &b);
  EXPECT_EQ(beyond.code(), cu::kOutOfMemory);
  EXPECT_NE(beyond.message().find("bytes free of"), std::string::npos) << beyond.message();
}

}  // namespace
}  // namespace gpupool::emu
