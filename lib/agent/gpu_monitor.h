// Gauges of physical GPUs from NVML (libnvidia-ml.so.1, loaded at run time): utilisation, memory in use,
// temperature and power, as nvidia-smi and DCGM report them.
#ifndef GPUPOOL_AGENT_GPU_MONITOR_H_
#define GPUPOOL_AGENT_GPU_MONITOR_H_

#include <memory>
#include <optional>
#include <string>

namespace gpupool::agent {

struct GpuGauges {
  std::optional<double> utilization;  // 0..1 of the last sample period a kernel ran (NVML's utilization.gpu).
  std::optional<uint64_t> memory_used;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
};

class GpuMonitor {
 public:
  // NVML, or why not (no library, nvmlInit failed, or it is gpupool's own NVML of a process under gp-run).
  static std::unique_ptr<GpuMonitor> Open(std::string* why_not);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // The GPU with this UUID ("GPU-..."); nullopt if NVML does not know it. Gauges NVML cannot read stay unset.
  std::optional<GpuGauges> Read(const std::string& uuid) const;

 private:
  struct Api;
  explicit GpuMonitor(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_GPU_MONITOR_H_
