// Bytes per channel of a CUarray_format, for the interposer (arrays, textures) and the agent (texture checks, the
// cuda backend): one table, so that both sides of the wire size a texel alike. Header-only: it needs cuda.h, which
// only they see.
#ifndef GPUPOOL_CORE_ARRAY_FORMAT_H_
#define GPUPOOL_CORE_ARRAY_FORMAT_H_

#include <cuda.h>

#include <cstdint>

namespace gpupool {

// Bytes of one channel of a texel of `format` (a CUarray_format, as an integer: a tenant's value off the wire may
// name no enumerator, and converting it to the enum first would be undefined); 0 for a format gpupool does not
// support (the block-compressed and packed ones, or none at all).
inline uint32_t ChannelBytes(uint32_t format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
  }
}

}  // namespace gpupool

#endif  // GPUPOOL_CORE_ARRAY_FORMAT_H_
