// bad_kernel: a kernel that writes through a wild pointer. A GPU (and the emulated device) reports an illegal
// address; the program prints the error and exits 3. Exit 0 would mean the fault went unnoticed.
#include <cstdio>

__global__ void Wild(int* p) { p[threadIdx.x * 1024] = 42; }

int main() {
  int* ok = nullptr;
  if (cudaMalloc(&ok, 4096) != cudaSuccess) return 2;
  Wild<<<1, 32>>>(reinterpret_cast<int*>(0x10));
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("bad_kernel: %s\n", cudaGetErrorName(e));
  return e == cudaSuccess ? 0 : 3;
}
