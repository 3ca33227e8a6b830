// Parser test input: a recursive __device__ function that stays a real call (.func with a return parameter).
extern "C" __device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
extern "C" __global__ void fib_kernel(int* out, int n) { out[threadIdx.x] = fib(n + threadIdx.x); }
