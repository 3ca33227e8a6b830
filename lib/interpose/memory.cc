// Memory management. Nothing is allocated yet: cuMemAlloc and friends are the generated stubs
// (CUDA_ERROR_NOT_SUPPORTED), so the only pointer that can be freed is NULL.
#include <fmt/format.h>

#include "api.h"
#include "driver.h"

namespace gpupool::interpose {
namespace {

// cudaFree(NULL), which programs call to create the context, reaches the driver as cuMemFree(0).
CUresult MemFree(const char* name, unsigned long long dptr) {
  return ApiCall(
      name,
      [&] {
        Driver& driver = Driver::Get();
        if (CUresult r = driver.CheckInitialized(); r != CUDA_SUCCESS) return r;
        if (Driver::Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
        // TODO(feature): free allocations once cuMemAlloc exists; until then no other pointer is ours.
        return dptr == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
      },
      [&](CUresult) { return fmt::format("dptr={:#x}", dptr); });
}

}  // namespace
}  // namespace gpupool::interpose

extern "C" {

CUresult cuMemFree(CUdeviceptr_v1 dptr) { return gpupool::interpose::MemFree("cuMemFree", dptr); }
CUresult cuMemFree_v2(CUdeviceptr dptr) { return gpupool::interpose::MemFree("cuMemFree_v2", dptr); }

}  // extern "C"
