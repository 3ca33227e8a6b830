// Parser test input: the common atomic forms.
extern "C" __global__ void atomics(int* counters, float* sum, unsigned long long* big, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(&counters[0], 1);
  atomicMax(&counters[1], i);
  atomicMin(&counters[2], i);
  atomicExch(&counters[3], i);
  atomicCAS(&counters[4], 0, i);
  atomicAnd(&counters[5], i);
  atomicOr(&counters[6], i);
  atomicXor(&counters[7], i);
  atomicInc(reinterpret_cast<unsigned*>(&counters[8]), 100u);
  atomicAdd(sum, in[i]);
  atomicAdd(big, 1ull);
}
