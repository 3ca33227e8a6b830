// Plain C++ values of the session protocol, shared by the client (lib/client), the session server and the device
// backends (lib/backend): no Cap'n Proto type appears here, so a backend never sees the wire. The calls themselves
// are declared once in lib/schema/session_calls.h; their outcome is a CallStatus (lib/core/call_status.h).
#ifndef GPUPOOL_CORE_SESSION_TYPES_H_
#define GPUPOOL_CORE_SESSION_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/call_status.h"

namespace gpupool::session {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t Volume() const { return uint64_t{x} * y * z; }
};

// Where a kernel parameter lies in the packed parameter buffer.
struct KernelParam {
  uint32_t offset = 0, size = 0;
};

// Bytes that belong to someone else (a message, the caller): valid only as long as the owner says.
struct ByteView {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Bytes a call writes into its own reply. The server sets `reserve`, which sizes the reply's buffer and returns
// where to write (reserve(0) empties it again); the client reads `data`/`size`, a view into the reply.
struct ReplyBytes {
  std::function<uint8_t*(size_t)> reserve;
  // Where the server may instead answer bytes that stay where they are until the reply is written (null: it may not).
  std::function<void(const uint8_t*, size_t)> refer;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// A slice as its client sees it: the GPU's identity and attributes, with the slice's memory as total memory.
struct DeviceInfo {
  std::string name;
  uint64_t total_memory = 0;
  int cc_major = 0, cc_minor = 0;
  uint8_t uuid[16] = {};
  int pci_domain = 0, pci_bus = 0, pci_device = 0;
  std::map<int, int> attributes;  // CUdevice_attribute -> value, every attribute the backend knows.
  bool emulated = false;
};

// Session-local handle numbers as the client holds them. Distinct types, so that a stream number can never be
// passed where an event number is expected. 0 is never a handle; as a stream it is the default stream.
template <typename Tag>
struct Id {
  uint64_t value = 0;
};
using StreamId = Id<struct StreamTag>;
using EventId = Id<struct EventTag>;
using ModuleId = Id<struct ModuleTag>;
using FunctionId = Id<struct FunctionTag>;
using PhysicalId = Id<struct PhysicalTag>;

// Virtual memory management (addressReserve, memCreate, memMap) works in units of this many bytes: sizes, offsets
// and addresses are multiples of it. What cuMemGetAllocationGranularity reports to programs.
constexpr uint64_t kMappingGranularity = 2ull << 20;

}  // namespace gpupool::session

#endif  // GPUPOOL_CORE_SESSION_TYPES_H_
