// libgpupool.so is gpupool_internal linked whole, with only the public API (namespace gpupool, minus
// gpupool::internal and the wire types) exported by libgpupool.map. This file anchors the target.
#include "gpupool/gpupool.h"
