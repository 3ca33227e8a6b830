// Where the interposer's devices come from.
//
// At cuInit the interposer asks a DeviceProvider, once, for the devices this process may use, and caches them:
// every device query (cuDeviceGetAttribute and friends) is answered from that cache, because cudart asks ~110
// attributes per device at init and never again (shared/design/CUDA-NOTES.md). The provider attaches the slices of a
// lease (gp-run's environment, GPUPOOL_REQUEST, or a private agent's) and fills that structure from the agents in one
// round trip; the interposer's own tests may fake devices instead (fake_devices.h, a test seam).
#ifndef GPUPOOL_INTERPOSE_DEVICES_H_
#define GPUPOOL_INTERPOSE_DEVICES_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "client/session_client.h"
#include "gpupool/lease.h"
#include "gpupool/status.h"

namespace gpupool::interpose {

// What the interposer knows about one device (one slice, for the real provider). The fields are the ones that
// must agree with each other wherever the driver API exposes them twice: the compute capability and PCI location
// are also attributes, and the integrity check hashes UUID and PCI location, so cudart fails init if an attribute
// disagrees with these fields. The device registry writes these fields over the matching attributes.
struct DeviceInfo {
  std::string name;                // cuDeviceGetName; the real GPU's name for a slice.
  uint64_t total_memory = 0;       // Bytes; the slice's memory, not the card's.
  std::array<uint8_t, 16> uuid{};  // cuDeviceGetUuid; unique per device within the process.
  int pci_domain = 0;              // PCI location: cuDeviceGetPCIBusId, PCI_*_ID attributes.
  int pci_bus = 0;
  int pci_device = 0;
  int cc_major = 0;  // Compute capability.
  int cc_minor = 0;
  // CUdevice_attribute -> value. An attribute absent from the map reads as 0.
  std::map<int, int> attributes;
  bool emulated = false;  // An emulated device: it runs PTX only.
};

// Source of the device list. Implementations need not be thread-safe: ListDevices is called once, under the
// interposer's init lock.
class DeviceProvider {
 public:
  virtual ~DeviceProvider() = default;

  // The devices, ordinal 0..N-1. An empty list is not an error. A failure carries a one-line message meant for
  // the user ("GPUPOOL_REQUEST='...': ...").
  virtual Result<std::vector<DeviceInfo>> ListDevices() = 0;

  // Says, in one line, why there are no devices; shown when ListDevices returned none.
  virtual std::string NoDeviceHint() const = 0;

  // The sessions behind the listed devices (device i = element i), handed over once after ListDevices; empty for
  // fake devices. The provider itself stays alive for the process: it owns the lease (and a private agent).
  virtual std::vector<std::unique_ptr<internal::RemoteSession>> TakeSessions() { return {}; }

  // The lease this provider allocated from the pool for the process (GPUPOOL_REQUEST), or nullptr when it holds
  // none of its own: gp-run's lease (GPUPOOL_LEASE) is gp-run's to release. Lives as long as the provider.
  virtual Lease* OwnedLease() { return nullptr; }
};

// Has `lease` released when this process exits normally (main returns, exit()), after cudart's teardown and every
// other exit handler and static destructor of the program (devices.cc says why that order, and how); never by a
// child this process forked, and not at all when the process is killed: then its agents free the lease when its
// TTL passes. REQUIRES: `lease` lives until the process ends (the driver never destroys its provider); called at
// most once, once the slices are attached.
void ReleaseAtExit(Lease* lease);

// The provider for this process, chosen from the environment, first match wins:
//   GPUPOOL_LEASE         the lease gp-run hands over (a gpupool::Lease token): attach its slices;
//   GPUPOOL_REQUEST       gp-run's options ("-n 2 -p 0.5 --class x --same-server --spread --wait 10s -m 6GiB
//                         --servers a,b"): allocate a lease from the pool at cuInit, held for the process and
//                         released when it exits (ReleaseAtExit);
//   GPUPOOL_FAKE_DEVICES  fake devices for the interposer's own tests (nothing is forwarded), in a build with the
//                         test seams alone (core/test_seams.h);
//   otherwise             a private gp-agent (found beside this library) with one slice.
std::unique_ptr<DeviceProvider> MakeDeviceProviderFromEnvironment();

// The devices CUDA_VISIBLE_DEVICES lets the process see, as the real driver reads it: indices into `devices` in
// the order listed, from a comma-separated list of ordinals ("1,0") or UUIDs ("GPU-8f3a...", any unique prefix of
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"). The list ends at the first entry that names no device, names one
// already listed, or is malformed: the devices before it stay visible. An empty value hides every device; a null
// `value` (unset) shows them all.
std::vector<size_t> VisibleDevices(const char* value, const std::vector<DeviceInfo>& devices);

// The driver's UUID string of a device: "GPU-" and the 16 bytes as 8-4-4-4-12 hex digits.
std::string UuidString(const DeviceInfo& device);

// `s` without the blanks (spaces and tabs) around it: for the entries of comma-separated lists.
std::string_view Trim(std::string_view s);

// A fake device stands for an emulated device of gp-agent's default capability, and reports its attributes.
inline constexpr int kFakeCcMajor = 7, kFakeCcMinor = 5;

// The attributes of an emulated device of compute capability 7.5 (emu/device_attributes.h: a Tesla T4's limits,
// 0 for what the emulated device does not offer): the fake devices', and those of a slice whose agent sends none.
std::map<int, int> FakeDeviceAttributes();

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_DEVICES_H_
