#include "proc_address.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/log.h"
#include "driver_tables.h"
#include "forward_spec.h"

namespace gpupool::interpose {

CUdriverProcAddressQueryResult FindProc(const char* name, int cuda_version, uint64_t flags, int* symbol) {
  const GpupoolProcName* begin = gpupool_interpose_names;
  const GpupoolProcName* end = begin + gpupool_interpose_name_count;
  const GpupoolProcName* entry = std::lower_bound(
      begin, end, name, [](const GpupoolProcName& e, const char* n) { return std::strcmp(e.name, n) < 0; });
  if (entry == end || std::strcmp(entry->name, name) != 0) return CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

  // The per-thread variants replace the legacy ones entirely: below their first version there is no per-thread
  // answer, as in the driver, rather than a silent fallback to legacy-stream semantics.
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 && entry->per_thread_count > 0;
  const int first = per_thread ? entry->per_thread_begin : entry->legacy_begin;
  const int count = per_thread ? entry->per_thread_count : entry->legacy_count;
  int found = -1;
  for (int i = first; i < first + count; ++i) {  // Ascending versions.
    if (gpupool_interpose_variants[i].version <= cuda_version) found = gpupool_interpose_variants[i].symbol;
  }
  if (found < 0) return CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  *symbol = found;
  return CU_GET_PROC_ADDRESS_SUCCESS;
}

CUresult GetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  int index = -1;
  const CUdriverProcAddressQueryResult result = FindProc(symbol, cuda_version, flags, &index);
  if (status != nullptr) *status = result;
  if (result != CU_GET_PROC_ADDRESS_SUCCESS) return CUDA_ERROR_NOT_FOUND;
  *pfn = gpupool_interpose_symbol_addresses[index];
  return CUDA_SUCCESS;
}

std::string ProcAddressTrace(const char* symbol, int cuda_version, cuuint64_t flags, CUresult r) {
  int index = -1;  // The variant found, found again (FindProc has no side effects).
  const bool found = r == CUDA_SUCCESS && symbol != nullptr &&
                     FindProc(symbol, cuda_version, flags, &index) == CU_GET_PROC_ADDRESS_SUCCESS;
  return fmt::format("{}, {}, flags={}{}", symbol != nullptr ? symbol : "NULL", cuda_version, flags,
                     found ? fmt::format(" = {}", gpupool_interpose_symbol_names[index]) : "");
}

}  // namespace gpupool::interpose

GP_PROC_ADDRESS_ENTRIES(GP_DEFINE_ENTRY)

extern "C" {

int gpupool_interpose_unimplemented(int symbol) {
  using namespace gpupool::interpose;
  const char* name =
      symbol >= 0 && symbol < gpupool_interpose_symbol_count ? gpupool_interpose_symbol_names[symbol] : "?";
  // In a child forked after cuInit: the same answer as every other entry point there, and no logger lock.
  if (ForkedAfterInit()) return ForkedChildCall(name);
  try {
    // One flag per variant, allocated once; leaked so that late calls from atexit handlers still find it.
    static std::atomic<bool>* reported = new std::atomic<bool>[gpupool_interpose_symbol_count]();
    if (std::getenv("GPUPOOL_LOG") != nullptr && symbol >= 0 && symbol < gpupool_interpose_symbol_count &&
        !reported[symbol].exchange(true)) {
      GP_WARN("interpose", "{} is not implemented: answering CUDA_ERROR_NOT_SUPPORTED", name);
    }
    if (TraceEnabled()) TraceCall(name, "", CUDA_ERROR_NOT_SUPPORTED);
  } catch (...) {
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // extern "C"
