#include "api.h"

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
