// The "integrity check" of private export table d4082055 (slot 1), which cudart calls at init.
//
// cudart passes (version, unix_seconds, uint64_t out[2]). For versions ending in 0 and 1 the driver answers fixed
// constants. For the others (13002 with CUDA 13.0) it answers a keyed hash, which cudart recomputes from what it
// knows and compares; a mismatch fails init with "integrity checks failed" (error 103). The hash is HMAC over
// MD2 (RFC 1319, 16-byte blocks) with a fixed 16-byte key, of a message that binds the answer to this process
// and this driver:
//
//   uint32 reported driver version, uint32 requested version, uint32 pid, uint32 calling thread (pthread_self,
//   truncated), address of the cudart-interface table, address of the integrity table, address of the check
//   function, uint64 unix_seconds (native byte order, 48 bytes), then per device in ordinal order: its 16-byte
//   UUID and int32 PCI domain, bus and device (28 bytes each).
//
// Every input must agree with what the driver reports elsewhere: the version from cuDriverGetVersion, the UUIDs
// from cuDeviceGetUuid, the PCI ids from cuDeviceGetAttribute, and the table addresses from cuGetExportTable.
#ifndef GPUPOOL_INTERPOSE_INTEGRITY_H_
#define GPUPOOL_INTERPOSE_INTEGRITY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpupool::interpose {

// MD2 message digest (RFC 1319). Not for security: it is what the protocol above uses.
class Md2 {
 public:
  void Update(const void* data, size_t size);
  // The 16-byte digest. The object must not be used afterwards.
  std::array<uint8_t, 16> Finish();

 private:
  void ProcessBlock(const uint8_t* block, bool update_checksum);

  uint8_t state_[48] = {};
  uint8_t checksum_[16] = {};
  uint8_t last_checksum_byte_ = 0;
  uint8_t buffer_[16] = {};
  size_t buffered_ = 0;
};

// HMAC (RFC 2104) over MD2 with a 16-byte key (MD2's block size, so the key is used as is).
std::array<uint8_t, 16> HmacMd2(const std::array<uint8_t, 16>& key, const std::vector<uint8_t>& message);

struct IntegrityDevice {
  std::array<uint8_t, 16> uuid{};
  int32_t pci_domain = 0;
  int32_t pci_bus = 0;
  int32_t pci_device = 0;
};

struct IntegrityInputs {
  uint32_t driver_version = 0;
  uint32_t version = 0;  // What cudart asked for.
  uint32_t pid = 0;
  uint32_t thread = 0;
  const void* cudart_table = nullptr;
  const void* integrity_table = nullptr;
  const void* check_function = nullptr;
  uint64_t unix_seconds = 0;
  std::vector<IntegrityDevice> devices;
};

// The two words the check function writes to out[0], out[1].
std::array<uint64_t, 2> IntegrityHash(const IntegrityInputs& in);

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_INTEGRITY_H_
