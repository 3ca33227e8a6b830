// 32-bit bit manipulation intrinsics, bit fields (bfe/bfi) and a few PTX instructions written inline.
constexpr int kBitsResults = 24;

// Bit fields: nvcc extracts them with bfe and inserts with bfi.
struct Fields {
  unsigned lo : 5;
  unsigned mid : 11;
  unsigned hi : 16;
};
struct SignedFields {
  int a : 7;
  int b : 13;
  int c : 12;
};

union Word {
  unsigned u;
  Fields f;
  SignedFields s;
};

extern "C" __global__ void bit_ops(const unsigned* a, const unsigned* b, const unsigned* c, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = a[i], y = b[i], z = c[i];
  unsigned* r = out + kBitsResults * i;
  r[0] = __brev(x);
  r[1] = __clz((int)x);
  r[2] = __ffs((int)x);
  r[3] = __popc(x);
  r[4] = __byte_perm(x, y, z & 0x7777);
  r[5] = __funnelshift_l(x, y, z);
  r[6] = __funnelshift_lc(x, y, z & 63);
  r[7] = __funnelshift_r(x, y, z);
  r[8] = __funnelshift_rc(x, y, z & 63);
  Word w;
  w.u = x;
  r[9] = w.f.lo + w.f.mid * 3u + w.f.hi * 7u;
  // (Not a * 5 + b * 3 + c: nvcc turns that into dp2a, which dot.cu tests on its own.)
  r[10] = (unsigned)((w.s.a * 5) ^ (w.s.b * 3) ^ w.s.c);
  w.f.mid = y;  // Insert the low 11 bits of y.
  r[11] = w.u;
  unsigned pos = y & 31, len = z % 33;
  unsigned d;
  asm("bfe.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(pos), "r"(len));
  r[12] = d;
  int sd;
  asm("bfe.s32 %0, %1, %2, %3;" : "=r"(sd) : "r"((int)x), "r"(pos), "r"(len));
  r[13] = (unsigned)sd;
  asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(y), "r"(x), "r"(z & 31), "r"((z >> 8) % 33));
  r[14] = d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(y), "r"(z));  // Selector msbs replicate sign bits.
  r[15] = d;
  r[16] = __usad(x, y, z);
  r[17] = (unsigned)__sad((int)x, (int)y, z);
  r[18] = __uhadd(x, y);
  r[19] = __urhadd(x, y);
  r[20] = __umulhi(x, y);
  r[21] = (unsigned)__mulhi((int)x, (int)y);
  r[22] = __umul24(x, y);
  r[23] = (x << (z & 31)) | (x >> ((32 - (z & 31)) & 31));  // Rotate.
}
