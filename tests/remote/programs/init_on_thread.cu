// init_on_thread: CUDA initialised on a thread that ends soon after (a framework's worker thread, Python's
// threading), then used from the main thread. The slices (and, started without gp-run, the private gp-agent behind
// them) belong to the process, not to the thread that happened to initialise CUDA: they must outlive it.
#define PROGRAM_NAME "init_on_thread"
#include <chrono>
#include <cstdio>
#include <thread>

#include "program_checks.h"

__global__ void Square(int* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] *= v[i];
}

constexpr int kN = 4096;

int main() {
  std::thread([] { CHECK(cudaFree(nullptr)); }).join();  // Initialises CUDA; the thread ends with it.
  // Whatever the thread's end set off (a signal to a child it started) has had time to land.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::fprintf(stderr, "init_on_thread: the initialising thread ended\n");  // A mark between the agent's log lines.
  int host[kN];
  for (int i = 0; i < kN; ++i) host[i] = i;
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, sizeof(host)));
  CHECK(cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice));
  Square<<<kN / 256, 256>>>(dev, kN);
  CHECK(cudaGetLastError());
  int back[kN] = {};
  CHECK(cudaMemcpy(back, dev, sizeof(back), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < kN; ++i) wrong += back[i] != i * i;
  EXPECT(wrong == 0, "squares computed after the initialising thread ended");
  CHECK(cudaFree(dev));
  std::printf("init_on_thread: %d wrong, %d failure(s): %s\n", wrong, failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
