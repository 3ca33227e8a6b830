// The devices an agent owns: real NVIDIA GPUs found through NVML, plus emulated devices from its config.
#ifndef GPUPOOL_AGENT_INVENTORY_H_
#define GPUPOOL_AGENT_INVENTORY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gpupool::agent {

struct DeviceRecord {
  std::string uuid;
  std::string model;
  std::string device_class;
  bool emulated = false;
  uint64_t memory_bytes = 0;
  int physical_index = -1;  // NVML index (or CUDA ordinal, when found by the driver) of a real GPU; -1 if emulated.
  int compute_capability = 0;  // Emulated: what the device reports, major * 10 + minor.
};

// Real GPUs through NVML (dlopen("libnvidia-ml.so.1")). Where NVML is absent or fails, logs that once at info
// level and returns no devices.
std::vector<DeviceRecord> DiscoverNvmlDevices(const std::string& device_class);

// Physical GPUs through the CUDA driver's own device queries, where NVML is absent: `library` as the agent's
// cuda_driver says ("" = the system's libcuda.so.1). gpupool's own libcuda.so.1 counts only when named: it presents
// slices of another agent's lease, which stand in for GPUs in tests of the cuda backend (never by accident, as when
// the agent runs under gp-run). Logs why when it finds none.
std::vector<DeviceRecord> DiscoverDriverDevices(const std::string& library, const std::string& device_class);

// NVML's total memory of a GPU is more than the CUDA driver lets programs allocate (an H100 80GB: NVML 81,559 MiB,
// cuDeviceTotalMem 81,079 MiB): each GPU of `devices` found by the driver at `library` ("" = the system's) takes
// the driver's figure, so that a whole-GPU slice reports no more memory than the GPU's own programs see. Devices the
// driver does not list keep NVML's; a driver that does not load changes nothing.
void UseDriverMemoryTotals(const std::string& library, std::vector<DeviceRecord>* devices);

// `count` emulated devices of `memory_bytes` each, reporting `compute_capability` (major * 10 + minor). UUIDs are
// stable for a given agent name.
std::vector<DeviceRecord> MakeEmulatedDevices(int count, uint64_t memory_bytes, const std::string& agent_name,
                                              const std::string& device_class, int compute_capability = 75);

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_INVENTORY_H_
