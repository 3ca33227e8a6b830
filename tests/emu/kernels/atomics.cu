// Every global atomic function, each applied by all threads to one cell (or to one of kAtomicWords cells) so that
// the final value is independent of the order: sums of integers, minima, maxima, bitwise combinations, tickets
// whose returned old values form a permutation, and lock-free atomicCAS loops.
#include "kernel_types.h"

using kt::AtomicInput;
using kt::AtomicOld;
using kt::AtomicSlots;
using kt::SharedAtomicResult;

// The classic atomicAdd for double built from 64-bit atomicCAS (CUDA Programming Guide).
__device__ double CasAddDouble(double* address, double val) {
  unsigned long long* p = reinterpret_cast<unsigned long long*>(address);
  unsigned long long old = *p, assumed;
  do {
    assumed = old;
    old = atomicCAS(p, assumed, __double_as_longlong(val + __longlong_as_double(assumed)));
  } while (assumed != old);
  return __longlong_as_double(old);
}

// Not inlined, so the pointer's state space is unknown and the atomic is generic (atom without .global).
__device__ __noinline__ void GenericAdd(int* p, int v) { atomicAdd(p, v); }

extern "C" __global__ void atomics_all(AtomicSlots* s, const AtomicInput* in, AtomicOld* old, int n, unsigned inc_limit,
                                       unsigned dec_limit) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const AtomicInput x = in[i];
  AtomicOld o;

  atomicAdd(&s->add_i, x.v);
  o.ticket = atomicAdd(&s->ticket, 1u);
  atomicAdd(&s->add_f, (float)x.v);
  o.fticket = atomicAdd(&s->fticket, 1.0f);
  atomicAdd(&s->add_d, x.v * 0.125);
  atomicAdd(&s->add_ull, x.w);
  atomicSub(&s->sub_i, x.v);
  atomicSub(&s->sub_u, x.u);
  o.exch_i = atomicExch(&s->exch_i, i);
  atomicExch(&s->exch_f, (float)i);
  atomicExch(&s->exch_ull, x.w);
  atomicMin(&s->min_i, x.v);
  atomicMax(&s->max_i, x.v);
  atomicMin(&s->min_u, x.u);
  atomicMax(&s->max_u, x.u);
  atomicMin(&s->min_ll, (long long)x.w);
  atomicMax(&s->max_ll, (long long)x.w);
  atomicMin(&s->min_ull, x.w);
  atomicMax(&s->max_ull, x.w);
  o.inc = atomicInc(&s->inc, inc_limit);
  o.dec = atomicDec(&s->dec, dec_limit);

  // Lock-free increments: one thread wins each round, so this terminates under any scheduling.
  unsigned seen = *(volatile unsigned*)&s->cas_ticket, assumed;
  do {
    assumed = seen;
    seen = atomicCAS(&s->cas_ticket, assumed, assumed + 1);
  } while (seen != assumed);
  o.cas_ticket = assumed;

  int cur = *(volatile int*)&s->cas_sum, expected;
  do {
    expected = cur;
    cur = atomicCAS(&s->cas_sum, expected, expected + x.v);
  } while (cur != expected);

  unsigned long long cur64 = *(volatile unsigned long long*)&s->cas_ull, expected64;
  do {
    expected64 = cur64;
    cur64 = atomicCAS(&s->cas_ull, expected64, expected64 + x.w);
  } while (cur64 != expected64);

  CasAddDouble(&s->cas_d, x.v * 0.25);
  atomicAdd_block(&s->add_block, 1);
  atomicAdd_system(&s->add_system, x.v);
  GenericAdd(&s->generic_add, x.v);

  int w = i % kt::kAtomicWords;
  atomicAnd(&s->and32[w], x.and32);
  atomicOr(&s->or32[w], x.or32);
  atomicXor(&s->xor32[w], x.xor32);
  atomicAnd(&s->and64[w], x.and64);
  atomicOr(&s->or64[w], x.or64);
  atomicXor(&s->xor64[w], x.xor64);

  old[i] = o;
}

// The same functions on shared memory (atom.shared), one result per block. in[] holds blockDim.x values per
// block.
extern "C" __global__ void atomics_shared(const AtomicInput* in, SharedAtomicResult* out) {
  __shared__ int sum, mn, mx, exch_last, generic_add;
  __shared__ unsigned or_bits, and_bits, xor_bits, ticket, ticket_total, cas_count;
  if (threadIdx.x == 0) {
    sum = 0;
    mn = 0x7fffffff;
    mx = -0x7fffffff - 1;
    or_bits = 0;
    and_bits = 0xffffffffu;
    xor_bits = 0;
    ticket = 0;
    ticket_total = 0;
    cas_count = 0;
    exch_last = -1;
    generic_add = 0;
  }
  __syncthreads();
  const AtomicInput x = in[blockIdx.x * blockDim.x + threadIdx.x];
  atomicAdd(&sum, x.v);
  atomicMin(&mn, x.v);
  atomicMax(&mx, x.v);
  atomicOr(&or_bits, x.or32);
  atomicAnd(&and_bits, x.and32);
  atomicXor(&xor_bits, x.xor32);
  unsigned t = atomicInc(&ticket, 0xffffffffu);
  atomicAdd(&ticket_total, t);
  unsigned seen = *(volatile unsigned*)&cas_count, assumed;
  do {
    assumed = seen;
    seen = atomicCAS(&cas_count, assumed, assumed + 1);
  } while (seen != assumed);
  atomicExch(&exch_last, (int)threadIdx.x);
  GenericAdd(&generic_add, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    SharedAtomicResult r;
    r.sum = sum;
    r.min = mn;
    r.max = mx;
    r.or_bits = or_bits;
    r.and_bits = and_bits;
    r.xor_bits = xor_bits;
    r.ticket_total = ticket_total;
    r.cas_count = cas_count;
    r.exch_last = exch_last;
    r.generic_add = generic_add;
    out[blockIdx.x] = r;
  }
}
