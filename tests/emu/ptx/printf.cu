// Parser test input: device printf (vprintf with a local argument buffer and a .global format string).
#include <cstdio>
extern "C" __global__ void hello(int x, double y) { printf("hello from %d: x=%d y=%f\n", threadIdx.x, x, y); }
