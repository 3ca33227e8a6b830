// Barriers that only some threads reach. In its own module because the deadlock needs a named barrier
// (bar.sync 1), so that a device which cannot load that still runs errors.cu.

// A true deadlock on any GPU: threads 0-15 wait at barrier 0 for the whole block while the rest wait at barrier 1
// for blockDim.x threads; no thread exits, so neither barrier can ever complete. The device must fail the launch
// (kLaunchTimeout) instead of hanging. REQUIRES: blockDim.x a multiple of 32, > 16.
extern "C" __global__ void barrier_deadlock(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    asm volatile("bar.sync 1, %0;" : : "r"(blockDim.x) : "memory");
  }
  out[threadIdx.x] = 1;
}

// Not a deadlock: threads that exit no longer hold up a barrier (PTX ISA, `exit`: "if the exiting threads are
// holding up the barrier, the barrier is released"), so the threads in the branch pass and write their flag.
extern "C" __global__ void barrier_after_exit(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = 1;
  }
}

// __syncthreads_count / _and / _or (bar.red): reduce a predicate across the block at the barrier.
extern "C" __global__ void barrier_reduce(const int* in, int* out) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  int count = __syncthreads_count(v > 0);
  int all = __syncthreads_and(v > -50);
  int any = __syncthreads_or(v > 90);
  if (threadIdx.x == 0) {
    out[3 * blockIdx.x] = count;
    out[3 * blockIdx.x + 1] = all;
    out[3 * blockIdx.x + 2] = any;
  }
}
