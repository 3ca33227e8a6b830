// Recursive __device__ functions that nvcc must keep as real calls (__noinline__): they need the call stack
// (.param passing, local-memory frames) rather than inlining.

__device__ __noinline__ unsigned long long Factorial(unsigned n) { return n <= 1 ? 1ull : n * Factorial(n - 1); }

__device__ __noinline__ int Fibonacci(int n) { return n < 2 ? n : Fibonacci(n - 1) + Fibonacci(n - 2); }

__device__ __noinline__ bool IsOdd(unsigned n);
__device__ __noinline__ bool IsEven(unsigned n) { return n == 0 ? true : IsOdd(n - 1); }
__device__ __noinline__ bool IsOdd(unsigned n) { return n == 0 ? false : IsEven(n - 1); }

// A frame with a dynamically indexed array that must survive the recursive call (local memory per frame).
__device__ __noinline__ unsigned Frames(int depth, unsigned seed) {
  unsigned arr[8];
  for (int k = 0; k < 8; ++k) arr[k] = seed * (k + 1) + depth;
  unsigned below = depth > 0 ? Frames(depth - 1, seed + arr[depth & 7]) : 0u;
  return below * 31u + arr[seed & 7];
}

// One record per thread: n! for n = in[i] % 21, fib(in[i] % 17), parity of in[i] % 64, Frames(in[i] % 12, in[i]).
extern "C" __global__ void recursion(const unsigned* in, unsigned long long* fact, int* fib, int* parity,
                                     unsigned* frames, int count) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  unsigned v = in[i];
  fact[i] = Factorial(v % 21);
  fib[i] = Fibonacci(v % 17);
  parity[i] = IsEven(v % 64) ? 0 : 1;
  frames[i] = Frames(v % 12, v);
}
