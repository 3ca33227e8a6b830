// Code: libraries and modules (one object behind both handle kinds), their kernels (CUkernel = CUfunction), the
// JIT linker. Images are copied when the call arrives and loaded on a slice the first time they are used there,
// so one cudart library serves all devices of the process. The entry points are generated from forward_spec.h.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "core/log.h"
#include "driver.h"
#include "emu/fatbin.h"
#include "forward_spec.h"
#include "managed.h"
#include "remote.h"
#include "shared_object.h"

namespace gpupool::interpose {
namespace {

constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;

// The architecture whose PTX libcuda picks when it links translation units itself (before any module is loaded on
// a device): the first device's compute capability, else 7.5.
int LinkArch() {
  const DeviceInfo* first = nullptr;
  return Driver::Get().GetDevice(0, &first) == CUDA_SUCCESS ? first->cc_major * 10 + first->cc_minor : 75;
}

// The bytes of an image given only its pointer: a fatbin wrapper (what cudart passes: it points at the
// container), a fatbin container, or NUL-terminated PTX.
CUresult CopyImage(const void* image, std::vector<uint8_t>* out) {
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint32_t magic;
  std::memcpy(&magic, image, sizeof(magic));
  std::string linked;  // The PTX of a device-linked binary's translation units, if it is one.
  if (magic == kFatbinWrapperMagic) {
    auto prelinked = emu::PrelinkedPtx(image, LinkArch());
    if (!prelinked.ok()) {
      GP_ERROR("interpose", "cannot load this device-linked module: {}", prelinked.status().message());
      return prelinked.status().code() == cu::kNotSupported ? CUDA_ERROR_NOT_SUPPORTED
                                                                     : CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    linked = std::move(prelinked).value();
    const void* container;
    std::memcpy(&container, static_cast<const uint8_t*>(image) + 8, sizeof(container));
    image = container;
    if (image == nullptr) return CUDA_ERROR_INVALID_IMAGE;
  }
  size_t size = emu::ImageSize(image);
  if (size == 0) {
    GP_ERROR("interpose", "cannot load this module: not a fatbin or PTX image");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  const auto* bytes = static_cast<const uint8_t*>(image);
  out->assign(bytes, bytes + size);
  // After the container, which a GPU's driver reads (its linked SASS), the units' PTX, which the emulated device
  // links and runs (emu::PtxForDevice).
  if (!linked.empty()) {
    out->insert(out->end(), linked.begin(), linked.end());
    out->push_back(0);
  }
  return CUDA_SUCCESS;
}

CUresult ReadFile(const char* path, std::vector<uint8_t>* out) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream in(path, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (out->empty()) return CUDA_ERROR_INVALID_IMAGE;
  return CUDA_SUCCESS;
}

// Registers a module for `image`, embedded in shared library `library` ("" for the program's own, a file's or
// generated code); when a context is current (or `require_context`), loads it there now so that an image the slice
// cannot run fails at load time, as on a real driver.
CUresult NewModule(std::vector<uint8_t> image, bool require_context, std::string library, Module** out) {
  Remote& remote = Remote::Get();
  int dev = -1;
  if (CUresult r = remote.CurrentDevice(&dev); r != CUDA_SUCCESS) {
    if (require_context || r != CUDA_ERROR_INVALID_CONTEXT) return r;
    dev = -1;
  }
  auto* module = new Module();
  module->image = std::move(image);
  module->library = std::move(library);
  if (dev >= 0) {
    uint64_t id;
    if (CUresult r = remote.ModuleOn(module, dev, &id); r != CUDA_SUCCESS) {
      delete module;
      return r;
    }
  }
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.modules.insert(module);
  *out = module;
  return CUDA_SUCCESS;
}

CUresult CurrentOr(int dev, int* out) {
  if (dev >= 0) {
    const DeviceInfo* info;
    if (CUresult r = Driver::Get().GetDevice(dev, &info); r != CUDA_SUCCESS) return r;
    if (!Remote::Get().attached()) return CUDA_ERROR_NOT_SUPPORTED;
    *out = dev;
    return CUDA_SUCCESS;
  }
  return Remote::Get().CurrentDevice(out);
}

struct LinkState {
  std::vector<std::vector<uint8_t>> inputs;
  int ptx_inputs = 0;
  std::vector<uint8_t> result;
};
std::mutex link_mu;
std::set<LinkState*> link_states;

CUresult ResolveLink(CUlinkState handle, LinkState** state) {
  auto* s = reinterpret_cast<LinkState*>(handle);
  std::lock_guard<std::mutex> lock(link_mu);
  if (link_states.count(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  *state = s;
  return CUDA_SUCCESS;
}

}  // namespace

namespace {

// Loads an image, from memory (`code`, which NVIDIA's loaders read up to the end its header gives) or, given a
// `path`, from that file, as a module (`as_module`: loaded on the current slice now) or a library (loaded at first
// use), into *out.
template <typename Handle>
CUresult LoadImage(Handle* out, bool as_module, const void* code, const char* path) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint8_t> image;
  std::string library;  // Which shared object's image it is, for messages: the file's own name says it otherwise.
  if (path == nullptr) {
    if (CUresult r = CopyImage(code, &image); r != CUDA_SUCCESS) return r;
    library = SharedLibraryAt(code);
  } else {
    if (CUresult r = ReadFile(path, &image); r != CUDA_SUCCESS) return r;
    if (image.back() != 0 && emu::ImageSize(image.data()) == 0) image.push_back(0);  // PTX text without its NUL.
  }
  Module* module;
  if (CUresult r = NewModule(std::move(image), as_module, library, &module); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<Handle>(module);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult LibraryLoadData(CUlibrary* library, const void* code) { return LoadImage(library, false, code, nullptr); }
CUresult LibraryLoadFromFile(CUlibrary* library, const char* path) { return LoadImage(library, false, nullptr, path); }
CUresult ModuleLoadData(CUmodule* out, const void* code) { return LoadImage(out, true, code, nullptr); }
CUresult ModuleLoadFile(CUmodule* out, const char* path) { return LoadImage(out, true, nullptr, path); }

CUresult ModuleUnload(CUmodule handle) {
  Module* module;
  if (CUresult r = Remote::Get().ResolveModule(handle, &module); r != CUDA_SUCCESS) return r;
  Remote& remote = Remote::Get();
  std::map<int, uint64_t> loaded;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    module->alive = false;  // The object stays: a stale handle is then recognised, not dereferenced after free.
    loaded = std::move(module->per_device);
    module->per_device.clear();
    module->image.clear();
    module->image.shrink_to_fit();
  }
  remote.ForgetGlobalsOf(module);
  ManagedMemory::Get().ForgetOwner(module);
  for (const auto& [dev, id] : loaded) remote.session(dev)->ModuleUnload(id);
  return CUDA_SUCCESS;
}

CUresult LibraryGetModule(CUmodule* out, CUlibrary library) {
  Module* module;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Remote::Get().ResolveModule(reinterpret_cast<CUmodule>(library), &module); r != CUDA_SUCCESS) {
    return r;
  }
  *out = reinterpret_cast<CUmodule>(module);
  return CUDA_SUCCESS;
}

CUresult GetFunction(CUfunction* out, CUmodule handle, const char* name, bool require_context) {
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  Module* module;
  if (CUresult r = remote.ResolveModule(handle, &module); r != CUDA_SUCCESS) return r;
  Kernel* kernel;
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    auto& slot = module->kernels[name];
    if (!slot) {
      slot = std::make_unique<Kernel>();
      slot->module = module;
      slot->name = name;
      remote.kernels.insert(slot.get());
    }
    kernel = slot.get();
  }
  // Look the name up on the current slice now, so a missing kernel fails here rather than at launch.
  int dev;
  CUresult r = remote.CurrentDevice(&dev);
  if (r == CUDA_SUCCESS) {
    RemoteFunctionInfo info;
    if (CUresult f = remote.FunctionOn(kernel, dev, &info); f != CUDA_SUCCESS) return f;
  } else if (require_context || r != CUDA_ERROR_INVALID_CONTEXT) {
    return r;
  }
  *out = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}

namespace {

// Variable `name` of `module` on slice `dev` (loading the module there if needed): *a and *n. `kind` names it in the
// log line of a failure ("global", "managed variable"). A variable a GPU's driver placed outside the slice's window
// routes there by address from now on.
CUresult VariableOn(Module* module, int dev, const char* name, const char* kind, uint64_t* a, uint64_t* n) {
  Remote& remote = Remote::Get();
  uint64_t id;
  if (CUresult r = remote.ModuleOn(module, dev, &id); r != CUDA_SUCCESS) return r;
  int code = remote.session(dev)->GetGlobal(id, name, a, n);
  if (code == CUDA_ERROR_NOT_FOUND) return CUDA_ERROR_NOT_FOUND;  // Programs probe for optional globals.
  if (code != 0) return remote.Fail(dev, code, fmt::format("looking up {} '{}'", kind, name).c_str());
  if (*n > 0 && remote.DeviceOf(*a) != dev) remote.AddOutsideGlobal(*a, *n, dev, module);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult GetGlobal(CUdeviceptr* address, size_t* bytes, CUmodule handle, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  Module* module;
  if (CUresult r = remote.ResolveModule(handle, &module); r != CUDA_SUCCESS) return r;
  int dev;
  if (CUresult r = remote.CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  uint64_t a = 0, n = 0;
  if (CUresult r = VariableOn(module, dev, name, "global", &a, &n); r != CUDA_SUCCESS) return r;
  if (address != nullptr) *address = a;
  if (bytes != nullptr) *bytes = n;
  return CUDA_SUCCESS;
}

// A __managed__ variable: cudart asks for each when it registers the library, before any context exists, and
// points the program's host symbol at the answer. The variable lives on one slice (the current one, else the
// first: CUDA's managed variables belong to no one device); its pages become managed memory there (managed.h).
CUresult LibraryGetManaged(CUdeviceptr* address, size_t* bytes, CUlibrary library, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  Module* module;
  if (CUresult r = remote.ResolveModule(reinterpret_cast<CUmodule>(library), &module); r != CUDA_SUCCESS) return r;
  int dev = 0;
  if (CUresult r = remote.CurrentDevice(&dev); r == CUDA_ERROR_INVALID_CONTEXT) {
    dev = 0;
  } else if (r != CUDA_SUCCESS) {
    return r;
  }
  uint64_t a = 0, n = 0;
  if (CUresult r = VariableOn(module, dev, name, "managed variable", &a, &n); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ManagedMemory::Get().AdoptVariable(dev, a, n, module); r != CUDA_SUCCESS) return r;
  if (address != nullptr) *address = a;
  if (bytes != nullptr) *bytes = n;
  return CUDA_SUCCESS;
}

CUresult KernelGetFunction(CUfunction* out, CUkernel handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Kernel* kernel;
  if (CUresult r = Remote::Get().ResolveKernel(reinterpret_cast<CUfunction>(handle), &kernel); r != CUDA_SUCCESS) {
    return r;
  }
  *out = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}

CUresult FuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction handle, int dev) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  Kernel* kernel;
  if (CUresult r = remote.ResolveKernel(handle, &kernel); r != CUDA_SUCCESS) return r;
  if (CUresult r = CurrentOr(dev, &dev); r != CUDA_SUCCESS) return r;
  RemoteFunctionInfo info;
  if (CUresult r = remote.FunctionOn(kernel, dev, &info); r != CUDA_SUCCESS) return r;
  const DeviceInfo& device = Driver::Get().devices()[dev];
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
      // The kernel's own bound where the slice reports one (launch bounds, registers), else the device's.
      const int device_limit = DeviceAttribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024);
      *value = info.max_threads_per_block > 0 ? std::min(info.max_threads_per_block, device_limit) : device_limit;
      break;
    }
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = info.shared_bytes;
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *value = info.local_bytes;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = info.num_regs;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
      // The architecture the kernel's PTX was written for (compute_120 on a 12.1 device: 120), as the driver
      // answers; CUB picks its tuning policy, and so the kernels it launches, from it.
      *value = info.ptx_version != 0 ? info.ptx_version : device.cc_major * 10 + device.cc_minor;
      break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:  // The code the device runs: compiled for the device itself.
      *value = device.cc_major * 10 + device.cc_minor;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = MaxDynamicShared(*kernel, dev, info);
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *value = -1;
      break;
    default:
      *value = 0;  // Constant bytes, cache mode, cluster attributes: none.
  }
  return CUDA_SUCCESS;
}

// cuFuncSetCacheConfig / cuKernelSetCacheConfig: hints a slice need not follow; accepted.
CUresult FuncAccept(CUfunction handle) {
  Kernel* kernel;
  return Remote::Get().ResolveKernel(handle, &kernel);
}

// cuFuncSetAttribute / cuKernelSetAttribute: set on every slice where the function lives (and replayed where it
// is resolved later). The dynamic shared memory opt-in is also kept here: launches are checked against it.
CUresult FuncSetAttribute(CUfunction handle, CUfunction_attribute attribute, int value, int dev) {
  Remote& remote = Remote::Get();
  Kernel* kernel;
  if (CUresult r = remote.ResolveKernel(handle, &kernel); r != CUDA_SUCCESS) return r;
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
      if (CUresult r = CurrentOr(dev, &dev); r != CUDA_SUCCESS) return r;
      RemoteFunctionInfo info;
      if (CUresult r = remote.FunctionOn(kernel, dev, &info); r != CUDA_SUCCESS) return r;
      if (value < 0 || value > MaxOptInDynamicShared(dev, info)) return CUDA_ERROR_INVALID_VALUE;
      if (CUresult r = remote.SetFunctionAttribute(kernel, attribute, value); r != CUDA_SUCCESS) return r;
      kernel->max_dynamic_shared = value;
      return CUDA_SUCCESS;
    }
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      return remote.SetFunctionAttribute(kernel, attribute, value);
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return remote.SetFunctionAttribute(kernel, attribute, value);
    default:
      return CUDA_ERROR_INVALID_VALUE;  // The rest are read-only (cuFuncSetAttribute documents only these).
  }
}

CUresult FuncGetName(const char** name, CUfunction handle) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Kernel* kernel;
  if (CUresult r = Remote::Get().ResolveKernel(handle, &kernel); r != CUDA_SUCCESS) return r;
  *name = kernel->name.c_str();
  return CUDA_SUCCESS;
}

CUresult FuncGetModule(CUmodule* out, CUfunction handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Kernel* kernel;
  if (CUresult r = Remote::Get().ResolveKernel(handle, &kernel); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<CUmodule>(kernel->module);
  return CUDA_SUCCESS;
}

namespace {

// The function behind `handle` and the current context's slice.
CUresult KernelOnCurrentSlice(CUfunction handle, Kernel** kernel, int* dev) {
  Remote& remote = Remote::Get();
  if (CUresult r = remote.ResolveKernel(handle, kernel); r != CUDA_SUCCESS) return r;
  return remote.CurrentDevice(dev);
}

}  // namespace

CUresult FuncGetParamInfo(CUfunction handle, size_t index, size_t* offset, size_t* size) {
  Kernel* kernel;
  int dev;
  if (CUresult r = KernelOnCurrentSlice(handle, &kernel, &dev); r != CUDA_SUCCESS) return r;
  RemoteFunctionInfo info;
  if (CUresult r = Remote::Get().FunctionOn(kernel, dev, &info); r != CUDA_SUCCESS) return r;
  if (index >= info.params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = info.params[index].offset;
  if (size != nullptr) *size = info.params[index].size;
  return CUDA_SUCCESS;
}

// cuFuncGetParamCount / cuKernelGetParamCount (CUDA 13.2): the length of the parameter table launches pack by.
CUresult FuncGetParamCount(CUfunction handle, size_t* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Kernel* kernel;
  int dev;
  if (CUresult r = KernelOnCurrentSlice(handle, &kernel, &dev); r != CUDA_SUCCESS) return r;
  RemoteFunctionInfo info;
  if (CUresult r = Remote::Get().FunctionOn(kernel, dev, &info); r != CUDA_SUCCESS) return r;
  *count = info.params.size();
  return CUDA_SUCCESS;
}

// Functions load on a slice at first use (lazily, as CUDA_MODULE_LOADING=LAZY does); cuFuncLoad loads it on the
// current context's slice now, and cuFuncIsLoaded says whether that happened there.
CUresult FuncLoad(CUfunction handle) {
  Kernel* kernel;
  int dev;
  if (CUresult r = KernelOnCurrentSlice(handle, &kernel, &dev); r != CUDA_SUCCESS) return r;
  RemoteFunctionInfo info;
  return Remote::Get().FunctionOn(kernel, dev, &info);
}

CUresult FuncIsLoaded(CUfunctionLoadingState* state, CUfunction handle) {
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Kernel* kernel;
  int dev;
  if (CUresult r = KernelOnCurrentSlice(handle, &kernel, &dev); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(Remote::Get().mu());
  *state = kernel->per_device.count(dev) ? CU_FUNCTION_LOADING_STATE_LOADED : CU_FUNCTION_LOADING_STATE_UNLOADED;
  return CUDA_SUCCESS;
}

CUresult LinkCreate(unsigned int n, CUjit_option* options, void** values, CUlinkState* out) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* state = new LinkState();
  std::lock_guard<std::mutex> lock(link_mu);
  link_states.insert(state);
  *out = reinterpret_cast<CUlinkState>(state);
  return CUDA_SUCCESS;
}

CUresult LinkAddData(CUlinkState handle, CUjitInputType type, void* data, size_t size) {
  LinkState* state;
  if (CUresult r = ResolveLink(handle, &state); r != CUDA_SUCCESS) return r;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint8_t> bytes;
  const auto* p = static_cast<const uint8_t*>(data);
  switch (type) {
    case CU_JIT_INPUT_PTX:
      if (size == 0) size = std::strlen(static_cast<const char*>(data)) + 1;
      bytes.assign(p, p + size);
      if (bytes.back() != 0) bytes.push_back(0);
      ++state->ptx_inputs;
      break;
    case CU_JIT_INPUT_FATBINARY:
    case CU_JIT_INPUT_CUBIN:
      if (size == 0) size = emu::ImageSize(data);
      if (size == 0) return CUDA_ERROR_INVALID_IMAGE;
      bytes.assign(p, p + size);
      break;
    default:
      GP_WARN("interpose", "cuLinkAddData: input type {} (object/library) is not supported; pass PTX or a fatbin",
              static_cast<int>(type));
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  std::lock_guard<std::mutex> lock(link_mu);
  state->inputs.push_back(std::move(bytes));
  return CUDA_SUCCESS;
}

CUresult LinkAddFile(CUlinkState handle, CUjitInputType type, const char* path) {
  std::vector<uint8_t> bytes;
  if (CUresult r = ReadFile(path, &bytes); r != CUDA_SUCCESS) return r;
  return LinkAddData(handle, type, bytes.data(), bytes.size());
}

// A single input is passed through as the image (what numba produces for a kernel without device-function
// libraries). Several become a linked image: the PTX of each, one module after another, which the slice's device
// links when it loads it (emu/ptx_link.h).
CUresult LinkComplete(CUlinkState handle, void** out, size_t* size) {
  LinkState* state;
  if (CUresult r = ResolveLink(handle, &state); r != CUDA_SUCCESS) return r;
  if (out == nullptr || size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(link_mu);
  if (state->inputs.empty()) return CUDA_ERROR_INVALID_VALUE;
  if (state->inputs.size() == 1) {
    state->result = state->inputs.front();
  } else {
    const int arch = LinkArch();
    std::string linked;
    for (size_t i = 0; i < state->inputs.size(); ++i) {
      auto ptx = emu::PtxForDevice(state->inputs[i].data(), state->inputs[i].size(), arch);
      if (!ptx.ok()) {
        GP_ERROR("interpose", "cuLinkComplete: input {} of {}: {}", i + 1, state->inputs.size(),
                 ptx.status().message());
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
      }
      linked += *ptx;
      if (linked.back() != '\n') linked += '\n';
    }
    state->result.assign(linked.begin(), linked.end());
    state->result.push_back(0);
  }
  *out = state->result.data();
  *size = state->result.size();
  return CUDA_SUCCESS;
}

CUresult LinkDestroy(CUlinkState handle) {
  LinkState* state;
  if (CUresult r = ResolveLink(handle, &state); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> lock(link_mu);
    link_states.erase(state);
  }
  delete state;
  return CUDA_SUCCESS;
}

// Lazy unless CUDA_MODULE_LOADING=EAGER: cudart does not read that variable itself, it asks the driver here, and
// loads every module at init when the answer is eager (shared/design/CUDA-NOTES.md).
CUresult ModuleLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* env = std::getenv("CUDA_MODULE_LOADING");
  *mode = env != nullptr && std::strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_MODULE_FORWARDS(GP_DEFINE_FORWARD)

GP_MODULE_ENTRIES(GP_DEFINE_ENTRY)
