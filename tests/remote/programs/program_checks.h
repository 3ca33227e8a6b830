// CHECK, EXPECT and EXPECTF for the CUDA test programs: each failure prints one line starting with the program's name
// (define PROGRAM_NAME before including this) and counts in `failures`; the program reports the count at its end.
#ifndef GPUPOOL_TESTS_REMOTE_PROGRAMS_PROGRAM_CHECKS_H_
#define GPUPOOL_TESTS_REMOTE_PROGRAMS_PROGRAM_CHECKS_H_

#include <cstdio>

static int failures = 0;
#define CHECK(call)                                                                                 \
  do {                                                                                              \
    cudaError_t err_ = (call);                                                                      \
    if (err_ != cudaSuccess) {                                                                      \
      std::printf(PROGRAM_NAME ": %s failed: %s\n", #call, cudaGetErrorString(err_));               \
      ++failures;                                                                                   \
    }                                                                                               \
  } while (0)
#define EXPECT(cond, what)                                         \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::printf(PROGRAM_NAME ": %s: expected %s\n", what, #cond); \
      ++failures;                                                  \
    }                                                              \
  } while (0)

// EXPECTF(cond, format, ...): as EXPECT, saying what failed in printf's words (library results: statuses, counts).
#define EXPECTF(cond, ...)                             \
  do {                                                 \
    if (!(cond)) {                                     \
      std::printf(PROGRAM_NAME ": FAILED: " __VA_ARGS__); \
      std::printf("\n");                               \
      ++failures;                                      \
    }                                                  \
  } while (0)

#endif  // GPUPOOL_TESTS_REMOTE_PROGRAMS_PROGRAM_CHECKS_H_
