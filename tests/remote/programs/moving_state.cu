// A program whose session carries state of every kind while its lease is moved under it (gp-agent ctl migrate):
// allocations, a module variable counting launches, streams and an event, a stream-ordered allocation, and an
// executable graph replayed every round, before the moves and after them. It works for `rounds` rounds (argv[1]),
// resting a little between them so that the moves land mid-run, computes the same on the host, and checks bit for
// bit at the end: a call lost or run twice by a move shows as a wrong count or a wrong byte.
// With `pause_ms` (argv[2]), it also idles that long half-way, after printing "idle" (the time to suspend its lease).
// Prints "ready" once set up, then "ok <launches>" or the failures and exits 1. Built with -DNO_MODULE_VARIABLE
// (moving_state_plain), the module has no variable and the launches are counted in an allocation instead: a session
// a GPU's driver can restore without placing any variable.
#define PROGRAM_NAME "moving_state"
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_checks.h"

#ifndef NO_MODULE_VARIABLE
__device__ unsigned long long launches;  // Counts every launch of `step`: a module variable, moved with its module.
#endif

__global__ void step(float* x, int n, float k, unsigned long long* count) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 0.5f + k;  // Exact on either side: the multiplication by 0.5 rounds nothing.
#ifndef NO_MODULE_VARIABLE
  if (i == 0) atomicAdd(&launches, 1ull);
#else
  if (i == 0) atomicAdd(count, 1ull);
#endif
}

__global__ void mix(const float* a, float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] += a[i];
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
  const int pause_ms = argc > 2 ? std::atoi(argv[2]) : 0;
  const int n = 1 << 18;
  const size_t bytes = n * sizeof(float);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 977);
    y[i] = static_cast<float>(i % 13);
  }
  // Host bytes copied in every round (pageable, large enough to go through the memory a client shares with a worker
  // on its host), each round to its own place.
  const int chunk = 1 << 16;
  std::vector<float> z(static_cast<size_t>(rounds) * chunk);
  for (size_t i = 0; i < z.size(); ++i) z[i] = static_cast<float>((i * 2654435761u) >> 12);
  float *dx = nullptr, *dy = nullptr, *dz = nullptr, *pooled = nullptr;
  cudaStream_t stream;
  cudaEvent_t done;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaEventCreate(&done));
  CHECK(cudaMalloc(&dx, bytes));
  CHECK(cudaMalloc(&dy, bytes));
  CHECK(cudaMalloc(&dz, z.size() * sizeof(float)));
  unsigned long long* count = nullptr;  // The launches' count without a module variable (NO_MODULE_VARIABLE).
  CHECK(cudaMalloc(&count, sizeof(*count)));
  CHECK(cudaMemset(count, 0, sizeof(*count)));
  CHECK(cudaMallocAsync(&pooled, bytes, stream));  // Lives across every round, in the stream's pool.
  CHECK(cudaMemcpyAsync(dx, x.data(), bytes, cudaMemcpyHostToDevice, stream));
  CHECK(cudaMemcpyAsync(dy, y.data(), bytes, cudaMemcpyHostToDevice, stream));
  // A graph of one step and one mix, captured once and replayed every round.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  const int threads = 256, blocks = (n + threads - 1) / threads;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  step<<<blocks, threads, 0, stream>>>(dx, n, 1.0f, count);
  mix<<<blocks, threads, 0, stream>>>(dx, dy, n);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaStreamSynchronize(stream));
  std::printf("ready\n");
  std::fflush(stdout);

  for (int r = 0; r < rounds; ++r) {
    CHECK(cudaGraphLaunch(exec, stream));
    for (int i = 0; i < n; ++i) {
      x[i] = x[i] * 0.5f + 1.0f;
      y[i] += x[i];
    }
    const float k = static_cast<float>(r % 7);
    step<<<blocks, threads, 0, stream>>>(dx, n, k, count);
    for (int i = 0; i < n; ++i) x[i] = x[i] * 0.5f + k;
    CHECK(cudaMemcpyAsync(pooled, dx, bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaMemcpyAsync(dz + static_cast<size_t>(r) * chunk, z.data() + static_cast<size_t>(r) * chunk,
                          chunk * sizeof(float), cudaMemcpyHostToDevice, stream));
    CHECK(cudaEventRecord(done, stream));
    if (r % 8 == 7) {
      CHECK(cudaEventSynchronize(done));
      usleep(5000);
    }
    if (pause_ms > 0 && r == rounds / 2) {
      CHECK(cudaStreamSynchronize(stream));
      std::printf("idle\n");
      std::fflush(stdout);
      usleep(pause_ms * 1000);
    }
  }
  CHECK(cudaStreamSynchronize(stream));
  std::vector<float> gx(n), gy(n), gp(n), gz(z.size());
  CHECK(cudaMemcpy(gz.data(), dz, z.size() * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(gz.data(), z.data(), z.size() * sizeof(float)) == 0, "the copies from the host, bit for bit");
  CHECK(cudaMemcpy(gx.data(), dx, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(gy.data(), dy, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(gp.data(), pooled, bytes, cudaMemcpyDeviceToHost));
  unsigned long long counted = 0;
#ifndef NO_MODULE_VARIABLE
  CHECK(cudaMemcpyFromSymbol(&counted, launches, sizeof(counted)));
#else
  CHECK(cudaMemcpy(&counted, count, sizeof(counted), cudaMemcpyDeviceToHost));
#endif
  EXPECT(std::memcmp(gx.data(), x.data(), bytes) == 0, "x, bit for bit");
  EXPECT(std::memcmp(gy.data(), y.data(), bytes) == 0, "y, bit for bit");
  EXPECT(std::memcmp(gp.data(), x.data(), bytes) == 0, "the stream-ordered copy of x");
  // The launch captured into the graph is not run by the capture: each round runs two.
  EXPECTF(counted == 2ull * rounds, "launches counted %llu, want %llu", counted, 2ull * rounds);
  CHECK(cudaFree(count));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFreeAsync(pooled, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (failures == 0) std::printf("ok %llu\n", counted);
  return failures == 0 ? 0 : 1;
}
