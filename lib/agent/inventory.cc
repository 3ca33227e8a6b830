#include "agent/inventory.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "agent/nvml_types.h"
#include "backend/cuda/cuda_driver.h"
#include "core/log.h"

namespace gpupool::agent {
namespace {

// NVML's entry points are resolved at run time so the agent runs where no driver is installed.
using nvmlReturn_t = nvml::Return;
using nvmlDevice_t = nvml::Device;
using NvmlMemory = nvml::Memory;
constexpr nvmlReturn_t kNvmlSuccess = nvml::kSuccess;

}  // namespace

std::vector<DeviceRecord> DiscoverNvmlDevices(const std::string& device_class) {
  std::vector<DeviceRecord> out;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    GP_INFO("agent", "NVML not found (libnvidia-ml.so.1: {}); no physical GPUs on this host", dlerror());
    return out;
  }
  if (dlsym(lib, "nvmlGpupoolSlices") != nullptr) {  // Started under gp-run: not a GPU driver.
    GP_WARN("agent", "libnvidia-ml.so.1 on the library path is gpupool's own (slices of a lease); no physical GPUs");
    dlclose(lib);
    return out;
  }
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib, "nvmlShutdown"));
  auto count_fn = reinterpret_cast<nvmlReturn_t (*)(unsigned*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle_fn =
      reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto name_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(dlsym(lib, "nvmlDeviceGetName"));
  auto uuid_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(dlsym(lib, "nvmlDeviceGetUUID"));
  auto mem_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  if (!init || !count_fn || !handle_fn || !name_fn || !uuid_fn || !mem_fn) {
    GP_WARN("agent", "NVML library lacks expected entry points; ignoring physical GPUs");
    dlclose(lib);
    return out;
  }
  if (nvmlReturn_t rc = init(); rc != kNvmlSuccess) {
    GP_INFO("agent", "NVML present but nvmlInit failed (code {}); no physical GPUs used", rc);
    dlclose(lib);
    return out;
  }
  unsigned count = 0;
  if (count_fn(&count) == kNvmlSuccess) {
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      if (handle_fn(i, &dev) != kNvmlSuccess) continue;
      char name[96] = {0}, uuid[96] = {0};
      NvmlMemory mem{};
      if (name_fn(dev, name, sizeof(name)) != kNvmlSuccess || uuid_fn(dev, uuid, sizeof(uuid)) != kNvmlSuccess ||
          mem_fn(dev, &mem) != kNvmlSuccess) {
        GP_WARN("agent", "NVML could not describe GPU {}; skipping it", i);
        continue;
      }
      DeviceRecord r;
      r.uuid = uuid;
      r.model = name;
      r.device_class = device_class;
      r.memory_bytes = mem.total;
      r.physical_index = static_cast<int>(i);
      out.push_back(std::move(r));
    }
  }
  GP_INFO("agent", "NVML found {} GPU(s)", out.size());
  if (shutdown) shutdown();
  dlclose(lib);
  return out;
}

std::vector<DeviceRecord> DiscoverDriverDevices(const std::string& library, const std::string& device_class) {
  std::vector<DeviceRecord> out;
  auto driver = backend::CudaDriver::Load(library);
  if (!driver.ok()) {
    GP_INFO("agent", "no GPUs through the CUDA driver either: {}", driver.status().message());
    return out;
  }
  auto devices = (*driver)->Devices();
  if (!devices.ok()) {
    GP_WARN("agent", "{}; no physical GPUs used", devices.status().message());
    return out;
  }
  for (const backend::DriverDevice& d : *devices) {
    DeviceRecord r;
    r.uuid = d.uuid;
    r.model = d.name;
    r.device_class = device_class;
    r.memory_bytes = d.memory_bytes;
    r.physical_index = d.ordinal;
    out.push_back(std::move(r));
  }
  GP_INFO("agent", "the CUDA driver{} found {} GPU(s)", (*driver)->is_gpupool() ? " (gpupool's own, slices of a lease)" : "",
          out.size());
  return out;
}

void UseDriverMemoryTotals(const std::string& library, std::vector<DeviceRecord>* devices) {
  auto driver = backend::CudaDriver::Load(library);
  if (!driver.ok()) return;  // RunAgent says why when it loads the driver for the sessions.
  auto listed = (*driver)->Devices();
  if (!listed.ok()) return;
  for (DeviceRecord& r : *devices) {
    if (r.emulated) continue;
    for (const backend::DriverDevice& d : *listed) {
      if (d.uuid != r.uuid || d.memory_bytes == 0 || d.memory_bytes >= r.memory_bytes) continue;
      GP_INFO("agent", "GPU {}: the CUDA driver gives programs {} MiB of NVML's {} MiB; slices are cut from {} MiB",
              r.uuid, d.memory_bytes >> 20, r.memory_bytes >> 20, d.memory_bytes >> 20);
      r.memory_bytes = d.memory_bytes;
    }
  }
}

std::vector<DeviceRecord> MakeEmulatedDevices(int count, uint64_t memory_bytes, const std::string& agent_name,
                                              const std::string& device_class, int compute_capability) {
  std::vector<DeviceRecord> out;
  for (int i = 0; i < count; ++i) {
    // FNV-1a over "name/index": stable across restarts, distinct across agents with distinct names.
    uint64_t h = 1469598103934665603ull;
    for (char c : fmt::format("{}/{}", agent_name, i)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    DeviceRecord r;
    r.uuid = fmt::format("EMU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", static_cast<uint32_t>(h >> 32),
                         static_cast<uint32_t>(h >> 16) & 0xffff, static_cast<uint32_t>(h) & 0xffff, i & 0xffff,
                         (h * 31 + static_cast<uint64_t>(i)) & 0xffffffffffffull);
    r.model = "gpupool emulated GPU";
    r.device_class = device_class;
    r.emulated = true;
    r.memory_bytes = memory_bytes;
    r.compute_capability = compute_capability;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace gpupool::agent
