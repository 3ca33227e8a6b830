// The directory's entries and specs: what an agent publishes decodes to what placement needs, and whatever else is
// under the prefix (anybody with write access to etcd can put it there) is refused with a reason.
#include "client/directory.h"

#include <gtest/gtest.h>

#include <capnp/message.h>

namespace gpupool::internal {
namespace {

std::string SampleEntry(const std::string& address = "10.0.0.5:7450", uint32_t devices = 2) {
  capnp::MallocMessageBuilder message;
  auto e = message.initRoot<wire::DirectoryEntry>();
  e.setFormat(1);
  e.setName("gpu-a");
  e.setInstanceId("abc");
  e.setAddress(address);
  e.setLeases(3);
  auto list = e.initDevices(devices);
  for (uint32_t i = 0; i < devices; ++i) {
    list[i].setIndex(i);
    list[i].setModel("NVIDIA A100");
    list[i].setDeviceClass("a100");
    list[i].setMemoryTotal(40ull << 30);
    list[i].setMemoryAllocated(i == 1 ? 10ull << 30 : 0);
    list[i].setShareAllocatedMicros(i == 1 ? 250000 : 0);
    list[i].setCordoned(i == 0);
  }
  return EncodeDirectoryEntry(e.asReader());
}

TEST(DirectoryEntry, RoundTripsWhatPlacementNeeds) {
  auto info = DecodeDirectoryEntry(SampleEntry());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->up);
  EXPECT_TRUE(info->summary);
  EXPECT_EQ(info->name, "gpu-a");
  EXPECT_EQ(info->address, "10.0.0.5:7450");
  EXPECT_EQ(info->lease_count, 3u);
  ASSERT_EQ(info->devices.size(), 2u);
  EXPECT_TRUE(info->devices[0].cordoned);
  EXPECT_TRUE(info->devices[0].whole_free());
  EXPECT_EQ(info->devices[1].memory_allocated, 10ull << 30);
  EXPECT_DOUBLE_EQ(info->devices[1].compute_allocated, 0.25);
  EXPECT_FALSE(info->devices[1].whole_free());
  EXPECT_EQ(info->devices[1].device_class, "a100");
}

TEST(DirectoryEntry, RefusesWhatNoAgentWrites) {
  const std::string ok = SampleEntry();
  for (const auto& [entry, says] : std::vector<std::pair<std::string, std::string>>{
           {"{not json", "not an entry"},
           {"", "not an entry"},
           {R"({"format":2,"address":"a:1"})", "format 2"},
           {R"({"format":1})", "its address"},
           {R"({"format":1,"address":"no port"})", "its address"},
           {R"({"format":1,"address":"a:1","name":"x\u0001y"})", "control characters"},
           {R"({"format":1,"address":"a:1","devices":[{"index":1}]})", "out of order"},
           {R"({"format":1,"address":"a:1","devices":"nope"})", "not an entry"},
           {std::string(70000, ' '), "more than an entry holds"},
       }) {
    auto info = DecodeDirectoryEntry(entry);
    ASSERT_FALSE(info.ok()) << entry.substr(0, 80);
    EXPECT_NE(info.status().message().find(says), std::string::npos) << info.status().message();
  }
  // Counts past a device's size are clamped, never trusted to wrap placement's arithmetic.
  auto big = DecodeDirectoryEntry(
      R"({"format":1,"address":"a:1","devices":[{"memoryTotal":"100","memoryAllocated":"999","shareAllocatedMicros":4000000}]})");
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->devices[0].memory_allocated, 100u);
  EXPECT_DOUBLE_EQ(big->devices[0].compute_allocated, 1.0);
}

TEST(DirectorySpec, NamesEtcdEndpoints) {
  EtcdConfig config;
  ASSERT_TRUE(ParseDirectorySpec("etcd:http://a:2379, https://b:2380/", &config).ok());
  EXPECT_EQ(config.endpoints, (std::vector<std::string>{"http://a:2379", "https://b:2380"}));
  for (const char* bad : {"etcd:", "consul:http://a:1", "etcd:a:2379", "etcd:http://a", "etcd:ftp://a:1",
                          "etcd:http://a:0", "etcd:http://u@a:1", "etcd:http://a:1/v3"}) {
    EXPECT_FALSE(ParseDirectorySpec(bad, &config).ok()) << bad;
  }
  EXPECT_TRUE(CheckDirectoryPrefix("/gpupool", "t").ok());
  for (const char* bad : {"gpupool", "/", "/a/", "/a b", ""}) EXPECT_FALSE(CheckDirectoryPrefix(bad, "t").ok()) << bad;
}

}  // namespace
}  // namespace gpupool::internal
