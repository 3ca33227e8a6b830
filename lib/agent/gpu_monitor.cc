#include "agent/gpu_monitor.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "agent/nvml_types.h"

namespace gpupool::agent {
namespace {

using nvmlReturn_t = nvml::Return;
using nvmlDevice_t = nvml::Device;
using NvmlMemory = nvml::Memory;
using NvmlUtilization = nvml::Utilization;
constexpr nvmlReturn_t kNvmlSuccess = nvml::kSuccess;
constexpr int kNvmlTemperatureGpu = nvml::kTemperatureGpu;

}  // namespace

struct GpuMonitor::Api {
  void* lib = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, NvmlMemory*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;  // Milliwatts.
};

std::unique_ptr<GpuMonitor> GpuMonitor::Open(std::string* why_not) {
  auto api = std::make_unique<Api>();
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    *why_not = fmt::format("NVML not found ({})", dlerror());
    return nullptr;
  }
  auto fail = [&](std::string why) -> std::unique_ptr<GpuMonitor> {
    dlclose(api->lib);
    *why_not = std::move(why);
    return nullptr;
  };
  if (dlsym(api->lib, "nvmlGpupoolSlices") != nullptr) return fail("libnvidia-ml.so.1 is gpupool's own (gp-run)");
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(api->lib, "nvmlInit_v2"));
  api->shutdown = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(api->lib, "nvmlShutdown"));
  api->by_uuid = reinterpret_cast<decltype(api->by_uuid)>(dlsym(api->lib, "nvmlDeviceGetHandleByUUID"));
  api->utilization = reinterpret_cast<decltype(api->utilization)>(dlsym(api->lib, "nvmlDeviceGetUtilizationRates"));
  api->memory = reinterpret_cast<decltype(api->memory)>(dlsym(api->lib, "nvmlDeviceGetMemoryInfo"));
  api->temperature = reinterpret_cast<decltype(api->temperature)>(dlsym(api->lib, "nvmlDeviceGetTemperature"));
  api->power = reinterpret_cast<decltype(api->power)>(dlsym(api->lib, "nvmlDeviceGetPowerUsage"));
  if (!init || !api->by_uuid) return fail("NVML lacks nvmlInit_v2 or nvmlDeviceGetHandleByUUID");
  if (nvmlReturn_t rc = init(); rc != kNvmlSuccess) return fail(fmt::format("nvmlInit failed (code {})", rc));
  return std::unique_ptr<GpuMonitor>(new GpuMonitor(std::move(api)));
}

GpuMonitor::GpuMonitor(std::unique_ptr<Api> api) : api_(std::move(api)) {}

GpuMonitor::~GpuMonitor() {
  if (api_->shutdown) api_->shutdown();
  dlclose(api_->lib);
}

std::optional<GpuGauges> GpuMonitor::Read(const std::string& uuid) const {
  nvmlDevice_t dev = nullptr;
  if (api_->by_uuid(uuid.c_str(), &dev) != kNvmlSuccess) return std::nullopt;
  GpuGauges g;
  NvmlUtilization u{};
  if (api_->utilization && api_->utilization(dev, &u) == kNvmlSuccess) g.utilization = u.gpu / 100.0;
  NvmlMemory m{};
  if (api_->memory && api_->memory(dev, &m) == kNvmlSuccess) g.memory_used = m.used;
  unsigned celsius = 0, milliwatts = 0;
  if (api_->temperature && api_->temperature(dev, kNvmlTemperatureGpu, &celsius) == kNvmlSuccess) {
    g.temperature_c = celsius;
  }
  if (api_->power && api_->power(dev, &milliwatts) == kNvmlSuccess) g.power_w = milliwatts / 1000.0;
  return g;
}

}  // namespace gpupool::agent
