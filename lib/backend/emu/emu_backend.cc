#include "backend/emu/emu_backend.h"

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "emu/device.h"
#include "emu/device_attributes.h"

namespace gpupool::backend {
namespace {

static_assert(emu::Device::kMappingGranularity == kMappingGranularity,
              "the emulated device maps in the session protocol's unit");

CallStatus NoClusters() { return {CUDA_ERROR_NOT_SUPPORTED, "thread block clusters are not emulated"}; }

// More than one block per cluster: the emulated device has no thread block clusters.
bool Clustered(const Dim3& k) { return k.Volume() > 1; }

class EmuBackend final : public DeviceBackend {
 public:
  EmuBackend(const EmuBackendConfig& config, std::unique_ptr<emu::Device> device)
      : config_(config), device_(std::move(device)) {
    auto output = output_;
    device_->SetPrintfSink([output](std::string_view text) {
      std::lock_guard<std::mutex> lock(output->mu);
      output->text.append(text);
    });
  }

  DeviceInfo Info() override {
    const emu::DeviceProperties& p = device_->properties();
    DeviceInfo info;
    info.name = config_.device_name;
    info.total_memory = config_.memory_bytes;
    info.cc_major = p.cc_major;
    info.cc_minor = p.cc_minor;
    std::copy(config_.uuid, config_.uuid + 16, info.uuid);
    info.pci_bus = config_.pci_bus;
    info.pci_device = config_.pci_device;
    info.emulated = true;
    info.attributes = emu::DeviceAttributes(p);
    info.attributes[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = config_.pci_bus;
    return info;
  }

  // The modules' variables: on a GPU the driver's memory, here the emulator's; the slice's either way.
  uint64_t DriverHeldBytes() override { return device_->ModuleBytes(); }

  CallStatus MemInfo(uint64_t* free_bytes, uint64_t* total_bytes) override {
    device_->MemInfo(free_bytes, total_bytes);
    return device_->StickyError();
  }

  CallStatus ReserveAddress(uint64_t bytes, uint64_t alignment, uint64_t hint, uint64_t* address) override {
    return device_->ReserveAddress(bytes, alignment, hint, address);
  }
  CallStatus FreeAddress(uint64_t address, uint64_t bytes) override {
    return device_->FreeAddress(address, bytes);
  }
  CallStatus CreatePhysical(uint64_t bytes, PhysicalRef* memory) override {
    uint64_t handle = 0;
    CallStatus s = device_->CreatePhysical(bytes, &handle);
    memory->p = reinterpret_cast<void*>(handle);
    return s;
  }
  CallStatus ReleasePhysical(PhysicalRef memory) override {
    return device_->ReleasePhysical(reinterpret_cast<uint64_t>(memory.p));
  }
  CallStatus Map(uint64_t address, uint64_t bytes, PhysicalRef memory, uint64_t offset) override {
    return device_->Map(address, bytes, reinterpret_cast<uint64_t>(memory.p), offset);
  }
  CallStatus Unmap(uint64_t address, uint64_t bytes) override { return device_->Unmap(address, bytes); }

  CallStatus Alloc(uint64_t bytes, uint64_t* address, uint64_t* reserved) override {
    CallStatus s = device_->Malloc(bytes, address);
    if (!s.ok()) return s;
    uint64_t base = 0, size = bytes;
    device_->AddressRange(*address, &base, &size);
    *reserved = size;
    return CallStatus::Ok();
  }

  CallStatus AllocAt(uint64_t address, uint64_t bytes, uint64_t* reserved) override {
    if (CallStatus s = device_->MallocAt(address, bytes); !s.ok()) return s;
    uint64_t base = 0, size = bytes;
    device_->AddressRange(address, &base, &size);
    *reserved = size;
    return CallStatus::Ok();
  }

  CallStatus Free(uint64_t address, uint64_t) override { return device_->FreeAsync(address); }

  CallStatus CopyToDevice(uint64_t dst, const uint8_t* src, uint64_t bytes, StreamRef stream) override {
    return device_->CopyToDevice(dst, src, bytes, stream.as<emu::Stream>(), true);
  }

  CallStatus CopyFromDevice(uint8_t* dst, uint64_t src, uint64_t bytes, StreamRef stream) override {
    return device_->CopyFromDevice(dst, src, bytes, stream.as<emu::Stream>(), true);
  }

  CallStatus CopyOnDevice(uint64_t dst, uint64_t src, uint64_t bytes, StreamRef stream) override {
    return device_->CopyOnDevice(dst, src, bytes, stream.as<emu::Stream>(), true);
  }

  CallStatus Memset(uint64_t dst, uint32_t value, uint8_t element_size, uint64_t count, StreamRef stream) override {
    return device_->Memset(dst, value, element_size, count, stream.as<emu::Stream>(), true);
  }

  CallStatus LoadModule(const uint8_t* image, size_t bytes, ModuleRef* module) override {
    emu::Module* m = nullptr;
    CallStatus s = device_->LoadModule(image, bytes, &m);
    module->p = m;
    return s;
  }

  bool PlacesModuleVariables() const override { return true; }
  bool PlacesTextureObjects() const override { return true; }
  bool MemoryShareable() const override { return config_.memory_fd >= 0; }
  bool MemoryKept() const override { return config_.memory_kept; }

  CallStatus LoadModuleAt(const uint8_t* image, size_t bytes, const std::vector<uint64_t>& placements,
                          ModuleRef* module) override {
    emu::Module* m = nullptr;
    CallStatus s = device_->LoadModuleAt(image, bytes, placements, &m, config_.memory_kept);
    module->p = m;
    return s;
  }

  CallStatus ModuleVariables(ModuleRef module, const std::vector<uint8_t>&,
                             std::vector<std::pair<uint64_t, uint64_t>>* placed) override {
    placed->clear();
    for (uint64_t address : device_->ModulePlacements(module.as<emu::Module>())) {
      uint64_t base = 0, size = 0;
      if (CallStatus s = device_->AddressRange(address, &base, &size); !s.ok()) return s;
      placed->emplace_back(address, size);
    }
    return CallStatus::Ok();
  }

  CallStatus UnloadModule(ModuleRef module) override { return device_->UnloadModule(module.as<emu::Module>()); }

  CallStatus GetFunction(ModuleRef module, const std::string& name, FunctionRef* function, KernelInfo* info) override {
    emu::Function* fn = nullptr;
    CallStatus s = device_->GetFunction(module.as<emu::Module>(), name, &fn);
    if (!s.ok()) return s;
    function->p = fn;
    for (const emu::ParamInfo& p : emu::Device::Params(fn)) {
      info->params.push_back({static_cast<uint32_t>(p.offset), static_cast<uint32_t>(p.size)});
    }
    device_->Attributes(fn, &info->shared_bytes, &info->local_bytes, &info->num_regs);
    info->ptx_version = emu::Device::PtxVersion(fn);
    info->max_threads_per_block = device_->MaxThreadsPerBlock(fn);
    return CallStatus::Ok();
  }

  CallStatus GetGlobal(ModuleRef module, const std::string& name, uint64_t* address, uint64_t* bytes) override {
    size_t size = 0;
    CallStatus s = device_->GetGlobal(module.as<emu::Module>(), name, address, &size);
    *bytes = size;
    return s;
  }

  CallStatus Launch(FunctionRef function, const KernelInfo&, const LaunchShape& shape, StreamRef stream,
                    const uint8_t* params, size_t param_bytes) override {
    if (shape.cluster && Clustered(*shape.cluster)) return NoClusters();
    emu::LaunchConfig c;
    c.grid = {shape.grid.x, shape.grid.y, shape.grid.z};
    c.block = {shape.block.x, shape.block.y, shape.block.z};
    c.shared_bytes = shape.shared_bytes;
    c.stream = stream.as<emu::Stream>();
    c.cooperative = shape.cooperative;
    return device_->LaunchPacked(function.as<emu::Function>(), c, params, param_bytes);
  }

  // The emulated device follows no carve-out or scheduling preference, and checks dynamic shared memory against
  // its opt-in limit at launch; it has no thread block clusters.
  CallStatus SetFunctionAttribute(FunctionRef, int attribute, int value) override {
    switch (attribute) {
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        if (value > 1) return NoClusters();
        break;
      case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > device_->properties().shared_memory_per_block_optin) {
          return {CUDA_ERROR_INVALID_VALUE, "dynamic shared memory above the device's opt-in limit"};
        }
        break;
      default:
        break;
    }
    return CallStatus::Ok();
  }

  // Clusters of one block are the device's resident blocks.
  CallStatus MaxActiveClusters(FunctionRef, const LaunchShape& shape, int* clusters) override {
    if (shape.cluster && Clustered(*shape.cluster)) return NoClusters();
    const emu::DeviceProperties& props = device_->properties();
    uint64_t threads = shape.block.Volume();
    if (threads == 0 || threads > static_cast<uint64_t>(props.max_threads_per_block)) {
      return {CUDA_ERROR_INVALID_VALUE, "block size out of range"};
    }
    *clusters = static_cast<int>(props.max_threads_per_multiprocessor / threads) * props.multiprocessor_count;
    return CallStatus::Ok();
  }

  CallStatus CreateStream(StreamRef* stream) override {
    emu::Stream* s = nullptr;
    CallStatus st = device_->CreateStream(&s);
    stream->p = s;
    return st;
  }

  // The emulated stream lives on until the session ends, so queued work still completes without waiting here.
  CallStatus DestroyStream(StreamRef) override { return device_->StickyError(); }

  CallStatus QueryStream(StreamRef stream) override { return device_->StreamQuery(stream.as<emu::Stream>()); }

  // The emulated device resolves texture objects itself (emu/texture.h): the description goes into a table of the
  // device that kernels cannot write, bounded by emu::TextureTable::kCapacity objects, and takes no device memory.
  CallStatus CreateTexture(const TextureSpec& spec, uint64_t* handle, uint64_t* reserved) override {
    emu::TextureDesc d;
    if (CallStatus s = DescOf(spec, &d); !s.ok()) return s;
    if (CallStatus s = device_->CreateTextureObject(d, handle); !s.ok()) return s;
    *reserved = 0;
    return CallStatus::Ok();
  }

  CallStatus CreateTextureAt(const TextureSpec& spec, uint64_t handle, uint64_t* reserved) override {
    emu::TextureDesc d;
    if (CallStatus s = DescOf(spec, &d); !s.ok()) return s;
    if (CallStatus s = device_->CreateTextureObjectAt(d, handle); !s.ok()) return s;
    *reserved = 0;
    return CallStatus::Ok();
  }

  // The emulator's description of the texture `spec` describes.
  static CallStatus DescOf(const TextureSpec& spec, emu::TextureDesc* out) {
    emu::TextureDesc& d = *out;
    d.surface = spec.surface;
    d.dims = static_cast<uint8_t>(spec.dims);
    d.channels = static_cast<uint8_t>(spec.channels);
    switch (spec.format) {
      case CU_AD_FORMAT_UNSIGNED_INT8: d.format = emu::TexFormat::kU8; break;
      case CU_AD_FORMAT_SIGNED_INT8: d.format = emu::TexFormat::kS8; break;
      case CU_AD_FORMAT_UNSIGNED_INT16: d.format = emu::TexFormat::kU16; break;
      case CU_AD_FORMAT_SIGNED_INT16: d.format = emu::TexFormat::kS16; break;
      case CU_AD_FORMAT_HALF: d.format = emu::TexFormat::kHalf; break;
      case CU_AD_FORMAT_UNSIGNED_INT32: d.format = emu::TexFormat::kU32; break;
      case CU_AD_FORMAT_SIGNED_INT32: d.format = emu::TexFormat::kS32; break;
      case CU_AD_FORMAT_FLOAT: d.format = emu::TexFormat::kF32; break;
      default: return {CUDA_ERROR_NOT_SUPPORTED, fmt::format("texel format 0x{:x}", spec.format)};
    }
    // Boilerplate by nature: field by field from the device interface's struct to the emulator's.
    d.base = spec.address;
    d.pitch = spec.pitch;
    d.slice_pitch = spec.slice_pitch;
    d.width = spec.width;
    d.height = spec.height;
    d.depth = spec.depth;
    d.layers = spec.layers;
    for (int i = 0; i < 3; ++i) d.address[i] = static_cast<emu::TexAddress>(spec.address_mode[i]);
    d.linear_filter = spec.filter_mode == CU_TR_FILTER_MODE_LINEAR;
    d.normalized_coords = (spec.flags & CU_TRSF_NORMALIZED_COORDINATES) != 0;
    d.read_as_integer = (spec.flags & CU_TRSF_READ_AS_INTEGER) != 0;
    d.srgb = (spec.flags & CU_TRSF_SRGB) != 0;
    d.linear_resource = spec.resource == TextureSpec::Resource::kLinear;
    for (int i = 0; i < 4; ++i) d.border[i] = spec.border[i];
    return CallStatus::Ok();
  }

  CallStatus DestroyTexture(uint64_t handle) override { return device_->DestroyTextureObject(handle); }

  CallStatus Utilization(uint32_t* gpu_percent, uint32_t* memory_percent) override {
    unsigned gpu = 0, memory = 0;
    device_->Utilization(&gpu, &memory);
    *gpu_percent = gpu;
    *memory_percent = memory;
    return CallStatus::Ok();
  }

  CallStatus StreamWaitValue(StreamRef stream, uint64_t address, uint64_t value, unsigned width,
                             uint32_t flags) override {
    return device_->WaitValue(stream.as<emu::Stream>(), address, value, width, flags & 0x3);
  }

  CallStatus StreamWaitEvent(StreamRef stream, EventRef event) override {
    return device_->StreamWaitEvent(stream.as<emu::Stream>(), event.as<emu::Event>());
  }

  CallStatus CreateEvent(EventRef* event) override {
    emu::Event* e = nullptr;
    CallStatus st = device_->CreateEvent(&e);
    event->p = e;
    return st;
  }

  // Like streams, events live until the session ends: queued records and waits still name them.
  CallStatus DestroyEvent(EventRef) override { return CallStatus::Ok(); }

  CallStatus RecordEvent(EventRef event, StreamRef stream) override {
    return device_->RecordEvent(event.as<emu::Event>(), stream.as<emu::Stream>());
  }

  CallStatus QueryEvent(EventRef event) override { return device_->EventQuery(event.as<emu::Event>()); }

  CallStatus ElapsedMs(EventRef start, EventRef end, float* ms) override {
    return device_->ElapsedMs(start.as<emu::Event>(), end.as<emu::Event>(), ms);
  }

  CallStatus WhenReached(StreamRef stream, std::function<void()> done) override {
    return device_->WhenReached(stream.as<emu::Stream>(), std::move(done));
  }

  void WhenNearlyReached(StreamRef stream, std::chrono::nanoseconds lead, std::function<void()> soon) override {
    device_->WhenNearlyReached(stream.as<emu::Stream>(), lead, std::move(soon));
  }
  bool CanTellNearlyReached() const override { return true; }

  // All streams share one in-order queue: everything before the record is done when the queue gets here.
  CallStatus WhenRecorded(EventRef, std::function<void()> done) override {
    return device_->WhenReached(nullptr, std::move(done));
  }

  // A fault is the device's (the context's), not a stream's: it is sticky, as on a GPU.
  CallStatus Settled(StreamRef) override { return device_->StickyError(); }
  CallStatus SettledEvent(EventRef) override { return device_->StickyError(); }

  std::string TakeOutput() override {
    std::lock_guard<std::mutex> lock(output_->mu);
    std::string text;
    text.swap(output_->text);
    return text;
  }

  void Reset() override { device_->ResetContext(); }

  // Device pointers are this process's addresses (emu::DeviceConfig::address_base).
  uint8_t* IdleHostView(uint64_t address, uint64_t bytes) override {
    if (!device_->Idle()) return nullptr;  // Idle: no fault either.
    return reinterpret_cast<uint8_t*>(address);
  }

  bool Quiet() override {
    if (!device_->Idle()) return false;
    // After Idle(): a kernel's output is in before its work counts as run.
    std::lock_guard<std::mutex> lock(output_->mu);
    return output_->text.empty();
  }

 private:
  struct Output {
    std::mutex mu;
    std::string text;
  };

  EmuBackendConfig config_;
  std::unique_ptr<emu::Device> device_;
  std::shared_ptr<Output> output_ = std::make_shared<Output>();
};

}  // namespace

Result<std::unique_ptr<DeviceBackend>> NewEmuBackend(const EmuBackendConfig& config) {
  // Boilerplate by nature: field by field from the backend's configuration to the emulator's.
  emu::DeviceOptions o;
  o.memory_bytes = config.memory_bytes;
  // The session server's slice quota is the slice's one memory limit (shared by the lease's sessions on the
  // slice); the device only places, and reports its modules' memory to be counted there (DriverHeldBytes).
  o.enforce_capacity = false;
  o.base_address = config.window_base;
  o.address_space_bytes = config.window_bytes;
  o.name = config.device_name;
  o.cc_major = config.cc_major;
  o.cc_minor = config.cc_minor;
  o.worker_threads = config.worker_threads;
  o.gate = config.gate;
  o.memory_fd = config.memory_fd;
  auto device = std::make_unique<emu::Device>(o);
  if (CallStatus s = device->StartupStatus(); !s.ok()) {
    return ToStatus(s);  // Out of memory: the window's addresses are taken (kResourceExhausted, "windowTaken").
  }
  return std::unique_ptr<DeviceBackend>(std::make_unique<EmuBackend>(config, std::move(device)));
}

}  // namespace gpupool::backend
