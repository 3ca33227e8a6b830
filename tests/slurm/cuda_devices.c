// What a job step sees through the CUDA driver it loads (libcuda.so.1 from the library path, as any CUDA program):
// the device count, each device's name and total memory, and that memory can be allocated on each. Prints
// "cuda_devices: N device(s)" then one line per device; exits 1 with the failing call otherwise.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*Init)(unsigned);
typedef int (*GetCount)(int*);
typedef int (*DeviceGet)(int*, int);
typedef int (*GetName)(char*, int, int);
typedef int (*TotalMem)(size_t*, int);
typedef int (*RetainCtx)(void**, int);
typedef int (*ReleaseCtx)(int);
typedef int (*SetCurrent)(void*);
typedef int (*MemAlloc)(unsigned long long*, size_t);
typedef int (*MemFree)(unsigned long long);

#define LOAD(type, name)                                        \
  type name = (type)dlsym(lib, #name);                          \
  if (name == NULL) {                                           \
    fprintf(stderr, "cuda_devices: %s missing\n", #name);      \
    return 1;                                                   \
  }
#define CHECK(call)                                                    \
  do {                                                                 \
    int rc_ = (call);                                                  \
    if (rc_ != 0) {                                                    \
      fprintf(stderr, "cuda_devices: %s failed: %d\n", #call, rc_);    \
      return 1;                                                        \
    }                                                                  \
  } while (0)

int main(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "cuda_devices: %s\n", dlerror());
    return 1;
  }
  LOAD(Init, cuInit);
  LOAD(GetCount, cuDeviceGetCount);
  LOAD(DeviceGet, cuDeviceGet);
  LOAD(GetName, cuDeviceGetName);
  LOAD(TotalMem, cuDeviceTotalMem_v2);
  LOAD(RetainCtx, cuDevicePrimaryCtxRetain);
  LOAD(ReleaseCtx, cuDevicePrimaryCtxRelease_v2);
  LOAD(SetCurrent, cuCtxSetCurrent);
  LOAD(MemAlloc, cuMemAlloc_v2);
  LOAD(MemFree, cuMemFree_v2);
  CHECK(cuInit(0));
  int count = 0;
  CHECK(cuDeviceGetCount(&count));
  printf("cuda_devices: %d device(s)\n", count);
  for (int i = 0; i < count; ++i) {
    int device;
    char name[256];
    size_t total = 0;
    void* ctx = NULL;
    unsigned long long pointer = 0;
    CHECK(cuDeviceGet(&device, i));
    CHECK(cuDeviceGetName(name, sizeof(name), device));
    CHECK(cuDeviceTotalMem_v2(&total, device));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, device));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc_v2(&pointer, 1 << 20));
    CHECK(cuMemFree_v2(pointer));
    CHECK(cuDevicePrimaryCtxRelease_v2(device));
    printf("cuda_devices: device %d: %s, %zu MiB, allocated 1 MiB\n", i, name, total >> 20);
  }
  fflush(stdout);
  return 0;
}
