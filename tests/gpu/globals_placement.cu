// Where NVIDIA's driver places modules' variables (issue 43, docs/moving-leases.md section 4): a session restored in
// a new process on a GPU loads its modules again, and their __device__ variables must land where they were, or
// pointers to them dangle. This probe loads two modules with variables in a fresh context, in the same order each
// run, and prints each variable's address; run twice in separate processes, the outputs show whether the driver's
// placement repeats. With `reserve`, a large address range is reserved first (as a session worker reserves its
// window), and with `alloc` some memory is allocated first, to see what disturbs the placement.
//
//   globals_placement [reserve] [alloc]
#include <cuda.h>

#include <cstdio>
#include <cstring>

static const char* kModuleA = R"(
.version 8.0
.target sm_90
.address_size 64
.global .align 8 .u64 counter;
.global .align 4 .b8 table[4096];
.visible .entry touch(.param .u64 p) { .reg .b64 %rd<2>; ld.global.u64 %rd1, [counter]; ret; }
)";
static const char* kModuleB = R"(
.version 8.0
.target sm_90
.address_size 64
.global .align 16 .b8 big[1048576];
.global .align 4 .u32 flag = 7;
.visible .entry poke() { ret; }
)";

static bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::printf("globals_placement: %s: %s\n", what, name ? name : "?");
  return false;
}

int main(int argc, char** argv) {
  bool reserve = false, alloc = false;
  for (int i = 1; i < argc; ++i) {
    reserve |= std::strcmp(argv[i], "reserve") == 0;
    alloc |= std::strcmp(argv[i], "alloc") == 0;
  }
  CUdevice dev;
  CUcontext ctx;
  if (!Ok(cuInit(0), "cuInit") || !Ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !Ok(cuDevicePrimaryCtxRetain(&ctx, dev), "retain") || !Ok(cuCtxSetCurrent(ctx), "set current")) {
    return 1;
  }
  if (reserve) {
    CUdeviceptr window = 0;
    if (!Ok(cuMemAddressReserve(&window, size_t{64} << 30, 0, 0x7f0000000000ull, 0), "reserve")) return 1;
    std::printf("window at 0x%llx\n", static_cast<unsigned long long>(window));
  }
  if (alloc) {
    CUdeviceptr p = 0;
    if (!Ok(cuMemAlloc(&p, 3 << 20), "alloc")) return 1;
  }
  CUmodule a, b;
  if (!Ok(cuModuleLoadData(&a, kModuleA), "load A") || !Ok(cuModuleLoadData(&b, kModuleB), "load B")) return 1;
  const struct {
    CUmodule module;
    const char* name;
  } variables[] = {{a, "counter"}, {a, "table"}, {b, "big"}, {b, "flag"}};
  for (const auto& v : variables) {
    CUdeviceptr at = 0;
    size_t bytes = 0;
    if (!Ok(cuModuleGetGlobal(&at, &bytes, v.module, v.name), v.name)) return 1;
    std::printf("%s: 0x%llx, %zu bytes\n", v.name, static_cast<unsigned long long>(at), bytes);
  }
  // Unloaded and loaded again in the same process: where the second load puts them.
  cuModuleUnload(a);
  if (!Ok(cuModuleLoadData(&a, kModuleA), "load A again")) return 1;
  CUdeviceptr again = 0;
  size_t bytes = 0;
  if (Ok(cuModuleGetGlobal(&again, &bytes, a, "counter"), "counter again")) {
    std::printf("counter after a reload: 0x%llx\n", static_cast<unsigned long long>(again));
  }
  return 0;
}
