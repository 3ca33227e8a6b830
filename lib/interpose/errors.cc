// cuGetErrorName / cuGetErrorString. Names come from cuda.h (generated table); descriptions are the driver's
// wording for the errors programs commonly print, and the name in words for the rest.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <string>

#include "api.h"
#include "driver_tables.h"
#include "forward_spec.h"

namespace gpupool::interpose {
namespace {

const GpupoolResultName* FindResult(int value) {
  for (int i = 0; i < gpupool_interpose_result_name_count; ++i) {
    if (gpupool_interpose_result_names[i].value == value) return &gpupool_interpose_result_names[i];
  }
  return nullptr;
}

// Boilerplate by nature: a table of the driver's descriptions, one case a code (as nvml.cc's nvmlErrorString).
const char* KnownDescription(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA driver is a stub library";
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return "CUDA-capable device(s) is/are busy or unavailable";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT: return "context already current";
    case CUDA_ERROR_MAP_FAILED: return "mapping of buffer object failed";
    case CUDA_ERROR_UNMAP_FAILED: return "unmapping of buffer object failed";
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return "no kernel image is available for execution on the device";
    case CUDA_ERROR_INVALID_PTX: return "a PTX JIT compilation failed";
    case CUDA_ERROR_INVALID_SOURCE: return "device kernel image is invalid";
    case CUDA_ERROR_FILE_NOT_FOUND: return "file not found";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "too many resources requested for launch";
    case CUDA_ERROR_LAUNCH_TIMEOUT: return "the launch timed out and was terminated";
    case CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE: return "primary context active";
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return "context is destroyed";
    case CUDA_ERROR_ASSERT: return "device-side assert triggered";
    case CUDA_ERROR_ILLEGAL_INSTRUCTION: return "an illegal instruction was encountered";
    case CUDA_ERROR_MISALIGNED_ADDRESS: return "misaligned address";
    case CUDA_ERROR_LAUNCH_FAILED: return "unspecified launch failure";
    case CUDA_ERROR_NOT_PERMITTED: return "operation not permitted";
    case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
    case CUDA_ERROR_UNKNOWN: return "unknown error";
    default: return nullptr;
  }
}

// "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED" -> "peer access unsupported". Built once per value, kept for the life of
// the process because callers keep the returned pointer.
const char* DerivedDescription(const GpupoolResultName& result) {
  static std::mutex mu;
  static auto* cache = new std::map<int, std::string>();  // Leaked on purpose, like the strings it hands out.
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = cache->try_emplace(result.value);
  if (inserted) {
    std::string_view name = result.name;
    constexpr std::string_view kPrefix = "CUDA_ERROR_";
    if (name.substr(0, kPrefix.size()) == kPrefix) name.remove_prefix(kPrefix.size());
    std::string text(name);
    for (char& c : text) c = c == '_' ? ' ' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    it->second = std::move(text);
  }
  return it->second.c_str();
}

}  // namespace

std::string ResultName(CUresult result) {
  if (const GpupoolResultName* r = FindResult(result)) return r->name;
  return fmt::format("CUresult({})", static_cast<int>(result));
}

}  // namespace gpupool::interpose

namespace gpupool::interpose {

CUresult ErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const GpupoolResultName* r = FindResult(error);
  *pStr = r != nullptr ? r->name : nullptr;
  return r != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult ErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const GpupoolResultName* r = FindResult(error);
  if (r == nullptr) {
    *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  const char* known = KnownDescription(error);
  *pStr = known != nullptr ? known : DerivedDescription(*r);
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_ERROR_ENTRIES(GP_DEFINE_ENTRY)
