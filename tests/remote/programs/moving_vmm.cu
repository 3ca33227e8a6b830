// moving_vmm: a session whose memory is mapped through virtual memory management (as PyTorch's expandable segments
// allocate), for moves of its lease (issue 43): 4 MiB of physical memory mapped into a reservation, filled with a
// pattern, then a kernel adds one to every word each round (`rounds`, argv[1]; 20 ms apart). Prints "ready" after
// the first round and "ok ROUNDS" once every word is its pattern plus the rounds (or what failed, exiting 1).
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#define PROGRAM_NAME "moving_vmm"
#include "program_checks.h"

#define CU(call)                                                                 \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                    \
      std::printf(PROGRAM_NAME ": %s failed: CUresult %d\n", #call, static_cast<int>(r_)); \
      ++failures;                                                                \
    }                                                                            \
  } while (0)

__global__ void AddOne(unsigned* p, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] += 1;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 50;
  CHECK(cudaFree(nullptr));
  CUdevice dev;
  CU(cuCtxGetDevice(&dev));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t granularity = 0;
  CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t bytes = ((4u << 20) + granularity - 1) / granularity * granularity;
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle handle = 0;
  CU(cuMemAddressReserve(&base, bytes, 0, 0, 0));
  CU(cuMemCreate(&handle, bytes, &prop, 0));
  CU(cuMemMap(base, bytes, 0, handle, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(base, bytes, &access, 1));
  if (failures) return 1;
  const size_t n = bytes / sizeof(unsigned);
  std::vector<unsigned> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned>(i * 2654435761u);
  unsigned* p = reinterpret_cast<unsigned*>(base);
  CHECK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
  for (int round = 0; round < rounds; ++round) {
    AddOne<<<static_cast<unsigned>((n + 255) / 256), 256>>>(p, n);
    CHECK(cudaDeviceSynchronize());
    if (failures) return 1;
    if (round == 0) {
      std::printf("ready\n");
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<unsigned> back(n);
  CHECK(cudaMemcpy(back.data(), p, bytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += back[i] != host[i] + static_cast<unsigned>(rounds);
  EXPECTF(wrong == 0, "%zu words wrong after %d rounds\n", wrong, rounds);
  CU(cuMemUnmap(base, bytes));
  CU(cuMemRelease(handle));
  CU(cuMemAddressFree(base, bytes));
  if (failures) return 1;
  std::printf("ok %d\n", rounds);
  return 0;
}
