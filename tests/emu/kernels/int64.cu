// 64-bit integer arithmetic: multiply, divide and remainder (a software routine in PTX for 64 bits), shifts, high
// halves of products, and the 64-bit bit-counting intrinsics.
constexpr int kInt64Results = 20;

// out holds kInt64Results values per element. REQUIRES: b[i] != 0 and not (a[i] == INT64_MIN && b[i] == -1).
extern "C" __global__ void int64_ops(const long long* a, const long long* b, unsigned long long* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long x = a[i], y = b[i];
  unsigned long long ux = x, uy = y;
  unsigned s = (unsigned)y & 63;
  unsigned long long* r = out + (long long)kInt64Results * i;
  r[0] = ux + uy;
  r[1] = ux - uy;
  r[2] = ux * uy;
  r[3] = (unsigned long long)(x / y);
  r[4] = (unsigned long long)(x % y);
  r[5] = ux / uy;
  r[6] = ux % uy;
  r[7] = ux << s;
  r[8] = (unsigned long long)(x >> s);  // Arithmetic.
  r[9] = ux >> s;                       // Logical.
  r[10] = (unsigned long long)__mul64hi(x, y);
  r[11] = __umul64hi(ux, uy);
  r[12] = (unsigned long long)__clzll(x);
  r[13] = (unsigned long long)__popcll(ux);
  r[14] = __brevll(ux);
  r[15] = (unsigned long long)__ffsll(x);
  r[16] = (unsigned long long)(x < y ? x : y);
  r[17] = ux > uy ? ux : uy;
  r[18] = (unsigned long long)(long long)(int)x * (unsigned long long)(long long)(int)y;  // mul.wide.s32
  r[19] = (unsigned long long)(unsigned)x * (unsigned)y;                                  // mul.wide.u32
}
