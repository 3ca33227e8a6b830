// The fake devices of the interposer's own tests (tests/interpose): devices that forward nothing, listed from
// GPUPOOL_FAKE_DEVICES. A test seam (core/test_seams.h): fake_devices.cc is built only with GPUPOOL_TEST_SEAMS, and
// only MakeDeviceProviderFromEnvironment (devices.cc) asks for the provider.
#ifndef GPUPOOL_INTERPOSE_FAKE_DEVICES_H_
#define GPUPOOL_INTERPOSE_FAKE_DEVICES_H_

#include <memory>
#include <string_view>
#include <vector>

#include "devices.h"
#include "gpupool/status.h"

namespace gpupool::interpose {

// The fake devices' provider when the seam's GPUPOOL_FAKE_DEVICES is set; null otherwise.
std::unique_ptr<DeviceProvider> MakeFakeDeviceProvider();

// Fake devices for tests, from a spec: a comma-separated list of groups "N[:SIZE]", e.g. "2:16GiB" (two devices
// of 16 GiB), "1:16GiB,1:8GiB", "1" (one device of 16 GiB), "0" (none). SIZE takes the units of ParseMemorySize.
// Every fake device is named "gpupool emulated GPU", compute capability 7.5, with the attributes of
// FakeDeviceAttributes(); device i gets a distinct UUID and PCI bus i+1.
Result<std::vector<DeviceInfo>> ParseFakeDevices(std::string_view spec);

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_FAKE_DEVICES_H_
