/* driver_api: a program that uses the CUDA driver API directly (no cudart), loading PTX text. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

static const char* kPtx =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry twice(.param .u64 p, .param .u32 n)\n{\n"
    "  .reg .b32 %r<5>;\n  .reg .b64 %rd<5>;\n  .reg .pred %p1;\n"
    "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %tid.x;\n  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n"
    "  mad.lo.s32 %r2, %r3, %r4, %r2;\n  setp.ge.u32 %p1, %r2, %r1;\n  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n  mul.wide.u32 %rd2, %r2, 4;\n  add.s64 %rd3, %rd1, %rd2;\n"
    "  ld.global.u32 %r3, [%rd3];\n  shl.b32 %r3, %r3, 1;\n  st.global.u32 [%rd3], %r3;\n"
    "DONE:\n  ret;\n}\n";

#define CHECK(x)                                                      \
  do {                                                                \
    CUresult r_ = (x);                                                \
    if (r_ != CUDA_SUCCESS) {                                         \
      const char* s_ = 0;                                             \
      cuGetErrorName(r_, &s_);                                        \
      fprintf(stderr, "driver_api: %s failed: %s\n", #x, s_ ? s_ : "?"); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main(void) {
  enum { N = 10000 };
  static unsigned data[N];
  for (unsigned i = 0; i < N; ++i) data[i] = i;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CUdeviceptr d;
  char name[128];
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDeviceGetName(name, sizeof(name), dev));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&fn, mod, "twice"));
  CHECK(cuFuncLoad(fn));
  CUfunctionLoadingState loading = CU_FUNCTION_LOADING_STATE_UNLOADED;
  CHECK(cuFuncIsLoaded(&loading, fn));
  if (loading != CU_FUNCTION_LOADING_STATE_LOADED) {
    printf("driver_api: cuFuncIsLoaded after cuFuncLoad: %d\n", (int)loading);
    return 1;
  }
  CHECK(cuMemAlloc(&d, sizeof(data)));
  CHECK(cuMemcpyHtoD(d, data, sizeof(data)));
  unsigned n = N;
  void* args[] = {&d, &n};
  CHECK(cuLaunchKernel(fn, (N + 127) / 128, 1, 1, 128, 1, 1, 0, 0, args, 0));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemcpyDtoH(data, d, sizeof(data)));
  CHECK(cuMemFree(d));
  CHECK(cuModuleUnload(mod));
  int wrong = 0;
  for (unsigned i = 0; i < N; ++i) wrong += data[i] != 2 * i;
  printf("driver_api: device \"%s\", %d wrong: %s\n", name, wrong, wrong ? "FAILED" : "PASSED");
  return wrong != 0;
}
