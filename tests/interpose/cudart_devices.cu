// A plain CUDA runtime program, built by nvcc three ways (static cudart, -cudart shared, --default-stream
// per-thread), run against the interposer's libcuda.so.1 with fake devices.
//
//   cudart_devices COUNT [BYTES]
//
// COUNT: the devices expected (0: cudaGetDeviceCount must report cudaErrorNoDevice); BYTES: each one's memory.
// Prints what it sees on stdout (device_checks.h); exits 1 when a check fails.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "device_checks.h"

namespace {

void CheckSuccess(cudaError_t e, const char* call) {
  std::printf("%s: %s\n", call, cudaGetErrorName(e));
  if (e != cudaSuccess) {
    std::printf("FAIL: %s: %s\n", call, cudaGetErrorString(e));
    ++failures;
  }
}

// Never launched (launching is not implemented yet), but its registration is part of every real program's start.
__global__ void Scale(float* data, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

}  // namespace

int main(int argc, char** argv) {
  const auto [expected_count, expected_bytes] = ParseExpectedDevices(argc, argv);

  int count = -1;
  const cudaError_t count_error = cudaGetDeviceCount(&count);
  if (expected_count == 0) {
    std::printf("cudaGetDeviceCount: %s (%s)\n", cudaGetErrorName(count_error), cudaGetErrorString(count_error));
    Check(count_error == cudaErrorNoDevice, "cudaGetDeviceCount reports cudaErrorNoDevice");
    return failures == 0 ? 0 : 1;
  }
  CheckSuccess(count_error, "cudaGetDeviceCount");
  std::printf("devices %d\n", count);
  Check(count == expected_count, "device count as configured");

  int driver_version = 0;
  CheckSuccess(cudaDriverGetVersion(&driver_version), "cudaDriverGetVersion");
  Check(driver_version >= 13020, "driver version >= 13020 (CUDA 13.2's, which gpupool serves)");

  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    std::memset(&prop, 0, sizeof(prop));
    CheckSuccess(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
    std::printf("device %d: %s, %zu bytes, cc %d.%d, %d SMs, warp %d, %d threads/block, smem %zu/%zu, pci %d\n", i,
                prop.name, prop.totalGlobalMem, prop.major, prop.minor, prop.multiProcessorCount, prop.warpSize,
                prop.maxThreadsPerBlock, prop.sharedMemPerBlock, prop.sharedMemPerBlockOptin, prop.pciBusID);
    Check(std::strcmp(prop.name, "gpupool emulated GPU") == 0, "name");
    Check(prop.totalGlobalMem == expected_bytes, "totalGlobalMem as configured");
    Check(prop.major == 7 && prop.minor == 5, "compute capability 7.5");
    Check(prop.multiProcessorCount == 40, "multiProcessorCount");
    Check(prop.warpSize == 32, "warpSize");
    Check(prop.maxThreadsPerBlock == 1024, "maxThreadsPerBlock");
    Check(prop.sharedMemPerBlock == 48 * 1024 && prop.sharedMemPerBlockOptin == 64 * 1024, "shared memory");
    Check(prop.pciBusID == i + 1, "pciBusID");
    int sms = 0;
    CheckSuccess(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, i), "cudaDeviceGetAttribute");
    Check(sms == 40, "cudaDevAttrMultiProcessorCount");
  }

  // Context creation on the last device, then the calls that need a context.
  CheckSuccess(cudaSetDevice(count - 1), "cudaSetDevice");
  CheckSuccess(cudaFree(nullptr), "cudaFree(0)");
  CheckSuccess(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  CheckSuccess(cudaStreamSynchronize(0), "cudaStreamSynchronize(0)");
  int current = -1;
  CheckSuccess(cudaGetDevice(&current), "cudaGetDevice");
  Check(current == count - 1, "current device");

  // Another thread starts without a current context: cudart makes the primary context current there too.
  std::thread other([&] {
    CheckSuccess(cudaSetDevice(0), "cudaSetDevice (second thread)");
    CheckSuccess(cudaFree(nullptr), "cudaFree(0) (second thread)");
    CheckSuccess(cudaDeviceSynchronize(), "cudaDeviceSynchronize (second thread)");
  });
  other.join();

  // Memory is not implemented yet: the allocation must fail cleanly, twice (the interposer logs it once).
  for (int attempt = 0; attempt < 2; ++attempt) {
    float* data = nullptr;
    const cudaError_t e = cudaMalloc(&data, 1 << 20);
    std::printf("cudaMalloc: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
    Check(e != cudaSuccess && data == nullptr, "cudaMalloc fails while memory is not implemented");
    cudaGetLastError();
  }
  // The failed allocation left nothing sticky behind.
  CheckSuccess(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the failed cudaMalloc");

  // Reset destroys the primary context (and cudart's context-local state); the next call creates it again.
  CheckSuccess(cudaDeviceReset(), "cudaDeviceReset");
  CheckSuccess(cudaFree(nullptr), "cudaFree(0) after cudaDeviceReset");
  CheckSuccess(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaDeviceReset");
  (void)&Scale;

  if (failures != 0) {
    std::printf("FAILED (%d)\n", failures);
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
