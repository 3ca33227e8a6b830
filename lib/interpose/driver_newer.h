// Values of the driver ABI of CUDA releases newer than the headers gpupool may be built against (CUDA 13.0), which
// the hand-written entry points of those releases' variants (driver_variants_newer.txt) need. Under our own names,
// so that a build against newer headers, which define NVIDIA's, compiles the same; NVIDIA's name is in each comment.
#ifndef GPUPOOL_INTERPOSE_DRIVER_NEWER_H_
#define GPUPOOL_INTERPOSE_DRIVER_NEWER_H_

#include "api.h"

namespace gpupool::interpose {

// cuLaunchHostFunc_v2's syncMode (CUhostTaskSyncMode, CUDA 13.1): how the driver's thread waits for the next host
// function. CU_HOST_TASK_BLOCKING, CU_HOST_TASK_SPINWAIT.
inline constexpr unsigned int kHostTaskBlocking = 0;
inline constexpr unsigned int kHostTaskSpinWait = 1;

// CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED (CUDA 13.2): whether stream batch memory operations can do atomic
// reductions (CU_STREAM_MEM_OP_ATOMIC_REDUCTION).
inline constexpr int kDeviceAttributeAtomicReductionSupported = 148;
// One past the newest CUdevice_attribute gpupool answers: CU_DEVICE_ATTRIBUTE_MAX of CUDA 13.2, or of the headers.
inline constexpr int kDeviceAttributeEnd = CU_DEVICE_ATTRIBUTE_MAX > 149 ? CU_DEVICE_ATTRIBUTE_MAX : 149;

// Boilerplate by nature: below, a table of the newer headers' constants.
// CU_STREAM_MEM_OP_ATOMIC_REDUCTION (CUDA 13.2), a CUstreamBatchMemOpType.
inline constexpr int kStreamMemOpAtomicReduction = 8;

// Launch attributes of CUDA 13.2 (CUlaunchAttributeID), each taking a mode 0..2 (DEFAULT, REQUIRE_PORTABLE,
// ALLOW_NON_PORTABLE): CU_LAUNCH_ATTRIBUTE_PORTABLE_CLUSTER_SIZE_MODE (CUlaunchAttributePortableClusterMode),
// CU_LAUNCH_ATTRIBUTE_SHARED_MEMORY_MODE (CUsharedMemoryMode).
inline constexpr int kLaunchAttributePortableClusterSizeMode = 17;
inline constexpr int kLaunchAttributeSharedMemoryMode = 18;
inline constexpr int kLaunchModeDefault = 0;
inline constexpr int kLaunchModeRequirePortable = 1;
inline constexpr int kLaunchModeAllowNonPortable = 2;

// Read-only CUmemPool_attribute values of CUDA 13.2: CU_MEMPOOL_ATTR_ALLOCATION_TYPE (a CUmemAllocationType),
// _EXPORT_HANDLE_TYPES (CUmemAllocationHandleType), _LOCATION_ID (int), _LOCATION_TYPE (CUmemLocationType),
// _MAX_POOL_SIZE (cuuint64_t), _HW_DECOMPRESS_ENABLED (int).
inline constexpr int kMemPoolAttrAllocationType = 9;
inline constexpr int kMemPoolAttrExportHandleTypes = 10;
inline constexpr int kMemPoolAttrLocationId = 11;
inline constexpr int kMemPoolAttrLocationType = 12;
inline constexpr int kMemPoolAttrMaxPoolSize = 13;
inline constexpr int kMemPoolAttrHwDecompressEnabled = 14;

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_DRIVER_NEWER_H_
