// The GPU kit's open questions, answered by the driver it runs on (natively: NVIDIA's; under gp-run: gpupool's).
// It prints one line per answer and checks nothing: the kit compares the native lines with the pool's, and the
// closing note records them. Built by scripts/gpu-prebuilt.sh (or by hand: nvcc -o questions questions.cu -lcuda).
//
//   questions            the answers, one "question: answer" line each; exit 0 unless CUDA could not start
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

__global__ void Fill(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i;
}

__global__ void WildWrite(int* p) { *(p + (1ull << 40) / sizeof(int)) = 1; }

const char* Name(cudaError_t e) { return cudaGetErrorName(e); }

// Which error a block of more threads than the device allows is refused with, at launch.
void OversizedBlock() {
  int* d = nullptr;
  cudaMalloc(&d, 4096 * sizeof(int));
  Fill<<<1, 4096>>>(d, 4096);
  std::printf("block of 4096 threads: launch %s\n", Name(cudaGetLastError()));
  std::printf("block of 4096 threads: then synchronize %s\n", Name(cudaDeviceSynchronize()));
  cudaFree(d);
}

// Whether cuMemAddressReserve places a reservation at the address asked for (the cuda backend reserves each
// session's window at the address the client chose).
void AddressHint() {
  CUdevice dev;
  cuCtxGetDevice(&dev);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t granularity = 0;
  cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  const unsigned long long hints[] = {0x7f0000000000ull, 0x200000000000ull, 0x10000000000ull};
  for (unsigned long long hint : hints) {
    CUdeviceptr got = 0;
    CUresult r = cuMemAddressReserve(&got, 1ull << 30, granularity, hint, 0);
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::printf("address hint 0x%llx (1 GiB): %s at 0x%llx (%s)\n", hint, name, static_cast<unsigned long long>(got),
                r == CUDA_SUCCESS && got == hint ? "honoured" : "not honoured");
    if (r == CUDA_SUCCESS) cuMemAddressFree(got, 1ull << 30);
  }
}

void Identity() {
  int count = 0;
  cudaGetDeviceCount(&count);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::printf("CUDA_VISIBLE_DEVICES=%s: %d device(s)\n", visible ? visible : "(unset)", count);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, i);
    std::printf("device %d: %s, cc %d.%d, %d SMs, %zu MiB, uuid GPU-", i, p.name, p.major, p.minor,
                p.multiProcessorCount, p.totalGlobalMem >> 20);
    for (int b = 0; b < 16; ++b) {
      const bool dash = b == 3 || b == 5 || b == 7 || b == 9;
      std::printf("%02x%s", static_cast<unsigned char>(p.uuid.bytes[b]), dash ? "-" : "");
    }
    std::printf(", shared/block opt-in %zu, shared/SM %zu\n", p.sharedMemPerBlockOptin, p.sharedMemPerMultiprocessor);
  }
}

// Graph semantics the emulated path allowed and the GPU kit saw refused: launching an executable graph into a
// capturing stream, and enabling or disabling a child-graph node of an executable graph.
void Graphs() {
  int* d = nullptr;
  cudaMalloc(&d, 256 * sizeof(int));
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaGraph_t inner;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  Fill<<<1, 256, 0, s>>>(d, 256);
  cudaStreamEndCapture(s, &inner);
  cudaGraphExec_t inner_exec;
  std::printf("graph: instantiate a one-kernel graph %s\n", Name(cudaGraphInstantiate(&inner_exec, inner, 0)));
  for (auto mode : {cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeGlobal, cudaStreamCaptureModeRelaxed}) {
    cudaStreamBeginCapture(s, mode);
    cudaError_t launch = cudaGraphLaunch(inner_exec, s);
    cudaGraph_t outer = nullptr;
    cudaError_t end = cudaStreamEndCapture(s, &outer);
    size_t nodes = 0;
    if (outer) cudaGraphGetNodes(outer, nullptr, &nodes);
    std::printf("graph: cudaGraphLaunch into a capture (mode %d) %s, end capture %s, %zu node(s)\n",
                static_cast<int>(mode), Name(launch), Name(end), nodes);
    if (outer) cudaGraphDestroy(outer);
    cudaGetLastError();
  }
  cudaGraph_t parent;
  cudaGraphCreate(&parent, 0);
  cudaGraphNode_t child;
  cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, inner);
  cudaGraphExec_t parent_exec;
  cudaGraphInstantiate(&parent_exec, parent, 0);
  std::printf("graph: cudaGraphNodeSetEnabled on a child-graph node %s\n",
              Name(cudaGraphNodeSetEnabled(parent_exec, child, 0)));
  unsigned enabled = 7;
  std::printf("graph: cudaGraphNodeGetEnabled on a child-graph node %s (%u)\n",
              Name(cudaGraphNodeGetEnabled(parent_exec, child, &enabled)), enabled);
  cudaGetLastError();
  cudaGraphExecDestroy(parent_exec);
  cudaGraphDestroy(parent);
  cudaGraphExecDestroy(inner_exec);
  cudaGraphDestroy(inner);
  cudaStreamDestroy(s);
  cudaFree(d);
}

// After a sticky fault: what enqueueing and synchronising a host function answer, and whether it runs.
void HostFunctionAfterStickyError() {
  int* d = nullptr;
  cudaMalloc(&d, sizeof(int));
  cudaStream_t s;
  cudaStreamCreate(&s);
  WildWrite<<<1, 1, 0, s>>>(d);
  std::printf("sticky: synchronize after the wild kernel %s\n", Name(cudaStreamSynchronize(s)));
  static std::atomic<int> ran{0};
  cudaError_t add = cudaLaunchHostFunc(s, [](void*) { ran.store(1); }, nullptr);
  cudaError_t sync = cudaStreamSynchronize(s);
  std::printf("sticky: cudaLaunchHostFunc %s, then synchronize %s, the function %s\n", Name(add), Name(sync),
              ran.load() ? "ran" : "did not run");
  static std::atomic<int> called{0};
  static std::atomic<int> status{-1};
  cudaError_t cb = cudaStreamAddCallback(
      s, [](cudaStream_t, cudaError_t e, void*) { status.store(e); called.store(1); }, nullptr, 0);
  cudaError_t sync2 = cudaStreamSynchronize(s);
  std::printf("sticky: cudaStreamAddCallback %s, then synchronize %s, the callback %s (status %d)\n", Name(cb),
              Name(sync2), called.load() ? "ran" : "did not run", status.load());
}

}  // namespace

int main() {
  if (cudaError_t e = cudaSetDevice(0); e != cudaSuccess) {
    std::printf("questions: no device: %s\n", Name(e));
    return 1;
  }
  cudaFree(nullptr);
  Identity();
  OversizedBlock();
  AddressHint();
  Graphs();
  HostFunctionAfterStickyError();  // Last: the context is unusable after it.
  return 0;
}
