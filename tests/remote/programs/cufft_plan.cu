// cuFFT on a slice: plans a 1-D FFT and runs it. cuFFT ships SASS only and reads the driver's own function records
// through a private export table, so on an emulated slice the plan fails: gpupool must say why (whose module, what it
// needs) rather than leave CUFFT_INTERNAL_ERROR alone. Before planning, the program asks for an export table no
// driver has, as a library probing for a newer driver would: gpupool names the id and the asker.
//   cufft_plan   exit 0 when the FFT of a unit impulse is all ones; 1 when cuFFT refused (its status printed)
#include <cuda.h>
#include <cuda_runtime.h>
#include <cufft.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  CUuuid unknown;
  for (int i = 0; i < 16; ++i) unknown.bytes[i] = static_cast<char>(i * 0x11);
  const void* table = &unknown;
  cudaFree(nullptr);  // Initialises the driver.
  CUresult lookup = cuGetExportTable(&table, &unknown);
  // NVIDIA's driver answers CUDA_ERROR_INVALID_VALUE for a table it does not have (an H100's, driver 580).
  if (lookup != CUDA_ERROR_INVALID_VALUE || table != nullptr) {
    std::fprintf(stderr, "cufft_plan: an unknown export table answered %d, table %p\n", lookup, table);
    return 2;
  }
  const int n = 256;
  cufftHandle plan;
  cufftResult r = cufftPlan1d(&plan, n, CUFFT_C2C, 1);
  if (r != CUFFT_SUCCESS) {
    std::fprintf(stderr, "cufft_plan: cufftPlan1d answered %d\n", r);
    return 1;
  }
  std::vector<cufftComplex> host(n, cufftComplex{0.f, 0.f});
  host[0].x = 1.f;
  cufftComplex* data;
  cudaMalloc(&data, n * sizeof(cufftComplex));
  cudaMemcpy(data, host.data(), n * sizeof(cufftComplex), cudaMemcpyHostToDevice);
  r = cufftExecC2C(plan, data, data, CUFFT_FORWARD);
  cudaMemcpy(host.data(), data, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost);
  cufftDestroy(plan);
  cudaFree(data);
  if (r != CUFFT_SUCCESS) {
    std::fprintf(stderr, "cufft_plan: cufftExecC2C answered %d\n", r);
    return 1;
  }
  for (int i = 0; i < n; ++i) {
    if (std::fabs(host[i].x - 1.f) > 1e-5f || std::fabs(host[i].y) > 1e-5f) {
      std::fprintf(stderr, "cufft_plan: element %d is (%g, %g), not (1, 0)\n", i, host[i].x, host[i].y);
      return 2;
    }
  }
  std::printf("cufft_plan: PASSED\n");
  return 0;
}
