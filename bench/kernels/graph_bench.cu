// Graph launch against the same work launched call by call, on a slice (run under gp-run): 64 small kernels and
// memsets per iteration, each iteration ended by a stream synchronisation. A graph launch sends the iteration's
// work as one message (session call `batch`); call by call sends 128 posted messages. Prints the mean time per
// iteration of each and their ratio (stream / graph: above 1, the graph is faster), measured in the same run, and the
// same for the host time of the calls that queue an iteration (the 128 calls, or cudaGraphLaunch): a graph launched
// again unchanged sends the messages its last launch built.
//   gp-run -- build/bench/graph_bench [iterations]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void Bump(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

constexpr int kOps = 64, kN = 256;

void Work(int* buffer, cudaStream_t s) {
  for (int k = 0; k < kOps; ++k) {
    cudaMemsetAsync(buffer + k * kN, 0, kN * sizeof(int), s);
    Bump<<<1, kN, 0, s>>>(buffer + k * kN, kN);
  }
}

struct Means {
  double ms;        // An iteration, queued and waited for.
  double queue_us;  // The calls that queue it.
};

template <typename F>
Means Measure(int iterations, cudaStream_t s, F f) {
  using Clock = std::chrono::steady_clock;
  Clock::duration queueing{};
  auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    auto before = Clock::now();
    f();
    queueing += Clock::now() - before;
    cudaStreamSynchronize(s);
  }
  return {std::chrono::duration<double, std::milli>(Clock::now() - start).count() / iterations,
          std::chrono::duration<double, std::micro>(queueing).count() / iterations};
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 50;
  int* buffer;
  cudaStream_t s;
  if (cudaMalloc(&buffer, kOps * kN * sizeof(int)) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
    std::printf("graph_bench: no device\n");
    return 1;
  }
  cudaGraph_t g;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  Work(buffer, s);
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&exec, g, 0);
  // Warm-up of both paths (module loads, first messages).
  Measure(3, s, [&] { Work(buffer, s); });
  Measure(3, s, [&] { cudaGraphLaunch(exec, s); });
  Means stream = Measure(iterations, s, [&] { Work(buffer, s); });
  Means graph = Measure(iterations, s, [&] { cudaGraphLaunch(exec, s); });
  int check = 0;
  cudaMemcpy(&check, buffer + 5, sizeof(int), cudaMemcpyDeviceToHost);
  if (cudaGetLastError() != cudaSuccess || check != 1) {
    std::printf("graph_bench: wrong result (%d)\n", check);
    return 1;
  }
  std::printf("graph_bench: %d ops/iteration, %d iterations: stream %.3f ms, graph %.3f ms, ratio %.2f\n",
              2 * kOps, iterations, stream.ms, graph.ms, stream.ms / graph.ms);
  std::printf("graph_bench: queueing an iteration: stream %.1f us, graph %.1f us, ratio %.2f\n", stream.queue_us,
              graph.queue_us, stream.queue_us / graph.queue_us);
  return 0;
}
