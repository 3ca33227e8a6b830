#include "backend/cuda/cuda_backend.h"

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/array_format.h"
#include "core/log.h"
#include "core/range_allocator.h"
#include "core/test_seams.h"
#include "emu/fatbin.h"
#include "emu/ptx_parser.h"

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
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx)                     \
  X(cuOccupancyMaxActiveClusters) X(cuLaunchHostFunc) X(cuStreamCreate) X(cuStreamDestroy)               \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuStreamWaitValue32) X(cuStreamWaitValue64) X(cuEventCreate)    \
  X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventElapsedTime) X(cuEventSynchronize)         \
  X(cuGetErrorString) X(cuTexObjectCreate) X(cuTexObjectDestroy) X(cuMemGetInfo) X(cuCtxSetLimit) X(cuCtxGetLimit) \
  X(cuMemcpyDtoH) X(cuMemcpyHtoD) X(cuArray3DCreate) X(cuArrayDestroy) X(cuMemcpy3DAsync) X(cuSurfObjectCreate) \
  X(cuSurfObjectDestroy)

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

std::string UuidString(const CUuuid& u) { return GpuUuidString(reinterpret_cast<const unsigned char*>(u.bytes)); }

// A launch's shape as cuLaunchKernelEx and cuOccupancyMaxActiveClusters take it. Not copyable: `config.attrs`
// points at `attrs` once an attribute (cluster dimension, cooperative) is set.
struct DriverLaunch {
  CUlaunchConfig config = {};
  CUlaunchAttribute attrs[2] = {};

  // Boilerplate by nature: field by field from the launch's shape to the driver's configuration.
  DriverLaunch(const LaunchShape& shape, CUstream stream) {
    config.gridDimX = shape.grid.x;
    config.gridDimY = shape.grid.y;
    config.gridDimZ = shape.grid.z;
    config.blockDimX = shape.block.x;
    config.blockDimY = shape.block.y;
    config.blockDimZ = shape.block.z;
    config.sharedMemBytes = shape.shared_bytes;
    config.hStream = stream;
  }
  DriverLaunch(const DriverLaunch&) = delete;
  DriverLaunch& operator=(const DriverLaunch&) = delete;

  void SetCluster(const Dim3& k) {
    CUlaunchAttribute& a = Add();
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = k.x;
    a.value.clusterDim.y = k.y;
    a.value.clusterDim.z = k.z;
  }
  void SetCooperative() {
    CUlaunchAttribute& a = Add();
    a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    a.value.cooperative = 1;
  }

 private:
  CUlaunchAttribute& Add() {
    config.attrs = attrs;
    return attrs[config.numAttrs++];
  }
};

CUstream S(StreamRef s) { return static_cast<CUstream>(s.p); }
CUevent E(EventRef e) { return static_cast<CUevent>(e.p); }
CUmodule M(ModuleRef m) { return static_cast<CUmodule>(m.p); }
CUfunction F(FunctionRef f) { return static_cast<CUfunction>(f.p); }

// Drops `item` from `list` (the objects a session created and has not destroyed yet).
template <typename T>
void Forget(std::vector<T>& list, T item) {
  list.erase(std::remove(list.begin(), list.end(), item), list.end());
}

// The functions a session handed to the driver's callback thread (cuLaunchHostFunc) that have not run yet. After a
// kernel fault the driver runs none of them, ever (seen on an H100, driver 580: a host function queued behind the
// faulting kernel is dropped with the context's work), so whoever waits for one (a client's synchronisation, a
// submission turn, a staging buffer) would wait forever. While any is pending, a watch asks the context every
// kFaultPoll whether it has faulted, and if so runs them itself: the waits end, and report the fault.
// The watch also keeps markers: events recorded behind work whose end only bookkeeping waits for (the submission
// turns, DeviceBackend::WhenRan). A host function holds its stream until the driver's callback thread has run it,
// and one per kernel cost an H100 five times its launch rate; an event holds nothing, and the watch's thread sleeps
// in cuEventSynchronize on the oldest marker until it is reached.
class CallbackWatch {
 public:
  static constexpr auto kFaultPoll = std::chrono::milliseconds(20);

  CallbackWatch(const Api& api, CUcontext ctx) {
    state_->api = api;
    state_->ctx = ctx;
  }
  ~CallbackWatch() { Stop(/*idle=*/false); }

  // Ends the watch, before the context goes. `idle`: the device has no work left, so the watch's thread returns at
  // once and its spare events are destroyed; otherwise it may sleep on work that never ends (a client killed
  // mid-kernel), and is left to the worker's exit. Functions the driver runs later still run.
  void Stop(bool idle) {
    std::vector<CUevent> spare;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->stop) return;
      state_->stop = true;
      if (idle) spare.swap(state_->spare);
    }
    state_->changed.notify_all();
    if (thread_.joinable()) {
      if (idle) {
        thread_.join();
      } else {
        thread_.detach();
      }
    }
    for (CUevent e : spare) state_->api.cuEventDestroy(e);
  }

  // cuLaunchHostFunc(stream, fn): `fn` runs once, from the driver's callback thread or, after a fault, the watch's.
  CUresult Launch(CUstream stream, std::function<void()> fn) {
    auto callback = std::make_shared<Callback>();
    callback->fn = std::move(fn);
    callback->state = state_;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->stop) return CUDA_ERROR_DEINITIALIZED;
      state_->pending.emplace(callback.get(), callback);
      StartLocked();
    }
    state_->changed.notify_all();
    // The driver's reference: freed when it runs the function, or never after a fault (the worker exits soon).
    auto* held = new std::shared_ptr<Callback>(callback);
    CUresult res = state_->api.cuLaunchHostFunc(stream, &CallbackWatch::FromDriver, held);
    if (res != CUDA_SUCCESS) {
      delete held;
      Forget(state_, callback.get());
    }
    return res;
  }

  // `fn` runs once, on the watch's thread, after the work queued on `stream` so far has run (or the context
  // faulted). Called on the session's thread, with the context current.
  CUresult Mark(CUstream stream, std::function<void()> fn) {
    CUevent event = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->stop) return CUDA_ERROR_DEINITIALIZED;
      if (!state_->spare.empty()) {
        event = state_->spare.back();
        state_->spare.pop_back();
      }
    }
    if (event == nullptr) {
      CUresult res = state_->api.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC);
      if (res != CUDA_SUCCESS) return res;
    }
    CUresult res = state_->api.cuEventRecord(event, stream);
    std::lock_guard<std::mutex> lock(state_->mu);
    if (res != CUDA_SUCCESS || state_->stop) {
      state_->spare.push_back(event);
      return res != CUDA_SUCCESS ? res : CUDA_ERROR_DEINITIALIZED;
    }
    state_->markers.push_back({event, std::move(fn)});
    StartLocked();
    state_->changed.notify_all();
    return CUDA_SUCCESS;
  }

 private:
  struct Marker {
    CUevent event;
    std::function<void()> fn;
  };
  struct State;
  struct Callback {
    std::function<void()> fn;
    std::atomic<bool> ran{false};
    std::weak_ptr<State> state;
    void RunOnce() {
      if (!ran.exchange(true)) fn();
    }
  };
  // Shared with the callbacks the driver holds and with the watch's thread, either of which may outlive the watch.
  struct State {
    Api api;
    CUcontext ctx = nullptr;
    std::mutex mu;
    std::condition_variable changed;
    // Guarded by mu: stopped; the functions the driver has not run; markers in record order; reached markers' events.
    bool stop = false;
    std::unordered_map<const Callback*, std::shared_ptr<Callback>> pending;
    std::deque<Marker> markers;
    std::vector<CUevent> spare;
  };

  // Starts the watch's thread, once; never after Stop (whose thread would then outlive the watch unjoined).
  void StartLocked() {
    if (!state_->stop && !thread_.joinable()) thread_ = std::thread([state = state_] { Watch(state); });
  }

  static void CUDA_CB FromDriver(void* data) {
    auto* held = static_cast<std::shared_ptr<Callback>*>(data);
    (*held)->RunOnce();
    if (auto state = (*held)->state.lock()) Forget(state, held->get());
    delete held;
  }

  static void Forget(const std::shared_ptr<State>& state, const Callback* callback) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->pending.erase(callback);
  }

  // Runs every pending function and marker: the context faulted, and the driver will run none of them.
  static void RunAllLocked(State& st, std::unique_lock<std::mutex>& lock) {
    std::vector<std::shared_ptr<Callback>> dropped;
    for (auto& [raw, callback] : st.pending) dropped.push_back(callback);
    st.pending.clear();
    std::deque<Marker> markers;
    markers.swap(st.markers);
    lock.unlock();
    for (auto& callback : dropped) callback->RunOnce();
    for (Marker& m : markers) m.fn();
    lock.lock();
  }

  static void Watch(std::shared_ptr<State> state) {
    State& st = *state;
    st.api.cuCtxSetCurrent(st.ctx);
    std::unique_lock<std::mutex> lock(st.mu);
    while (!st.stop) {
      if (!st.markers.empty()) {
        // The oldest marker: its event answers once the work before it has run, or with the context's fault.
        CUevent event = st.markers.front().event;
        lock.unlock();
        const CUresult res = st.api.cuEventSynchronize(event);
        lock.lock();
        if (st.stop) break;
        if (cu::IsStickyFault(res)) {
          RunAllLocked(st, lock);
          continue;
        }
        Marker reached = std::move(st.markers.front());
        st.markers.pop_front();
        st.spare.push_back(reached.event);
        lock.unlock();
        reached.fn();
        lock.lock();
        continue;
      }
      if (st.pending.empty()) {
        st.changed.wait(lock, [&] { return st.stop || !st.pending.empty() || !st.markers.empty(); });
        continue;
      }
      st.changed.wait_for(lock, kFaultPoll, [&] { return st.stop || !st.markers.empty(); });
      if (st.stop || st.pending.empty() || !st.markers.empty()) continue;
      lock.unlock();
      // The legacy stream's query answers the context's fault, if it has one, without waiting for anything.
      const bool faulted = cu::IsStickyFault(st.api.cuStreamQuery(nullptr));
      lock.lock();
      if (faulted) RunAllLocked(st, lock);
    }
  }

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
};

// The driver's own memory for a session's context that does not depend on its modules, read when it begins.
struct ContextMemory {
  uint64_t heap_bytes = 0;        // CU_LIMIT_MALLOC_HEAP_SIZE: in-kernel malloc's heap.
  uint64_t printf_bytes = 0;      // CU_LIMIT_PRINTF_FIFO_SIZE: device printf's buffer.
  uint64_t stack_bytes = 0;       // CU_LIMIT_STACK_SIZE: per thread, part of its local memory.
  uint64_t resident_threads = 0;  // SMs x most threads per SM: local memory is reserved for all of them.
};

// The heap and printf buffer a slice's context runs with, whatever the driver's defaults: charged to the slice
// when its session opens. A tenant's cuCtxSetLimit stays with its client library (lib/interpose/context.cc) and
// never reaches this context, so these are the sizes for the session's whole life.
constexpr size_t kSliceHeapBytes = 8u << 20;
constexpr size_t kSlicePrintfBytes = 1u << 20;

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend(std::shared_ptr<CudaDriver> driver, std::unique_ptr<Api> api, const CudaBackendConfig& config,
              CUdevice device, CUcontext ctx, size_t granularity, const ContextMemory& context_memory)
      : driver_(std::move(driver)), api_(std::move(api)), config_(config), device_(device), ctx_(ctx),
        granularity_(granularity), context_memory_(context_memory) {
    window_.Reset(config_.window_bytes);
    api_->cuDeviceGetAttribute(&cc_major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    api_->cuDeviceGetAttribute(&cc_minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
  }

  ~CudaBackend() override {
    // Freeing memory waits for the work using it. Work still running when the session goes (its client died
    // mid-kernel) is nobody's now: the worker process exits right after this, and the driver then ends the context
    // with its work and memory, where waiting could take forever (a kernel that never ends).
    const bool idle = Idle();
    callbacks_.Stop(idle);
    if (!idle) return;
    ReleaseAll();
    api_->cuMemAddressFree(config_.window_base, config_.window_bytes);
    api_->cuDevicePrimaryCtxRelease(device_);
  }

  DeviceInfo Info() override {
    Current();
    DeviceInfo info;
    char name[256] = {0};
    api_->cuDeviceGetName(name, sizeof(name), device_);
    info.name = name;
    info.total_memory = config_.memory_bytes;
    api_->cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    api_->cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
    api_->cuDeviceGetAttribute(&info.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device_);
    api_->cuDeviceGetAttribute(&info.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device_);
    api_->cuDeviceGetAttribute(&info.pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device_);
    CUuuid uuid;
    api_->cuDeviceGetUuid(&uuid, device_);
    std::memcpy(info.uuid, uuid.bytes, 16);
    for (int id = 1; id < CU_DEVICE_ATTRIBUTE_MAX; ++id) {
      int value = 0;
      if (api_->cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(id), device_) == CUDA_SUCCESS) {
        info.attributes[id] = value;
      }
    }
    return info;
  }

  // The slice's quota is the session server's; the GPU's own free memory is not the slice's business.
  CallStatus MemInfo(uint64_t* free_bytes, uint64_t* total_bytes) override {
    *free_bytes = *total_bytes = config_.memory_bytes;
    return CallStatus::Ok();
  }

  CallStatus Alloc(uint64_t bytes, uint64_t* address, uint64_t* reserved) override {
    Reclaim();
    // A faulted context allocates nothing, as cuMemAlloc answers; the virtual memory calls used here would
    // succeed regardless (an H100, driver 580: cudaMalloc on a slice after a fault succeeded).
    Current();
    if (CUresult fault = api_->cuStreamQuery(nullptr); cu::IsStickyFault(fault)) return From(fault);
    uint64_t size = (bytes + granularity_ - 1) / granularity_ * granularity_;
    uint64_t offset = 0;
    if (!window_.Take(size, granularity_, &offset)) {
      return {CUDA_ERROR_OUT_OF_MEMORY, "the session's address window is full"};
    }
    return MapFresh(config_.window_base + offset, size, address, reserved);
  }

  // A restored session's allocation, at the address it had (within the window, which is the client's as before).
  CallStatus AllocAt(uint64_t address, uint64_t bytes, uint64_t* reserved) override {
    Current();
    const uint64_t size = (bytes + granularity_ - 1) / granularity_ * granularity_;
    if (address < config_.window_base || (address - config_.window_base) % granularity_ != 0 ||
        !window_.TakeAt(address - config_.window_base, size)) {
      return {CUDA_ERROR_INVALID_VALUE,
              fmt::format("restore: an allocation at 0x{:x} is not a free, aligned range of the window", address)};
    }
    uint64_t placed = 0;
    return MapFresh(address, size, &placed, reserved);
  }

  // Copies while the session is quiet: synchronous copies of the context's, which wait for nothing else.
  CallStatus ReadIdle(uint64_t address, uint64_t bytes, std::vector<uint8_t>* out) override {
    Current();
    out->resize(bytes);
    return From(api_->cuMemcpyDtoH(out->data(), address, bytes));
  }
  CallStatus WriteIdle(uint64_t address, const uint8_t* data, uint64_t bytes) override {
    Current();
    return From(api_->cuMemcpyHtoD(address, data, bytes));
  }

  // Fresh physical memory mapped read-write at `at` (taken from the window already: given back on failure).
  CallStatus MapFresh(CUdeviceptr at, uint64_t size, uint64_t* address, uint64_t* reserved) {
    const uint64_t offset = at - config_.window_base;
    CUmemAllocationProp prop = Prop();
    CUmemGenericAllocationHandle handle;
    CUresult res = api_->cuMemCreate(&handle, size, &prop, 0);
    if (res == CUDA_SUCCESS) {
      res = api_->cuMemMap(at, size, 0, handle, 0);
      if (res == CUDA_SUCCESS) {
        CUmemAccessDesc access = {};
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        res = api_->cuMemSetAccess(at, size, &access, 1);
        if (res != CUDA_SUCCESS) api_->cuMemUnmap(at, size);
      }
      if (res != CUDA_SUCCESS) api_->cuMemRelease(handle);
    }
    if (res != CUDA_SUCCESS) {
      window_.Give(offset, size);
      return From(res);
    }
    allocations_[at] = {handle, size};
    *address = at;
    *reserved = size;
    return CallStatus::Ok();
  }

  CallStatus Free(uint64_t address, uint64_t) override {
    auto it = allocations_.find(address);
    if (it == allocations_.end()) return {CUDA_ERROR_INVALID_VALUE, "not an allocation of this session"};
    Current();
    // cuMemUnmap waits for work using the range, as cudaFree does.
    api_->cuMemUnmap(it->first, it->second.size);
    api_->cuMemRelease(it->second.handle);
    window_.Give(it->first - config_.window_base, it->second.size);
    allocations_.erase(it);
    return CallStatus::Ok();
  }

  // Virtual memory: reservations share the session's window with its allocations (all of it is reserved on the
  // GPU already); physical memory and mappings are the driver's own.
  CallStatus ReserveAddress(uint64_t bytes, uint64_t alignment, uint64_t hint, uint64_t* address) override {
    uint64_t offset = 0, align = std::max<uint64_t>(alignment, granularity_);
    bool at_hint = hint >= config_.window_base && hint % align == 0 &&
                   window_.TakeAt(hint - config_.window_base, bytes);
    if (at_hint) {
      offset = hint - config_.window_base;
    } else if (!window_.Take(bytes, align, &offset)) {
      return {CUDA_ERROR_OUT_OF_MEMORY, "the session's address window has no free range that large"};
    }
    *address = config_.window_base + offset;
    reservations_[*address] = bytes;
    return CallStatus::Ok();
  }

  CallStatus FreeAddress(uint64_t address, uint64_t bytes) override {
    if (reservations_.erase(address) == 0) return {CUDA_ERROR_INVALID_VALUE, "not a reservation of this session"};
    window_.Give(address - config_.window_base, bytes);
    return CallStatus::Ok();
  }

  CallStatus CreatePhysical(uint64_t bytes, PhysicalRef* memory) override {
    Current();
    CUmemAllocationProp prop = Prop();
    CUmemGenericAllocationHandle handle;
    if (CUresult r = api_->cuMemCreate(&handle, bytes, &prop, 0); r != CUDA_SUCCESS) return From(r);
    physical_.push_back(handle);
    memory->p = reinterpret_cast<void*>(handle);
    return CallStatus::Ok();
  }

  CallStatus ReleasePhysical(PhysicalRef memory) override {
    auto handle = reinterpret_cast<CUmemGenericAllocationHandle>(memory.p);
    Forget(physical_, handle);
    return From(api_->cuMemRelease(handle));
  }

  CallStatus Map(uint64_t address, uint64_t bytes, PhysicalRef memory, uint64_t offset) override {
    Current();
    auto handle = reinterpret_cast<CUmemGenericAllocationHandle>(memory.p);
    if (CUresult r = api_->cuMemMap(address, bytes, offset, handle, 0); r != CUDA_SUCCESS) return From(r);
    CUmemAccessDesc access = {};
    access.location = Prop().location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (CUresult r = api_->cuMemSetAccess(address, bytes, &access, 1); r != CUDA_SUCCESS) {
      api_->cuMemUnmap(address, bytes);
      return From(r);
    }
    mappings_[address] = bytes;
    return CallStatus::Ok();
  }

  CallStatus Unmap(uint64_t address, uint64_t bytes) override {
    Current();
    for (auto it = mappings_.lower_bound(address); it != mappings_.end() && it->first < address + bytes;) {
      it = mappings_.erase(it);
    }
    return From(api_->cuMemUnmap(address, bytes));
  }

  // Through pinned staging so the copy is truly asynchronous and the event loop never blocks on the GPU.
  CallStatus CopyToDevice(uint64_t dst, const uint8_t* src, uint64_t bytes, StreamRef stream) override {
    Reclaim();
    Current();
    void* staging = nullptr;
    CUresult res = TakeStaging(bytes, &staging);
    if (res != CUDA_SUCCESS) return From(res);
    std::memcpy(staging, src, bytes);
    res = api_->cuMemcpyHtoDAsync(dst, staging, bytes, S(stream));
    if (res != CUDA_SUCCESS) {
      GiveStaging(staging);
      return From(res);
    }
    return ReleaseAfter(stream, staging, nullptr);
  }

  CallStatus CopyFromDevice(uint8_t* dst, uint64_t src, uint64_t bytes, StreamRef stream) override {
    Reclaim();
    Current();
    void* staging = nullptr;
    CUresult res = TakeStaging(bytes, &staging);
    if (res != CUDA_SUCCESS) return From(res);
    res = api_->cuMemcpyDtoHAsync(staging, src, bytes, S(stream));
    if (res != CUDA_SUCCESS) {
      GiveStaging(staging);
      return From(res);
    }
    // The reply's buffer is filled on the stream, before the server's own wait on it resolves.
    return ReleaseAfter(stream, staging, [dst, staging, bytes] { std::memcpy(dst, staging, bytes); });
  }

  CallStatus CopyOnDevice(uint64_t dst, uint64_t src, uint64_t bytes, StreamRef stream) override {
    Current();
    return From(api_->cuMemcpyDtoDAsync(dst, src, bytes, S(stream)));
  }

  CallStatus Memset(uint64_t dst, uint32_t value, uint8_t element_size, uint64_t count, StreamRef stream) override {
    Current();
    switch (element_size) {
      case 1: return From(api_->cuMemsetD8Async(dst, static_cast<unsigned char>(value), count, S(stream)));
      case 2: return From(api_->cuMemsetD16Async(dst, static_cast<unsigned short>(value), count, S(stream)));
      case 4: return From(api_->cuMemsetD32Async(dst, value, count, S(stream)));
      default: return {CUDA_ERROR_INVALID_VALUE, "memset element size must be 1, 2 or 4 bytes"};
    }
  }

  CallStatus LoadModule(const uint8_t* image, size_t bytes, ModuleRef* module) override {
    // The driver reads the image during the call only; a copy keeps it aligned and NUL-terminated (PTX).
    std::vector<uint8_t> copy(image, image + bytes);
    copy.push_back(0);
    Current();
    // The driver gives no per-context figure for a module's code, constants and variables: the device's free
    // memory before and after the load tells it (cuMemGetInfo is per device, so another process allocating or
    // freeing on the GPU meanwhile moves it too: the charge is then off by that much until the module goes).
    size_t free_before = 0, free_after = 0, total = 0;
    const bool measured = api_->cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS;
    CUmodule m;
    CUresult res = api_->cuModuleLoadData(&m, copy.data());
    if (res == CUDA_SUCCESS) {
      module->p = m;
      modules_.push_back(m);
      uint64_t bytes = 0;
      if (measured && api_->cuMemGetInfo(&free_after, &total) == CUDA_SUCCESS && free_after < free_before) {
        bytes = free_before - free_after;
      }
      module_bytes_[m] = bytes;
      modules_total_ += bytes;
    }
    return From(res);
  }

  // A restored session's module: loaded again, and kept only where the driver placed its variables where they
  // were (the driver chooses; it cannot be told). Elsewhere, pointers to them held by the program or stored in
  // device memory would dangle: the restore is refused, naming the variable.
  CallStatus LoadModuleAt(const uint8_t* image, size_t bytes, const std::vector<uint64_t>& placements,
                          ModuleRef* module) override {
    if (CallStatus s = LoadModule(image, bytes, module); !s.ok()) return s;
    std::vector<std::pair<uint64_t, uint64_t>> placed;
    CallStatus s = ModuleVariables(*module, std::vector<uint8_t>(image, image + bytes), &placed);
    if (s.ok() && placed.size() != placements.size()) {
      s = {CUDA_ERROR_NOT_SUPPORTED, fmt::format("restore: the module has {} variables on this GPU, {} before",
                                                 placed.size(), placements.size())};
    }
    for (size_t i = 0; s.ok() && i < placed.size(); ++i) {
      if (placed[i].first != placements[i]) {
        s = {CUDA_ERROR_NOT_SUPPORTED,
             fmt::format("restore: the GPU's driver placed a module variable at 0x{:x}, not at 0x{:x} where it was "
                         "(a GPU's driver places module variables itself)", placed[i].first, placements[i])};
      }
    }
    if (!s.ok()) UnloadModule(*module);
    return s;
  }

  // A module's variables, where the driver placed them, in address order: the .global and .const variables its PTX
  // declares (the SASS the driver loads has the same names), looked up by name. A module with no PTX to read the
  // names from (SASS alone) cannot tell them, and cannot be checkpointed.
  CallStatus ModuleVariables(ModuleRef module, const std::vector<uint8_t>& image,
                             std::vector<std::pair<uint64_t, uint64_t>>* placed) override {
    placed->clear();
    auto names = VariableNames(image);
    if (!names.ok()) return names.status();
    Current();
    for (const std::string& name : *names) {
      CUdeviceptr at = 0;
      size_t size = 0;
      CUresult r = api_->cuModuleGetGlobal(&at, &size, M(module), name.c_str());
      if (r == CUDA_ERROR_NOT_FOUND) continue;  // Declared in the PTX, gone from the SASS.
      if (r != CUDA_SUCCESS) return From(r);
      placed->emplace_back(at, size);
    }
    std::sort(placed->begin(), placed->end());
    return CallStatus::Ok();
  }

  // The names of the variables a module's image declares, read from its PTX (a fatbin's for this GPU's
  // architecture, or PTX text), as gpupool's emulator reads it.
  CallResult<std::vector<std::string>> VariableNames(const std::vector<uint8_t>& image) {
    auto ptx = emu::PtxForDevice(image.data(), image.size(), cc_major_ * 10 + cc_minor_);
    if (!ptx.ok()) {
      return CallStatus{CUDA_ERROR_NOT_SUPPORTED,
                        "checkpoint: a module's variables cannot be listed without its PTX: " + ptx.status().message()};
    }
    auto parsed = emu::ParsePtx(*ptx);
    if (!parsed.ok()) {
      return CallStatus{CUDA_ERROR_NOT_SUPPORTED,
                        "checkpoint: a module's variables cannot be listed: " + parsed.status().message()};
    }
    std::vector<std::string> names;
    for (const emu::ptx::Variable& v : parsed->globals) {
      if ((v.space == emu::ptx::Space::kGlobal || v.space == emu::ptx::Space::kConst) && !v.is_extern &&
          v.array_size >= 0) {
        names.push_back(v.name);
      }
    }
    return names;
  }

  CallStatus UnloadModule(ModuleRef module) override {
    Current();
    Forget(modules_, M(module));
    if (auto it = module_bytes_.find(M(module)); it != module_bytes_.end()) {
      modules_total_ -= it->second;
      module_bytes_.erase(it);
    }
    return From(api_->cuModuleUnload(M(module)));
  }

  // Per context where the driver says it: the heap and printf buffer at the sizes set when the session began, and
  // local memory as the driver reserves it, for every thread the device can hold at once (SMs x threads per SM):
  // the stack from the context's start, grown at a launch by the most local memory a launched function needs (and
  // never shrunk again); modules as LoadModule measured them.
  uint64_t DriverHeldBytes() override { return HeldWithLocal(launched_local_); }

  uint64_t DriverHeldBytesWithLaunch(const KernelInfo& info) override {
    const uint64_t local = static_cast<uint64_t>(std::max(info.local_bytes, 0));
    return HeldWithLocal(std::max(launched_local_, local));
  }

  CallStatus GetFunction(ModuleRef module, const std::string& name, FunctionRef* function, KernelInfo* info) override {
    Current();
    CUfunction fn;
    CUresult res = api_->cuModuleGetFunction(&fn, M(module), name.c_str());
    if (res != CUDA_SUCCESS) return From(res);
    for (size_t i = 0;; ++i) {
      size_t offset = 0, size = 0;
      if (api_->cuFuncGetParamInfo(fn, i, &offset, &size) != CUDA_SUCCESS) break;
      info->params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
    }
    api_->cuFuncGetAttribute(&info->shared_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
    api_->cuFuncGetAttribute(&info->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
    api_->cuFuncGetAttribute(&info->num_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    api_->cuFuncGetAttribute(&info->ptx_version, CU_FUNC_ATTRIBUTE_PTX_VERSION, fn);
    api_->cuFuncGetAttribute(&info->max_threads_per_block, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
    function->p = fn;
    return CallStatus::Ok();
  }

  // TODO(feature): module variables live outside the session's window, so a pointer to one does not route by
  // address on the client.
  CallStatus GetGlobal(ModuleRef module, const std::string& name, uint64_t* address, uint64_t* bytes) override {
    Current();
    CUdeviceptr at = 0;
    size_t size = 0;
    CUresult res = api_->cuModuleGetGlobal(&at, &size, M(module), name.c_str());
    *address = at;
    *bytes = size;
    return From(res);
  }

  // Kernel pointer arguments are not checked (a kernel can address anything its context maps): each session has
  // its own worker process and context, which maps only this session's memory.
  CallStatus Launch(FunctionRef function, const KernelInfo& info, const LaunchShape& shape, StreamRef stream,
                    const uint8_t* params, size_t) override {
    std::vector<void*> args;
    for (const KernelParam& p : info.params) args.push_back(const_cast<uint8_t*>(params) + p.offset);
    void** kernel_params = args.empty() ? nullptr : args.data();
    Current();
    // Real arrays behind surfaces and array textures hold the client's pitched memory for the launch (Shadow).
    for (const Shadow& shadow : shadows_) {
      if (CallStatus s = CopyShadow(shadow, true, S(stream)); !s.ok()) return s;
    }
    CUresult res;
    if (shape.cluster || shape.cooperative) {  // Only cuLaunchKernelEx takes clusters and the cooperative flag.
      DriverLaunch launch(shape, S(stream));
      if (shape.cluster) launch.SetCluster(*shape.cluster);
      if (shape.cooperative) launch.SetCooperative();
      res = api_->cuLaunchKernelEx(&launch.config, F(function), kernel_params, nullptr);
    } else {
      res = api_->cuLaunchKernel(F(function), shape.grid.x, shape.grid.y, shape.grid.z, shape.block.x,
                                 shape.block.y, shape.block.z, shape.shared_bytes, S(stream), kernel_params, nullptr);
    }
    if (res == CUDA_SUCCESS) {  // The driver has grown local memory for it (and never shrinks it).
      const uint64_t local = static_cast<uint64_t>(std::max(info.local_bytes, 0));
      launched_local_ = std::max(launched_local_, local);
    }
    for (const Shadow& shadow : shadows_) {
      if (!shadow.writable) continue;
      if (CallStatus s = CopyShadow(shadow, false, S(stream)); !s.ok() && res == CUDA_SUCCESS) return s;
    }
    return From(res);
  }

  CallStatus SetFunctionAttribute(FunctionRef function, int attribute, int value) override {
    Current();
    return From(api_->cuFuncSetAttribute(F(function), static_cast<CUfunction_attribute>(attribute), value));
  }

  CallStatus MaxActiveClusters(FunctionRef function, const LaunchShape& shape, int* clusters) override {
    Current();
    DriverLaunch launch(shape, nullptr);
    const Dim3& k = shape.cluster.value_or(Dim3{0, 0, 0});
    if (k.x != 0 || k.y != 0 || k.z != 0) launch.SetCluster(k);  // Zero: the function's own.
    return From(api_->cuOccupancyMaxActiveClusters(clusters, F(function), &launch.config));
  }

  CallStatus CreateStream(StreamRef* stream) override { return CreateOwned(api_->cuStreamCreate, &streams_, stream); }

  // Returns at once; queued work still completes.
  CallStatus DestroyStream(StreamRef stream) override {
    return DestroyOwned(api_->cuStreamDestroy, &streams_, S(stream));
  }

  CallStatus QueryStream(StreamRef stream) override {
    Current();
    return From(api_->cuStreamQuery(S(stream)));
  }

  // Texture objects over pitch2D and linear memory go to the real driver as they are. A texture over a CUDA array
  // (which the client keeps as pitched memory, lib/interpose/array.cc) goes as pitch2D memory when the array is 2D
  // without layers: the driver samples both alike. A 1D array cannot go as linear memory (the driver neither
  // filters nor addresses linear textures as it does arrays), and 3D and layered arrays, and every surface, need a
  // real CUDA array: those go over a shadow array (CreateOverShadow). Not run on a GPU yet.
  CallStatus CreateTexture(const TextureSpec& spec, uint64_t* handle, uint64_t* reserved) override {
    const bool pitch2d = spec.resource == TextureSpec::Resource::kPitch2D ||
                         (spec.resource == TextureSpec::Resource::kArray && spec.dims == 2 && spec.layers == 0);
    if (spec.surface || (!pitch2d && spec.resource == TextureSpec::Resource::kArray)) {
      return CreateOverShadow(spec, handle, reserved);
    }
    CUDA_RESOURCE_DESC res = {};
    const CUarray_format format = static_cast<CUarray_format>(spec.format);
    if (pitch2d) {
      res.resType = CU_RESOURCE_TYPE_PITCH2D;
      res.res.pitch2D.devPtr = spec.address;
      res.res.pitch2D.format = format;
      res.res.pitch2D.numChannels = spec.channels;
      res.res.pitch2D.width = spec.width;
      res.res.pitch2D.height = spec.height;
      res.res.pitch2D.pitchInBytes = spec.pitch;
    } else {
      res.resType = CU_RESOURCE_TYPE_LINEAR;
      res.res.linear.devPtr = spec.address;
      res.res.linear.format = format;
      res.res.linear.numChannels = spec.channels;
      res.res.linear.sizeInBytes = uint64_t{spec.width} * ChannelBytes(spec.format) * spec.channels;
    }
    const CUDA_TEXTURE_DESC tex = TextureDescOf(spec);
    Current();
    CUtexObject object = 0;
    if (CUresult r = api_->cuTexObjectCreate(&object, &res, &tex, nullptr); r != CUDA_SUCCESS) return From(r);
    textures_.push_back(object);
    *handle = object;
    *reserved = 0;  // The driver's own bookkeeping, not the slice's memory.
    return CallStatus::Ok();
  }

  CallStatus DestroyTexture(uint64_t handle) override {
    Current();
    for (auto it = shadows_.begin(); it != shadows_.end(); ++it) {
      if (it->object != handle) continue;
      // The array may still be read or written by queued work: it goes once the session's streams are done.
      const CUresult r = it->surface ? api_->cuSurfObjectDestroy(it->object) : api_->cuTexObjectDestroy(it->object);
      retired_arrays_.push_back(it->array);
      shadows_.erase(it);
      return From(r);
    }
    Forget(textures_, static_cast<CUtexObject>(handle));
    return From(api_->cuTexObjectDestroy(static_cast<CUtexObject>(handle)));
  }

  // How a texture samples, as the driver is told it.
  static CUDA_TEXTURE_DESC TextureDescOf(const TextureSpec& spec) {
    CUDA_TEXTURE_DESC tex = {};
    for (int i = 0; i < 3; ++i) tex.addressMode[i] = static_cast<CUaddress_mode>(spec.address_mode[i]);
    tex.filterMode = static_cast<CUfilter_mode>(spec.filter_mode);
    tex.flags = spec.flags;
    for (int i = 0; i < 4; ++i) tex.borderColor[i] = spec.border[i];
    return tex;
  }

  // Real CUDA arrays behind surfaces and 1D, 3D or layered array textures (CreateOverShadow).
  struct Shadow {
    CUarray array = nullptr;
    unsigned long long object = 0;  // The surface or texture object (CUsurfObject, CUtexObject).
    bool surface = false, writable = false;
    CUdeviceptr address = 0;  // The client's pitched memory it shadows.
    uint64_t pitch = 0, row_bytes = 0, height = 1, depth = 1;
    uint64_t slice_rows = 1;  // Rows of `pitch` from one depth slice (or layer) to the next.
  };

  // A surface, or a texture over a 1D, 3D or layered CUDA array: the client keeps arrays as pitched memory of the
  // slice (lib/interpose/array.cc), which a surface cannot be made over, nor such a texture sampled as the GPU
  // samples arrays. So a real CUDA array of the same shape shadows that memory: every launch of the session copies
  // the memory into it first, and a surface's array back after the launch, on the launch's stream, so that copies
  // and kernels see one content in stream order. The array is charged to the slice (`reserved`). Only sessions that
  // make such objects pay the copies.
  CallStatus CreateOverShadow(const TextureSpec& spec, uint64_t* handle, uint64_t* reserved) {
    Current();
    CUDA_ARRAY3D_DESCRIPTOR desc = {};
    desc.Format = static_cast<CUarray_format>(spec.format);
    desc.NumChannels = spec.channels;
    desc.Width = spec.width;
    desc.Height = spec.dims >= 2 ? spec.height : 0;
    desc.Depth = spec.layers ? spec.layers : (spec.dims == 3 ? spec.depth : 0);
    desc.Flags = (spec.surface ? CUDA_ARRAY3D_SURFACE_LDST : 0) | (spec.layers ? CUDA_ARRAY3D_LAYERED : 0);
    Shadow shadow;
    shadow.surface = spec.surface;
    shadow.writable = spec.surface;
    shadow.address = spec.address;
    shadow.pitch = spec.pitch;
    shadow.row_bytes = uint64_t{spec.width} * ChannelBytes(spec.format) * spec.channels;
    shadow.height = spec.dims >= 2 ? spec.height : 1;
    shadow.depth = spec.layers ? spec.layers : (spec.dims == 3 ? spec.depth : 1);
    shadow.slice_rows = shadow.height;
    if (shadow.depth > 1) {
      // The copies step through the memory's slices in whole rows (CUDA_MEMCPY3D's srcHeight).
      if (spec.pitch == 0 || spec.slice_pitch % spec.pitch != 0 || spec.slice_pitch / spec.pitch < shadow.height) {
        return {CUDA_ERROR_NOT_SUPPORTED, "an array whose slices are not whole rows apart cannot be shadowed"};
      }
      shadow.slice_rows = spec.slice_pitch / spec.pitch;
    }
    if (CUresult r = api_->cuArray3DCreate(&shadow.array, &desc); r != CUDA_SUCCESS) return From(r);
    CUDA_RESOURCE_DESC res = {};
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = shadow.array;
    CUresult r;
    if (spec.surface) {
      r = api_->cuSurfObjectCreate(&shadow.object, &res);
    } else {
      const CUDA_TEXTURE_DESC tex = TextureDescOf(spec);
      r = api_->cuTexObjectCreate(&shadow.object, &res, &tex, nullptr);
    }
    if (r != CUDA_SUCCESS) {
      api_->cuArrayDestroy(shadow.array);
      return From(r);
    }
    *handle = shadow.object;
    *reserved = shadow.row_bytes * shadow.height * shadow.depth;  // At least: the driver may pad it.
    shadows_.push_back(shadow);
    return CallStatus::Ok();
  }

  // The shadowed memory into its array (`in`), or the array back into the memory, on `stream`.
  CallStatus CopyShadow(const Shadow& shadow, bool in, CUstream stream) {
    CUDA_MEMCPY3D copy = {};
    copy.WidthInBytes = shadow.row_bytes;
    copy.Height = shadow.height;
    copy.Depth = shadow.depth;
    CUdeviceptr memory = shadow.address;
    if (in) {
      copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      copy.srcDevice = memory;
      copy.srcPitch = shadow.pitch;
      copy.srcHeight = shadow.slice_rows;
      copy.dstMemoryType = CU_MEMORYTYPE_ARRAY;
      copy.dstArray = shadow.array;
    } else {
      copy.srcMemoryType = CU_MEMORYTYPE_ARRAY;
      copy.srcArray = shadow.array;
      copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      copy.dstDevice = memory;
      copy.dstPitch = shadow.pitch;
      copy.dstHeight = shadow.slice_rows;
    }
    return From(api_->cuMemcpy3DAsync(&copy, stream));
  }

  // A GPU's utilisation is NVML's on the server (the whole GPU, all its tenants): the agent's telemetry is where it
  // will come from, not this session.
  CallStatus Utilization(uint32_t*, uint32_t*) override {
    return {CUDA_ERROR_NOT_SUPPORTED, "utilisation of GPU slices is not reported to clients yet"};
  }

  CallStatus StreamWaitValue(StreamRef stream, uint64_t address, uint64_t value, unsigned width,
                             uint32_t flags) override {
    Current();
    if (width == 4) return From(api_->cuStreamWaitValue32(S(stream), address, static_cast<cuuint32_t>(value), flags));
    return From(api_->cuStreamWaitValue64(S(stream), address, value, flags));
  }

  CallStatus StreamWaitEvent(StreamRef stream, EventRef event) override {
    Current();
    return From(api_->cuStreamWaitEvent(S(stream), E(event), 0));
  }

  CallStatus CreateEvent(EventRef* event) override { return CreateOwned(api_->cuEventCreate, &events_, event); }

  CallStatus DestroyEvent(EventRef event) override { return DestroyOwned(api_->cuEventDestroy, &events_, E(event)); }

  CallStatus RecordEvent(EventRef event, StreamRef stream) override {
    Current();
    return From(api_->cuEventRecord(E(event), S(stream)));
  }

  CallStatus QueryEvent(EventRef event) override {
    Current();
    return From(api_->cuEventQuery(E(event)));
  }

  CallStatus ElapsedMs(EventRef start, EventRef end, float* ms) override {
    Current();
    return From(api_->cuEventElapsedTime(ms, E(start), E(end)));
  }

  CallStatus WhenReached(StreamRef stream, std::function<void()> done) override {
    Current();
    return From(callbacks_.Launch(S(stream), std::move(done)));
  }

  // An event per submission where the experiment is on (test_seams::TurnEvents), else a host function.
  CallStatus WhenRan(StreamRef stream, std::function<void()> done) override {
    if (!turn_events_) return WhenReached(stream, std::move(done));
    Current();
    return From(callbacks_.Mark(S(stream), std::move(done)));
  }

  // cuEventSynchronize would block the event loop: a private non-blocking stream waits for the event instead.
  CallStatus WhenRecorded(EventRef event, std::function<void()> done) override {
    Current();
    if (!sync_stream_) {
      CUresult res = api_->cuStreamCreate(&sync_stream_, CU_STREAM_NON_BLOCKING);
      if (res != CUDA_SUCCESS) return From(res);
    }
    CUresult res = api_->cuStreamWaitEvent(sync_stream_, E(event), 0);
    if (res != CUDA_SUCCESS) return From(res);
    return WhenReached(StreamRef{sync_stream_}, std::move(done));
  }

  CallStatus Settled(StreamRef stream) override {
    Reclaim();
    Current();
    CUresult res = api_->cuStreamQuery(S(stream));
    return From(res == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : res);  // Work queued after the wait began.
  }

  CallStatus SettledEvent(EventRef event) override {
    Current();
    CUresult res = api_->cuEventQuery(E(event));
    return From(res == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : res);  // Recorded again after the wait began.
  }

  // TODO(feature): device printf on a GPU prints to the worker's stdout at the driver's sync points; it does not
  // reach the client yet.
  std::string TakeOutput() override { return {}; }

  void Reset() override { ReleaseAll(); }

  // Every stream of the session (ours for waits included) answers its query with success: nothing queued, nothing
  // running, no fault (a faulted context answers every query with its error). A query each, never a wait.
  bool Quiet() override {
    return EveryStreamAnswers([](CUresult r) { return r == CUDA_SUCCESS; });
  }

 private:
  struct Allocation {
    CUmemGenericAllocationHandle handle;
    uint64_t size;
  };

  CallStatus From(CUresult r) const {
    if (r == CUDA_SUCCESS) return CallStatus::Ok();
    const char* text = nullptr;
    api_->cuGetErrorString(r, &text);
    return {static_cast<int>(r), text ? text : "CUDA error"};
  }

  void Current() { api_->cuCtxSetCurrent(ctx_); }

  // A stream or an event, with the driver's default flags, kept in `owned` until destroyed: the session's end
  // destroys what the program left.
  template <typename Handle, typename Tag>
  CallStatus CreateOwned(CUresult (*create)(Handle*, unsigned int), std::vector<Handle>* owned, Ref<Tag>* ref) {
    Current();
    Handle handle;
    CUresult res = create(&handle, 0);
    if (res == CUDA_SUCCESS) {
      ref->p = handle;
      owned->push_back(handle);
    }
    return From(res);
  }

  template <typename Handle>
  CallStatus DestroyOwned(CUresult (*destroy)(Handle), std::vector<Handle>* owned, Handle handle) {
    Current();
    Forget(*owned, handle);
    return From(destroy(handle));
  }

  // Whether no work of the session is queued or running (a query each, never a wait).
  bool Idle() {
    return EveryStreamAnswers([](CUresult r) { return r != CUDA_ERROR_NOT_READY; });
  }

  // Whether `ok` holds for the query of every stream of the session: the default stream, ours for waits, its own.
  template <typename Ok>
  bool EveryStreamAnswers(Ok ok) {
    Current();
    if (!ok(api_->cuStreamQuery(nullptr))) return false;
    if (sync_stream_ && !ok(api_->cuStreamQuery(sync_stream_))) return false;
    for (CUstream s : streams_) {
      if (!ok(api_->cuStreamQuery(s))) return false;
    }
    return true;
  }

  // What the driver holds once local memory has grown by `local` bytes per thread beyond the stack.
  uint64_t HeldWithLocal(uint64_t local) const {
    return context_memory_.heap_bytes + context_memory_.printf_bytes + modules_total_ +
           context_memory_.resident_threads * (context_memory_.stack_bytes + local);
  }

  CUmemAllocationProp Prop() const {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    return prop;
  }

  // Queues on `stream`: `then` (if any), then handing `staging` back for Reclaim to free on this thread (a host
  // function must not call the driver).
  CallStatus ReleaseAfter(StreamRef stream, void* staging, std::function<void()> then) {
    auto done = done_staging_;
    CUresult res = callbacks_.Launch(S(stream), [done, staging, then = std::move(then)] {
      if (then) then();
      std::lock_guard<std::mutex> lock(done->mu);
      done->buffers.push_back(staging);
    });
    if (res != CUDA_SUCCESS) GiveStaging(staging);
    return From(res);
  }

  // Takes back the staging buffers of copies that have run.
  void Reclaim() {
    std::vector<void*> buffers;
    {
      std::lock_guard<std::mutex> lock(done_staging_->mu);
      buffers.swap(done_staging_->buffers);
    }
    if (buffers.empty()) return;
    Current();
    for (void* b : buffers) GiveStaging(b);
  }

  // Pinned host memory for a copy of `bytes`: a spare buffer of the copy's size class, else a new one. Pinning costs
  // the driver about a millisecond per few MiB each way (an H100 server moved 64 MiB copies at 0.9 GiB/s, 30 % of
  // its TCP loopback, while it pinned and unpinned a buffer per copy), so buffers are kept for the next copies.
  CUresult TakeStaging(uint64_t bytes, void** out) {
    const uint64_t capacity = StagingClass(bytes);
    if (auto it = spare_staging_.find(capacity); it != spare_staging_.end()) {
      *out = it->second;
      spare_staging_.erase(it);
      spare_staging_bytes_ -= capacity;
      return CUDA_SUCCESS;
    }
    CUresult res = api_->cuMemAllocHost(out, capacity);
    if (res == CUDA_SUCCESS) staging_capacity_[*out] = capacity;
    return res;
  }

  // A staging buffer no copy uses any more: kept while the spares stay within kSpareStagingBytes, else freed.
  void GiveStaging(void* buffer) {
    auto it = staging_capacity_.find(buffer);
    if (it == staging_capacity_.end()) return;
    const uint64_t capacity = it->second;
    if (spare_staging_bytes_ + capacity <= kSpareStagingBytes) {
      spare_staging_.emplace(capacity, buffer);
      spare_staging_bytes_ += capacity;
      return;
    }
    staging_capacity_.erase(it);
    api_->cuMemFreeHost(buffer);
  }

  // The size class of a copy of `bytes`: the next power of two, at least 64 KiB (so that a loop's copies of one
  // size, and of sizes near it, reuse one buffer).
  static uint64_t StagingClass(uint64_t bytes) {
    uint64_t capacity = 64u << 10;
    while (capacity < bytes) capacity <<= 1;
    return capacity;
  }

  void FreeSpareStaging() {
    for (auto& [capacity, buffer] : spare_staging_) {
      staging_capacity_.erase(buffer);
      api_->cuMemFreeHost(buffer);
    }
    spare_staging_.clear();
    spare_staging_bytes_ = 0;
  }

  void ReleaseAll() {
    Current();
    for (CUmodule m : modules_) api_->cuModuleUnload(m);
    modules_.clear();
    module_bytes_.clear();
    modules_total_ = 0;
    // Pending waits on it still complete; their callbacks own nothing of the session.
    if (sync_stream_) api_->cuStreamDestroy(sync_stream_);
    sync_stream_ = nullptr;
    for (CUstream s : streams_) api_->cuStreamDestroy(s);
    streams_.clear();
    for (CUevent e : events_) api_->cuEventDestroy(e);
    events_.clear();
    for (CUtexObject t : textures_) api_->cuTexObjectDestroy(t);
    textures_.clear();
    for (const Shadow& shadow : shadows_) {
      shadow.surface ? api_->cuSurfObjectDestroy(shadow.object) : api_->cuTexObjectDestroy(shadow.object);
      retired_arrays_.push_back(shadow.array);
    }
    shadows_.clear();
    for (CUarray array : retired_arrays_) api_->cuArrayDestroy(array);
    retired_arrays_.clear();
    for (auto& [address, a] : allocations_) {
      api_->cuMemUnmap(address, a.size);
      api_->cuMemRelease(a.handle);
    }
    allocations_.clear();
    for (auto& [address, bytes] : mappings_) api_->cuMemUnmap(address, bytes);
    mappings_.clear();
    for (CUmemGenericAllocationHandle handle : physical_) api_->cuMemRelease(handle);
    physical_.clear();
    reservations_.clear();
    window_.Reset(config_.window_bytes);
    Reclaim();
    FreeSpareStaging();
  }

  struct Staging {
    std::mutex mu;
    std::vector<void*> buffers;
  };

  std::shared_ptr<CudaDriver> driver_;
  std::unique_ptr<Api> api_;
  CudaBackendConfig config_;
  CUdevice device_;
  int cc_major_ = 0, cc_minor_ = 0;  // The GPU's compute capability: which PTX of a fatbin names its variables.
  CUcontext ctx_;
  size_t granularity_;
  RangeAllocator window_;
  std::map<CUdeviceptr, Allocation> allocations_;
  std::map<uint64_t, uint64_t> reservations_;          // Virtual memory: address -> bytes.
  std::map<uint64_t, uint64_t> mappings_;              // address -> bytes.
  std::vector<CUmemGenericAllocationHandle> physical_;  // Created, not released.
  // What the session created and has not destroyed: Reset and the destructor free them.
  std::vector<CUmodule> modules_;
  std::map<CUmodule, uint64_t> module_bytes_;  // What each module took on the device, as LoadModule measured.
  uint64_t modules_total_ = 0;
  ContextMemory context_memory_;
  uint64_t launched_local_ = 0;  // The most local memory per thread a launched function needs, beyond the stack.
  std::vector<CUstream> streams_;
  std::vector<CUevent> events_;
  std::vector<CUtexObject> textures_;
  std::vector<Shadow> shadows_;
  std::vector<CUarray> retired_arrays_;  // Of destroyed objects: freed with the session (work may still use them).
  CUstream sync_stream_ = nullptr;
  std::shared_ptr<Staging> done_staging_ = std::make_shared<Staging>();
  static constexpr uint64_t kSpareStagingBytes = 256ull << 20;  // Pinned buffers kept between copies, at most.
  std::multimap<uint64_t, void*> spare_staging_;                 // By capacity.
  uint64_t spare_staging_bytes_ = 0;
  std::map<void*, uint64_t> staging_capacity_;  // Every staging buffer, in use or spare: its capacity.
  // Last, so that it stops first: its thread queries the context.
  CallbackWatch callbacks_{*api_, ctx_};
  const bool turn_events_ = test_seams::TurnEvents();
};

}  // namespace

Result<std::unique_ptr<DeviceBackend>> NewCudaBackend(std::shared_ptr<CudaDriver> driver,
                                                      const CudaBackendConfig& config) {
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
  // Explicit sizes, not whatever the driver defaults to, since the slice is charged for them; read back, as the
  // driver may round them.
  ContextMemory context_memory;
  size_t value = 0;
  if (api->cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, kSliceHeapBytes) != CUDA_SUCCESS ||
      api->cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, kSlicePrintfBytes) != CUDA_SUCCESS) {
    api->cuMemAddressFree(config.window_base, config.window_bytes);
    api->cuDevicePrimaryCtxRelease(device);
    return Status(StatusCode::kUnavailable, "the CUDA driver refused the slice's heap and printf buffer sizes");
  }
  context_memory.heap_bytes = api->cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE) == CUDA_SUCCESS ? value
                                                                                                  : kSliceHeapBytes;
  context_memory.printf_bytes = api->cuCtxGetLimit(&value, CU_LIMIT_PRINTF_FIFO_SIZE) == CUDA_SUCCESS
                                    ? value
                                    : kSlicePrintfBytes;
  context_memory.stack_bytes = api->cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS ? value : 1024;
  int sms = 0, threads_per_sm = 0;
  api->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  api->cuDeviceGetAttribute(&threads_per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, device);
  context_memory.resident_threads = static_cast<uint64_t>(std::max(sms, 0)) * std::max(threads_per_sm, 0);
  return std::unique_ptr<DeviceBackend>(std::make_unique<CudaBackend>(std::move(driver), std::move(api), config,
                                                                      device, ctx, granularity, context_memory));
}

}  // namespace gpupool::backend
