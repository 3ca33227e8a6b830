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

// A session restored on another device keeps its addresses: allocations taken again at the same addresses (in any
// order), and a module's variables placed where they were, so that pointers held by the program and stored in
// device memory stay valid. What is taken already is refused, not overlapped.
TEST(DeviceMemory, AllocationsAndModuleVariablesCanBeRestoredAtTheirAddresses) {
  constexpr uint64_t kBase = 45ull << 40;  // A fixed window, free in this process, as a session's is.
  constexpr char kPtx[] = R"(
.version 7.0
.target sm_75
.address_size 64
.global .align 8 .b8 table[100000];
.global .align 4 .u32 counter = 7;
.visible .entry touch() { ret; }
)";
  uint64_t small = 0, large = 0, table = 0, counter = 0;
  std::vector<uint64_t> placements;
  {
    Device first(DeviceOptions{.memory_bytes = 64ull << 20, .base_address = kBase});
    ASSERT_TRUE(first.StartupStatus().ok()) << first.StartupStatus().message();
    ASSERT_TRUE(first.Malloc(1000, &small).ok());
    Module* module = nullptr;
    ASSERT_TRUE(first.LoadModule(kPtx, sizeof(kPtx), &module).ok());
    ASSERT_TRUE(first.Malloc(5 << 20, &large).ok());
    size_t bytes = 0;
    ASSERT_TRUE(first.GetGlobal(module, "table", &table, &bytes).ok());
    ASSERT_TRUE(first.GetGlobal(module, "counter", &counter, &bytes).ok());
    placements = first.ModulePlacements(module);
    ASSERT_EQ(placements.size(), 2u);
  }
  Device second(DeviceOptions{.memory_bytes = 64ull << 20, .base_address = kBase});
  ASSERT_TRUE(second.StartupStatus().ok()) << second.StartupStatus().message();
  // The large allocation first: restoring needs no particular order.
  ASSERT_TRUE(second.MallocAt(large, 5 << 20).ok());
  ASSERT_TRUE(second.MallocAt(small, 1000).ok());
  Module* module = nullptr;
  CallStatus loaded = second.LoadModuleAt(kPtx, sizeof(kPtx), placements, &module);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_EQ(second.ModulePlacements(module), placements);
  uint64_t table_again = 0, counter_again = 0;
  size_t bytes = 0;
  ASSERT_TRUE(second.GetGlobal(module, "table", &table_again, &bytes).ok());
  ASSERT_TRUE(second.GetGlobal(module, "counter", &counter_again, &bytes).ok());
  EXPECT_EQ(table_again, table);
  EXPECT_EQ(counter_again, counter);
  uint32_t value = 0;
  ASSERT_TRUE(second.CopyFromDevice(&value, counter_again, sizeof(value)).ok());
  EXPECT_EQ(value, 7u) << "the variable is initialised where it is placed";
  uint64_t free_bytes = 0, total = 0;
  second.MemInfo(&free_bytes, &total);
  EXPECT_EQ(total - free_bytes, 1024u + (5u << 20) + second.ModuleBytes()) << "restored memory is counted";

  // Taken ranges, ranges outside the device's memory and a module that places other variables are refused.
  CallStatus inside = second.MallocAt(small + 256, 16);
  EXPECT_EQ(inside.code(), cu::kInvalidValue) << "inside the restored allocation: " << inside.message();
  EXPECT_EQ(second.MallocAt(kBase - 4096, 16).code(), cu::kInvalidValue) << "below the device's memory";
  EXPECT_EQ(second.MallocAt(kBase + 1, 16).code(), cu::kInvalidValue) << "not aligned as allocations are";
  Module* twice = nullptr;
  EXPECT_EQ(second.LoadModuleAt(kPtx, sizeof(kPtx), placements, &twice).code(), cu::kInvalidValue)
      << "the variables' places are taken";
  EXPECT_EQ(second.LoadModuleAt(kPtx, sizeof(kPtx), {placements[0]}, &twice).code(), cu::kInvalidValue)
      << "a placement short";
  uint64_t free_after = 0;
  second.MemInfo(&free_after, &total);
  EXPECT_EQ(free_after, free_bytes) << "a refused restore leaves nothing behind";
}

}  // namespace
}  // namespace gpupool::emu
