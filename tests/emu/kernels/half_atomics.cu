// 16-bit atomics: atomicAdd on __half and __nv_bfloat16 (atom.add.noftz.f16/.bf16) and atomicCAS on unsigned
// short (atom.cas.b16), from many blocks at once, next to neighbouring halves in the same 32-bit word.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" __global__ void half_atomics(__half* half_sums, __nv_bfloat16* bf16_sums, unsigned short* cas_slot,
                                        int* cas_winners) {
  // Adjacent halves share a word: each must only ever see its own increments.
  atomicAdd(&half_sums[threadIdx.x & 1], __float2half(1.0f));
  atomicAdd(&bf16_sums[threadIdx.x & 1], __float2bfloat16(1.0f));
  unsigned short mine = static_cast<unsigned short>(blockIdx.x * blockDim.x + threadIdx.x + 1);
  if (atomicCAS(cas_slot, static_cast<unsigned short>(0), mine) == 0) atomicAdd(cas_winners, 1);
}
