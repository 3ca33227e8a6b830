// check.h: CHECK(call), which the examples wrap every CUDA runtime call in. On an error it prints which call
// failed and why, prefixed by the example's name, and makes main return 1, so each example stays a
// straight line of calls. An example defines its name, `constexpr char kExample[] = "vector_add";`, before main.
#pragma once

#include <cstdio>

#define CHECK(call)                                                                           \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s: %s failed: %s\n", kExample, #call, cudaGetErrorString(err_)); \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)
