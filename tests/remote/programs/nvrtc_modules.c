/* nvrtc_modules: a kernel compiled at run time by NVRTC, loaded through the driver API both ways a program may ask
 * for it: SASS for the device's architecture (-arch=sm_XX, a cubin) and PTX (-arch=compute_XX).
 *   nvrtc_modules       the cubin is refused at load (CUDA_ERROR_NO_BINARY_FOR_GPU or CUDA_ERROR_INVALID_IMAGE,
 *                       as the emulated device runs PTX only) and the PTX loads, runs and computes; exit 0.
 *   nvrtc_modules sass  loads the cubin only and exits 1 once it is refused (the test reads the logged reason). */
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* kSource =
    "extern \"C\" __global__ void scale_add(float* y, const float* x, float a, unsigned n) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

static const char* Name(CUresult r) {
  const char* s = 0;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

#define CHECK(call)                                                               \
  do {                                                                            \
    CUresult r_ = (call);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                     \
      fprintf(stderr, "nvrtc_modules: %s failed: %s\n", #call, Name(r_));         \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* The device's image of kSource for `arch` ("sm_75" or "compute_75"): SASS (a cubin) or PTX text; malloc'd. */
static char* Compile(const char* arch, int cubin, size_t* size) {
  nvrtcProgram program;
  char option[64];
  snprintf(option, sizeof option, "-arch=%s", arch);
  const char* options[] = {option};
  if (nvrtcCreateProgram(&program, kSource, "scale_add.cu", 0, NULL, NULL) != NVRTC_SUCCESS) exit(1);
  nvrtcResult r = nvrtcCompileProgram(program, 1, options);
  if (r != NVRTC_SUCCESS) {
    size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    char* log = malloc(log_size + 1);
    nvrtcGetProgramLog(program, log);
    fprintf(stderr, "nvrtc_modules: NVRTC %s: %s\n%s\n", option, nvrtcGetErrorString(r), log);
    exit(1);
  }
  char* image;
  if (cubin) {
    nvrtcGetCUBINSize(program, size);
    image = malloc(*size);
    nvrtcGetCUBIN(program, image);
  } else {
    nvrtcGetPTXSize(program, size);
    image = malloc(*size);
    nvrtcGetPTX(program, image);
  }
  nvrtcDestroyProgram(&program);
  return image;
}

/* Whether loading the cubin through every loader was refused with a code a driver gives for an image it cannot
 * run on this device. */
static int CubinRefused(const char* arch) {
  size_t size = 0;
  char* cubin = Compile(arch, 1, &size);
  if (size < 4 || memcmp(cubin, "\x7f" "ELF", 4) != 0) {
    fprintf(stderr, "nvrtc_modules: NVRTC's %s image is not a cubin\n", arch);
    exit(1);
  }
  int refused = 1;
  CUmodule module;
  CUlibrary library;
  CUresult results[3] = {cuModuleLoadData(&module, cubin), cuModuleLoadDataEx(&module, cubin, 0, NULL, NULL),
                         cuLibraryLoadData(&library, cubin, NULL, NULL, 0, NULL, NULL, 0)};
  const char* loaders[3] = {"cuModuleLoadData", "cuModuleLoadDataEx", "cuLibraryLoadData"};
  for (int i = 0; i < 3; ++i) {
    if (results[i] == CUDA_ERROR_NO_BINARY_FOR_GPU || results[i] == CUDA_ERROR_INVALID_IMAGE) {
      printf("nvrtc_modules: %s of the %s cubin refused: %s\n", loaders[i], arch, Name(results[i]));
    } else {
      printf("nvrtc_modules: %s of the %s cubin answered %s, expected a refusal\n", loaders[i], arch,
             Name(results[i]));
      refused = 0;
    }
  }
  free(cubin);
  return refused;
}

/* Runs scale_add from NVRTC's PTX for `arch`; the number of wrong elements. */
static int RunPtx(const char* arch) {
  enum { N = 100000 };
  size_t size = 0;
  char* ptx = Compile(arch, 0, &size);
  CUmodule module;
  CUfunction function;
  CHECK(cuModuleLoadData(&module, ptx));
  CHECK(cuModuleGetFunction(&function, module, "scale_add"));
  static float x[N], y[N];
  for (int i = 0; i < N; ++i) {
    x[i] = (float)i;
    y[i] = (float)(N - i);
  }
  CUdeviceptr dx, dy;
  CHECK(cuMemAlloc(&dx, sizeof x));
  CHECK(cuMemAlloc(&dy, sizeof y));
  CHECK(cuMemcpyHtoD(dx, x, sizeof x));
  CHECK(cuMemcpyHtoD(dy, y, sizeof y));
  float a = 3.0f;
  unsigned n = N;
  void* args[] = {&dy, &dx, &a, &n};
  CHECK(cuLaunchKernel(function, (N + 255) / 256, 1, 1, 256, 1, 1, 0, 0, args, NULL));
  CHECK(cuMemcpyDtoH(y, dy, sizeof y));
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += y[i] != 3.0f * (float)i + (float)(N - i);
  CHECK(cuMemFree(dx));
  CHECK(cuMemFree(dy));
  CHECK(cuModuleUnload(module));
  free(ptx);
  printf("nvrtc_modules: PTX for %s: %d of %d wrong\n", arch, wrong, N);
  return wrong;
}

int main(int argc, char** argv) {
  CUdevice dev;
  CUcontext ctx;
  int major = 0, minor = 0;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  char sass[16], ptx[16];
  snprintf(sass, sizeof sass, "sm_%d%d", major, minor);
  snprintf(ptx, sizeof ptx, "compute_%d%d", major, minor);
  if (argc > 1 && strcmp(argv[1], "sass") == 0) {
    if (!CubinRefused(sass)) return 2;
    return 1;  /* Refused, as expected: the test reads why on stderr. */
  }
  int refused = CubinRefused(sass);
  int wrong = RunPtx(ptx);
  int ok = refused && wrong == 0;
  printf("nvrtc_modules: %s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}
