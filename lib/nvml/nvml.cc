// libnvidia-ml.so.1 for programs on gpupool slices: what NVML reports about "the GPUs" is what the program sees
// through gpupool's libcuda.so.1, the slices of its lease (in CUDA_VISIBLE_DEVICES order): their count, names, UUIDs,
// PCI ids, memory (the slice's size as total, what the lease's processes hold on it as used), and utilisation as
// the slice's session measures it (emulated devices). PyTorch, pynvml and nvidia-smi-style tools ask these; without
// it they read a local GPU (or none) that has nothing to do with the slices. Clocks, temperature, power, fans, the
// PCIe link and the GPU's modes are not known to the client: those calls answer NVML_ERROR_NOT_SUPPORTED, never a
// made-up figure. Calls not defined here
// are absent, as in an older NVML
// (callers that look them up find nothing).
//
// The NVML types are declared here as the documented C ABI (nvml.h is not part of the CUDA toolkit).
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6,
                       kInsufficientSize = 7, kDriverNotLoaded = 9, kUnknown = 999;

struct Device {
  unsigned index = 0;
  CUdevice cu = 0;
};
using nvmlDevice_t = Device*;

struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;  // Percent of the sample period.
};
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
struct nvmlGpuFabricInfoV_t {
  unsigned int version;
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
};
constexpr unsigned char kFabricStateNotSupported = 0;
constexpr unsigned int kNoInstance = 0xFFFFFFFFu;
constexpr int kP2pNotSupported = 5;  // NVML_P2P_STATUS_NOT_SUPPORTED

std::mutex mu;
int init_count = 0;                 // Guarded by mu.
std::vector<Device> devices;        // Filled by the first nvmlInit. Guarded by mu (then read-only).

nvmlReturn_t FromCuda(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS:
      return kSuccess;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
      return kDriverNotLoaded;
    case CUDA_ERROR_INVALID_VALUE:
      return kInvalidArgument;
    case CUDA_ERROR_NOT_SUPPORTED:
      return kNotSupported;
    default:
      return kUnknown;
  }
}

bool Initialized() {
  std::lock_guard<std::mutex> lock(mu);
  return init_count > 0;
}

nvmlReturn_t Check(nvmlDevice_t d) {
  if (!Initialized()) return kUninitialized;
  for (const Device& known : devices) {
    if (&known == d) return kSuccess;
  }
  return kInvalidArgument;
}

nvmlReturn_t CopyText(const std::string& text, char* out, unsigned int length) {
  if (out == nullptr) return kInvalidArgument;
  if (text.size() + 1 > length) return kInsufficientSize;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return kSuccess;
}

std::string Uuid(CUdevice dev) {
  CUuuid u;
  if (cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) return {};
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

int Attribute(CUdevice dev, CUdevice_attribute a) {
  int v = 0;
  cuDeviceGetAttribute(&v, a, dev);
  return v;
}

// Free and total memory of the slice, as this process's session sees them (its primary context, made current for
// the question only).
nvmlReturn_t SliceMemory(CUdevice dev, size_t* free_bytes, size_t* total) {
  CUcontext ctx = nullptr;
  if (CUresult r = cuDevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS) return FromCuda(r);
  CUresult r = cuCtxPushCurrent(ctx);
  if (r == CUDA_SUCCESS) {
    r = cuMemGetInfo(free_bytes, total);
    CUcontext popped;
    cuCtxPopCurrent(&popped);
  }
  cuDevicePrimaryCtxRelease(dev);
  return FromCuda(r);
}

}  // namespace

extern "C" {

// gpupool's libcuda.so.1 exports it for this library (lib/interpose/device.cc).
CUresult cuGpupoolSliceUtilization(CUdevice dev, unsigned int* gpu_percent, unsigned int* memory_percent);

// Present only in gpupool's NVML: gp-agent checks for it so that it never takes slices for local GPUs.
int nvmlGpupoolSlices() { return 1; }

nvmlReturn_t nvmlInitWithFlags(unsigned int) {
  std::lock_guard<std::mutex> lock(mu);
  if (init_count == 0) {
    if (CUresult r = cuInit(0); r != CUDA_SUCCESS) return FromCuda(r);
    int count = 0;
    if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS) return FromCuda(r);
    if (devices.empty()) {  // Handles stay valid across shutdown and init, as NVML's do.
      for (int i = 0; i < count; ++i) {
        CUdevice dev;
        if (cuDeviceGet(&dev, i) == CUDA_SUCCESS) devices.push_back({static_cast<unsigned>(i), dev});
      }
    }
  }
  ++init_count;
  return kSuccess;
}
nvmlReturn_t nvmlInit_v2() { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit() { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lock(mu);
  if (init_count == 0) return kUninitialized;
  --init_count;
  return kSuccess;
}

// Boilerplate by nature: a table of NVML's descriptions, one case a code (as interpose/errors.cc's).
const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported (gpupool slice: not known to the client)";
    case kNotFound: return "Not Found";
    case kInsufficientSize: return "Insufficient Size";
    case kDriverNotLoaded: return "Driver Not Loaded (no gpupool slice attached)";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!Initialized()) return kUninitialized;
  int v = 0;
  cuDriverGetVersion(&v);
  return CopyText("gpupool-" + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10), version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return CopyText("13.gpupool", version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (version == nullptr) return kInvalidArgument;
  return FromCuda(cuDriverGetVersion(version));
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) { return nvmlSystemGetCudaDriverVersion(version); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!Initialized()) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  *count = static_cast<unsigned>(devices.size());
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!Initialized()) return kUninitialized;
  if (device == nullptr || index >= devices.size()) return kInvalidArgument;
  *device = &devices[index];
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (!Initialized()) return kUninitialized;
  if (uuid == nullptr || device == nullptr) return kInvalidArgument;
  for (Device& d : devices) {
    if (Uuid(d.cu) == uuid) {
      *device = &d;
      return kSuccess;
    }
  }
  return kNotFound;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (pci == nullptr) return kInvalidArgument;
  std::memset(pci, 0, sizeof(*pci));
  pci->domain = Attribute(d->cu, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  pci->bus = Attribute(d->cu, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  pci->device = Attribute(d->cu, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  std::snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", pci->domain & 0xFFFF, pci->bus,
                pci->device);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t* pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t* pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }

// Matches the bus id the slice reports through cuDeviceGetPCIBusId, in either of NVML's spellings.
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  if (!Initialized()) return kUninitialized;
  if (bus_id == nullptr || device == nullptr) return kInvalidArgument;
  unsigned domain = 0, bus = 0, dev = 0;
  if (std::sscanf(bus_id, "%x:%x:%x", &domain, &bus, &dev) != 3) {
    domain = 0;
    if (std::sscanf(bus_id, "%x:%x", &bus, &dev) != 2) return kInvalidArgument;
  }
  for (Device& d : devices) {
    if (static_cast<unsigned>(Attribute(d.cu, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)) == domain &&
        static_cast<unsigned>(Attribute(d.cu, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)) == bus &&
        static_cast<unsigned>(Attribute(d.cu, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)) == dev) {
      *device = &d;
      return kSuccess;
    }
  }
  return kNotFound;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int* index) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (index == nullptr) return kInvalidArgument;
  *index = d->index;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int* minor) { return nvmlDeviceGetIndex(d, minor); }

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int length) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  char text[256] = {0};
  if (CUresult r = cuDeviceGetName(text, sizeof(text), d->cu); r != CUDA_SUCCESS) return FromCuda(r);
  return CopyText(text, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int length) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  return CopyText(Uuid(d->cu), uuid, length);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major, int* minor) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (major == nullptr || minor == nullptr) return kInvalidArgument;
  *major = Attribute(d->cu, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  *minor = Attribute(d->cu, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* memory) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (memory == nullptr) return kInvalidArgument;
  size_t free_bytes = 0, total = 0;
  if (nvmlReturn_t r = SliceMemory(d->cu, &free_bytes, &total); r != kSuccess) return r;
  *memory = {total, free_bytes, total - free_bytes};
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* memory) {
  if (memory == nullptr) return kInvalidArgument;
  nvmlMemory_t m;
  if (nvmlReturn_t r = nvmlDeviceGetMemoryInfo(d, &m); r != kSuccess) return r;
  memory->total = m.total;
  memory->reserved = 0;
  memory->free = m.free;
  memory->used = m.used;
  return kSuccess;
}

// The processes this library can vouch for: this one, with what its session on the slice uses. Other processes of
// the same lease are not known here.
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* count, nvmlProcessInfo_t* infos) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (count == nullptr) return kInvalidArgument;
  size_t free_bytes = 0, total = 0;
  if (nvmlReturn_t r = SliceMemory(d->cu, &free_bytes, &total); r != kSuccess) return r;
  if (*count < 1 || infos == nullptr) {
    *count = 1;
    return kInsufficientSize;
  }
  *count = 1;
  infos[0] = {static_cast<unsigned>(getpid()), total - free_bytes, kNoInstance, kNoInstance};
  return kSuccess;
}
// The unversioned call fills the first, shorter record (pid and memory only).
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int* count, nvmlProcessInfo_v1_t* infos) {
  nvmlProcessInfo_t info;
  unsigned int one = infos != nullptr && count != nullptr && *count >= 1 ? 1 : 0;
  nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(d, &one, one ? &info : nullptr);
  if (count != nullptr) *count = one;
  if (r == kSuccess) infos[0] = {info.pid, info.usedGpuMemory};
  return r;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int* count, nvmlProcessInfo_t* infos) {
  return nvmlDeviceGetComputeRunningProcesses_v3(d, count, infos);
}

// No NVLink fabric between slices.
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfoV_t* info) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (info == nullptr) return kInvalidArgument;
  info->status = kNotSupported;
  info->state = kFabricStateNotSupported;
  return kSuccess;
}

// Slices never reach each other: no peer-to-peer path, no NVLink.
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int, int* status) {
  if (nvmlReturn_t r = Check(a); r != kSuccess) return r;
  if (nvmlReturn_t r = Check(b); r != kSuccess) return r;
  if (status == nullptr) return kInvalidArgument;
  *status = kP2pNotSupported;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int, int*) {
  nvmlReturn_t r = Check(d);
  return r != kSuccess ? r : kNotSupported;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int, nvmlPciInfo_t*) {
  nvmlReturn_t r = Check(d);
  return r != kSuccess ? r : kNotSupported;
}

// What the slice's session measures (gpupool's libcuda.so.1): the time this process's kernels, and its copies and
// memsets, kept the slice busy since the previous call. GPU servers do not report it yet: NVML_ERROR_NOT_SUPPORTED.
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* utilization) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (utilization == nullptr) return kInvalidArgument;
  unsigned int gpu = 0, memory = 0;
  if (CUresult r = cuGpupoolSliceUtilization(d->cu, &gpu, &memory); r != CUDA_SUCCESS) return FromCuda(r);
  utilization->gpu = gpu;
  utilization->memory = memory;
  return kSuccess;
}

// What monitoring tools (nvitop, gpustat, nvidia-smi-like scripts, PyTorch's checks) ask that the client does not
// know: the physical GPU's clocks, sensors, power, PCIe link, modes. NVML_ERROR_NOT_SUPPORTED, as NVML answers for a
// GPU without the feature, so the tools show "N/A" instead of failing on a missing function.
#define GPUPOOL_NVML_NOT_KNOWN(name, ...)         \
  nvmlReturn_t name(nvmlDevice_t d, __VA_ARGS__) { \
    nvmlReturn_t r = Check(d);                    \
    return r != kSuccess ? r : kNotSupported;     \
  }
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetTemperature, int, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetPowerUsage, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetClockInfo, int, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetMaxClockInfo, int, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetClock, int, int, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetApplicationsClock, int, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetFanSpeed, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetFanSpeed_v2, unsigned int, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetPowerManagementLimit, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetEnforcedPowerLimit, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetTotalEnergyConsumption, unsigned long long*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetPerformanceState, int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetPersistenceMode, int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetEncoderUtilization, unsigned int*, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetDecoderUtilization, unsigned int*, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetCurrPcieLinkGeneration, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetCurrPcieLinkWidth, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetMaxPcieLinkGeneration, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetMaxPcieLinkWidth, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetPcieThroughput, int, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetMigMode, unsigned int*, unsigned int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetEccMode, int*, int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetDisplayMode, int*)
GPUPOOL_NVML_NOT_KNOWN(nvmlDeviceGetDisplayActive, int*)
#undef GPUPOOL_NVML_NOT_KNOWN

// A slice is shared by the lease's processes, as a GPU in the default compute mode is.
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, int* mode) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (mode == nullptr) return kInvalidArgument;
  *mode = 0;  // NVML_COMPUTEMODE_DEFAULT
  return kSuccess;
}

// No graphics on a slice: no graphics processes.
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int* count, nvmlProcessInfo_t*) {
  if (nvmlReturn_t r = Check(d); r != kSuccess) return r;
  if (count == nullptr) return kInvalidArgument;
  *count = 0;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int* count, nvmlProcessInfo_t* p) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(d, count, p);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int* count, nvmlProcessInfo_t* p) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(d, count, p);
}

}  // extern "C"
