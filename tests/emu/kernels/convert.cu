// Conversions with every rounding mode, saturation of out-of-range and NaN float-to-integer conversions (cvt
// clamps to the destination range and maps NaN to 0), half precision.
#include <cuda_fp16.h>

#include "kernel_types.h"

using kt::ConvertOut;

extern "C" __global__ void convert_kernel(const float* fx, const double* dx, const int* ix, const unsigned* ux,
                                          const long long* llx, const unsigned short* hx, ConvertOut* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float f = fx[i];
  double d = dx[i];
  int iv = ix[i];
  unsigned uv = ux[i];
  long long lv = llx[i];
  ConvertOut o;
  o.f2i[0] = __float2int_rn(f);
  o.f2i[1] = __float2int_rz(f);
  o.f2i[2] = __float2int_rd(f);
  o.f2i[3] = __float2int_ru(f);
  o.f2u[0] = __float2uint_rn(f);
  o.f2u[1] = __float2uint_rz(f);
  o.f2u[2] = __float2uint_rd(f);
  o.f2u[3] = __float2uint_ru(f);
  o.f2ll[0] = __float2ll_rn(f);
  o.f2ll[1] = __float2ll_rz(f);
  o.f2ll[2] = __float2ll_rd(f);
  o.f2ll[3] = __float2ll_ru(f);
  o.f2ull[0] = __float2ull_rn(f);
  o.f2ull[1] = __float2ull_rz(f);
  o.f2ull[2] = __float2ull_rd(f);
  o.f2ull[3] = __float2ull_ru(f);
  o.cast_i = (int)f;
  o.cast_u = (unsigned)f;
  o.cast_ll = (long long)f;
  double d3 = (double)f * 3.0;
  o.d2i[0] = __double2int_rn(d3);
  o.d2i[1] = __double2int_rz(d3);
  o.d2i[2] = __double2int_rd(d3);
  o.d2i[3] = __double2int_ru(d3);
  o.d2ll[0] = __double2ll_rn(d3);
  o.d2ll[1] = __double2ll_rz(d3);
  o.d2ll[2] = __double2ll_rd(d3);
  o.d2ll[3] = __double2ll_ru(d3);
  o.d2f[0] = __double2float_rn(d);
  o.d2f[1] = __double2float_rz(d);
  o.d2f[2] = __double2float_rd(d);
  o.d2f[3] = __double2float_ru(d);
  o.i2f[0] = __int2float_rn(iv);
  o.i2f[1] = __int2float_rz(iv);
  o.i2f[2] = __int2float_rd(iv);
  o.i2f[3] = __int2float_ru(iv);
  o.u2f[0] = __uint2float_rn(uv);
  o.u2f[1] = __uint2float_rz(uv);
  o.u2f[2] = __uint2float_rd(uv);
  o.u2f[3] = __uint2float_ru(uv);
  o.ll2f[0] = __ll2float_rn(lv);
  o.ll2f[1] = __ll2float_rz(lv);
  o.ll2f[2] = __ll2float_rd(lv);
  o.ll2f[3] = __ll2float_ru(lv);
  o.ll2d[0] = __ll2double_rn(lv);
  o.ll2d[1] = __ll2double_rz(lv);
  o.ll2d[2] = __ll2double_rd(lv);
  o.ll2d[3] = __ll2double_ru(lv);
  o.f2h[0] = __half_as_ushort(__float2half_rn(f));
  o.f2h[1] = __half_as_ushort(__float2half_rz(f));
  o.f2h[2] = __half_as_ushort(__float2half_rd(f));
  o.f2h[3] = __half_as_ushort(__float2half_ru(f));
  o.h2f = __half2float(__float2half_rn(f));
  __half h = __ushort_as_half(hx[i]);
  o.h_value = __half2float(h);
  o.h_roundtrip = __half_as_ushort(__float2half_rn(__half2float(h)));
  out[i] = o;
}
