// The library unit of separate_main.cu (nvcc -rdc=true).
__device__ int library_calls = 0;
__constant__ int library_offset = 40;

// Same name as separate_main.cu's own, another body.
static __device__ __noinline__ int Local(int x) { return x - 7; }

__device__ int LibraryTransform(int x) { return Local(3 * x); }
