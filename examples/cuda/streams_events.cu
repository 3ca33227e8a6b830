// streams_events: two streams with asynchronous copies, kernels and events; device printf; elapsed time.
#include <cstdio>
#include <vector>

#include "check.h"

constexpr char kExample[] = "streams_events";

__global__ void Scale(float* x, float factor, int n, int stream_id) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
  if (i == 0) printf("stream %d: kernel ran on the device\n", stream_id);
}

int main() {
  const int n = 1 << 16;
  std::vector<float> host[2] = {std::vector<float>(n, 1.0f), std::vector<float>(n, 2.0f)};
  cudaStream_t streams[2];
  float* dev[2];
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int s = 0; s < 2; ++s) {
    CHECK(cudaStreamCreate(&streams[s]));
    CHECK(cudaMalloc(&dev[s], n * sizeof(float)));
  }
  CHECK(cudaEventRecord(start, streams[0]));
  for (int s = 0; s < 2; ++s) {
    CHECK(cudaMemcpyAsync(dev[s], host[s].data(), n * sizeof(float), cudaMemcpyHostToDevice, streams[s]));
    Scale<<<(n + 255) / 256, 256, 0, streams[s]>>>(dev[s], 3.0f + s, n, s);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(host[s].data(), dev[s], n * sizeof(float), cudaMemcpyDeviceToHost, streams[s]));
  }
  CHECK(cudaEventRecord(stop, streams[1]));
  for (int s = 0; s < 2; ++s) CHECK(cudaStreamSynchronize(streams[s]));
  CHECK(cudaEventSynchronize(stop));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += (host[0][i] != 3.0f) + (host[1][i] != 8.0f);
  for (int s = 0; s < 2; ++s) {
    CHECK(cudaFree(dev[s]));
    CHECK(cudaStreamDestroy(streams[s]));
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  std::printf("streams_events: elapsed %s, %d wrong: %s\n", ms >= 0 ? "measured" : "missing", wrong,
              wrong || ms < 0 ? "FAILED" : "PASSED");
  return wrong || ms < 0 ? 1 : 0;
}
