// Kernel launches and what programs ask before launching (occupancy). Arguments travel as one packed buffer laid
// out by the function's parameter table (offset and size of each parameter, from the slice, cached per function
// and slice). The entry points are generated from forward_spec.h.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include <cuda_occupancy.h>

#include "core/log.h"
#include "driver.h"
#include "driver_newer.h"
#include "forward_spec.h"
#include "graph.h"
#include "host_functions.h"
#include "managed.h"
#include "remote.h"

namespace gpupool::interpose {
namespace {

CUresult PackParams(const RemoteFunctionInfo& info, void** params, void** extra, std::vector<uint8_t>* out) {
  if (params != nullptr) {
    size_t total = 0;
    for (const auto& p : info.params) total = std::max<size_t>(total, p.offset + p.size);
    out->assign(total, 0);
    for (size_t i = 0; i < info.params.size(); ++i) {
      if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(out->data() + info.params[i].offset, params[i], info.params[i].size);
    }
    return CUDA_SUCCESS;
  }
  if (extra != nullptr) {
    const void* buffer = nullptr;
    size_t size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size = *static_cast<const size_t*>(extra[i + 1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (size != 0 && buffer == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto* p = static_cast<const uint8_t*>(buffer);
    out->assign(p, p + size);
    return CUDA_SUCCESS;
  }
  out->clear();
  return info.params.empty() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Checks a launch of `f` on slice `dev` the way the driver does and packs its arguments by the function's parameter
// table into a kernel node's work (what a launch sends, a capture records and a graph replays).
// `shared_memory_mode`: CUDA 13.2's launch attribute CU_LAUNCH_ATTRIBUTE_SHARED_MEMORY_MODE (driver_newer.h).
CUresult PrepareLaunch(CUfunction f, const uint32_t grid[3], const uint32_t block[3], unsigned int shared, int dev,
                       void** params, void** extra, const uint32_t* cluster, NodeWork* work,
                       RemoteFunctionInfo* info, int shared_memory_mode = kLaunchModeDefault) {
  Remote& remote = Remote::Get();
  Kernel* kernel;
  if (CUresult r = remote.ResolveKernel(f, &kernel); r != CUDA_SUCCESS) return r;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  // The shape is refused here, by the call, as the driver refuses it: a launch is posted, and the slice's own check
  // would report it only at the next synchronising call, as if the kernel had run and failed.
  static constexpr CUdevice_attribute kBlockDims[3] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                                                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
  static constexpr CUdevice_attribute kGridDims[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                                      CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                                      CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
  static constexpr int kBlockDimDefaults[3] = {1024, 1024, 64};
  static constexpr int kGridDimDefaults[3] = {2147483647, 65535, 65535};
  for (int i = 0; i < 3; ++i) {
    if (block[i] > static_cast<uint32_t>(DeviceAttribute(dev, kBlockDims[i], kBlockDimDefaults[i])) ||
        grid[i] > static_cast<uint32_t>(DeviceAttribute(dev, kGridDims[i], kGridDimDefaults[i]))) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const uint64_t threads = uint64_t{block[0]} * block[1] * block[2];
  if (threads > static_cast<uint64_t>(DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = remote.FunctionOn(kernel, dev, info); r != CUDA_SUCCESS) return r;
  // A block beyond the kernel's own bound (launch bounds, registers) is refused now, as the driver refuses it, not
  // at the next synchronising call.
  if (info->max_threads_per_block > 0 && threads > static_cast<uint64_t>(info->max_threads_per_block)) {
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  }
  // A portable launch stays within the shared memory every device of the architecture has, opt-in or not.
  if (shared_memory_mode == kLaunchModeRequirePortable &&
      uint64_t{shared} + static_cast<uint64_t>(std::max(info->shared_bytes, 0)) >
          static_cast<uint64_t>(DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The driver refuses more dynamic shared memory than the function opted into (cuFuncSetAttribute).
  if (shared > static_cast<unsigned int>(MaxDynamicShared(*kernel, dev, *info))) {
    // A non-portable launch may take up to the device's opt-in limit without the opt-in; the slice checks launches
    // against the function's opt-in, which this launch alone cannot change there. Said, rather than refused bare.
    if (shared_memory_mode == kLaunchModeAllowNonPortable) {
      GP_WARN("interpose",
              "{}: {} bytes of dynamic shared memory under CU_SHARED_MEMORY_MODE_ALLOW_NON_PORTABLE are not supported "
              "beyond the function's opt-in ({} bytes): raise it with cuFuncSetAttribute("
              "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
              kernel->name, shared, MaxDynamicShared(*kernel, dev, *info));
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = PackParams(*info, params, extra, &work->params); r != CUDA_SUCCESS) return r;
  if (cluster != nullptr) {
    for (int i = 0; i < 3; ++i) {
      if (cluster[i] == 0 || grid[i] % cluster[i] != 0) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    }
  }
  work->type = CU_GRAPH_NODE_TYPE_KERNEL;
  work->kernel = kernel;
  std::copy(grid, grid + 3, work->grid);
  std::copy(block, block + 3, work->block);
  work->shared_bytes = shared;
  work->clustered = cluster != nullptr;
  if (cluster != nullptr) std::copy(cluster, cluster + 3, work->cluster);
  work->param_offsets.clear();
  for (const auto& p : info->params) work->param_offsets.push_back(p.offset);
  return CUDA_SUCCESS;
}

CUresult SendLaunch(const NodeWork& w, int dev, uint64_t sid, const RemoteFunctionInfo& info) {
  Remote& remote = Remote::Get();
  if (CUresult r = ManagedMemory::Get().BeforeKernel(dev, sid); r != CUDA_SUCCESS) return r;
  int code = remote.session(dev)->Launch(info.handle, w.grid, w.block, w.shared_bytes, sid, w.params.data(),
                                         w.params.size(), w.clustered ? w.cluster : nullptr, w.cooperative);
  if (code != 0) return remote.Fail(dev, code, "a kernel launch");
  return CUDA_SUCCESS;
}

CUresult CooperativeGridFits(const NodeWork& work, int dev, const RemoteFunctionInfo& info);

CUresult Launch(CUfunction f, const uint32_t grid[3], const uint32_t block[3], unsigned int shared, CUstream stream,
                void** params, void** extra, const uint32_t* cluster = nullptr, bool cooperative = false,
                int shared_memory_mode = kLaunchModeDefault) {
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  NodeWork work;
  RemoteFunctionInfo info;
  if (CUresult r =
          PrepareLaunch(f, grid, block, shared, dev, params, extra, cluster, &work, &info, shared_memory_mode);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (cooperative) {
    if (CUresult r = CooperativeGridFits(work, dev, info); r != CUDA_SUCCESS) return r;
    work.cooperative = true;
  }
  if (Capturing(stream)) return CaptureWork(stream, std::move(work));
  return SendLaunch(work, dev, sid, info);
}

constexpr int kNewestOccupancyMajor = 12;  // The newest architecture cuda_occupancy.h (CUDA 13.0) has tables for.

// The slice's limits as NVIDIA's occupancy calculator (cuda_occupancy.h, shipped with the toolkit) takes them: the
// answers are then the driver's own arithmetic (register and shared memory granularity, reserved shared memory).
cudaOccDeviceProp OccupancyDevice(int dev) {
  const DeviceInfo& d = Driver::Get().devices()[dev];
  cudaOccDeviceProp p;
  p.computeMajor = d.cc_major;
  p.computeMinor = d.cc_minor;
  // The calculator knows architectures up to 12.x and answers "unknown device" for a newer one: such a device
  // (the emulated 13.0, which has 12.1's limits) is computed with 12.1's allocation granularities.
  if (p.computeMajor > kNewestOccupancyMajor) {
    p.computeMajor = kNewestOccupancyMajor;
    p.computeMinor = 1;
  }
  p.maxThreadsPerBlock = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024);
  p.maxThreadsPerMultiprocessor = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048);
  p.regsPerBlock = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536);
  p.regsPerMultiprocessor = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536);
  p.warpSize = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32);
  p.sharedMemPerBlock = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024);
  p.sharedMemPerMultiprocessor = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 64 * 1024);
  p.numSms = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1);
  p.sharedMemPerBlockOptin = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                       static_cast<int>(p.sharedMemPerBlock));
  p.reservedSharedMemPerBlock = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 0);
  return p;
}

cudaOccFuncAttributes OccupancyFunction(const Kernel& kernel, int dev, const RemoteFunctionInfo& info,
                                        int block_limit) {
  cudaOccFuncAttributes a;
  a.maxThreadsPerBlock = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024);
  // A potential block size the kernel could not launch with would be no answer.
  if (info.max_threads_per_block > 0) {
    a.maxThreadsPerBlock = std::min(a.maxThreadsPerBlock, info.max_threads_per_block);
  }
  if (block_limit > 0) a.maxThreadsPerBlock = std::min(a.maxThreadsPerBlock, block_limit);
  a.numRegs = info.num_regs;
  a.sharedSizeBytes = static_cast<size_t>(info.shared_bytes);
  a.maxDynamicSharedSizeBytes = static_cast<size_t>(MaxDynamicShared(kernel, dev, info));
  a.shmemLimitConfig = static_cast<int>(a.sharedSizeBytes + a.maxDynamicSharedSizeBytes) >
                               DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024)
                           ? FUNC_SHMEM_LIMIT_OPTIN
                           : FUNC_SHMEM_LIMIT_DEFAULT;
  return a;
}

// The calculator's "this cannot run" answers are the driver's CUDA_ERROR_INVALID_VALUE.
CUresult OccupancyResult(cudaOccError e) {
  return e == CUDA_OCC_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult FunctionForOccupancy(CUfunction f, int* dev, Kernel** kernel, RemoteFunctionInfo* info) {
  Remote& remote = Remote::Get();
  if (CUresult r = remote.ResolveKernel(f, kernel); r != CUDA_SUCCESS) return r;
  if (CUresult r = remote.CurrentDevice(dev); r != CUDA_SUCCESS) return r;
  return remote.FunctionOn(*kernel, *dev, info);
}

// What the occupancy calculator takes for function `f` on the current slice.
struct OccupancyInputs {
  cudaOccDeviceProp device;
  cudaOccFuncAttributes function;
  cudaOccDeviceState state;
};

// The same for `kernel` on slice `dev`.
OccupancyInputs OccupancyInputsOn(const Kernel& kernel, int dev, const RemoteFunctionInfo& info, int block_limit) {
  OccupancyInputs in;
  in.device = OccupancyDevice(dev);
  in.function = OccupancyFunction(kernel, dev, info, block_limit);
  return in;
}

CUresult OccupancyInputsFor(CUfunction f, int block_limit, OccupancyInputs* in) {
  int dev;
  Kernel* kernel;
  RemoteFunctionInfo info;
  if (CUresult r = FunctionForOccupancy(f, &dev, &kernel, &info); r != CUDA_SUCCESS) return r;
  *in = OccupancyInputsOn(*kernel, dev, info, block_limit);
  return CUDA_SUCCESS;
}

// Blocks of `block_size` threads one multiprocessor holds at once (cuOccupancyMaxActiveBlocksPerMultiprocessor).
CUresult ActiveBlocksPerMultiprocessor(OccupancyInputs& in, int block_size, size_t dynamic_shared, int* blocks) {
  cudaOccResult result;
  if (CUresult r = OccupancyResult(cudaOccMaxActiveBlocksPerMultiprocessor(&result, &in.device, &in.function,
                                                                           &in.state, block_size, dynamic_shared));
      r != CUDA_SUCCESS) {
    return r;
  }
  *blocks = result.activeBlocksPerMultiprocessor;
  return CUDA_SUCCESS;
}

// A cooperative grid must be resident at once: as the driver, refuse one larger than the slice's multiprocessors
// hold of this function (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), and any on a device without cooperative launch.
CUresult CooperativeGridFits(const NodeWork& work, int dev, const RemoteFunctionInfo& info) {
  if (DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  OccupancyInputs in = OccupancyInputsOn(*work.kernel, dev, info, 0);
  const int threads = static_cast<int>(work.block[0] * work.block[1] * work.block[2]);
  int per_sm = 0;
  if (CUresult r = ActiveBlocksPerMultiprocessor(in, threads, work.shared_bytes, &per_sm); r != CUDA_SUCCESS) {
    return r;
  }
  const uint64_t resident = static_cast<uint64_t>(per_sm) * in.device.numSms;
  const uint64_t blocks = uint64_t{work.grid[0]} * work.grid[1] * work.grid[2];
  return blocks <= resident ? CUDA_SUCCESS : CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
}

// The most blocks a portable cluster has (CUDA's programming guide: 8 on every architecture with clusters).
constexpr uint64_t kPortableClusterBlocks = 8;

// The cluster dimension among a launch configuration's attributes; false when it has none.
bool ClusterDimension(const CUlaunchConfig& config, uint32_t out[3]) {
  for (unsigned int i = 0; i < config.numAttrs; ++i) {
    const CUlaunchAttribute& a = config.attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      out[0] = a.value.clusterDim.x;
      out[1] = a.value.clusterDim.y;
      out[2] = a.value.clusterDim.z;
      return true;
    }
  }
  return false;
}

}  // namespace

CUresult LaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                      unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params,
                      void** extra) {
  const uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return Launch(f, grid, block, shared, stream, params, extra);
}

CUresult LaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  bool cooperative = false;
  int cluster_size_mode = kLaunchModeDefault, shared_memory_mode = kLaunchModeDefault;
  for (unsigned int i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && a.value.cooperative != 0) cooperative = true;
    // CUDA 13.2's modes (driver_newer.h): an enum at the start of the value, which the headers may not name.
    if (a.id == kLaunchAttributePortableClusterSizeMode || a.id == kLaunchAttributeSharedMemoryMode) {
      int mode;
      std::memcpy(&mode, &a.value, sizeof(mode));
      if (mode < kLaunchModeDefault || mode > kLaunchModeAllowNonPortable) return CUDA_ERROR_INVALID_VALUE;
      (a.id == kLaunchAttributeSharedMemoryMode ? shared_memory_mode : cluster_size_mode) = mode;
    }
    // The cluster dimension, the cooperative flag and the modes take effect; everything else (priority, access
    // policy, programmatic serialization, scheduling preference...) is a hint a slice may ignore: without it the
    // work is ordered as a plain launch orders it.
  }
  uint32_t cluster[3];
  const bool clustered = ClusterDimension(*config, cluster);
  // A portable cluster has at most 8 blocks, on every GPU that has clusters; a larger one is allowed as today
  // (default and non-portable modes): the slice refuses what its device cannot run.
  if (clustered && cluster_size_mode == kLaunchModeRequirePortable &&
      uint64_t{cluster[0]} * cluster[1] * cluster[2] > kPortableClusterBlocks) {
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  const uint32_t grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const uint32_t block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return Launch(f, grid, block, config->sharedMemBytes, config->hStream, params, extra, clustered ? cluster : nullptr,
                cooperative, shared_memory_mode);
}

CUresult LaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                 unsigned int by, unsigned int bz, unsigned int shared, CUstream stream,
                                 void** params) {
  const uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return Launch(f, grid, block, shared, stream, params, nullptr, nullptr, true);
}

namespace {

// Queues `fn` on the callback thread behind the work on `stream` (host_functions.h).
CUresult QueueHostFunction(CUstream stream, std::function<void(CUresult)> fn) {
  Remote& remote = Remote::Get();
  int dev;
  uint64_t sid;
  // Not behind the stream's pending host functions: the callback thread runs them in order anyway.
  if (CUresult r = remote.ResolveStream(stream, &dev, &sid, false); r != CUDA_SUCCESS) return r;
  // A context that has faulted takes no more host functions, as a GPU's driver answers (an H100's, driver 580).
  if (int fault = remote.session(dev)->StickyFault(); fault != 0) return ToResult(fault);
  remote.session(dev)->FlushBatch();  // The callback thread waits for the work before it: a graph's nodes too.
  HostFunctions::Get().Enqueue(dev, sid, std::move(fn));
  return CUDA_SUCCESS;
}

}  // namespace

CUresult LaunchHostFunc(CUstream stream, CUhostFn fn, void* data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Capturing(stream)) {
    NodeWork work;
    work.type = CU_GRAPH_NODE_TYPE_HOST;
    work.host_fn = fn;
    work.host_data = data;
    return CaptureWork(stream, std::move(work));
  }
  // Called whatever the work's outcome: a failed stream's error surfaces at the program's next synchronising call.
  return QueueHostFunction(stream, [fn, data](CUresult) { fn(data); });
}

// cuLaunchHostFunc_v2 (CUDA 13.1): syncMode says how the driver's callback thread waits for its next host function
// (blocking or spinning), a matter of latency only. Here one thread of this library runs them, blocking, and the
// host function runs in stream order either way.
CUresult LaunchHostFuncSynced(CUstream stream, CUhostFn fn, void* data, unsigned int sync_mode) {
  if (sync_mode != kHostTaskBlocking && sync_mode != kHostTaskSpinWait) return CUDA_ERROR_INVALID_VALUE;
  return LaunchHostFunc(stream, fn, data);
}

// cuStreamAddCallback: the callback learns the stream's status (an error of the work before it reaches the
// callback, as on a GPU, rather than the call).
CUresult StreamAddCallback(CUstream stream, CUstreamCallback callback, void* data, unsigned int flags) {
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (Capturing(stream)) return RefuseWhileCapturing(stream);  // Callbacks cannot be captured (host nodes can).
  return QueueHostFunction(stream, [stream, callback, data](CUresult status) { callback(stream, status, data); });
}

CUresult PrepareKernelWork(const CUDA_KERNEL_NODE_PARAMS& p, NodeWork* work) {
  int dev;
  if (CUresult r = Remote::Get().CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  CUfunction f = p.func != nullptr ? p.func : reinterpret_cast<CUfunction>(p.kern);
  const uint32_t grid[3] = {p.gridDimX, p.gridDimY, p.gridDimZ};
  const uint32_t block[3] = {p.blockDimX, p.blockDimY, p.blockDimZ};
  RemoteFunctionInfo info;
  return PrepareLaunch(f, grid, block, p.sharedMemBytes, dev, p.kernelParams, p.extra, nullptr, work, &info);
}

// A kernel node's work on `stream`: its function is resolved on the stream's slice (loading the module there if
// needed) and checked again there; the packed arguments travel as they are.
CUresult LaunchPacked(const NodeWork& work, CUstream stream) {
  Remote& remote = Remote::Get();
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  RemoteFunctionInfo info;
  if (CUresult r = remote.FunctionOn(work.kernel, dev, &info); r != CUDA_SUCCESS) return r;
  const int limit = MaxDynamicShared(*work.kernel, dev, info);
  if (work.shared_bytes <= static_cast<unsigned int>(limit)) return SendLaunch(work, dev, sid, info);
  // The function's limit was lowered after the node was made (and checked against it then): an executable graph
  // keeps what its kernels were made with and runs them, as NVIDIA's driver does (an H100's, driver 580). The
  // slice checks launches against the function's limit, so the limit is raised for this launch and put back, in
  // the session's order. Beyond what the device offers it is refused still.
  if (work.shared_bytes > static_cast<unsigned int>(std::max(0, MaxOptInDynamicShared(dev, info)))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  RemoteSession* session = remote.session(dev);
  const int attribute = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  if (int code = session->FunctionSetAttribute(info.handle, attribute, static_cast<int>(work.shared_bytes));
      code != 0) {
    return remote.Fail(dev, code, "a graph kernel's shared memory limit");
  }
  CUresult launched = SendLaunch(work, dev, sid, info);
  if (int code = session->FunctionSetAttribute(info.handle, attribute, limit); code != 0) {
    return remote.Fail(dev, code, "a graph kernel's shared memory limit");
  }
  return launched;
}

int MaxOptInDynamicShared(int dev, const RemoteFunctionInfo& info) {
  return DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 48 * 1024) - info.shared_bytes;
}

int MaxDynamicShared(const Kernel& kernel, int dev, const RemoteFunctionInfo& info) {
  int set = kernel.max_dynamic_shared.load();
  if (set >= 0) return set;
  return std::max(0, DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024) - info.shared_bytes);
}

CUresult OccupancyMaxActiveBlocks(int* blocks, CUfunction f, int block_size, size_t dynamic_shared) {
  if (blocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  OccupancyInputs in;
  if (CUresult r = OccupancyInputsFor(f, 0, &in); r != CUDA_SUCCESS) return r;
  return ActiveBlocksPerMultiprocessor(in, block_size, dynamic_shared, blocks);
}

CUresult OccupancyMaxPotentialBlockSize(int* min_grid, int* block_size, CUfunction f, CUoccupancyB2DSize b2d,
                                        size_t dynamic_shared, int limit) {
  if (min_grid == nullptr || block_size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  OccupancyInputs in;
  if (CUresult r = OccupancyInputsFor(f, limit, &in); r != CUDA_SUCCESS) return r;
  auto shared_for = [&](int size) { return b2d != nullptr ? b2d(size) : dynamic_shared; };
  return OccupancyResult(cudaOccMaxPotentialOccupancyBlockSizeVariableSMem(min_grid, block_size, &in.device,
                                                                          &in.function, &in.state, shared_for));
}

// Asked of the slice: only the device knows how its SMs group into GPCs, which a cluster may not span.
CUresult OccupancyMaxActiveClusters(int* clusters, CUfunction f, const CUlaunchConfig* config) {
  if (clusters == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  Kernel* kernel;
  RemoteFunctionInfo info;
  if (CUresult r = FunctionForOccupancy(f, &dev, &kernel, &info); r != CUDA_SUCCESS) return r;
  uint32_t cluster[3] = {0, 0, 0};  // None given: the function's own (compile-time) cluster dimensions.
  ClusterDimension(*config, cluster);
  const uint32_t grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const uint32_t block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  // The device's refusal (a cluster size it cannot hold, say) is an answer, not a failure worth a log line:
  // libraries probe with configurations they expect to be refused.
  return ToResult(Remote::Get().session(dev)->OccupancyMaxActiveClusters(info.handle, grid, block,
                                                                         config->sharedMemBytes, cluster, clusters));
}

CUresult OccupancyAvailableDynamicSMem(size_t* bytes, CUfunction f, int num_blocks, int block_size) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  OccupancyInputs in;
  if (CUresult r = OccupancyInputsFor(f, 0, &in); r != CUDA_SUCCESS) return r;
  return OccupancyResult(
      cudaOccAvailableDynamicSMemPerBlock(bytes, &in.device, &in.function, &in.state, num_blocks, block_size));
}

int DeviceAttribute(int dev, int attribute, int fallback) {
  const auto& attrs = Driver::Get().devices()[dev].attributes;
  auto it = attrs.find(attribute);
  return it != attrs.end() && it->second > 0 ? it->second : fallback;
}

}  // namespace gpupool::interpose

GP_LAUNCH_FORWARDS(GP_DEFINE_FORWARD)
