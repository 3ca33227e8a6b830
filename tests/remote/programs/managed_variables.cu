// __managed__ variables on a gpupool slice: the host reads their initial values, kernels' writes (atomics
// included), a flag a graph's kernel checks, and a plain __device__ variable on the same page that the host's
// writes to its neighbours must not overwrite. Exits 0 with "PASS".
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define PROGRAM_NAME "managed_variables"
#include "program_checks.h"

__managed__ int counters[4];
__managed__ int initialised = 7;
__managed__ int go = 0;
__device__ int device_only = 11;

__global__ void Count() { atomicAdd(&counters[threadIdx.x % 4], 1); }

__global__ void Step() {
  if (go != 0) {  // The host's flag, set before the launch.
    initialised += 1;
    device_only += 100;
  }
}

int main() {
  // Before the first touch: where the variables cannot be managed, cudart says so here (the host symbols would
  // otherwise point nowhere).
  REQUIRE_OK(cudaFree(nullptr));
  REQUIRE(initialised == 7, "initial value %d", initialised);
  counters[0] = 100;
  Count<<<2, 64>>>();
  REQUIRE_OK(cudaDeviceSynchronize());
  REQUIRE(counters[0] == 132 && counters[1] == 32 && counters[3] == 32, "counters %d %d %d %d", counters[0],
         counters[1], counters[2], counters[3]);

  cudaStream_t s;
  REQUIRE_OK(cudaStreamCreate(&s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  REQUIRE_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  Step<<<1, 1, 0, s>>>();
  REQUIRE_OK(cudaStreamEndCapture(s, &graph));
  REQUIRE_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    go = round % 2;  // Launches 1 and 3 see the flag off, 2 on.
    REQUIRE_OK(cudaGraphLaunch(exec, s));
    REQUIRE_OK(cudaStreamSynchronize(s));
  }
  REQUIRE(initialised == 8, "initialised %d after the graph", initialised);
  int device_value = 0;
  REQUIRE_OK(cudaMemcpyFromSymbol(&device_value, device_only, sizeof(int)));
  REQUIRE(device_value == 111, "device_only %d (the host's writes to its page overwrote it?)", device_value);
  device_value = 5;
  REQUIRE_OK(cudaMemcpyToSymbol(initialised, &device_value, sizeof(int)));
  REQUIRE(initialised == 5, "initialised %d after cudaMemcpyToSymbol", initialised);
  void* address = nullptr;
  REQUIRE_OK(cudaGetSymbolAddress(&address, counters));
  cudaPointerAttributes attributes{};
  REQUIRE_OK(cudaPointerGetAttributes(&attributes, address));
  REQUIRE(attributes.type == cudaMemoryTypeManaged, "type %d", static_cast<int>(attributes.type));
  REQUIRE_OK(cudaGraphExecDestroy(exec));
  REQUIRE_OK(cudaGraphDestroy(graph));
  REQUIRE_OK(cudaStreamDestroy(s));
  std::printf("PASS\n");
  return 0;
}
