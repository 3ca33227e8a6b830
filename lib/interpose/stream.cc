// Stream management. No stream can be created yet; the default streams exist and are always idle. The _ptsz
// variants are the per-thread-default-stream forms (programs built with --default-stream per-thread), where
// the NULL stream means the calling thread's default stream instead of the legacy one.
#include <fmt/format.h>

#include "api.h"
#include "driver.h"

namespace gpupool::interpose {
namespace {

// NULL and the two named default streams; any other handle would have come from cuStreamCreate.
bool IsDefaultStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

// cuStreamQuery and cuStreamSynchronize: nothing is ever pending.
// TODO(feature): wait for the work queued on the slice once launches and async copies exist.
CUresult DefaultStreamIdle(const char* name, CUstream stream) {
  return ApiCall(
      name,
      [&] {
        if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
        if (Driver::Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
        return IsDefaultStream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
      },
      [&](CUresult) { return fmt::format("stream={}", static_cast<void*>(stream)); });
}

}  // namespace
}  // namespace gpupool::interpose

extern "C" {

CUresult cuStreamQuery(CUstream stream) { return gpupool::interpose::DefaultStreamIdle("cuStreamQuery", stream); }
CUresult cuStreamQuery_ptsz(CUstream stream) {
  return gpupool::interpose::DefaultStreamIdle("cuStreamQuery_ptsz", stream);
}
CUresult cuStreamSynchronize(CUstream stream) {
  return gpupool::interpose::DefaultStreamIdle("cuStreamSynchronize", stream);
}
CUresult cuStreamSynchronize_ptsz(CUstream stream) {
  return gpupool::interpose::DefaultStreamIdle("cuStreamSynchronize_ptsz", stream);
}

}  // extern "C"
