// Module management. Loading code is not implemented yet; this file answers how cudart should load it.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "api.h"

using gpupool::interpose::ApiCall;

extern "C" {

// Lazy unless CUDA_MODULE_LOADING=EAGER: cudart does not read that variable itself, it asks the driver here, and
// loads every module at init when the answer is eager (shared/design/CUDA-NOTES.md).
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  return ApiCall(
      "cuModuleGetLoadingMode",
      [&] {
        if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
        const char* env = std::getenv("CUDA_MODULE_LOADING");
        *mode = env != nullptr && std::strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
        return CUDA_SUCCESS;
      },
      [&](CUresult r) {
        return r == CUDA_SUCCESS ? fmt::format("-> {}", *mode == CU_MODULE_LAZY_LOADING ? "lazy" : "eager") : "";
      });
}

}  // extern "C"
