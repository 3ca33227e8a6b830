// Helpers shared by the hand-written driver entry points (device.cc, context.cc, ...).
//
// Every entry point is an extern "C" function with the driver's own name and prototype, whose body runs through
// ApiCall(): that is where the "nothing escapes into the user's program" rule of STYLE.md point 9 is enforced
// (a C++ exception becomes CUDA_ERROR_UNKNOWN and one log line on stderr) and where GPUPOOL_LOG=debug traces
// every call. Nothing here writes to stdout.
#ifndef GPUPOOL_INTERPOSE_API_H_
#define GPUPOOL_INTERPOSE_API_H_

// Declares every ABI variant (cuDeviceTotalMem and cuDeviceTotalMem_v2, cuCtxPushCurrent and _v2...) under its
// real symbol name instead of mapping the plain names onto the newest variant: the library defines them all.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <string>
#include <type_traits>
#include <utility>

namespace gpupool::interpose {

// True when GPUPOOL_LOG asks for debug output (or more) for the "interpose" subsystem. Cached after the first call.
bool TraceEnabled();
// Writes one trace line "name(args) -> RESULT_NAME" at debug level. Never throws.
void TraceCall(const char* name, const std::string& args, CUresult result) noexcept;
// Logs (once per process and name) that an exception reached the API boundary; returns CUDA_ERROR_UNKNOWN.
CUresult ReportException(const char* name) noexcept;
// "CUDA_ERROR_INVALID_VALUE", or "CUresult(12345)" for a value cuda.h does not name.
std::string ResultName(CUresult result);

// Whether this process is a child forked after cuInit. Its parent's sessions, connections and client thread are not
// its own (the thread does not even exist in the child), so, as with NVIDIA's driver, such a child cannot use CUDA:
// entry points answer CUDA_ERROR_NOT_INITIALIZED at once, never waiting on the parent's state, and never send a
// byte on the parent's connections. The parent is untouched. A child that execs starts afresh.
bool ForkedAfterInit() noexcept;
// Arms ForkedAfterInit for children forked from now on (called once cuInit has attached the slices).
void WatchForks() noexcept;
// The answer of entry point `name` in such a child: CUDA_ERROR_NOT_INITIALIZED (named once on stderr), or
// CUDA_SUCCESS for the few that need no driver state (error names, the driver version), which then run as usual.
// cudart's teardown at exit() is refused without a word.
CUresult ForkedChildCall(const char* name) noexcept;

struct NoArgs {
  std::string operator()(CUresult) const { return {}; }
};

// Runs `body` (returning CUresult) as the implementation of entry point `name`. When tracing, `describe(result)`
// renders the arguments (and, on success, the outputs) for the trace line; it is not called otherwise.
template <typename Body, typename Describe = NoArgs>
CUresult ApiCall(const char* name, Body&& body, Describe&& describe = {}) noexcept {
  CUresult result;
  if (ForkedAfterInit()) [[unlikely]] {
    if (CUresult refused = ForkedChildCall(name); refused != CUDA_SUCCESS) return refused;
  }
  try {
    result = std::forward<Body>(body)();
  } catch (...) {
    result = ReportException(name);
  }
  if (TraceEnabled()) {
    std::string args;
    try {
      args = describe(result);
    } catch (...) {
      args.clear();  // Not `args = "?"`: GCC 12 -Wrestrict misfires on that after inlining.
      args.push_back('?');
    }
    TraceCall(name, args, result);
  }
  return result;
}

// Same for private export-table entries whose return type is not CUresult (void, uint32_t): `body` returns T.
template <typename T, typename Body>
T TableCall(const char* name, T on_exception, Body&& body) noexcept {
  T value = on_exception;
  if (ForkedAfterInit()) [[unlikely]] return on_exception;  // Private tables: cudart's bookkeeping, no word.
  try {
    value = std::forward<Body>(body)();
  } catch (...) {
    ReportException(name);
  }
  if (TraceEnabled()) TraceCall(name, {}, CUDA_SUCCESS);
  return value;
}

// The version cuDriverGetVersion reports, and which the integrity check hashes: the newest CUDA release whose
// driver ABI this library serves. That is the CUDA_VERSION of the headers it was built against, or, when newer, the
// newest release of driver_variants_newer.txt (13020 for CUDA 13.2): GPUPOOL_DRIVER_VERSION, from
// lib/interpose/CMakeLists.txt. A cudart or library of that release then finds every driver entry point it asks
// for by its version, each either implemented or refused with CUDA_ERROR_NOT_SUPPORTED, never an older ABI in its
// place (cuLaunchHostFunc at 13010 is the 4-argument cuLaunchHostFunc_v2). Libraries newer than the driver they
// find warn about it (cuda.core) or avoid what it lacks. cudart 13 refuses anything below 13000.
inline constexpr int kDriverVersion = GPUPOOL_DRIVER_VERSION;
static_assert(kDriverVersion >= CUDA_VERSION, "the driver version is at least the headers' CUDA_VERSION");
static_assert(kDriverVersion >= 13000, "build against CUDA 13 headers: cudart 13 needs a driver version >= 13000");

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_API_H_
