#include "backend/emu/emu_session.h"

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <kj/async.h>

#include "backend/handle_table.h"
#include "backend/session_checks.h"
#include "core/log.h"
#include "emu/device.h"

namespace gpupool::backend {
namespace {

using emu::Code;
using emu::EmuStatus;

void SetStatus(wire::CallStatus::Builder out, const EmuStatus& s) {
  out.setCode(static_cast<int32_t>(s.code()));
  if (!s.ok()) out.setMessage(s.message());
}

void SetStatus(wire::CallStatus::Builder out, Code code, const std::string& message) {
  out.setCode(static_cast<int32_t>(code));
  out.setMessage(message);
}

constexpr char kRevokedMessage[] = "the lease of this session ended (released or expired); its memory is freed";

class EmuSession final : public wire::Session::Server {
 public:
  EmuSession(const EmuSessionConfig& config, std::unique_ptr<emu::Device> device)
      : config_(config), device_(std::move(device)) {
    if (config_.control) {
      std::lock_guard<std::mutex> lock(config_.control->mu);
      config_.control->revoke = [this] {
        revoked_ = true;
        device_->ResetContext();  // Frees every allocation and module of the session now.
        // Their handles go too: nothing may reach the freed modules (every call also checks revoked_ first).
        functions_.clear();
        modules_.clear();
        allocations_.clear();
      };
    }
    auto output = output_;
    device_->SetPrintfSink([output](std::string_view text) {
      std::lock_guard<std::mutex> lock(output->mu);
      output->text.append(text);
    });
  }

  ~EmuSession() noexcept(false) {
    if (config_.control) {
      std::lock_guard<std::mutex> lock(config_.control->mu);
      config_.control->revoke = nullptr;
    }
    GP_INFO("session", "session on {} window 0x{:x} closed: its memory and modules are freed", config_.device_name,
            config_.window_base);
  }

  kj::Promise<void> properties(PropertiesContext context) override {
    const emu::DeviceProperties& p = device_->properties();
    auto props = context.getResults().initProps();
    props.setName(config_.device_name);
    props.setTotalMemory(config_.memory_bytes);
    props.setCcMajor(p.cc_major);
    props.setCcMinor(p.cc_minor);
    props.setUuid(kj::arrayPtr(config_.uuid, 16));
    props.setPciDomain(0);
    props.setPciBus(config_.pci_bus);
    props.setPciDevice(config_.pci_device);
    props.setEmulated(true);
    std::vector<std::pair<int, int>> attrs = Attributes(p);
    auto list = props.initAttributes(static_cast<unsigned>(attrs.size()));
    for (size_t i = 0; i < attrs.size(); ++i) {
      list[i].setId(attrs[i].first);
      list[i].setValue(attrs[i].second);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> memGetInfo(MemGetInfoContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    uint64_t free_bytes = 0, total = 0;
    device_->MemInfo(&free_bytes, &total);
    auto r = context.getResults();
    SetStatus(r.initStatus(), device_->StickyError());
    r.setFree(free_bytes);
    r.setTotal(total);
    return kj::READY_NOW;
  }

  kj::Promise<void> memAlloc(MemAllocContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    uint64_t bytes = context.getParams().getBytes();
    auto r = context.getResults();
    if (bytes == 0 || bytes > kMaxAllocBytes) {
      return Invalid(r.initStatus(), fmt::format("cannot allocate {} bytes", bytes));
    }
    uint64_t address = 0;
    EmuStatus s = device_->Malloc(bytes, &address);
    SetStatus(r.initStatus(), s);
    if (s.ok()) allocations_.insert(address);
    r.setAddress(address);
    return kj::READY_NOW;
  }

  kj::Promise<void> memFree(MemFreeContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    uint64_t address = context.getParams().getAddress();
    // Only what memAlloc returned: the device would also free module variables, whose module still uses them.
    if (address != 0 && !allocations_.erase(address)) {
      return Invalid(context.getResults().initStatus(),
                     fmt::format("0x{:x} is not the start of an allocation of this session", address));
    }
    SetStatus(context.getResults().initStatus(), device_->FreeAsync(address));
    return kj::READY_NOW;
  }

  kj::Promise<void> copyToDevice(CopyToDeviceContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto params = context.getParams();
    emu::Stream* stream = nullptr;
    if (!Stream(params.getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    auto data = params.getData();
    // The device reads straight from the request message, which lives until this call's promise resolves: the
    // reply waits for the copy (the client does not wait for the reply, so nothing is delayed but the ack).
    EmuStatus s = device_->CopyToDevice(params.getDst(), data.begin(), data.size(), stream, true);
    if (!s.ok()) {
      SetStatus(context.getResults().initStatus(), s);
      return kj::READY_NOW;
    }
    return Reached(stream).then([this, context]() mutable {
      SetStatusAfterWait(context.getResults().initStatus());
    });
  }

  kj::Promise<void> copyFromDevice(CopyFromDeviceContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto params = context.getParams();
    emu::Stream* stream = nullptr;
    if (!Stream(params.getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    uint64_t bytes = params.getBytes();
    if (bytes > (64ull << 20)) {
      SetStatus(context.getResults().initStatus(), Code::kInvalidValue, "a copy message carries at most 64 MiB");
      return kj::READY_NOW;
    }
    // The device writes straight into the reply message; nothing else touches it until the copy has run.
    auto results = context.getResults();
    auto data = results.initData(static_cast<unsigned>(bytes));
    EmuStatus s = device_->CopyFromDevice(data.begin(), params.getSrc(), bytes, stream, true);
    if (!s.ok()) {
      SetStatus(results.initStatus(), s);
      results.setData(nullptr);
      return kj::READY_NOW;
    }
    return Reached(stream).then([this, context]() mutable {
      SetStatusAfterWait(context.getResults().initStatus());
    });
  }

  kj::Promise<void> copyOnDevice(CopyOnDeviceContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    emu::Stream* stream = nullptr;
    if (!Stream(p.getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    SetStatus(context.getResults().initStatus(), device_->CopyOnDevice(p.getDst(), p.getSrc(), p.getBytes(), stream, true));
    return kj::READY_NOW;
  }

  kj::Promise<void> memset(MemsetContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    emu::Stream* stream = nullptr;
    if (!Stream(p.getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    uint64_t bytes = 0;
    std::string error;
    if (!MemsetBytes(p.getElementSize(), p.getCount(), &bytes, &error)) {
      return Invalid(context.getResults().initStatus(), error);
    }
    SetStatus(context.getResults().initStatus(),
              device_->Memset(p.getDst(), p.getValue(), p.getElementSize(), p.getCount(), stream, true));
    return kj::READY_NOW;
  }

  kj::Promise<void> moduleLoad(ModuleLoadContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto image = context.getParams().getImage();
    emu::Module* module = nullptr;
    EmuStatus s = device_->LoadModule(image.begin(), image.size(), &module);
    auto r = context.getResults();
    SetStatus(r.initStatus(), s);
    if (s.ok()) {
      r.setModule(modules_.Add(module));
    } else {
      GP_INFO("session", "module load refused: {}", s.message());
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> moduleUnload(ModuleUnloadContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    uint64_t handle = context.getParams().getModule();
    auto it = modules_.find(handle);
    if (it == modules_.end()) return BadHandle(context.getResults().initStatus(), "module");
    EmuStatus s = device_->UnloadModule(it->second);
    modules_.erase(it);
    // The module's functions die with it: their handles must not reach the freed code.
    functions_.EraseIf([handle](uint64_t, const FunctionEntry& f) { return f.module == handle; });
    SetStatus(context.getResults().initStatus(), s);
    return kj::READY_NOW;
  }

  kj::Promise<void> moduleGetFunction(ModuleGetFunctionContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto it = modules_.find(p.getModule());
    auto r = context.getResults();
    if (it == modules_.end()) return BadHandle(r.initStatus(), "module");
    emu::Function* fn = nullptr;
    EmuStatus s = device_->GetFunction(it->second, p.getName(), &fn);
    SetStatus(r.initStatus(), s);
    if (!s.ok()) return kj::READY_NOW;
    r.setFunction(functions_.Add({it->first, fn}));
    const auto& params = emu::Device::Params(fn);
    auto list = r.initParams(static_cast<unsigned>(params.size()));
    for (size_t i = 0; i < params.size(); ++i) {
      list[i].setOffset(params[i].offset);
      list[i].setSize(params[i].size);
    }
    int shared = 0, local = 0, regs = 0;
    emu::Device::Attributes(fn, &shared, &local, &regs);
    r.setSharedBytes(shared);
    r.setLocalBytes(local);
    r.setNumRegs(regs);
    return kj::READY_NOW;
  }

  kj::Promise<void> moduleGetGlobal(ModuleGetGlobalContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto it = modules_.find(p.getModule());
    auto r = context.getResults();
    if (it == modules_.end()) return BadHandle(r.initStatus(), "module");
    uint64_t address = 0;
    size_t bytes = 0;
    SetStatus(r.initStatus(), device_->GetGlobal(it->second, p.getName(), &address, &bytes));
    r.setAddress(address);
    r.setBytes(bytes);
    return kj::READY_NOW;
  }

  kj::Promise<void> launch(LaunchContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto it = functions_.find(p.getFunction());
    if (it == functions_.end()) return BadHandle(context.getResults().initStatus(), "function");
    emu::Stream* stream = nullptr;
    if (!Stream(p.getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    if (p.hasCluster() && Clustered(p.getCluster())) return NoClusters(context.getResults().initStatus());
    emu::LaunchConfig c;
    c.grid = {p.getGrid().getX(), p.getGrid().getY(), p.getGrid().getZ()};
    c.block = {p.getBlock().getX(), p.getBlock().getY(), p.getBlock().getZ()};
    c.shared_bytes = p.getSharedBytes();
    c.stream = stream;
    auto params = p.getParams();
    // A short buffer would leave parameters (pointers among them) zero or, worse, read past the message.
    std::string error;
    if (!ParamsFit(emu::Device::Params(it->second.fn), params.size(), [](const emu::ParamInfo& i) { return i.offset; },
                   [](const emu::ParamInfo& i) { return i.size; }, &error)) {
      return Invalid(context.getResults().initStatus(), error);
    }
    SetStatus(context.getResults().initStatus(), device_->LaunchPacked(it->second.fn, c, params.begin(), params.size()));
    return kj::READY_NOW;
  }

  // The emulated device follows no carve-out or scheduling preference, and checks dynamic shared memory against
  // its opt-in limit at launch; it has no thread block clusters.
  kj::Promise<void> functionSetAttribute(FunctionSetAttributeContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    if (functions_.find(p.getFunction()) == functions_.end()) {
      return BadHandle(context.getResults().initStatus(), "function");
    }
    switch (p.getAttribute()) {
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        if (p.getValue() > 1) return NoClusters(context.getResults().initStatus());
        break;
      case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (p.getValue() < 0 || p.getValue() > device_->properties().shared_memory_per_block_optin) {
          return Invalid(context.getResults().initStatus(), "dynamic shared memory above the device's opt-in limit");
        }
        break;
      default:
        break;
    }
    SetStatus(context.getResults().initStatus(), EmuStatus());
    return kj::READY_NOW;
  }

  // The emulated device has no thread block clusters: clusters of one block are its resident blocks.
  kj::Promise<void> occupancyMaxActiveClusters(OccupancyMaxActiveClustersContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    if (functions_.find(p.getFunction()) == functions_.end()) {
      return BadHandle(context.getResults().initStatus(), "function");
    }
    if (Clustered(p.getCluster())) return NoClusters(context.getResults().initStatus());
    const emu::DeviceProperties& props = device_->properties();
    uint64_t threads = uint64_t{p.getBlock().getX()} * p.getBlock().getY() * p.getBlock().getZ();
    if (threads == 0 || threads > static_cast<uint64_t>(props.max_threads_per_block)) {
      return Invalid(context.getResults().initStatus(), "block size out of range");
    }
    int per_sm = static_cast<int>(props.max_threads_per_multiprocessor / threads);
    context.getResults().setClusters(per_sm * props.multiprocessor_count);
    SetStatus(context.getResults().initStatus(), EmuStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> streamCreate(StreamCreateContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    emu::Stream* s = nullptr;
    EmuStatus st = device_->CreateStream(&s);
    auto r = context.getResults();
    SetStatus(r.initStatus(), st);
    if (st.ok()) {
      r.setStream(streams_.Add(s));
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> streamDestroy(StreamDestroyContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    // The handle goes now; the emulated stream lives on until the session ends, so queued work still completes
    // without this call waiting for it.
    if (!streams_.erase(context.getParams().getStream())) return BadHandle(context.getResults().initStatus(), "stream");
    SetStatus(context.getResults().initStatus(), device_->StickyError());
    return kj::READY_NOW;
  }

  kj::Promise<void> streamSynchronize(StreamSynchronizeContext context) override {
    // A pure wait: a caller that goes away (its connection broke) must not keep the session alive.
    context.allowCancellation();
    if (revoked_) return Revoked(context.getResults().initStatus());
    emu::Stream* stream = nullptr;
    if (!Stream(context.getParams().getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    return Reached(stream).then([this, context]() mutable {
      auto r = context.getResults();
      SetStatusAfterWait(r.initStatus());
      r.setOutput(TakeOutput());
    });
  }

  kj::Promise<void> streamQuery(StreamQueryContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    emu::Stream* stream = nullptr;
    if (!Stream(context.getParams().getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    auto r = context.getResults();
    SetStatus(r.initStatus(), device_->StreamQuery(stream));
    r.setOutput(TakeOutput());
    return kj::READY_NOW;
  }

  kj::Promise<void> streamWaitEvent(StreamWaitEventContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    emu::Stream* stream = nullptr;
    if (!Stream(p.getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    auto it = events_.find(p.getEvent());
    if (it == events_.end()) return BadHandle(context.getResults().initStatus(), "event");
    SetStatus(context.getResults().initStatus(), device_->StreamWaitEvent(stream, it->second));
    return kj::READY_NOW;
  }

  kj::Promise<void> eventCreate(EventCreateContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    emu::Event* e = nullptr;
    EmuStatus st = device_->CreateEvent(&e);
    auto r = context.getResults();
    SetStatus(r.initStatus(), st);
    if (st.ok()) {
      r.setEvent(events_.Add(e));
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> eventDestroy(EventDestroyContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    if (!events_.erase(context.getParams().getEvent())) return BadHandle(context.getResults().initStatus(), "event");
    SetStatus(context.getResults().initStatus(), EmuStatus::Ok());
    return kj::READY_NOW;
  }

  kj::Promise<void> eventRecord(EventRecordContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto it = events_.find(p.getEvent());
    if (it == events_.end()) return BadHandle(context.getResults().initStatus(), "event");
    emu::Stream* stream = nullptr;
    if (!Stream(p.getStream(), &stream)) return BadHandle(context.getResults().initStatus(), "stream");
    SetStatus(context.getResults().initStatus(), device_->RecordEvent(it->second, stream));
    return kj::READY_NOW;
  }

  kj::Promise<void> eventSynchronize(EventSynchronizeContext context) override {
    // A pure wait: a caller that goes away (its connection broke) must not keep the session alive.
    context.allowCancellation();
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto it = events_.find(context.getParams().getEvent());
    if (it == events_.end()) return BadHandle(context.getResults().initStatus(), "event");
    // All streams share one in-order queue: everything before the record is done when the queue gets here.
    return Reached(nullptr).then([this, context]() mutable {
      auto r = context.getResults();
      SetStatusAfterWait(r.initStatus());
      r.setOutput(TakeOutput());
    });
  }

  kj::Promise<void> eventQuery(EventQueryContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto it = events_.find(context.getParams().getEvent());
    if (it == events_.end()) return BadHandle(context.getResults().initStatus(), "event");
    SetStatus(context.getResults().initStatus(), device_->EventQuery(it->second));
    return kj::READY_NOW;
  }

  kj::Promise<void> eventElapsed(EventElapsedContext context) override {
    if (revoked_) return Revoked(context.getResults().initStatus());
    auto p = context.getParams();
    auto a = events_.find(p.getStart()), b = events_.find(p.getEnd());
    if (a == events_.end() || b == events_.end()) return BadHandle(context.getResults().initStatus(), "event");
    float ms = 0;
    auto r = context.getResults();
    SetStatus(r.initStatus(), device_->ElapsedMs(a->second, b->second, &ms));
    r.setMs(ms);
    return kj::READY_NOW;
  }

  kj::Promise<void> synchronize(SynchronizeContext context) override {
    // A pure wait: a caller that goes away (its connection broke) must not keep the session alive.
    context.allowCancellation();
    if (revoked_) return Revoked(context.getResults().initStatus());
    return Reached(nullptr).then([this, context]() mutable {
      auto r = context.getResults();
      SetStatusAfterWait(r.initStatus());
      r.setOutput(TakeOutput());
    });
  }

 private:
  struct Output {
    std::mutex mu;
    std::string text;
  };

  // Resolves once the device has run everything queued on `stream` so far (default stream: everything), without
  // blocking the event loop.
  kj::Promise<void> Reached(emu::Stream* stream) {
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    // The fulfiller travels to the device's worker thread, which fulfils it there (that is what it is for).
    auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(kj::mv(paf.fulfiller));
    EmuStatus s = device_->LaunchHostFunc(stream, [fulfiller] { (*fulfiller)->fulfill(); });
    if (!s.ok()) return kj::READY_NOW;  // Faulted context: nothing will run; report the sticky error now.
    return kj::mv(paf.promise);
  }

  std::string TakeOutput() {
    std::lock_guard<std::mutex> lock(output_->mu);
    std::string text;
    text.swap(output_->text);
    return text;
  }

  bool Stream(uint64_t id, emu::Stream** out) {
    if (id == 0) {
      *out = nullptr;
      return true;
    }
    auto it = streams_.find(id);
    if (it == streams_.end()) return false;
    *out = it->second;
    return true;
  }

  kj::Promise<void> Revoked(wire::CallStatus::Builder status) {
    SetStatus(status, Code::kInvalidContext, kRevokedMessage);
    return kj::READY_NOW;
  }

  // The status of a call that waited for the device: the lease may have ended meanwhile.
  void SetStatusAfterWait(wire::CallStatus::Builder status) {
    if (revoked_) {
      SetStatus(status, Code::kInvalidContext, kRevokedMessage);
    } else {
      SetStatus(status, device_->StickyError());
    }
  }

  kj::Promise<void> Invalid(wire::CallStatus::Builder status, const std::string& message) {
    SetStatus(status, Code::kInvalidValue, message);
    return kj::READY_NOW;
  }

  // More than one block per cluster: the emulated device has no thread block clusters.
  static bool Clustered(wire::Dim3::Reader k) { return uint64_t{k.getX()} * k.getY() * k.getZ() > 1; }

  kj::Promise<void> NoClusters(wire::CallStatus::Builder status) {
    SetStatus(status, Code::kNotSupported, "thread block clusters are not emulated");
    return kj::READY_NOW;
  }

  kj::Promise<void> BadHandle(wire::CallStatus::Builder status, const char* what) {
    SetStatus(status, Code::kInvalidHandle, std::string("unknown ") + what + " handle");
    return kj::READY_NOW;
  }

  std::vector<std::pair<int, int>> Attributes(const emu::DeviceProperties& p) const {
    return {
        {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, p.max_threads_per_block},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, static_cast<int>(p.max_block_dim.x)},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, static_cast<int>(p.max_block_dim.y)},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, static_cast<int>(p.max_block_dim.z)},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, static_cast<int>(p.max_grid_dim.x)},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, static_cast<int>(p.max_grid_dim.y)},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, static_cast<int>(p.max_grid_dim.z)},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, p.shared_memory_per_block},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, p.shared_memory_per_block_optin},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, p.shared_memory_per_multiprocessor},
        {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, p.total_constant_memory},
        {CU_DEVICE_ATTRIBUTE_WARP_SIZE, p.warp_size},
        {CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647},
        {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, p.registers_per_block},
        {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, p.registers_per_multiprocessor},
        {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, p.clock_rate_khz},
        {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, p.texture_alignment},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, p.multiprocessor_count},
        {CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0},
        {CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
        {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT},
        {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
        {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 0},
        {CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, config_pci_bus_},
        {CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
        {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
        {CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0},
        {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, p.memory_clock_rate_khz},
        {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, p.memory_bus_width},
        {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, p.l2_cache_size},
        {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, p.max_threads_per_multiprocessor},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, p.max_blocks_per_multiprocessor},
        {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, p.cc_major},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, p.cc_minor},
        {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0},
        {CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, 0},
        {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 1},
        {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0},
        {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0},
        {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0},
        {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0},
        {CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0},
        {CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 32},
        {CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 0},
        {CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 0},
        {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0},
    };
  }

  EmuSessionConfig config_;
  int config_pci_bus_ = config_.pci_bus;
  std::unique_ptr<emu::Device> device_;
  std::shared_ptr<Output> output_ = std::make_shared<Output>();
  HandleTable<emu::Module*> modules_;
  struct FunctionEntry {
    uint64_t module;  // The handle of the module it belongs to: unloading the module erases it.
    emu::Function* fn;
  };
  HandleTable<FunctionEntry> functions_;
  HandleTable<emu::Stream*> streams_;
  HandleTable<emu::Event*> events_;
  std::set<uint64_t> allocations_;  // What memAlloc returned and memFree did not take back yet.
  bool revoked_ = false;
};

}  // namespace

Result<kj::Own<wire::Session::Server>> NewEmuSession(const EmuSessionConfig& config) {
  emu::DeviceOptions o;
  o.memory_bytes = config.memory_bytes;
  o.base_address = config.window_base;
  o.name = config.device_name;
  o.worker_threads = config.worker_threads;
  o.gate = config.gate;
  auto device = std::make_unique<emu::Device>(o);
  if (EmuStatus s = device->StartupStatus(); !s.ok()) {
    return Status(StatusCode::kResourceExhausted, s.message());
  }
  return kj::Own<wire::Session::Server>(kj::heap<EmuSession>(config, std::move(device)));
}

}  // namespace gpupool::backend
