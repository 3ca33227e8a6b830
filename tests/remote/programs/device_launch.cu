// device_launch: kernels launched from the device (CUDA dynamic parallelism, built with -rdc=true and
// libcudadevrt). The emulated device does not run device-side launches: the module is refused when it loads, the
// host's launch fails, and the library's log line names device-side launch. Never a silent wrong result: the
// program exits 1 when the launch is refused and 2 when the children's results are wrong.
#include <cstdio>

__global__ void FillChild(int* out, int base) { out[base + threadIdx.x] = base + threadIdx.x; }

__global__ void LaunchChildren(int* out) {
  if (threadIdx.x == 0) FillChild<<<1, 32>>>(out, blockIdx.x * 32);
}

int main() {
  constexpr int kBlocks = 4, kCount = kBlocks * 32;
  int* out = nullptr;
  cudaMalloc(&out, kCount * sizeof(int));
  cudaMemset(out, 0xff, kCount * sizeof(int));
  LaunchChildren<<<kBlocks, 32>>>(out);
  cudaError_t launched = cudaGetLastError();
  cudaError_t ran = cudaDeviceSynchronize();
  if (launched != cudaSuccess || ran != cudaSuccess) {
    std::fprintf(stderr, "device_launch: the launch failed: %s / %s\n", cudaGetErrorName(launched),
                 cudaGetErrorName(ran));
    return 1;
  }
  int host[kCount];
  cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += host[i] != i;
  std::printf("device_launch: %d of %d wrong: %s\n", wrong, kCount, wrong ? "FAILED" : "PASSED");
  return wrong ? 2 : 0;
}
