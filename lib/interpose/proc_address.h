// cuGetProcAddress: how a (name, CUDA version, flags) request picks an ABI variant from the generated tables.
#ifndef GPUPOOL_INTERPOSE_PROC_ADDRESS_H_
#define GPUPOOL_INTERPOSE_PROC_ADDRESS_H_

#include <cstdint>

#include "api.h"

namespace gpupool::interpose {

// Finds the variant cuGetProcAddress answers for `name` requested at `cuda_version` with `flags`: among the
// variants of `name` (its per-thread ones if flags has CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM and `name`
// has any, else its legacy ones), the newest introduced at or before `cuda_version`. Sets `*symbol` to its index in
// gpupool_interpose_symbol_names/_addresses on success. Returns CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND for a name
// cudaTypedefs.h does not know, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT when every variant is newer than
// `cuda_version`.
CUdriverProcAddressQueryResult FindProc(const char* name, int cuda_version, uint64_t flags, int* symbol);

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_PROC_ADDRESS_H_
