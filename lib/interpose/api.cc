#include "api.h"

#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "core/log.h"

namespace gpupool::interpose {

bool TraceEnabled() {
  static const bool enabled = [] {
    try {
      return log::Enabled(log::Level::kDebug, "interpose");
    } catch (...) {
      return false;
    }
  }();
  return enabled;
}

void TraceCall(const char* name, const std::string& args, CUresult result) noexcept {
  try {
    log::Write(log::Level::kDebug, "interpose", fmt::format("{}({}) -> {}", name, args, ResultName(result)));
  } catch (...) {
  }
}

namespace {
std::atomic<bool> forked_after_init{false};
std::atomic<bool> fork_reported{false};
}  // namespace

bool ForkedAfterInit() noexcept { return forked_after_init.load(std::memory_order_relaxed); }

void WatchForks() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, [] { forked_after_init.store(true); }); });
}

CUresult ForkedChildCall(const char* name) noexcept {
  static constexpr const char* kStateless[] = {"cuGetErrorName", "cuGetErrorString", "cuDriverGetVersion"};
  for (const char* stateless : kStateless) {
    if (std::strcmp(name, stateless) == 0) return CUDA_SUCCESS;
  }
  // What cudart's atexit teardown calls in any child that exits with exit(): refused without a word, or every
  // forked worker that never used CUDA would print the line below.
  static constexpr const char* kTeardown[] = {"cuLibraryUnload", "cuModuleUnload", "cuDevicePrimaryCtxRelease",
                                              "cuDevicePrimaryCtxRelease_v2", "cuCtxDestroy", "cuCtxDestroy_v2",
                                              "context_local_storage.delete"};
  for (const char* teardown : kTeardown) {
    if (std::strcmp(name, teardown) == 0) return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (!fork_reported.exchange(true)) {
    // Straight to stderr, formatted by hand: the logger's lock (or malloc's) may have been held by another thread
    // of the parent at fork().
    static constexpr char kBefore[] = "gpupool: this process was forked after CUDA was initialised: ";
    static constexpr char kAfter[] =
        " and every later CUDA call fail with CUDA_ERROR_NOT_INITIALIZED (as with NVIDIA's driver); use CUDA in "
        "the parent only, or start the child with exec (Python: the 'spawn' start method)\n";
    const struct iovec parts[] = {{const_cast<char*>(kBefore), sizeof(kBefore) - 1},
                                  {const_cast<char*>(name), std::strlen(name)},
                                  {const_cast<char*>(kAfter), sizeof(kAfter) - 1}};
    ssize_t ignored = writev(STDERR_FILENO, parts, 3);
    (void)ignored;
  }
  return CUDA_ERROR_NOT_INITIALIZED;
}

CUresult ReportException(const char* name) noexcept {
  try {
    static std::mutex mu;
    static auto* reported = new std::set<std::string>();  // Leaked: may be used during static destruction.
    std::lock_guard<std::mutex> lock(mu);
    if (reported->insert(name).second) {
      GP_ERROR("interpose", "{}: internal error (C++ exception), answering CUDA_ERROR_UNKNOWN", name);
    }
  } catch (...) {
  }
  return CUDA_ERROR_UNKNOWN;
}

}  // namespace gpupool::interpose
