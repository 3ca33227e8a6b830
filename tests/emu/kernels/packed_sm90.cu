// packed.cu built for sm_90, where cuda_bf16.h uses add/sub/mul.bf16x2 (sm_80 builds them from fma.rn.bf16x2).
#include "packed.cu"
