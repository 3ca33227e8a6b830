// The few NVML types the agent uses, as nvml.h declares them: NVML is loaded at run time (dlopen), so the agent
// builds and runs where no NVIDIA driver is installed.
#ifndef GPUPOOL_AGENT_NVML_TYPES_H_
#define GPUPOOL_AGENT_NVML_TYPES_H_

namespace gpupool::agent::nvml {

using Return = int;
using Device = void*;
struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned int gpu, memory;
};
constexpr Return kSuccess = 0;
constexpr int kTemperatureGpu = 0;

}  // namespace gpupool::agent::nvml

#endif  // GPUPOOL_AGENT_NVML_TYPES_H_
