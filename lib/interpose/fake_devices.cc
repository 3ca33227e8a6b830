// The fake devices of the interposer's own tests (GPUPOOL_FAKE_DEVICES), behind the test seam (core/test_seams.h):
// built into libcuda.so.1 only with GPUPOOL_TEST_SEAMS.
#include "fake_devices.h"

#include <fmt/format.h>

#include <charconv>
#include <string>

#include "api.h"
#include "core/test_seams.h"
#include "gpupool/units.h"

namespace gpupool::interpose {
namespace {

using test_seams::kFakeDevicesVariable;
constexpr uint64_t kDefaultFakeMemory = uint64_t{16} << 30;
// More than any machine has; a typo such as "20000" should not allocate 20000 device records.
constexpr int kMaxFakeDevices = 64;

class FakeDeviceProvider : public DeviceProvider {
 public:
  explicit FakeDeviceProvider(std::string spec) : spec_(std::move(spec)) {}

  Result<std::vector<DeviceInfo>> ListDevices() override { return ParseFakeDevices(spec_); }

  std::string NoDeviceHint() const override {
    return fmt::format("no GPU attached: {}={} declares no device", kFakeDevicesVariable, spec_);
  }

 private:
  std::string spec_;
};

Status SpecError(std::string_view spec, std::string_view why) {
  return Status(StatusCode::kInvalidArgument,
                fmt::format("{}='{}' is malformed: {} (expected N[:SIZE][,N[:SIZE]...], e.g. 2:16GiB)",
                            kFakeDevicesVariable, spec, why));
}

DeviceInfo MakeFakeDevice(int ordinal, uint64_t memory) {
  DeviceInfo d;
  d.name = "gpupool emulated GPU";
  d.total_memory = memory;
  // A version-4-style UUID with a fixed prefix ("gpupool" in ASCII) and the ordinal: stable across runs, distinct
  // per device, and recognisable in logs.
  d.uuid = {'g', 'p', 'u', 'p', 'o', 'o', 'l', 0x40, 0x80, 0, 0, 0, 0, 0, 0, 0};
  d.uuid[12] = static_cast<uint8_t>(ordinal >> 24);
  d.uuid[13] = static_cast<uint8_t>(ordinal >> 16);
  d.uuid[14] = static_cast<uint8_t>(ordinal >> 8);
  d.uuid[15] = static_cast<uint8_t>(ordinal);
  d.pci_domain = 0;
  d.pci_bus = ordinal + 1;
  d.pci_device = 0;
  d.cc_major = kFakeCcMajor;
  d.cc_minor = kFakeCcMinor;
  d.attributes = FakeDeviceAttributes();
  d.attributes[CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID] = ordinal;
  return d;
}

}  // namespace

std::unique_ptr<DeviceProvider> MakeFakeDeviceProvider() {
  const char* spec = test_seams::FakeDevices();
  if (spec == nullptr) return nullptr;
  return std::make_unique<FakeDeviceProvider>(spec);
}

Result<std::vector<DeviceInfo>> ParseFakeDevices(std::string_view spec) {
  std::vector<DeviceInfo> devices;
  std::string_view rest = spec;
  if (Trim(rest).empty()) return SpecError(spec, "empty");
  while (true) {
    size_t comma = rest.find(',');
    std::string_view group = Trim(rest.substr(0, comma));
    std::string_view count_text = group;
    uint64_t memory = kDefaultFakeMemory;
    if (size_t colon = group.find(':'); colon != std::string_view::npos) {
      count_text = Trim(group.substr(0, colon));
      Result<uint64_t> size = ParseMemorySize(Trim(group.substr(colon + 1)));
      if (!size.ok()) return SpecError(spec, size.status().message());
      if (*size == 0) return SpecError(spec, "a device needs more than 0 bytes of memory");
      memory = *size;
    }
    int count = -1;
    auto [end, ec] = std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    if (ec != std::errc() || end != count_text.data() + count_text.size() || count < 0) {
      return SpecError(spec, fmt::format("'{}' is not a device count", count_text));
    }
    if (devices.size() + count > kMaxFakeDevices) {
      return SpecError(spec, fmt::format("more than {} devices", kMaxFakeDevices));
    }
    for (int i = 0; i < count; ++i) devices.push_back(MakeFakeDevice(static_cast<int>(devices.size()), memory));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return devices;
}

}  // namespace gpupool::interpose
