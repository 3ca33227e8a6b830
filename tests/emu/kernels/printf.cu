// Device printf from several threads and blocks. The host compares the captured output as a sorted multiset of
// lines against the same formats run through its own snprintf.
#include <cstdio>

extern "C" __global__ void printf_kernel(int base) {
  int t = threadIdx.x;
  const char* word = (t & 1) ? "odd" : "even";
  float f = (float)t * 0.25f - 1.0f;
  unsigned hex = 0xdeadbeefu ^ (unsigned)(t * 0x01010101);
  long long big = (long long)(t + base) * -123456789012ll;
  printf("t=%d b=%u f=%f s=%s x=%x ll=%lld\n", t - 4 + base, blockIdx.x, f, word, hex, big);
  if (t == 0) {
    printf("block %d of %d: %5d|%-6s|%.3f|%e|%c|%%|%llu|%08x|%g\n", blockIdx.x, gridDim.x, base, "ab", 3.14159,
           -0.000123, 'Z', 18446744073709551615ull, 0xabcu, 1.5e-7);
  }
  if (t == 1 && blockIdx.x == 0) printf("plain line without arguments\n");
}
