// GPUPOOL_FAKE_DEVICES parsing and the fake devices' properties (lib/interpose/devices.h).
#include "devices.h"
#include "fake_devices.h"

#include <gtest/gtest.h>

#include <set>

#include "api.h"

namespace gpupool::interpose {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(FakeDevices, CountAndSize) {
  Result<std::vector<DeviceInfo>> devices = ParseFakeDevices("2:16GiB");
  ASSERT_TRUE(devices.ok()) << devices.status().message();
  ASSERT_EQ(devices->size(), 2u);
  for (const DeviceInfo& d : *devices) {
    EXPECT_EQ(d.name, "gpupool emulated GPU");
    EXPECT_EQ(d.total_memory, 16 * kGiB);
    EXPECT_EQ(d.cc_major, 7);
    EXPECT_EQ(d.cc_minor, 5);
  }
}

TEST(FakeDevices, DefaultSizeAndGroups) {
  Result<std::vector<DeviceInfo>> one = ParseFakeDevices("1");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].total_memory, 16 * kGiB);

  Result<std::vector<DeviceInfo>> mixed = ParseFakeDevices("1:16GiB, 2:512MiB");
  ASSERT_TRUE(mixed.ok()) << mixed.status().message();
  ASSERT_EQ(mixed->size(), 3u);
  EXPECT_EQ((*mixed)[0].total_memory, 16 * kGiB);
  EXPECT_EQ((*mixed)[1].total_memory, 512u << 20);
  EXPECT_EQ((*mixed)[2].total_memory, 512u << 20);
}

TEST(FakeDevices, ZeroIsNoDevice) {
  Result<std::vector<DeviceInfo>> none = ParseFakeDevices("0");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(FakeDevices, DistinctUuidsAndPciLocations) {
  Result<std::vector<DeviceInfo>> devices = ParseFakeDevices("4");
  ASSERT_TRUE(devices.ok());
  std::set<std::array<uint8_t, 16>> uuids;
  std::set<int> buses;
  for (const DeviceInfo& d : *devices) {
    uuids.insert(d.uuid);
    buses.insert(d.pci_bus);
  }
  EXPECT_EQ(uuids.size(), 4u);
  EXPECT_EQ(buses, (std::set<int>{1, 2, 3, 4}));
}

TEST(FakeDevices, RejectsMalformedSpecs) {
  for (const char* spec : {"", " ", "x", "-1", "2:", "2:0", "2:lots", "2:16GiB,", ",1", "1.5", "65", "40,40"}) {
    Result<std::vector<DeviceInfo>> devices = ParseFakeDevices(spec);
    EXPECT_FALSE(devices.ok()) << "'" << spec << "' was accepted";
    if (!devices.ok()) {
      EXPECT_NE(devices.status().message().find("GPUPOOL_FAKE_DEVICES"), std::string::npos);
    }
  }
}

TEST(FakeDevices, RealisticAttributes) {
  const std::map<int, int> a = FakeDeviceAttributes();
  EXPECT_EQ(a.at(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  EXPECT_EQ(a.at(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
  EXPECT_EQ(a.at(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 40);
  EXPECT_EQ(a.at(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK), 48 * 1024);
  EXPECT_EQ(a.at(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), 64 * 1024);
  EXPECT_GT(a.at(CU_DEVICE_ATTRIBUTE_CLOCK_RATE), 0);
  EXPECT_GT(a.at(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE), 0);
  EXPECT_EQ(a.at(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY), 0);
  for (const auto& [attribute, value] : a) {
    EXPECT_GT(attribute, 0);
    EXPECT_LT(attribute, CU_DEVICE_ATTRIBUTE_MAX);
  }
}

std::vector<DeviceInfo> ThreeDevices() {
  auto devices = ParseFakeDevices("3:1GiB");
  EXPECT_TRUE(devices.ok());
  return std::move(devices).value();
}

TEST(VisibleDevices, UnsetShowsAllEmptyShowsNone) {
  auto d = ThreeDevices();
  EXPECT_EQ(VisibleDevices(nullptr, d), (std::vector<size_t>{0, 1, 2}));
  EXPECT_TRUE(VisibleDevices("", d).empty());
}

TEST(VisibleDevices, OrdinalsPickAndOrder) {
  auto d = ThreeDevices();
  EXPECT_EQ(VisibleDevices("2,0", d), (std::vector<size_t>{2, 0}));
  EXPECT_EQ(VisibleDevices(" 1 , 2 ", d), (std::vector<size_t>{1, 2}));
}

TEST(VisibleDevices, TheListEndsAtTheFirstEntryThatNamesNoDevice) {
  auto d = ThreeDevices();
  EXPECT_EQ(VisibleDevices("1,5,0", d), (std::vector<size_t>{1}));    // Out of range.
  EXPECT_EQ(VisibleDevices("0,x,2", d), (std::vector<size_t>{0}));    // Malformed.
  EXPECT_EQ(VisibleDevices("2,2,0", d), (std::vector<size_t>{2}));    // Repeated.
  EXPECT_EQ(VisibleDevices("-1,0", d), (std::vector<size_t>{}));      // Negative.
  EXPECT_EQ(VisibleDevices("1x", d), (std::vector<size_t>{}));
}

TEST(VisibleDevices, UuidsAndUniquePrefixes) {
  auto d = ThreeDevices();
  std::string u1 = UuidString(d[1]), u2 = UuidString(d[2]);
  ASSERT_EQ(u1.size(), 40u);
  ASSERT_EQ(u1.rfind("GPU-", 0), 0u);
  EXPECT_EQ(VisibleDevices((u2 + "," + u1).c_str(), d), (std::vector<size_t>{2, 1}));
  // The shortest prefix that tells device 1 from the others.
  size_t n = 5;
  while (n < u1.size() && (UuidString(d[0]).compare(0, n, u1, 0, n) == 0 || u2.compare(0, n, u1, 0, n) == 0)) ++n;
  EXPECT_EQ(VisibleDevices(u1.substr(0, n).c_str(), d), (std::vector<size_t>{1}));
  EXPECT_TRUE(VisibleDevices("GPU-", d).empty()) << "a prefix that fits every device names none";
  EXPECT_TRUE(VisibleDevices("GPU-zzzz", d).empty());
}

}  // namespace
}  // namespace gpupool::interpose
