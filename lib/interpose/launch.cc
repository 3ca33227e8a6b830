// Kernel launches and what programs ask before launching (occupancy). Arguments travel as one packed buffer laid
// out by the function's parameter table (offset and size of each parameter, from the slice, cached per function
// and slice). The entry points are generated from forward_spec.h.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "driver.h"
#include "forward_spec.h"
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

CUresult Launch(CUfunction f, const uint32_t grid[3], const uint32_t block[3], unsigned int shared, CUstream stream,
                void** params, void** extra) {
  Remote& remote = Remote::Get();
  Kernel* kernel;
  if (CUresult r = remote.ResolveKernel(f, &kernel); r != CUDA_SUCCESS) return r;
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  RemoteFunctionInfo info;
  if (CUresult r = remote.FunctionOn(kernel, dev, &info); r != CUDA_SUCCESS) return r;
  std::vector<uint8_t> packed;
  if (CUresult r = PackParams(info, params, extra, &packed); r != CUDA_SUCCESS) return r;
  int code = remote.session(dev)->Launch(info.handle, grid, block, shared, sid, packed.data(), packed.size());
  if (code != 0) return remote.Fail(dev, code, "a kernel launch");
  return CUDA_SUCCESS;
}

int Attribute(int dev, int attribute, int fallback) {
  const auto& attrs = Driver::Get().devices()[dev].attributes;
  auto it = attrs.find(attribute);
  return it != attrs.end() && it->second > 0 ? it->second : fallback;
}

// Blocks of `block_size` threads that fit on one multiprocessor, from the function's registers and shared memory
// and the device's per-SM limits (register allocation granularity ignored).
int ActiveBlocks(int dev, const RemoteFunctionInfo& info, int block_size, size_t dynamic_shared) {
  if (block_size <= 0 || block_size > Attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024)) return 0;
  int warp = Attribute(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32);
  int threads = (block_size + warp - 1) / warp * warp;
  int blocks = Attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 16);
  blocks = std::min(blocks, Attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 1024) / threads);
  if (info.num_regs > 0) {
    blocks = std::min(blocks, Attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536) /
                                  (info.num_regs * threads));
  }
  size_t shared = info.shared_bytes + dynamic_shared;
  if (shared > 0) {
    if (shared > static_cast<size_t>(Attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 49152))) {
      return 0;
    }
    blocks = std::min<int>(
        blocks, static_cast<int>(Attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 65536) /
                                 shared));
  }
  return std::max(blocks, 0);
}

CUresult FunctionForOccupancy(CUfunction f, int* dev, RemoteFunctionInfo* info) {
  Remote& remote = Remote::Get();
  Kernel* kernel;
  if (CUresult r = remote.ResolveKernel(f, &kernel); r != CUDA_SUCCESS) return r;
  if (CUresult r = remote.CurrentDevice(dev); r != CUDA_SUCCESS) return r;
  return remote.FunctionOn(kernel, *dev, info);
}

}  // namespace

CUresult LaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                      unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params,
                      void** extra) {
  const uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return Launch(f, grid, block, shared, stream, params, extra);
}

CUresult LaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && a.value.cooperative != 0) {
      static std::once_flag once;
      std::call_once(once, [] { GP_WARN("interpose", "cooperative launches are not supported on gpupool slices"); });
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    // Everything else (priority, access policy, cluster hints...) is a hint a slice may ignore.
  }
  const uint32_t grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const uint32_t block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return Launch(f, grid, block, config->sharedMemBytes, config->hStream, params, extra);
}

// The simplest honest form: the work before the callback is finished when it runs (CUDA's guarantee); the host
// thread waits for that instead of a driver thread.
CUresult LaunchHostFunc(CUstream stream, CUhostFn fn, void* data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  int dev;
  uint64_t sid;
  if (CUresult r = remote.ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  if (int code = remote.session(dev)->StreamSynchronize(sid); code != 0) {
    return remote.Fail(dev, code, "the work before a host function");
  }
  fn(data);
  return CUDA_SUCCESS;
}

CUresult OccupancyMaxActiveBlocks(int* blocks, CUfunction f, int block_size, size_t dynamic_shared) {
  if (blocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  RemoteFunctionInfo info;
  if (CUresult r = FunctionForOccupancy(f, &dev, &info); r != CUDA_SUCCESS) return r;
  *blocks = ActiveBlocks(dev, info, block_size, dynamic_shared);
  return CUDA_SUCCESS;
}

CUresult OccupancyMaxPotentialBlockSize(int* min_grid, int* block_size, CUfunction f, CUoccupancyB2DSize b2d,
                                        size_t dynamic_shared, int limit) {
  if (min_grid == nullptr || block_size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  RemoteFunctionInfo info;
  if (CUresult r = FunctionForOccupancy(f, &dev, &info); r != CUDA_SUCCESS) return r;
  int max_block = Attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024);
  if (limit > 0) max_block = std::min(max_block, limit);
  int warp = Attribute(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32);
  int best_threads = 0, best_block = 0, best_blocks = 0;
  for (int size = max_block / warp * warp; size > 0; size -= warp) {
    size_t dyn = b2d != nullptr ? b2d(size) : dynamic_shared;
    int blocks = ActiveBlocks(dev, info, size, dyn);
    if (blocks * size > best_threads) {
      best_threads = blocks * size;
      best_block = size;
      best_blocks = blocks;
    }
  }
  *block_size = best_block;
  *min_grid = best_blocks * Attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1);
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_LAUNCH_FORWARDS(GP_DEFINE_FORWARD)
