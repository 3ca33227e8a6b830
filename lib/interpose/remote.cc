#include "remote.h"

#include <cstdlib>
#include <set>
#include <string>

#include "core/log.h"
#include "driver.h"
#include "host_functions.h"

namespace gpupool::interpose {

Remote& Remote::Get() {
  // Leaked like Driver: cudart calls into us from atexit handlers.
  static Remote* remote = new Remote();
  return *remote;
}

void Remote::Attach(std::vector<std::unique_ptr<RemoteSession>> sessions) { sessions_ = std::move(sessions); }

int Remote::DeviceOf(uint64_t address) const {
  for (size_t i = 0; i < sessions_.size(); ++i) {
    if (sessions_[i]->Owns(address)) return static_cast<int>(i);
  }
  if (!any_outside_globals_.load(std::memory_order_acquire)) return -1;
  std::shared_lock<std::shared_mutex> lock(globals_mu_);
  auto it = outside_globals_.upper_bound(address);
  if (it == outside_globals_.begin()) return -1;
  --it;
  return address - it->first < it->second.bytes ? it->second.device : -1;
}

void Remote::AddOutsideGlobal(uint64_t address, uint64_t bytes, int device, const Module* module) {
  std::unique_lock<std::shared_mutex> lock(globals_mu_);
  outside_globals_[address] = {bytes, device, module};
  any_outside_globals_.store(true, std::memory_order_release);
}

void Remote::ForgetGlobalsOf(const Module* module) {
  std::unique_lock<std::shared_mutex> lock(globals_mu_);
  for (auto it = outside_globals_.begin(); it != outside_globals_.end();) {
    it = it->second.module == module ? outside_globals_.erase(it) : std::next(it);
  }
}

CUresult Remote::CurrentDevice(int* device) const {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (!attached()) return CUDA_ERROR_NOT_SUPPORTED;  // Fake devices: nothing to forward to.
  Context* ctx = Driver::Current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult Remote::ResolveStream(CUstream handle, int* device, uint64_t* remote, bool after_host_functions) {
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    *remote = 0;
    if (CUresult r = CurrentDevice(device); r != CUDA_SUCCESS) return r;
  } else {
    if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
    auto* stream = reinterpret_cast<Stream*>(handle);
    std::lock_guard<std::mutex> lock(mu_);
    if (streams.count(stream) == 0 || !stream->alive) return CUDA_ERROR_INVALID_HANDLE;
    *device = stream->device;
    *remote = stream->remote;
  }
  if (after_host_functions) HostFunctions::Get().WaitBefore(*device, *remote);
  return CUDA_SUCCESS;
}

namespace {

// The live object a handle names among `objects` (the program's own handles are pointers to them, checked here
// before any use): CUDA_ERROR_INVALID_HANDLE for a null, foreign or dead one. REQUIRES: the objects' mutex held.
template <typename Object, typename Handle, typename Set, typename Alive>
CUresult Resolve(Handle handle, const Set& objects, Alive alive, Object** out) {
  auto* object = reinterpret_cast<Object*>(handle);
  if (object == nullptr || objects.count(object) == 0 || !alive(*object)) return CUDA_ERROR_INVALID_HANDLE;
  *out = object;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult Remote::ResolveEvent(CUevent handle, Event** event) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu_);
  return Resolve(handle, events, [](const Event& e) { return e.alive; }, event);
}

CUresult Remote::ResolveModule(CUmodule handle, Module** module) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu_);
  return Resolve(handle, modules, [](const Module& m) { return m.alive; }, module);
}

CUresult Remote::ResolveKernel(CUfunction handle, Kernel** kernel) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu_);
  return Resolve(handle, kernels, [](const Kernel& k) { return k.module->alive; }, kernel);
}

CUresult Remote::ModuleOn(Module* module, int device, uint64_t* remote) {
  // Held across the round trip: two threads launching the same kernel first must not load it twice.
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = module->per_device.find(device); it != module->per_device.end()) {
    *remote = it->second;
    return CUDA_SUCCESS;
  }
  uint64_t id = 0;
  int code = session(device)->ModuleLoad(module->image.data(), module->image.size(), &id);
  if (code != 0 && !module->library.empty()) {
    // A prebuilt library's kernels: its user cannot rebuild it, so say whose they are and where they run.
    return Fail(device, code, ("loading a module of " + module->library).c_str(),
                ToResult(code) == CUDA_ERROR_NO_BINARY_FOR_GPU
                    ? module->library + " is a prebuilt library without PTX for this device: its kernels need a "
                                        "GPU server (or a build of it that carries PTX)"
                    : "");
  }
  if (code != 0) return Fail(device, code, "loading a module");
  module->per_device[device] = id;
  *remote = id;
  return CUDA_SUCCESS;
}

CUresult Remote::FunctionOn(Kernel* kernel, int device, RemoteFunctionInfo* info) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = kernel->per_device.find(device); it != kernel->per_device.end()) {
      *info = it->second;
      return CUDA_SUCCESS;
    }
  }
  uint64_t module = 0;
  if (CUresult r = ModuleOn(kernel->module, device, &module); r != CUDA_SUCCESS) return r;
  RemoteFunctionInfo fetched;
  int code = session(device)->GetFunction(module, kernel->name, &fetched);
  if (code != 0) return Fail(device, code, "looking up a kernel");
  std::map<int, int> attributes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    attributes = kernel->attributes;
  }
  for (const auto& [attribute, value] : attributes) {
    if (int c = session(device)->FunctionSetAttribute(fetched.handle, attribute, value); c != 0) {
      return Fail(device, c, "setting a function attribute");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  kernel->per_device[device] = fetched;
  *info = fetched;
  return CUDA_SUCCESS;
}

CUresult Remote::SetFunctionAttribute(Kernel* kernel, int attribute, int value) {
  std::vector<std::pair<int, uint64_t>> resolved;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kernel->attributes[attribute] = value;
    for (const auto& [device, info] : kernel->per_device) resolved.push_back({device, info.handle});
  }
  for (const auto& [device, handle] : resolved) {
    if (int code = session(device)->FunctionSetAttribute(handle, attribute, value); code != 0) return ToResult(code);
  }
  return CUDA_SUCCESS;
}

CUresult Remote::Fail(int device, int code, const char* what, const std::string& hint) {
  static std::mutex logged_mu;
  static std::set<std::string> logged;
  std::string message = device >= 0 && device < static_cast<int>(sessions_.size())
                            ? sessions_[device]->last_error()
                            : std::string();
  if (message.empty()) message = ResultName(ToResult(code));
  if (!hint.empty()) message += "; " + hint;
  std::lock_guard<std::mutex> lock(logged_mu);
  if (logged.insert(message).second) GP_ERROR("interpose", "device {}: {} failed: {}", device, what, message);
  return ToResult(code);
}

CUresult CheckForwarded(const char* symbol, CUresult result) noexcept {
  if (result != CUDA_ERROR_NOT_SUPPORTED || Remote::Get().attached()) return result;
  try {
    static std::mutex mu;
    static auto* reported = new std::set<std::string>();
    std::lock_guard<std::mutex> lock(mu);
    if (std::getenv("GPUPOOL_LOG") != nullptr && reported->insert(symbol).second) {
      GP_WARN("interpose", "{} is not implemented for fake devices (GPUPOOL_FAKE_DEVICES): answering "
                           "CUDA_ERROR_NOT_SUPPORTED", symbol);
    }
  } catch (...) {
  }
  return result;
}

}  // namespace gpupool::interpose
