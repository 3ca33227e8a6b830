// Uses the driver API the way programs that bypass cudart do (numba, cuda-python, PyCUDA): dlopen("libcuda.so.1")
// and dlsym of the plain driver names. Run with the interposer's directory on LD_LIBRARY_PATH.
//
//   driver_dlopen COUNT [BYTES]
//
// COUNT: the devices expected (0: cuInit must fail with CUDA_ERROR_NO_DEVICE); BYTES: each one's memory.
// Prints what it sees on stdout; exits 1 at the first check that fails.
#include <cuda.h>
#include <dlfcn.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "device_checks.h"

namespace {

void* lib = nullptr;

template <typename F>
F Load(const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    std::printf("FAIL: dlsym(%s): %s\n", name, dlerror());
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}

void CheckResult(CUresult got, CUresult want, const char* call) {
  if (got != want) {
    std::printf("FAIL: %s returned %d, expected %d\n", call, static_cast<int>(got), static_cast<int>(want));
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto [expected_count, expected_bytes] = ParseExpectedDevices(argc, argv);

  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("FAIL: dlopen(libcuda.so.1): %s\n", dlerror());
    return 1;
  }
  auto cu_init = Load<CUresult (*)(unsigned int)>("cuInit");
  auto cu_driver_get_version = Load<CUresult (*)(int*)>("cuDriverGetVersion");
  auto cu_device_get_count = Load<CUresult (*)(int*)>("cuDeviceGetCount");
  auto cu_get_error_name = Load<CUresult (*)(CUresult, const char**)>("cuGetErrorName");

  int version = 0;
  CheckResult(cu_driver_get_version(&version), CUDA_SUCCESS, "cuDriverGetVersion");
  // CUDA 13.2's: gpupool serves what its cudart and libraries ask of the driver
  // (lib/interpose/driver_variants_newer.txt).
  Check(version >= 13020, "cuDriverGetVersion reports at least 13020");
  std::printf("driver version %d\n", version);

  int count = -1;
  CheckResult(cu_device_get_count(&count), CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount before cuInit");

  const CUresult init = cu_init(0);
  const char* init_name = nullptr;
  cu_get_error_name(init, &init_name);
  std::printf("cuInit: %s\n", init_name != nullptr ? init_name : "?");
  if (expected_count == 0) {
    CheckResult(init, CUDA_ERROR_NO_DEVICE, "cuInit without devices");
    CheckResult(cu_init(0), CUDA_ERROR_NO_DEVICE, "cuInit again");
    CheckResult(cu_device_get_count(&count), CUDA_ERROR_NO_DEVICE, "cuDeviceGetCount after a failed cuInit");
    return failures == 0 ? 0 : 1;
  }
  CheckResult(init, CUDA_SUCCESS, "cuInit");
  CheckResult(cu_init(1), CUDA_ERROR_INVALID_VALUE, "cuInit with flags");

  auto cu_device_get = Load<CUresult (*)(CUdevice*, int)>("cuDeviceGet");
  auto cu_device_get_name = Load<CUresult (*)(char*, int, CUdevice)>("cuDeviceGetName");
  auto cu_device_total_mem_v1 = Load<CUresult (*)(unsigned int*, CUdevice)>("cuDeviceTotalMem");
  auto cu_device_total_mem = Load<CUresult (*)(size_t*, CUdevice)>("cuDeviceTotalMem_v2");
  auto cu_device_get_attribute = Load<CUresult (*)(int*, CUdevice_attribute, CUdevice)>("cuDeviceGetAttribute");
  auto cu_device_get_pci_bus_id = Load<CUresult (*)(char*, int, CUdevice)>("cuDeviceGetPCIBusId");
  auto cu_device_get_by_pci_bus_id = Load<CUresult (*)(CUdevice*, const char*)>("cuDeviceGetByPCIBusId");
  auto cu_device_get_uuid = Load<CUresult (*)(CUuuid*, CUdevice)>("cuDeviceGetUuid_v2");
  auto cu_primary_retain = Load<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
  auto cu_primary_release = Load<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxRelease_v2");
  auto cu_primary_get_state = Load<CUresult (*)(CUdevice, unsigned int*, int*)>("cuDevicePrimaryCtxGetState");
  auto cu_ctx_set_current = Load<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
  auto cu_ctx_get_current = Load<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  auto cu_ctx_push = Load<CUresult (*)(CUcontext)>("cuCtxPushCurrent_v2");
  auto cu_ctx_pop = Load<CUresult (*)(CUcontext*)>("cuCtxPopCurrent_v2");
  auto cu_ctx_get_device = Load<CUresult (*)(CUdevice*)>("cuCtxGetDevice");
  auto cu_ctx_get_device_v2 = Load<CUresult (*)(CUdevice*, CUcontext)>("cuCtxGetDevice_v2");
  auto cu_ctx_synchronize = Load<CUresult (*)()>("cuCtxSynchronize");
  auto cu_mem_alloc = Load<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");

  CheckResult(cu_device_get_count(&count), CUDA_SUCCESS, "cuDeviceGetCount");
  std::printf("devices %d\n", count);
  Check(count == expected_count, "device count as configured");

  CUdevice dev = -1;
  CheckResult(cu_device_get(&dev, count), CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet past the last device");
  CUuuid first_uuid{};
  for (int i = 0; i < count; ++i) {
    CheckResult(cu_device_get(&dev, i), CUDA_SUCCESS, "cuDeviceGet");
    char name[256] = {};
    CheckResult(cu_device_get_name(name, sizeof(name), dev), CUDA_SUCCESS, "cuDeviceGetName");
    size_t bytes = 0;
    CheckResult(cu_device_total_mem(&bytes, dev), CUDA_SUCCESS, "cuDeviceTotalMem_v2");
    unsigned int bytes_v1 = 0;
    CheckResult(cu_device_total_mem_v1(&bytes_v1, dev), CUDA_SUCCESS, "cuDeviceTotalMem");
    int major = 0, minor = 0, sms = 0, warp = 0, bus = -1;
    cu_device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu_device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    cu_device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    cu_device_get_attribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
    cu_device_get_attribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    // CUDA 13.2's newest attribute, ATOMIC_REDUCTION_SUPPORTED (148), is answered (gpupool's stream memory operations
    // do no atomic reductions); past it (CU_DEVICE_ATTRIBUTE_MAX of 13.2) is refused.
    int atomic_reduction = -1, unused = 0;
    CheckResult(cu_device_get_attribute(&atomic_reduction, static_cast<CUdevice_attribute>(148), dev), CUDA_SUCCESS,
                "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED)");
    Check(atomic_reduction == 0, "no atomic reductions in stream memory operations");
    CheckResult(cu_device_get_attribute(&unused, static_cast<CUdevice_attribute>(149), dev), CUDA_ERROR_INVALID_VALUE,
                "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MAX of CUDA 13.2)");
    char pci[32] = {};
    CheckResult(cu_device_get_pci_bus_id(pci, sizeof(pci), dev), CUDA_SUCCESS, "cuDeviceGetPCIBusId");
    CUdevice by_pci = -1;
    CheckResult(cu_device_get_by_pci_bus_id(&by_pci, pci), CUDA_SUCCESS, "cuDeviceGetByPCIBusId");
    Check(by_pci == dev, "cuDeviceGetByPCIBusId finds the device back");
    CUuuid uuid{};
    CheckResult(cu_device_get_uuid(&uuid, dev), CUDA_SUCCESS, "cuDeviceGetUuid_v2");
    if (i == 0) first_uuid = uuid;
    if (i == 1) Check(std::memcmp(&uuid, &first_uuid, sizeof(uuid)) != 0, "distinct UUIDs");
    std::printf("device %d: %s, %zu bytes, cc %d.%d, %d SMs, warp %d, pci %s\n", i, name, bytes, major, minor, sms,
                warp, pci);
    Check(std::strcmp(name, "gpupool emulated GPU") == 0, "device name");
    Check(bytes == expected_bytes, "total memory as configured");
    Check(bytes_v1 == (bytes > UINT_MAX ? UINT_MAX : bytes), "cuDeviceTotalMem (v1) clamps to 32 bits");
    Check(major == 7 && minor == 5 && sms == 40 && warp == 32, "attributes");
    Check(bus == i + 1, "PCI bus attribute");
  }

  // Contexts: the sequence cudart performs, then the stack operations.
  CUcontext ctx = nullptr, current = nullptr;
  CheckResult(cu_ctx_get_device(&dev), CUDA_ERROR_INVALID_CONTEXT, "cuCtxGetDevice without a context");
  CheckResult(cu_primary_retain(&ctx, count - 1), CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
  unsigned int flags = 99;
  int active = 0;
  CheckResult(cu_primary_get_state(count - 1, &flags, &active), CUDA_SUCCESS, "cuDevicePrimaryCtxGetState");
  Check(active == 1 && flags == 0, "retained primary context is active");
  CheckResult(cu_ctx_set_current(ctx), CUDA_SUCCESS, "cuCtxSetCurrent");
  CheckResult(cu_ctx_get_current(&current), CUDA_SUCCESS, "cuCtxGetCurrent");
  Check(current == ctx, "current context");
  CheckResult(cu_ctx_get_device(&dev), CUDA_SUCCESS, "cuCtxGetDevice");
  Check(dev == count - 1, "context device");
  dev = -1;
  CheckResult(cu_ctx_get_device_v2(&dev, ctx), CUDA_SUCCESS, "cuCtxGetDevice_v2");
  Check(dev == count - 1, "context device (v2)");
  CheckResult(cu_ctx_synchronize(), CUDA_SUCCESS, "cuCtxSynchronize");
  CheckResult(cu_ctx_push(ctx), CUDA_SUCCESS, "cuCtxPushCurrent_v2");
  CUcontext popped = nullptr;
  CheckResult(cu_ctx_pop(&popped), CUDA_SUCCESS, "cuCtxPopCurrent_v2");
  Check(popped == ctx, "popped context");
  CheckResult(cu_ctx_set_current(reinterpret_cast<CUcontext>(0x1234)), CUDA_ERROR_INVALID_CONTEXT,
              "cuCtxSetCurrent with a bogus handle");

  CUdeviceptr ptr = 0;
  const CUresult alloc = cu_mem_alloc(&ptr, 1 << 20);
  const char* alloc_name = nullptr;
  cu_get_error_name(alloc, &alloc_name);
  std::printf("cuMemAlloc_v2: %s\n", alloc_name != nullptr ? alloc_name : "?");
  CheckResult(alloc, CUDA_ERROR_NOT_SUPPORTED, "cuMemAlloc_v2 (memory is not implemented yet)");

  CheckResult(cu_primary_release(count - 1), CUDA_SUCCESS, "cuDevicePrimaryCtxRelease_v2");
  CheckResult(cu_primary_get_state(count - 1, &flags, &active), CUDA_SUCCESS, "cuDevicePrimaryCtxGetState");
  Check(active == 0, "released primary context is inactive");
  CheckResult(cu_primary_release(count - 1), CUDA_ERROR_INVALID_CONTEXT, "releasing once too often");

  if (failures != 0) {
    std::printf("FAILED (%d)\n", failures);
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
