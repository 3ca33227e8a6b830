// Convenience header: the whole public API of libgpupool.
#ifndef GPUPOOL_GPUPOOL_H_
#define GPUPOOL_GPUPOOL_H_

#include "gpupool/lease.h"
#include "gpupool/pool.h"
#include "gpupool/request.h"
#include "gpupool/state.h"
#include "gpupool/status.h"
#include "gpupool/units.h"

#endif  // GPUPOOL_GPUPOOL_H_
