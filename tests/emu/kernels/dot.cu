// Integer dot-product instructions (dp4a, dp2a; sm_61+). nvcc also emits dp2a on its own for expressions like
// a * 5 + b * 3 + c over 16- and 8-bit values, so ordinary code needs them too.
constexpr int kDotResults = 6;

extern "C" __global__ void dot_ops(const unsigned* a, const unsigned* b, const unsigned* c, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = a[i], y = b[i], z = c[i];
  unsigned* r = out + kDotResults * i;
  r[0] = (unsigned)__dp4a((int)x, (int)y, (int)z);
  r[1] = __dp4a(x, y, z);
  r[2] = (unsigned)__dp2a_lo((int)x, (int)y, (int)z);
  r[3] = __dp2a_lo(x, y, z);
  r[4] = (unsigned)__dp2a_hi((int)x, (int)y, (int)z);
  r[5] = __dp2a_hi(x, y, z);
}
