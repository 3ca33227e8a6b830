// CHECK, EXPECT and EXPECTF for the CUDA test programs: each failure prints one line starting with the program's name
// (define PROGRAM_NAME before including this) and counts in `failures`; the program reports the count at its end.
#ifndef GPUPOOL_TESTS_REMOTE_PROGRAMS_PROGRAM_CHECKS_H_
#define GPUPOOL_TESTS_REMOTE_PROGRAMS_PROGRAM_CHECKS_H_

#include <cstdio>
#include <cstdlib>

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

#ifdef CUDA_VERSION
// DRV(call): CHECK for a driver API call (cuda.h included first), naming the CUresult.
#define DRV(call)                                                                 \
  do {                                                                            \
    CUresult r_ = (call);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                     \
      const char* name_ = nullptr;                                                \
      cuGetErrorName(r_, &name_);                                                 \
      std::printf(PROGRAM_NAME ": %s failed: %s\n", #call, name_ ? name_ : "?"); \
      ++failures;                                                                 \
    }                                                                             \
  } while (0)
#endif

// REQUIRE(cond, format, ...) and REQUIRE_OK(call): a failure ends the program at once (exit status 1), for checks
// that later steps build on, or that run over whole arrays (the first wrong element is the one worth a line).
#define REQUIRE(cond, ...)                                                \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::printf(PROGRAM_NAME ": FAILED at line %d: %s: ", __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                           \
      std::printf("\n");                                                  \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)
#define REQUIRE_OK(call)                                                                                     \
  do {                                                                                                       \
    cudaError_t err_ = (call);                                                                               \
    if (err_ != cudaSuccess) {                                                                               \
      std::printf(PROGRAM_NAME ": %s failed at line %d: %s\n", #call, __LINE__, cudaGetErrorString(err_));  \
      std::exit(1);                                                                                          \
    }                                                                                                        \
  } while (0)

// REQUIRE_REFUSED(call, expected, what): the call must answer `expected` (else the program ends at once, as REQUIRE);
// the runtime's last error, which a refusal sets, is cleared for the checks after it.
#define REQUIRE_REFUSED(call, expected, what)                                                            \
  do {                                                                                                   \
    cudaError_t err_ = (call);                                                                           \
    if (err_ != (expected)) {                                                                            \
      std::printf(PROGRAM_NAME ": FAILED at line %d: %s (%s): %s, expected %s\n", __LINE__, #call, what, \
                  cudaGetErrorName(err_), #expected);                                                    \
      std::exit(1);                                                                                      \
    }                                                                                                    \
    cudaGetLastError();                                                                                  \
  } while (0)

// The device's free memory once the work queued before has run (its frees included): cudaDeviceSynchronize, then
// cudaMemGetInfo, each CHECKed. For the checks that what a program freed went back to the slice.
static inline size_t FreeMemoryWhenIdle() {
  CHECK(cudaDeviceSynchronize());
  size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

// Whether the program runs on a slice (gp-run sets GPUPOOL_LEASE). For checks of what gpupool promises beyond the
// driver (a slice counts memory when it is promised, where a GPU takes it lazily); run natively, the program checks
// itself against the GPU's own driver and skips them.
static inline bool OnSlice() { return std::getenv("GPUPOOL_LEASE") != nullptr; }

#endif  // GPUPOOL_TESTS_REMOTE_PROGRAMS_PROGRAM_CHECKS_H_
