#include "driver.h"

#include <cstdlib>
#include <utility>

#include "core/log.h"
#include "remote.h"

namespace gpupool::interpose {
namespace {

// Deeper than any program pushes contexts; a fixed array keeps the thread-local trivially destructible, so no
// TLS destructor has to run in threads that exit after the library state is gone.
constexpr int kMaxContextDepth = 64;
thread_local Context* tls_stack[kMaxContextDepth];
thread_local int tls_depth = 0;

}  // namespace

std::string Driver::InitError(int* status_code) {
  std::lock_guard<std::mutex> lock(init_mu_);
  *status_code = init_error_code_;
  return init_error_;
}

Driver& Driver::Get() {
  static Driver* driver = new Driver();
  return *driver;
}

CUresult Driver::Init(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(init_mu_);
  if (init_attempted_) return init_result_.load(std::memory_order_acquire);
  init_attempted_ = true;

  std::unique_ptr<DeviceProvider> provider = MakeDeviceProviderFromEnvironment();
  Result<std::vector<DeviceInfo>> listed = provider->ListDevices();
  if (!listed.ok()) {
    GP_WARN("interpose", "{}", listed.status().message());
    init_error_ = listed.status().message();
    init_error_code_ = static_cast<int>(listed.status().code());
    init_result_.store(CUDA_ERROR_NO_DEVICE, std::memory_order_release);
    return CUDA_ERROR_NO_DEVICE;
  }
  if (listed->empty()) {
    GP_WARN("interpose", "{}", provider->NoDeviceHint());
    init_error_ = provider->NoDeviceHint();
    init_error_code_ = static_cast<int>(StatusCode::kUnavailable);
    init_result_.store(CUDA_ERROR_NO_DEVICE, std::memory_order_release);
    return CUDA_ERROR_NO_DEVICE;
  }

  // CUDA_VISIBLE_DEVICES picks and orders the slices, as it does a machine's GPUs; a hidden slice's session closes.
  std::vector<std::unique_ptr<internal::RemoteSession>> sessions = provider->TakeSessions();
  const char* visible_env = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<size_t> visible = VisibleDevices(visible_env, *listed);
  if (visible.empty()) {
    init_error_ = fmt::format("CUDA_VISIBLE_DEVICES='{}' shows none of the {} device(s) of this process",
                              visible_env, listed->size());
    init_error_code_ = static_cast<int>(StatusCode::kInvalidArgument);
    GP_WARN("interpose", "{}", init_error_);
    init_result_.store(CUDA_ERROR_NO_DEVICE, std::memory_order_release);
    return CUDA_ERROR_NO_DEVICE;
  }
  std::vector<std::unique_ptr<internal::RemoteSession>> visible_sessions;
  for (size_t i : visible) {
    devices_.push_back(std::move((*listed)[i]));
    if (i < sessions.size()) visible_sessions.push_back(std::move(sessions[i]));
  }
  Remote::Get().Attach(std::move(visible_sessions));
  provider_ = std::move(provider);
  // Only now that the provider is kept: a provider dropped above (no device) released its lease as it went.
  if (Lease* owned = provider_->OwnedLease()) ReleaseAtExit(owned);
  unsigned long long next_id = 1;
  for (size_t i = 0; i < devices_.size(); ++i) {
    DeviceInfo& d = devices_[i];
    // The structure's fields are authoritative where an attribute repeats them (see DeviceInfo).
    d.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = d.cc_major;
    d.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = d.cc_minor;
    d.attributes[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] = d.pci_domain;
    d.attributes[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = d.pci_bus;
    d.attributes[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] = d.pci_device;
    auto ctx = std::make_unique<Context>();
    ctx->device = static_cast<int>(i);
    ctx->id = next_id++;
    primary_contexts_.push_back(std::move(ctx));
    GP_INFO("interpose", "device {}: {}, {} bytes, compute capability {}.{}", i, d.name, d.total_memory, d.cc_major,
            d.cc_minor);
  }
  WatchForks();
  init_result_.store(CUDA_SUCCESS, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult Driver::CheckInitialized() const { return init_result_.load(std::memory_order_acquire); }

CUresult Driver::GetDevice(CUdevice dev, const DeviceInfo** device) const {
  if (CUresult r = CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (dev < 0 || static_cast<size_t>(dev) >= devices_.size()) return CUDA_ERROR_INVALID_DEVICE;
  *device = &devices_[dev];
  return CUDA_SUCCESS;
}

Context* Driver::FromHandle(CUcontext handle) const {
  if (handle == nullptr || CheckInitialized() != CUDA_SUCCESS) return nullptr;
  for (const auto& ctx : primary_contexts_) {
    if (Handle(ctx.get()) == handle) return ctx.get();
  }
  return nullptr;
}

Context* Driver::Current() { return tls_depth > 0 ? tls_stack[tls_depth - 1] : nullptr; }

void Driver::SetCurrent(Context* ctx) {
  if (ctx == nullptr) {
    if (tls_depth > 0) --tls_depth;
  } else if (tls_depth == 0) {
    tls_stack[tls_depth++] = ctx;
  } else {
    tls_stack[tls_depth - 1] = ctx;
  }
}

CUresult Driver::Push(Context* ctx) {
  if (tls_depth == kMaxContextDepth) return CUDA_ERROR_INVALID_VALUE;
  tls_stack[tls_depth++] = ctx;
  return CUDA_SUCCESS;
}

Context* Driver::Pop() { return tls_depth > 0 ? tls_stack[--tls_depth] : nullptr; }

void Driver::Retain(Context* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  ++ctx->retain_count;
  ctx->active = true;
}

CUresult Driver::Release(Context* ctx) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ctx->retain_count == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--ctx->retain_count == 0) Deactivate(ctx, lock);
  return CUDA_SUCCESS;
}

void Driver::Reset(Context* ctx) {
  std::unique_lock<std::mutex> lock(mu_);
  // The context is destroyed, outstanding retains with it: after cudaDeviceReset cudart retains again and
  // releases once at exit.
  ctx->retain_count = 0;
  Deactivate(ctx, lock);
}

void Driver::Deactivate(Context* ctx, std::unique_lock<std::mutex>& lock) {
  ctx->active = false;
  std::map<void*, Context::Stored> storage = std::move(ctx->storage);
  ctx->storage.clear();
  // TODO(feature): free the context's allocations, modules and streams on its slice.
  lock.unlock();
  for (const auto& [key, stored] : storage) {
    if (stored.destructor != nullptr) stored.destructor(Handle(ctx), key, stored.value);
  }
  lock.lock();
}

CUresult Driver::Resolve(CUcontext handle, Context** ctx) const {
  if (CUresult r = CheckInitialized(); r != CUDA_SUCCESS) return r;
  *ctx = handle == nullptr ? Current() : FromHandle(handle);
  return *ctx != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult Driver::StoragePut(CUcontext handle, void* key, void* value, ClsDestructor destructor) {
  Context* ctx;
  if (CUresult r = Resolve(handle, &ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu_);
  ctx->storage[key] = Context::Stored{value, destructor};
  return CUDA_SUCCESS;
}

CUresult Driver::StorageGet(CUcontext handle, void* key, void** value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult r = Resolve(handle, &ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ctx->storage.find(key);
  if (it == ctx->storage.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = it->second.value;
  return CUDA_SUCCESS;
}

CUresult Driver::StorageDelete(CUcontext handle, void* key) {
  Context* ctx;
  if (CUresult r = Resolve(handle, &ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu_);
  // No destructor here: the caller deletes its own value (cudart does so at exit).
  return ctx->storage.erase(key) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace gpupool::interpose
