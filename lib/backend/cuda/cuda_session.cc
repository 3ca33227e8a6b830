#include "backend/cuda/cuda_session.h"

#include <cuda.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <kj/async.h>

#include "backend/handle_table.h"
#include "backend/session_checks.h"
#include "core/log.h"
#include "core/range_allocator.h"

namespace gpupool::backend {
namespace {

// The driver entry points this backend uses, resolved through cuGetProcAddress at the CUDA 13.0 ABI, which is the
// one cuda.h's names denote (so decltype of the header's declaration is the right pointer type).
#define GP_CUDA_API(X)                                                                                   \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetUuid) X(cuDeviceGetName) X(cuDeviceGetAttribute)      \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuMemAddressReserve)     \
  X(cuMemAddressFree) X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)       \
  X(cuMemUnmap) X(cuMemSetAccess) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemcpyHtoDAsync)               \
  X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD16Async) X(cuMemsetD32Async)  \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncGetParamInfo) \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuOccupancyMaxActiveClusters) X(cuLaunchHostFunc) X(cuStreamCreate) X(cuStreamDestroy)      \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)             \
  X(cuEventQuery) X(cuEventElapsedTime) X(cuEventSynchronize) X(cuGetErrorString)

struct Api {
#define GP_FIELD(name) decltype(&::name) name = nullptr;
  GP_CUDA_API(GP_FIELD)
#undef GP_FIELD

  // False (with the missing name) when the driver lacks one of them.
  bool Load(const CudaDriver& driver, std::string* missing) {
#define GP_LOAD(name)                                                                   \
  name = reinterpret_cast<decltype(name)>(driver.Symbol(#name, 13000));                 \
  if (!name) {                                                                          \
    *missing = #name;                                                                   \
    return false;                                                                       \
  }
    GP_CUDA_API(GP_LOAD)
#undef GP_LOAD
    return true;
  }
};

std::string UuidString(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                     b[15]);
}

// A launch's shape as cuLaunchKernelEx and cuOccupancyMaxActiveClusters take it. Not copyable: `config.attrs`
// points at `cluster` once a cluster dimension is set.
struct LaunchShape {
  CUlaunchConfig config = {};
  CUlaunchAttribute cluster = {};

  LaunchShape(wire::Dim3::Reader grid, wire::Dim3::Reader block, uint32_t shared_bytes, CUstream stream) {
    config.gridDimX = grid.getX();
    config.gridDimY = grid.getY();
    config.gridDimZ = grid.getZ();
    config.blockDimX = block.getX();
    config.blockDimY = block.getY();
    config.blockDimZ = block.getZ();
    config.sharedMemBytes = shared_bytes;
    config.hStream = stream;
  }
  LaunchShape(const LaunchShape&) = delete;
  LaunchShape& operator=(const LaunchShape&) = delete;

  void SetCluster(wire::Dim3::Reader k) {
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = k.getX();
    cluster.value.clusterDim.y = k.getY();
    cluster.value.clusterDim.z = k.getZ();
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
};

void SetStatus(wire::CallStatus::Builder out, CUresult r, const Api& api) {
  out.setCode(static_cast<int32_t>(r));
  if (r != CUDA_SUCCESS) {
    const char* text = nullptr;
    api.cuGetErrorString(r, &text);
    out.setMessage(text ? text : "CUDA error");
  }
}

class CudaSession final : public wire::Session::Server {
 public:
  CudaSession(std::shared_ptr<CudaDriver> driver, std::unique_ptr<Api> api, const CudaSessionConfig& config,
              CUdevice device, CUcontext ctx, size_t granularity)
      : driver_(std::move(driver)), api_(std::move(api)), config_(config), device_(device), ctx_(ctx),
        granularity_(granularity) {
    window_.Reset(config_.window_bytes);
    if (config_.control) {
      std::lock_guard<std::mutex> lock(config_.control->mu);
      config_.control->revoke = [this] {
        revoked_ = true;
        ReleaseAll();
      };
    }
  }

  ~CudaSession() noexcept(false) {
    if (config_.control) {
      std::lock_guard<std::mutex> lock(config_.control->mu);
      config_.control->revoke = nullptr;
    }
    ReleaseAll();
    api_->cuMemAddressFree(config_.window_base, config_.window_bytes);
    api_->cuDevicePrimaryCtxRelease(device_);
  }

  kj::Promise<void> properties(PropertiesContext context) override {
    Current();
    auto props = context.getResults().initProps();
    char name[256] = {0};
    api_->cuDeviceGetName(name, sizeof(name), device_);
    props.setName(name);
    props.setTotalMemory(config_.memory_bytes);
    int major = 0, minor = 0, bus = 0, dev = 0, domain = 0;
    api_->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    api_->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
    api_->cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device_);
    api_->cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device_);
    api_->cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device_);
    props.setCcMajor(major);
    props.setCcMinor(minor);
    props.setPciBus(bus);
    props.setPciDevice(dev);
    props.setPciDomain(domain);
    CUuuid uuid;
    api_->cuDeviceGetUuid(&uuid, device_);
    props.setUuid(kj::arrayPtr(reinterpret_cast<const uint8_t*>(uuid.bytes), 16));
    std::vector<std::pair<int, int>> attrs;
    for (int id = 1; id < CU_DEVICE_ATTRIBUTE_MAX; ++id) {
      int value = 0;
      if (api_->cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(id), device_) == CUDA_SUCCESS) {
        attrs.push_back({id, value});
      }
    }
    auto list = props.initAttributes(static_cast<unsigned>(attrs.size()));
    for (size_t i = 0; i < attrs.size(); ++i) {
      list[i].setId(attrs[i].first);
      list[i].setValue(attrs[i].second);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> memGetInfo(MemGetInfoContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto r = context.getResults();
    SetStatus(r.initStatus(), CUDA_SUCCESS, *api_);
    r.setTotal(config_.memory_bytes);
    r.setFree(config_.memory_bytes - std::min(config_.memory_bytes, used_));
    return kj::READY_NOW;
  }

  kj::Promise<void> memAlloc(MemAllocContext context) override {
    auto r = context.getResults();
    if (revoked_) return Revoked(r.initStatus());
    uint64_t bytes = context.getParams().getBytes();
    // Checked before rounding: a size near 2^64 would round to a small one.
    if (bytes == 0 || bytes > kMaxAllocBytes) return Invalid(r.initStatus(), fmt::format("cannot allocate {} bytes", bytes));
    uint64_t size = (bytes + granularity_ - 1) / granularity_ * granularity_;
    if (size > config_.memory_bytes - std::min(config_.memory_bytes, used_)) {
      return Status(r.initStatus(), CUDA_ERROR_OUT_OF_MEMORY);
    }
    uint64_t offset = 0;
    if (!window_.Take(size, granularity_, &offset)) return Status(r.initStatus(), CUDA_ERROR_OUT_OF_MEMORY);
    Current();
    CUmemAllocationProp prop = Prop();
    CUmemGenericAllocationHandle handle;
    CUdeviceptr address = config_.window_base + offset;
    CUresult res = api_->cuMemCreate(&handle, size, &prop, 0);
    if (res == CUDA_SUCCESS) {
      res = api_->cuMemMap(address, size, 0, handle, 0);
      if (res == CUDA_SUCCESS) {
        CUmemAccessDesc access = {};
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        res = api_->cuMemSetAccess(address, size, &access, 1);
        if (res != CUDA_SUCCESS) api_->cuMemUnmap(address, size);
      }
      if (res != CUDA_SUCCESS) api_->cuMemRelease(handle);
    }
    if (res != CUDA_SUCCESS) {
      window_.Give(offset, size);
      return Status(r.initStatus(), res);
    }
    allocations_[address] = {handle, size};
    used_ += size;
    r.setAddress(address);
    return Status(r.initStatus(), CUDA_SUCCESS);
  }

  kj::Promise<void> memFree(MemFreeContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    uint64_t address = context.getParams().getAddress();
    if (address == 0) return Status(context.getResults().initStatus(), CUDA_SUCCESS);  // As cudaFree(nullptr).
    auto it = allocations_.find(address);
    if (it == allocations_.end()) {
      return Invalid(context.getResults().initStatus(),
                     fmt::format("0x{:x} is not the start of an allocation of this session", address));
    }
    Current();
    // cuMemUnmap waits for work using the range, as cudaFree does.
    api_->cuMemUnmap(it->first, it->second.size);
    api_->cuMemRelease(it->second.handle);
    window_.Give(it->first - config_.window_base, it->second.size);
    used_ -= it->second.size;
    allocations_.erase(it);
    return Status(context.getResults().initStatus(), CUDA_SUCCESS);
  }

  kj::Promise<void> copyToDevice(CopyToDeviceContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    CUstream stream;
    if (!Stream(p.getStream(), &stream)) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    auto data = p.getData();
    if (data.size() == 0) return Status(context.getResults().initStatus(), CUDA_SUCCESS);
    std::string error;
    if (!Owned(p.getDst(), data.size(), "copy destination", &error)) return Invalid(context.getResults().initStatus(), error);
    // Through pinned staging so the copy is truly asynchronous and the event loop never blocks on the GPU.
    void* staging = nullptr;
    Current();
    CUresult res = api_->cuMemAllocHost(&staging, std::max<size_t>(data.size(), 1));
    if (res != CUDA_SUCCESS) return Status(context.getResults().initStatus(), res);
    std::memcpy(staging, data.begin(), data.size());
    res = api_->cuMemcpyHtoDAsync(p.getDst(), staging, data.size(), stream);
    if (res != CUDA_SUCCESS) {
      api_->cuMemFreeHost(staging);
      return Status(context.getResults().initStatus(), res);
    }
    return Reached(stream).then([this, context, staging]() mutable {
      Current();
      api_->cuMemFreeHost(staging);
      SetStatus(context.getResults().initStatus(), CUDA_SUCCESS, *api_);
    });
  }

  kj::Promise<void> copyFromDevice(CopyFromDeviceContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    CUstream stream;
    if (!Stream(p.getStream(), &stream)) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    uint64_t bytes = p.getBytes();
    if (bytes > kMaxCopyBytes) {
      return Invalid(context.getResults().initStatus(),
                     fmt::format("a copy message carries at most {} bytes, not {}", kMaxCopyBytes, bytes));
    }
    if (bytes == 0) return Status(context.getResults().initStatus(), CUDA_SUCCESS);
    std::string error;
    if (!Owned(p.getSrc(), bytes, "copy source", &error)) return Invalid(context.getResults().initStatus(), error);
    void* staging = nullptr;
    Current();
    CUresult res = api_->cuMemAllocHost(&staging, std::max<uint64_t>(bytes, 1));
    if (res != CUDA_SUCCESS) return Status(context.getResults().initStatus(), res);
    res = api_->cuMemcpyDtoHAsync(staging, p.getSrc(), bytes, stream);
    if (res != CUDA_SUCCESS) {
      api_->cuMemFreeHost(staging);
      return Status(context.getResults().initStatus(), res);
    }
    return Reached(stream).then([this, context, staging, bytes]() mutable {
      auto r = context.getResults();
      r.setData(kj::arrayPtr(static_cast<const uint8_t*>(staging), bytes));
      Current();
      api_->cuMemFreeHost(staging);
      SetStatus(r.initStatus(), CUDA_SUCCESS, *api_);
    });
  }

  kj::Promise<void> copyOnDevice(CopyOnDeviceContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    CUstream stream;
    if (!Stream(p.getStream(), &stream)) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    uint64_t bytes = p.getBytes();
    if (bytes == 0) return Status(context.getResults().initStatus(), CUDA_SUCCESS);
    std::string error;
    if (!Owned(p.getDst(), bytes, "copy destination", &error) || !Owned(p.getSrc(), bytes, "copy source", &error)) {
      return Invalid(context.getResults().initStatus(), error);
    }
    Current();
    return Status(context.getResults().initStatus(), api_->cuMemcpyDtoDAsync(p.getDst(), p.getSrc(), bytes, stream));
  }

  kj::Promise<void> memset(MemsetContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    CUstream stream;
    if (!Stream(p.getStream(), &stream)) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    uint64_t bytes = 0;
    std::string error;
    if (!MemsetBytes(p.getElementSize(), p.getCount(), &bytes, &error)) return Invalid(context.getResults().initStatus(), error);
    if (bytes == 0) return Status(context.getResults().initStatus(), CUDA_SUCCESS);
    if (!Owned(p.getDst(), bytes, "memset destination", &error)) return Invalid(context.getResults().initStatus(), error);
    Current();
    CUresult res;
    switch (p.getElementSize()) {
      case 1: res = api_->cuMemsetD8Async(p.getDst(), static_cast<unsigned char>(p.getValue()), p.getCount(), stream); break;
      case 2: res = api_->cuMemsetD16Async(p.getDst(), static_cast<unsigned short>(p.getValue()), p.getCount(), stream); break;
      case 4: res = api_->cuMemsetD32Async(p.getDst(), p.getValue(), p.getCount(), stream); break;
      default: res = CUDA_ERROR_INVALID_VALUE;
    }
    return Status(context.getResults().initStatus(), res);
  }

  kj::Promise<void> moduleLoad(ModuleLoadContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto image = context.getParams().getImage();
    // The driver wants the image to outlive the call only for its duration; a copy keeps it aligned.
    std::vector<uint8_t> copy(image.begin(), image.end());
    copy.push_back(0);
    Current();
    CUmodule module;
    CUresult res = api_->cuModuleLoadData(&module, copy.data());
    auto r = context.getResults();
    if (res == CUDA_SUCCESS) {
      r.setModule(modules_.Add(module));
    }
    return Status(r.initStatus(), res);
  }

  kj::Promise<void> moduleUnload(ModuleUnloadContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    uint64_t handle = context.getParams().getModule();
    auto it = modules_.find(handle);
    if (it == modules_.end()) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    Current();
    CUresult res = api_->cuModuleUnload(it->second);
    modules_.erase(it);
    // Its functions and variables go with it: a stale CUfunction must never reach cuLaunchKernel.
    functions_.EraseIf([handle](uint64_t, const FunctionInfo& f) { return f.module == handle; });
    for (auto g = globals_.begin(); g != globals_.end();) g = g->second.module == handle ? globals_.erase(g) : std::next(g);
    return Status(context.getResults().initStatus(), res);
  }

  kj::Promise<void> moduleGetFunction(ModuleGetFunctionContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto r = context.getResults();
    auto it = modules_.find(p.getModule());
    if (it == modules_.end()) return Status(r.initStatus(), CUDA_ERROR_INVALID_HANDLE);
    Current();
    CUfunction fn;
    CUresult res = api_->cuModuleGetFunction(&fn, it->second, p.getName().cStr());
    if (res != CUDA_SUCCESS) return Status(r.initStatus(), res);
    std::vector<std::pair<size_t, size_t>> params;
    for (size_t i = 0;; ++i) {
      size_t offset = 0, size = 0;
      if (api_->cuFuncGetParamInfo(fn, i, &offset, &size) != CUDA_SUCCESS) break;
      params.push_back({offset, size});
    }
    r.setFunction(functions_.Add({it->first, fn, params}));
    auto list = r.initParams(static_cast<unsigned>(params.size()));
    for (size_t i = 0; i < params.size(); ++i) {
      list[i].setOffset(static_cast<uint32_t>(params[i].first));
      list[i].setSize(static_cast<uint32_t>(params[i].second));
    }
    int shared = 0, local = 0, regs = 0;
    api_->cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
    api_->cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
    api_->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    r.setSharedBytes(shared);
    r.setLocalBytes(local);
    r.setNumRegs(regs);
    return Status(r.initStatus(), CUDA_SUCCESS);
  }

  kj::Promise<void> moduleGetGlobal(ModuleGetGlobalContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto r = context.getResults();
    auto it = modules_.find(p.getModule());
    if (it == modules_.end()) return Status(r.initStatus(), CUDA_ERROR_INVALID_HANDLE);
    Current();
    CUdeviceptr address = 0;
    size_t bytes = 0;
    CUresult res = api_->cuModuleGetGlobal(&address, &bytes, it->second, p.getName().cStr());
    // TODO(feature): module globals live outside the session's window, so a pointer to one does not route by
    // address on the client.
    // The variable is this session's memory until its module is unloaded: copies may reach it.
    if (res == CUDA_SUCCESS && bytes > 0) globals_[address] = {bytes, it->first};
    r.setAddress(address);
    r.setBytes(bytes);
    return Status(r.initStatus(), res);
  }

  kj::Promise<void> launch(LaunchContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto it = functions_.find(p.getFunction());
    if (it == functions_.end()) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    CUstream stream;
    if (!Stream(p.getStream(), &stream)) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    auto buffer = p.getParams();
    std::string error;
    if (!ParamsFit(it->second.params, buffer.size(), [](const auto& q) { return q.first; },
                   [](const auto& q) { return q.second; }, &error)) {
      return Invalid(context.getResults().initStatus(), error);
    }
    // TODO(security): pointer arguments are not checked: a kernel can address anything the context maps, other
    // sessions' memory included, until each session has its own context in its own worker process.
    std::vector<void*> args;
    for (const auto& [offset, size] : it->second.params) args.push_back(const_cast<uint8_t*>(buffer.begin()) + offset);
    Current();
    auto g = p.getGrid();
    auto b = p.getBlock();
    void** kernel_params = args.empty() ? nullptr : args.data();
    if (p.hasCluster()) {  // Thread block clusters: only cuLaunchKernelEx takes their dimensions.
      LaunchShape shape(g, b, p.getSharedBytes(), stream);
      shape.SetCluster(p.getCluster());
      return Status(context.getResults().initStatus(),
                    api_->cuLaunchKernelEx(&shape.config, it->second.fn, kernel_params, nullptr));
    }
    CUresult res = api_->cuLaunchKernel(it->second.fn, g.getX(), g.getY(), g.getZ(), b.getX(), b.getY(), b.getZ(),
                                        p.getSharedBytes(), stream, kernel_params, nullptr);
    return Status(context.getResults().initStatus(), res);
  }

  kj::Promise<void> occupancyMaxActiveClusters(OccupancyMaxActiveClustersContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto it = functions_.find(p.getFunction());
    if (it == functions_.end()) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    Current();
    LaunchShape shape(p.getGrid(), p.getBlock(), p.getSharedBytes(), nullptr);
    auto k = p.getCluster();
    if (k.getX() != 0 || k.getY() != 0 || k.getZ() != 0) shape.SetCluster(k);  // Zero: the function's own.
    int clusters = 0;
    CUresult res = api_->cuOccupancyMaxActiveClusters(&clusters, it->second.fn, &shape.config);
    context.getResults().setClusters(clusters);
    return Status(context.getResults().initStatus(), res);
  }

  kj::Promise<void> functionSetAttribute(FunctionSetAttributeContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto it = functions_.find(p.getFunction());
    if (it == functions_.end()) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    Current();
    CUresult res = api_->cuFuncSetAttribute(it->second.fn, static_cast<CUfunction_attribute>(p.getAttribute()),
                                            p.getValue());
    return Status(context.getResults().initStatus(), res);
  }

  kj::Promise<void> streamCreate(StreamCreateContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    Current();
    CUstream s;
    CUresult res = api_->cuStreamCreate(&s, 0);
    auto r = context.getResults();
    if (res == CUDA_SUCCESS) {
      r.setStream(streams_.Add(s));
    }
    return Status(r.initStatus(), res);
  }

  kj::Promise<void> streamDestroy(StreamDestroyContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto it = streams_.find(context.getParams().getStream());
    if (it == streams_.end()) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    Current();
    CUresult res = api_->cuStreamDestroy(it->second);  // Returns at once; queued work still completes.
    streams_.erase(it);
    return Status(context.getResults().initStatus(), res);
  }

  kj::Promise<void> streamSynchronize(StreamSynchronizeContext context) override {
    // A pure wait: a caller that goes away (its connection broke) must not keep the session alive.
    context.allowCancellation();
    if (revoked_) return Revoked(context.getResults().initStatus());
    uint64_t id = context.getParams().getStream();
    CUstream stream;
    if (!Stream(id, &stream)) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    return Reached(stream).then([this, context, id]() mutable {
      // Looked up again: the session may have been revoked, or the stream destroyed, while we waited.
      CUstream now;
      CUresult res = CUDA_ERROR_CONTEXT_IS_DESTROYED;
      if (!revoked_) {
        Current();
        res = Stream(id, &now) ? api_->cuStreamQuery(now) : CUDA_SUCCESS;
        if (res == CUDA_ERROR_NOT_READY) res = CUDA_SUCCESS;  // Work queued after this call.
      }
      SetStatus(context.getResults().initStatus(), res, *api_);
    });
  }

  kj::Promise<void> streamQuery(StreamQueryContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    CUstream stream;
    if (!Stream(context.getParams().getStream(), &stream)) {
      return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    }
    Current();
    return Status(context.getResults().initStatus(), api_->cuStreamQuery(stream));
  }

  kj::Promise<void> streamWaitEvent(StreamWaitEventContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    CUstream stream;
    auto e = events_.find(p.getEvent());
    if (!Stream(p.getStream(), &stream) || e == events_.end()) {
      return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    }
    Current();
    return Status(context.getResults().initStatus(), api_->cuStreamWaitEvent(stream, e->second, 0));
  }

  kj::Promise<void> eventCreate(EventCreateContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    Current();
    CUevent e;
    CUresult res = api_->cuEventCreate(&e, 0);
    auto r = context.getResults();
    if (res == CUDA_SUCCESS) {
      r.setEvent(events_.Add(e));
    }
    return Status(r.initStatus(), res);
  }

  kj::Promise<void> eventDestroy(EventDestroyContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto it = events_.find(context.getParams().getEvent());
    if (it == events_.end()) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    Current();
    CUresult res = api_->cuEventDestroy(it->second);
    events_.erase(it);
    return Status(context.getResults().initStatus(), res);
  }

  kj::Promise<void> eventRecord(EventRecordContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    CUstream stream;
    auto e = events_.find(p.getEvent());
    if (!Stream(p.getStream(), &stream) || e == events_.end()) {
      return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    }
    Current();
    return Status(context.getResults().initStatus(), api_->cuEventRecord(e->second, stream));
  }

  kj::Promise<void> eventSynchronize(EventSynchronizeContext context) override {
    // A pure wait: a caller that goes away (its connection broke) must not keep the session alive.
    context.allowCancellation();
    if (revoked_) return Revoked(context.getResults().initStatus());
    uint64_t id = context.getParams().getEvent();
    auto e = events_.find(id);
    if (e == events_.end()) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    // cuEventSynchronize blocks the calling thread. Instead a private stream waits for the event and then runs a
    // host function that resolves the promise on the event loop (as Reached does): the callback owns only the
    // fulfiller, never the session, so the session, its event or its lease may end while it waits.
    Current();
    CUresult res = SyncStream();
    if (res == CUDA_SUCCESS) res = api_->cuStreamWaitEvent(sync_stream_, e->second, 0);
    if (res != CUDA_SUCCESS) return Status(context.getResults().initStatus(), res);
    return Reached(sync_stream_).then([this, context, id]() mutable {
      // Looked up again: destroyed while we waited means it had completed (or was never waited on) as well.
      CUresult res = CUDA_ERROR_CONTEXT_IS_DESTROYED;
      if (!revoked_) {
        auto e = events_.find(id);
        Current();
        res = e != events_.end() ? api_->cuEventQuery(e->second) : CUDA_SUCCESS;
        if (res == CUDA_ERROR_NOT_READY) res = CUDA_SUCCESS;  // Recorded again after this call.
      }
      SetStatus(context.getResults().initStatus(), res, *api_);
    });
  }

  kj::Promise<void> eventQuery(EventQueryContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto e = events_.find(context.getParams().getEvent());
    if (e == events_.end()) return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    Current();
    return Status(context.getResults().initStatus(), api_->cuEventQuery(e->second));
  }

  kj::Promise<void> eventElapsed(EventElapsedContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto a = events_.find(p.getStart()), b = events_.find(p.getEnd());
    if (a == events_.end() || b == events_.end()) {
      return Status(context.getResults().initStatus(), CUDA_ERROR_INVALID_HANDLE);
    }
    Current();
    float ms = 0;
    CUresult res = api_->cuEventElapsedTime(&ms, a->second, b->second);
    context.getResults().setMs(ms);
    return Status(context.getResults().initStatus(), res);
  }

  kj::Promise<void> synchronize(SynchronizeContext context) override {
    // A pure wait: a caller that goes away (its connection broke) must not keep the session alive.
    context.allowCancellation();
    if (revoked_) return Revoked(context.getResults().initStatus());
    // Every stream of the session, the legacy default stream included.
    kj::Vector<kj::Promise<void>> all;
    all.add(Reached(nullptr));
    for (auto& [id, s] : streams_) all.add(Reached(s));
    return kj::joinPromises(all.releaseAsArray()).then([this, context]() mutable {
      // Revoked while waiting: the streams were destroyed under the promise; report that.
      SetStatus(context.getResults().initStatus(), revoked_ ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS, *api_);
    });
  }

 private:
  struct Allocation {
    CUmemGenericAllocationHandle handle;
    uint64_t size;
  };
  struct FunctionInfo {
    uint64_t module;  // The handle of its module: unloading the module erases it.
    CUfunction fn;
    std::vector<std::pair<size_t, size_t>> params;
  };

  kj::Promise<void> Status(wire::CallStatus::Builder out, CUresult r) {
    SetStatus(out, r, *api_);
    return kj::READY_NOW;
  }

  kj::Promise<void> Invalid(wire::CallStatus::Builder out, const std::string& message) {
    out.setCode(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE));
    out.setMessage(message);
    return kj::READY_NOW;
  }

  kj::Promise<void> Revoked(wire::CallStatus::Builder out) {
    out.setCode(static_cast<int32_t>(CUDA_ERROR_CONTEXT_IS_DESTROYED));
    out.setMessage("the lease of this session ended (released or expired); its memory is freed");
    return kj::READY_NOW;
  }

  // Whether the session owns [address, address + bytes): inside its window and inside one of its allocations
  // (the GPU's address space also maps other tenants' memory, so the window alone is not enough), or inside a
  // variable of one of its modules (which the driver places outside the window). `*error` says which failed.
  bool Owned(uint64_t address, uint64_t bytes, const char* what, std::string* error) const {
    if (InsideOneOf(globals_, address, bytes, [](const Global& g) { return g.bytes; })) return true;
    if (!RangeInside(address, bytes, config_.window_base, config_.window_bytes)) {
      *error = fmt::format("{}: {} lies outside this session's window [0x{:x}, 0x{:x})", what,
                           DescribeRange(address, bytes), config_.window_base,
                           config_.window_base + config_.window_bytes);
      return false;
    }
    if (!InsideOneOf(allocations_, address, bytes, [](const Allocation& a) { return a.size; })) {
      *error = fmt::format("{}: {} is not inside one allocation of this session", what, DescribeRange(address, bytes));
      return false;
    }
    return true;
  }

  // The private non-blocking stream eventSynchronize waits on, created on first use. REQUIRES: Current().
  CUresult SyncStream() {
    if (sync_stream_) return CUDA_SUCCESS;
    return api_->cuStreamCreate(&sync_stream_, CU_STREAM_NON_BLOCKING);
  }

  void Current() { api_->cuCtxSetCurrent(ctx_); }

  CUmemAllocationProp Prop() const {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    return prop;
  }

  // Resolves once the GPU has run everything queued on `stream` so far, without blocking the event loop.
  kj::Promise<void> Reached(CUstream stream) {
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    auto* holder = new kj::Own<kj::CrossThreadPromiseFulfiller<void>>(kj::mv(paf.fulfiller));
    Current();
    CUresult res = api_->cuLaunchHostFunc(
        stream,
        [](void* data) {
          auto* h = static_cast<kj::Own<kj::CrossThreadPromiseFulfiller<void>>*>(data);
          (*h)->fulfill();
          delete h;
        },
        holder);
    if (res != CUDA_SUCCESS) {
      delete holder;
      return kj::READY_NOW;  // A broken context: the next call reports its error.
    }
    return kj::mv(paf.promise);
  }

  bool Stream(uint64_t id, CUstream* out) {
    if (id == 0) {
      *out = nullptr;
      return true;
    }
    auto it = streams_.find(id);
    if (it == streams_.end()) return false;
    *out = it->second;
    return true;
  }

  void ReleaseAll() {
    Current();
    functions_.clear();  // Before their modules: no handle may outlive the code it names.
    globals_.clear();
    for (auto& [id, m] : modules_) api_->cuModuleUnload(m);
    modules_.clear();
    // Pending waits on it still complete; their callbacks own nothing of the session.
    if (sync_stream_) api_->cuStreamDestroy(sync_stream_);
    sync_stream_ = nullptr;
    for (auto& [id, s] : streams_) api_->cuStreamDestroy(s);
    streams_.clear();
    for (auto& [id, e] : events_) api_->cuEventDestroy(e);
    events_.clear();
    for (auto& [address, a] : allocations_) {
      api_->cuMemUnmap(address, a.size);
      api_->cuMemRelease(a.handle);
    }
    allocations_.clear();
    window_.Reset(config_.window_bytes);
    used_ = 0;
  }

  std::shared_ptr<CudaDriver> driver_;
  std::unique_ptr<Api> api_;
  CudaSessionConfig config_;
  CUdevice device_;
  CUcontext ctx_;
  size_t granularity_;
  uint64_t used_ = 0;
  bool revoked_ = false;
  RangeAllocator window_;
  std::map<CUdeviceptr, Allocation> allocations_;
  struct Global {
    uint64_t bytes;
    uint64_t module;  // The handle of its module.
  };
  std::map<CUdeviceptr, Global> globals_;  // Module variables the client asked for (moduleGetGlobal).
  CUstream sync_stream_ = nullptr;
  HandleTable<CUmodule> modules_;
  HandleTable<FunctionInfo> functions_;
  HandleTable<CUstream> streams_;
  HandleTable<CUevent> events_;
};

}  // namespace

Result<kj::Own<wire::Session::Server>> NewCudaSession(std::shared_ptr<CudaDriver> driver,
                                                      const CudaSessionConfig& config) {
  if (!driver) return Status(StatusCode::kUnavailable, "no CUDA driver is loaded");
  auto api = std::make_unique<Api>();
  std::string missing;
  if (!api->Load(*driver, &missing)) {
    return Status(StatusCode::kUnavailable, fmt::format("the CUDA driver lacks {}", missing));
  }
  // The CUDA ordinal of the NVML device: by UUID, whatever CUDA_DEVICE_ORDER says.
  int count = 0;
  api->cuDeviceGetCount(&count);
  CUdevice device = -1;
  for (int i = 0; i < count; ++i) {
    CUdevice d;
    CUuuid uuid;
    if (api->cuDeviceGet(&d, i) == CUDA_SUCCESS && api->cuDeviceGetUuid(&uuid, d) == CUDA_SUCCESS &&
        UuidString(uuid) == config.nvml_uuid) {
      device = d;
    }
  }
  if (device < 0) return Status(StatusCode::kUnavailable, "the CUDA driver does not see GPU " + config.nvml_uuid);
  CUcontext ctx;
  if (CUresult r = api->cuDevicePrimaryCtxRetain(&ctx, device); r != CUDA_SUCCESS) {
    return Status(StatusCode::kUnavailable, fmt::format("cuDevicePrimaryCtxRetain failed ({})", static_cast<int>(r)));
  }
  api->cuCtxSetCurrent(ctx);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  if (api->cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      granularity == 0) {
    api->cuDevicePrimaryCtxRelease(device);
    return Status(StatusCode::kUnavailable, "this GPU does not support virtual memory management");
  }
  CUdeviceptr reserved = 0;
  CUresult r = api->cuMemAddressReserve(&reserved, config.window_bytes, granularity, config.window_base, 0);
  if (r != CUDA_SUCCESS || reserved != config.window_base) {
    if (r == CUDA_SUCCESS) api->cuMemAddressFree(reserved, config.window_bytes);
    api->cuDevicePrimaryCtxRelease(device);
    return Status(StatusCode::kResourceExhausted, "the address window is taken on this GPU server");
  }
  return kj::Own<wire::Session::Server>(
      kj::heap<CudaSession>(std::move(driver), std::move(api), config, device, ctx, granularity));
}

}  // namespace gpupool::backend
