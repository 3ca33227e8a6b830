// Initialisation and device management: answered from the device list cached at cuInit (driver.h).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "api.h"
#include "core/log.h"
#include "driver.h"
#include "driver_newer.h"
#include "forward_spec.h"
#include "remote.h"
#include "shared_object.h"

namespace gpupool::interpose {
namespace {

CUresult Lookup(CUdevice dev, const DeviceInfo** device) { return Driver::Get().GetDevice(dev, device); }

int Attribute(const DeviceInfo& d, int attribute) {
  auto it = d.attributes.find(attribute);
  return it != d.attributes.end() ? it->second : 0;
}

// NVIDIA's math libraries choose their kernels by compute capability: on an architecture they carry SASS for they
// load SASS-only cubins (cuBLAS's GEMMs at 12.x), on one they do not know their forward-compatible PTX (compute_120).
// An emulated device runs PTX only, so to these libraries an emulated 12.x device reports 13.0, newer than any they
// know, and they take the PTX it runs; everyone else, the program included, sees the device's own capability.
// Which library asks is the caller's shared object (their cudart is static: its calls come from inside them).
// GPUPOOL_LIBRARY_CC=0 turns this off.
constexpr int kPtxOnlyMajor = 13, kPtxOnlyMinor = 0;
bool ToldPtxOnlyCapability(const DeviceInfo& d, const void* caller) {
  if (!d.emulated || d.cc_major != 12) return false;
  static const bool enabled = [] {
    const char* env = std::getenv("GPUPOOL_LIBRARY_CC");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  if (!enabled) return false;
  const std::string library = SharedLibraryAt(caller);
  const bool math_library = library.rfind("libcublas", 0) == 0 || library.rfind("libcusolver", 0) == 0;
  if (math_library) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      GP_INFO("interpose", "{} is told compute capability {}.{} for the emulated device ({}.{}), so that it takes "
                           "its PTX (GPUPOOL_LIBRARY_CC=0: not)",
              library, kPtxOnlyMajor, kPtxOnlyMinor, d.cc_major, d.cc_minor);
    }
  }
  return math_library;
}

std::string PciBusId(const DeviceInfo& d) {
  return fmt::format("{:04X}:{:02X}:{:02X}.0", d.pci_domain, d.pci_bus, d.pci_device);
}

}  // namespace

// The implementations of device.cc's rows of forward_spec.h (GP_DEVICE_ENTRIES).

CUresult DriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult DeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::Get();
  if (CUresult r = driver.CheckInitialized(); r != CUDA_SUCCESS) return r;
  *count = static_cast<int>(driver.devices().size());
  return CUDA_SUCCESS;
}

CUresult DeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo* d;
  if (CUresult r = Lookup(ordinal, &d); r != CUDA_SUCCESS) return r;
  *device = ordinal;  // A CUdevice is its ordinal.
  return CUDA_SUCCESS;
}

// Copies `text` into the caller's buffer of `len` bytes: at most len - 1 bytes and a NUL.
CUresult CopyOut(const std::string& text, char* out, int len) {
  const size_t n = std::min(text.size(), static_cast<size_t>(len) - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
  return CUDA_SUCCESS;
}

CUresult DeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo* d;
  if (CUresult r = Lookup(dev, &d); r != CUDA_SUCCESS) return r;
  return CopyOut(d->name, name, len);
}

// _v2 differs for MIG instances only; a slice is reported as a whole device.
CUresult DeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo* d;
  if (CUresult r = Lookup(dev, &d); r != CUDA_SUCCESS) return r;
  std::memcpy(uuid->bytes, d->uuid.data(), sizeof(uuid->bytes));
  return CUDA_SUCCESS;
}

// The slice's memory, not the card's; the 32-bit form saturates.
template <typename Bytes>
CUresult DeviceTotalMem(Bytes* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo* d;
  if (CUresult r = Lookup(dev, &d); r != CUDA_SUCCESS) return r;
  *bytes = static_cast<Bytes>(std::min<uint64_t>(d->total_memory, std::numeric_limits<Bytes>::max()));
  return CUDA_SUCCESS;
}

CUresult DeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev, const void* caller) {
  // Up to the newest attribute of the driver version reported (driver_newer.h), whatever the headers know.
  if (pi == nullptr || attrib <= 0 || attrib >= kDeviceAttributeEnd) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo* d;
  if (CUresult r = Lookup(dev, &d); r != CUDA_SUCCESS) return r;
  *pi = Attribute(*d, attrib);
  const bool capability =
      attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR || attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR;
  if (capability && ToldPtxOnlyCapability(*d, caller)) {
    *pi = attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? kPtxOnlyMajor : kPtxOnlyMinor;
  }
  return CUDA_SUCCESS;
}

CUresult DeviceComputeCapability(int* major, int* minor, CUdevice dev, const void* caller) {
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo* d;
  if (CUresult r = Lookup(dev, &d); r != CUDA_SUCCESS) return r;
  *major = d->cc_major;
  *minor = d->cc_minor;
  if (ToldPtxOnlyCapability(*d, caller)) {
    *major = kPtxOnlyMajor;
    *minor = kPtxOnlyMinor;
  }
  return CUDA_SUCCESS;
}

CUresult DeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo* d;
  if (CUresult r = Lookup(dev, &d); r != CUDA_SUCCESS) return r;
  prop->maxThreadsPerBlock = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->sharedMemPerBlock = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->totalConstantMemory = Attribute(*d, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->SIMDWidth = Attribute(*d, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->regsPerBlock = Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->clockRate = Attribute(*d, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  prop->textureAlign = Attribute(*d, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  return CUDA_SUCCESS;
}

CUresult DeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const DeviceInfo* d;
  if (CUresult r = Lookup(dev, &d); r != CUDA_SUCCESS) return r;
  return CopyOut(PciBusId(*d), pciBusId, len);
}

CUresult DeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::Get();
  if (CUresult r = driver.CheckInitialized(); r != CUDA_SUCCESS) return r;
  // "domain:bus:device.function", "domain:bus:device" or "bus:device.function", all hexadecimal.
  unsigned int domain = 0, bus = 0, device = 0, function = 0;
  char tail = 0;
  if (std::sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) != 4 &&
      std::sscanf(pciBusId, "%x:%x:%x%c", &domain, &bus, &device, &tail) != 3) {
    domain = 0;
    if (std::sscanf(pciBusId, "%x:%x.%x%c", &bus, &device, &function, &tail) != 3) return CUDA_ERROR_INVALID_VALUE;
  }
  const auto& devices = driver.devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceInfo& d = devices[i];
    if (static_cast<unsigned int>(d.pci_domain) == domain && static_cast<unsigned int>(d.pci_bus) == bus &&
        static_cast<unsigned int>(d.pci_device) == device) {
      *dev = static_cast<CUdevice>(i);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

}  // namespace gpupool::interpose

GP_DEVICE_ENTRIES(GP_DEFINE_ENTRY)

using gpupool::interpose::ApiCall;
using gpupool::interpose::DeviceInfo;
using gpupool::interpose::Driver;

extern "C" {

// gpupool's own, for the gpupool Python package (gpupool.attach): why cuInit found no device, as it logged it, and
// the kind of failure (a gpupool::StatusCode as int, 0 while cuInit has not failed), so that the package raises the
// matching exception with gpupool's words. Copies at most `size` - 1 bytes and a NUL.
CUresult cuGpupoolInitError(int* status_code, char* message, size_t size) {
  using namespace gpupool::interpose;
  if (status_code == nullptr || message == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::string error = Driver::Get().InitError(status_code);
  const size_t n = std::min(error.size(), size - 1);
  std::memcpy(message, error.data(), n);
  message[n] = '\0';
  return CUDA_SUCCESS;
}

// gpupool's own, for its libnvidia-ml.so.1 (nvmlDeviceGetUtilizationRates): the slice's utilisation rates since
// the previous call. CUDA_ERROR_NOT_SUPPORTED where the slice cannot tell (GPU servers, for now; fake devices).
CUresult cuGpupoolSliceUtilization(CUdevice dev, unsigned int* gpu_percent, unsigned int* memory_percent) {
  using namespace gpupool::interpose;
  return ApiCall("cuGpupoolSliceUtilization", [&]() -> CUresult {
    if (gpu_percent == nullptr || memory_percent == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const DeviceInfo* device;
    if (CUresult r = Driver::Get().GetDevice(dev, &device); r != CUDA_SUCCESS) return r;
    Remote& remote = Remote::Get();
    if (!remote.attached()) return CUDA_ERROR_NOT_SUPPORTED;
    uint32_t gpu = 0, memory = 0;
    int code = remote.session(dev)->Utilization(&gpu, &memory);
    if (code == CUDA_ERROR_NOT_SUPPORTED) return CUDA_ERROR_NOT_SUPPORTED;
    if (code != 0) return remote.Fail(dev, code, "the slice's utilisation");
    *gpu_percent = gpu;
    *memory_percent = memory;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
