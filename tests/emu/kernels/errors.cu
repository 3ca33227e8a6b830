// Kernels that fault on purpose: the emulated device must report each fault with CUDA's error code, make it
// sticky, and recover on ResetContext().
#include <cassert>

// Writes `value` through `p`; the host passes an address far outside any allocation.
extern "C" __global__ void write_at(int* p, int value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *p = value;
}

extern "C" __global__ void read_at(const int* p, int* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = *p;
}

// A 4-byte store to an address that is not 4-byte aligned.
extern "C" __global__ void misaligned_write(char* p) {
  if (threadIdx.x == 0) *reinterpret_cast<volatile int*>(p + 1) = 7;
}

extern "C" __global__ void assert_kernel(const int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int v = x[i];
    assert(v != 42);
  }
}

extern "C" __global__ void trap_kernel(int trigger) {
  if ((int)threadIdx.x == trigger) __trap();
}

// Used after a fault to show the context works again.
extern "C" __global__ void fill_index(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3 + 1;
}
