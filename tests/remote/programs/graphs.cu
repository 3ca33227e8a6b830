// CUDA graphs and stream capture on a slice, through the CUDA runtime as programs use them:
//   - an explicit graph (memset, host-to-device copy, kernels in a diamond, a host node, a child graph, an event
//     record node, a device-to-host copy) launched several times, with host memory read and written when it runs;
//   - node parameter changes on the executable graph (kernel arguments, a disabled node) and cudaGraphExecUpdate
//     from an edited graph of the same shape (and its refusal after the shape changed);
//   - stream capture across two streams (fork and join through events), capture status and info, the captured
//     graph's structure, replays with new input;
//   - an executable graph launched into a capture (a child graph node), graph memory (allocation and free nodes);
//   - the refusals: synchronising a capturing stream invalidates the capture, an unjoined fork fails the capture;
//   - a graph of kernels and a memset launched again and again (whose launches send the messages the last one
//     built), with each change that must show in the next launch: kernel arguments, a disabled node, an update from
//     an edited graph, another stream, a function's shared memory limit (`graphs replay` runs only this part).
// Prints "N failure(s): PASSED/FAILED".
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#define PROGRAM_NAME "graphs"
#include "program_checks.h"

#define EXPECT_ERR(call, expected)                                                                         \
  do {                                                                                                     \
    cudaError_t e_ = (call);                                                                               \
    if (e_ != (expected)) {                                                                                \
      std::printf(PROGRAM_NAME ": %s returned %s, expected %s\n", #call, cudaGetErrorName(e_), #expected); \
      ++failures;                                                                                          \
    }                                                                                                      \
  } while (0)

constexpr int kN = 4096;

__global__ void Scale(int* p, int factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= factor;
}

__global__ void AddInto(int* dst, const int* a, const int* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = a[i] + b[i];
}

__global__ void AddConst(int* p, int c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += c;
}

struct HostLog {
  int calls = 0;
  int seen = -1;  // What the host node read from the output buffer of the previous launch.
  const int* out = nullptr;
};

void CUDART_CB OnHost(void* data) {
  auto* log = static_cast<HostLog*>(data);
  ++log->calls;
  log->seen = log->out[1];
}

cudaKernelNodeParams KernelParams(void* fn, void** args) {
  cudaKernelNodeParams p{};
  p.func = fn;
  p.gridDim = dim3((kN + 255) / 256);
  p.blockDim = dim3(256);
  p.kernelParams = args;
  return p;
}

void ExplicitGraph() {
  int *a, *b, *sum;
  CHECK(cudaMalloc(&a, kN * sizeof(int)));
  CHECK(cudaMalloc(&b, kN * sizeof(int)));
  CHECK(cudaMalloc(&sum, kN * sizeof(int)));
  std::vector<int> in(kN), out(kN, -1);
  HostLog log;
  log.out = out.data();

  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  // b = 0 (memset), a = in (copy); a *= 3 and b += 5 in parallel; sum = a + b; host node; sum -> out.
  cudaGraphNode_t set_b, copy_a, scale_a, add_b, add, host, back, child, record;
  cudaMemsetParams ms{};
  ms.dst = b;
  ms.value = 0;
  ms.elementSize = 4;
  ms.width = kN;
  ms.height = 1;
  CHECK(cudaGraphAddMemsetNode(&set_b, g, nullptr, 0, &ms));
  CHECK(cudaGraphAddMemcpyNode1D(&copy_a, g, nullptr, 0, a, in.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  int factor = 3, five = 5, n = kN;
  void* scale_args[] = {&a, &factor, &n};
  cudaKernelNodeParams sp = KernelParams(reinterpret_cast<void*>(Scale), scale_args);
  CHECK(cudaGraphAddKernelNode(&scale_a, g, &copy_a, 1, &sp));
  void* add_b_args[] = {&b, &five, &n};
  cudaKernelNodeParams bp = KernelParams(reinterpret_cast<void*>(AddConst), add_b_args);
  CHECK(cudaGraphAddKernelNode(&add_b, g, &set_b, 1, &bp));
  void* add_args[] = {&sum, &a, &b, &n};
  cudaKernelNodeParams ap = KernelParams(reinterpret_cast<void*>(AddInto), add_args);
  cudaGraphNode_t both[] = {scale_a, add_b};
  CHECK(cudaGraphAddKernelNode(&add, g, both, 2, &ap));
  // A child graph: sum += 100.
  cudaGraph_t sub;
  CHECK(cudaGraphCreate(&sub, 0));
  int hundred = 100;
  void* sub_args[] = {&sum, &hundred, &n};
  cudaKernelNodeParams cp = KernelParams(reinterpret_cast<void*>(AddConst), sub_args);
  cudaGraphNode_t sub_node;
  CHECK(cudaGraphAddKernelNode(&sub_node, sub, nullptr, 0, &cp));
  CHECK(cudaGraphAddChildGraphNode(&child, g, &add, 1, sub));
  CHECK(cudaGraphDestroy(sub));  // The node holds its own copy.
  CHECK(cudaGraphAddMemcpyNode1D(&back, g, &child, 1, out.data(), sum, kN * sizeof(int), cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp{OnHost, &log};
  CHECK(cudaGraphAddHostNode(&host, g, &back, 1, &hp));
  cudaEvent_t done;
  CHECK(cudaEventCreate(&done));
  CHECK(cudaGraphAddEventRecordNode(&record, g, &host, 1, done));

  size_t count = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT(count == 9, "nine nodes");
  CHECK(cudaGraphGetRootNodes(g, nullptr, &count));
  EXPECT(count == 2, "two roots (the memset and the copy)");
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &count));
  EXPECT(count == 8, "eight edges");
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(child, &type));
  EXPECT(type == cudaGraphNodeTypeGraph, "a child graph node");

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kN; ++i) in[i] = i + round;  // Read when the graph runs, not when it was built.
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventSynchronize(done));
    bool ok = true;
    for (int i = 0; i < kN; ++i) ok = ok && out[i] == 3 * (i + round) + 5 + 100;
    EXPECT(ok, "explicit graph result");
    EXPECT(log.calls == round + 1 && log.seen == 3 * (1 + round) + 105, "host node ran after the copy back");
  }

  // New kernel arguments on the executable graph only: a *= 4 instead of 3.
  int four = 4;
  void* scale4_args[] = {&a, &four, &n};
  cudaKernelNodeParams sp4 = KernelParams(reinterpret_cast<void*>(Scale), scale4_args);
  CHECK(cudaGraphExecKernelNodeSetParams(exec, scale_a, &sp4));
  // Only kernel, copy and memset nodes can be disabled: NVIDIA's driver refuses a child-graph node (an H100's,
  // driver 580). The kernel b += 5 is skipped.
  EXPECT_ERR(cudaGraphNodeSetEnabled(exec, child, 0), cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaGraphNodeSetEnabled(exec, add_b, 0));
  unsigned enabled = 1;
  CHECK(cudaGraphNodeGetEnabled(exec, add_b, &enabled));
  EXPECT(enabled == 0, "kernel node disabled");
  for (int i = 0; i < kN; ++i) in[i] = i;
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  bool ok = true;
  for (int i = 0; i < kN; ++i) ok = ok && out[i] == 4 * i + 100;
  EXPECT(ok, "updated kernel arguments, disabled kernel node");
  // The graph itself kept its parameters.
  cudaKernelNodeParams got{};
  CHECK(cudaGraphKernelNodeGetParams(scale_a, &got));
  EXPECT(got.kernelParams != nullptr && *static_cast<int*>(got.kernelParams[1]) == 3, "graph keeps factor 3");

  // cudaGraphExecUpdate from the graph edited in place: factor 7, child enabled state kept disabled.
  int seven = 7;
  void* scale7_args[] = {&a, &seven, &n};
  cudaKernelNodeParams sp7 = KernelParams(reinterpret_cast<void*>(Scale), scale7_args);
  CHECK(cudaGraphKernelNodeSetParams(scale_a, &sp7));
  cudaGraphExecUpdateResultInfo info{};
  CHECK(cudaGraphExecUpdate(exec, g, &info));
  EXPECT(info.result == cudaGraphExecUpdateSuccess, "update succeeded");
  CHECK(cudaGraphNodeSetEnabled(exec, add_b, 1));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  ok = true;
  for (int i = 0; i < kN; ++i) ok = ok && out[i] == 7 * i + 105;
  EXPECT(ok, "exec updated from the edited graph");
  // A changed shape cannot update an executable graph.
  cudaGraphNode_t extra;
  CHECK(cudaGraphAddEmptyNode(&extra, g, &record, 1));
  EXPECT_ERR(cudaGraphExecUpdate(exec, g, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged, "topology change reported");
  cudaGetLastError();  // The runtime keeps the refusal as the last error.

  // A clone runs like its original.
  cudaGraph_t copy;
  CHECK(cudaGraphClone(&copy, g));
  cudaGraphNode_t extra_in_clone = nullptr;
  CHECK(cudaGraphNodeFindInClone(&extra_in_clone, extra, copy));
  CHECK(cudaGraphDestroyNode(extra_in_clone));  // The clone goes back to the shape of the executable graph.
  cudaGraphExec_t exec2;
  CHECK(cudaGraphInstantiate(&exec2, copy, 0));
  CHECK(cudaGraphDestroy(copy));
  CHECK(cudaGraphLaunch(exec2, s));
  CHECK(cudaStreamSynchronize(s));
  ok = true;
  for (int i = 0; i < kN; ++i) ok = ok && out[i] == 7 * i + 105;
  EXPECT(ok, "cloned graph result");

  CHECK(cudaGraphExecDestroy(exec2));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(sum));
}

void Capture() {
  int *a, *b, *sum;
  CHECK(cudaMalloc(&a, kN * sizeof(int)));
  CHECK(cudaMalloc(&b, kN * sizeof(int)));
  CHECK(cudaMalloc(&sum, kN * sizeof(int)));
  int* in;
  int* out;
  CHECK(cudaMallocHost(&in, kN * sizeof(int)));
  CHECK(cudaMallocHost(&out, kN * sizeof(int)));
  HostLog log;
  log.out = out;
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const int blocks = (kN + 255) / 256;

  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status;
  CHECK(cudaStreamIsCapturing(s1, &status));
  EXPECT(status == cudaStreamCaptureStatusActive, "s1 captures");
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusNone, "s2 does not capture yet");
  CHECK(cudaMemcpyAsync(a, in, kN * sizeof(int), cudaMemcpyHostToDevice, s1));
  CHECK(cudaEventRecord(fork, s1));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));  // s2 joins the capture.
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusActive, "s2 joined the capture");
  CHECK(cudaMemsetAsync(b, 0, kN * sizeof(int), s2));
  AddConst<<<blocks, 256, 0, s2>>>(b, 11, kN);
  CHECK(cudaGetLastError());
  Scale<<<blocks, 256, 0, s1>>>(a, 2, kN);
  CHECK(cudaEventRecord(join, s2));
  CHECK(cudaStreamWaitEvent(s1, join, 0));
  AddInto<<<blocks, 256, 0, s1>>>(sum, a, b, kN);
  CHECK(cudaMemcpyAsync(out, sum, kN * sizeof(int), cudaMemcpyDeviceToHost, s1));
  CHECK(cudaLaunchHostFunc(s1, OnHost, &log));
  unsigned long long id = 0;
  cudaGraph_t capturing = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  CHECK(cudaStreamGetCaptureInfo(s1, &status, &id, &capturing, &deps, nullptr, &ndeps));
  EXPECT(id != 0 && capturing != nullptr && ndeps == 1, "capture info: id, graph, one dependency");
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s1, &g));
  EXPECT(g == capturing, "the captured graph");
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusNone, "s2 left the capture with s1");
  EXPECT(log.calls == 0, "nothing ran during capture");

  size_t count = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT(count == 7, "seven captured nodes");
  CHECK(cudaGraphGetRootNodes(g, nullptr, &count));
  EXPECT(count == 1, "one root (the copy in)");

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kN; ++i) in[i] = i * (round + 1);
    CHECK(cudaGraphLaunch(exec, s1));
    CHECK(cudaStreamSynchronize(s1));
    bool ok = true;
    for (int i = 0; i < kN; ++i) ok = ok && out[i] == 2 * i * (round + 1) + 11;
    EXPECT(ok, "captured graph result");
    EXPECT(log.calls == round + 1, "captured host function ran once per launch");
  }

  // An executable graph launched into a capture is refused, and the capture invalidated, as NVIDIA's driver does
  // (an H100's, driver 580, in every capture mode).
  cudaGraph_t outer = nullptr;
  CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal));
  EXPECT_ERR(cudaGraphLaunch(exec, s2), cudaErrorStreamCaptureUnsupported);
  EXPECT_ERR(cudaStreamEndCapture(s2, &outer), cudaErrorStreamCaptureInvalidated);
  EXPECT(outer == nullptr, "no graph from a capture a graph launch invalidated");
  cudaGetLastError();
  // The graph inside a graph is a child graph node.
  CHECK(cudaGraphCreate(&outer, 0));
  cudaGraphNode_t inner_node;
  CHECK(cudaGraphAddChildGraphNode(&inner_node, outer, nullptr, 0, g));
  cudaGraphExec_t outer_exec;
  CHECK(cudaGraphInstantiate(&outer_exec, outer, 0));
  for (int i = 0; i < kN; ++i) in[i] = 1;
  CHECK(cudaGraphLaunch(outer_exec, s2));
  CHECK(cudaStreamSynchronize(s2));
  EXPECT(out[5] == 2 + 11, "graph inside a graph");

  // Synchronising a capturing stream is refused and invalidates the capture.
  cudaGraph_t bad = nullptr;
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
  AddConst<<<blocks, 256, 0, s1>>>(a, 1, kN);
  EXPECT_ERR(cudaStreamSynchronize(s1), cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamIsCapturing(s1, &status));
  EXPECT(status == cudaStreamCaptureStatusInvalidated, "capture invalidated");
  EXPECT_ERR(cudaStreamEndCapture(s1, &bad), cudaErrorStreamCaptureInvalidated);
  EXPECT(bad == nullptr, "no graph from an invalidated capture");
  cudaGetLastError();
  // A fork never joined back fails the capture.
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  CHECK(cudaEventRecord(fork, s1));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));
  AddConst<<<blocks, 256, 0, s2>>>(b, 1, kN);
  EXPECT_ERR(cudaStreamEndCapture(s1, &bad), cudaErrorStreamCaptureUnjoined);
  cudaGetLastError();
  CHECK(cudaStreamIsCapturing(s2, &status));
  EXPECT(status == cudaStreamCaptureStatusNone, "the unjoined stream left the failed capture");
  // The streams work normally afterwards.
  CHECK(cudaMemsetAsync(b, 0, kN * sizeof(int), s2));
  CHECK(cudaStreamSynchronize(s2));

  CHECK(cudaGraphExecDestroy(outer_exec));
  CHECK(cudaGraphDestroy(outer));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(fork));
  CHECK(cudaEventDestroy(join));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFreeHost(in));
  CHECK(cudaFreeHost(out));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(sum));
}

// An allocation node's parameters: `bytes` of device 0's memory.
cudaMemAllocNodeParams DeviceAllocation(size_t bytes) {
  cudaMemAllocNodeParams ap{};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = bytes;
  return ap;
}

// A memset node's parameters: kN ints at `dst` set to `value`.
cudaMemsetParams Ints(void* dst, unsigned int value) {
  cudaMemsetParams ms{};
  ms.dst = dst;
  ms.value = value;
  ms.elementSize = 4;
  ms.width = kN;
  ms.height = 1;
  return ms;
}

void GraphMemory() {
  const size_t free0 = FreeMemoryWhenIdle();  // Earlier frees have reached the device.
  size_t total = 0;
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaMemAllocNodeParams ap = DeviceAllocation(kN * sizeof(int));
  cudaGraphNode_t alloc, set, back, release;
  CHECK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  EXPECT(ap.dptr != nullptr, "graph memory has its address when the node is made");
  size_t free1 = 0;
  CHECK(cudaMemGetInfo(&free1, &total));
  // A slice counts graph memory when the node promises it; a GPU's driver maps it at the first launch (an H100:
  // free memory unchanged here).
  if (OnSlice()) EXPECT(free1 + kN * sizeof(int) <= free0, "graph memory counted against the slice");
  cudaMemsetParams ms = Ints(ap.dptr, 0x01020304);
  CHECK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &ms));
  std::vector<int> out(kN, 0);
  CHECK(cudaGraphAddMemcpyNode1D(&back, g, &set, 1, out.data(), ap.dptr, kN * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaGraphAddMemFreeNode(&release, g, &back, 1, ap.dptr));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  CHECK(cudaGraphLaunch(exec, nullptr));
  CHECK(cudaGraphLaunch(exec, nullptr));
  CHECK(cudaDeviceSynchronize());
  EXPECT(out[kN - 1] == 0x01020304, "graph memory written and read back");
  unsigned long long used = 0, reserved = 0;  // cuuint64_t, which cuda_runtime.h does not name.
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &used));
  EXPECT(used >= kN * sizeof(int), "the graph's memory counted as used by graphs");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  // A GPU keeps graph memory in the device's graph pool after the graph is gone, until it is trimmed.
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaDeviceGraphMemTrim(0));
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
  EXPECTF(reserved == 0, "graph memory reserved after the graph and a trim: %llu bytes",
          reserved);
  const size_t free2 = FreeMemoryWhenIdle();
  EXPECT(free2 == free0, "graph memory returned with the graph");
}

// Graph memory that the program frees outside the graph stays the graph's: its next launch allocates it again at the
// same address, and a free node of another graph may free it (the shape of NVIDIA's graphMemoryNodes sample).
void GraphMemoryFreedOutside() {
  const size_t free0 = FreeMemoryWhenIdle();
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaMemAllocNodeParams ap = DeviceAllocation(kN * sizeof(int));
  cudaGraphNode_t alloc, set;
  CHECK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  int* memory = static_cast<int*>(ap.dptr);
  cudaMemsetParams ms = Ints(memory, 7);
  CHECK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &ms));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  std::vector<int> out(kN, 0);
  for (int round = 0; round < 2; ++round) {
    CHECK(cudaGraphLaunch(exec, s));
    AddConst<<<(kN + 255) / 256, 256, 0, s>>>(memory, round, kN);
    CHECK(cudaMemcpyAsync(out.data(), memory, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECTF(out[kN - 1] == 7 + round, "graph memory after launch %d: %d", round, out[kN - 1]);
    if (round == 0) {
      CHECK(cudaFree(memory));
    } else {
      CHECK(cudaFreeAsync(memory, s));
    }
  }
  EXPECT_ERR(cudaFree(memory), cudaErrorInvalidValue);  // Freed already, until the graph's next launch.
  // A free node of another graph frees it after one more launch of the first.
  cudaGraph_t g2;
  cudaGraphNode_t release;
  cudaGraphExec_t exec2;
  CHECK(cudaGraphCreate(&g2, 0));
  CHECK(cudaGraphAddMemFreeNode(&release, g2, nullptr, 0, memory));
  CHECK(cudaGraphInstantiate(&exec2, g2, 0));
  CHECK(cudaGraphDestroy(g2));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaGraphLaunch(exec2, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphExecDestroy(exec2));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaDeviceGraphMemTrim(0));
  const size_t free1 = FreeMemoryWhenIdle();
  // On a slice exactly; a GPU's driver keeps some of it in its pools even after a trim (an H100: 32 MiB).
  if (OnSlice()) {
    EXPECTF(free1 == free0, "graph memory returned with its graphs: %zu free, %zu before", free1, free0);
  }
}

// The per-thread default stream can be captured (each thread's is its own); the legacy one cannot.
void CapturePerThreadStream() {
  constexpr int n = 1024;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHECK(cudaStreamIsCapturing(cudaStreamPerThread, &status));
  EXPECT(status == cudaStreamCaptureStatusActive, "the per-thread stream captures");
  CHECK(cudaMemsetAsync(d, 0, n * sizeof(int), cudaStreamPerThread));
  AddConst<<<n / 256, 256, 0, cudaStreamPerThread>>>(d, 5, n);
  CHECK(cudaStreamEndCapture(cudaStreamPerThread, &g));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  CHECK(cudaGraphLaunch(exec, cudaStreamPerThread));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  int back[n] = {};
  CHECK(cudaMemcpy(back, d, sizeof(back), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += back[i] != 5;
  EXPECT(wrong == 0, "a graph captured on the per-thread stream");
  EXPECT(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal) != cudaSuccess,
         "the legacy default stream cannot be captured");
  cudaGetLastError();
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(d));
}

__global__ void AddConstShared(int* p, int c, int n) {
  extern __shared__ int scratch[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = c;
  __syncthreads();
  if (i < n) p[i] += scratch[threadIdx.x];
}

// Launches `exec` on `s`, then reads the counters back: each must be `want`, and the memset's region zero again
// (the host set it to 99 before the launch).
void LaunchAndCheck(cudaGraphExec_t exec, cudaStream_t s, int* counters, int* cleared, int want, const char* what) {
  std::vector<int> host(kN, 99);
  CHECK(cudaMemcpy(cleared, host.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<int> got(kN, -1), zeros(kN, -1);
  CHECK(cudaMemcpy(got.data(), counters, kN * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(zeros.data(), cleared, kN * sizeof(int), cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int i = 0; i < kN; ++i) ok = ok && got[i] == want && zeros[i] == 0;
  if (!ok) std::printf(PROGRAM_NAME ": %s: counters[0] %d (want %d), cleared[0] %d\n", what, got[0], want, zeros[0]);
  EXPECT(ok, what);
}

void ReplayedGraph() {
  int *counters, *cleared;
  CHECK(cudaMalloc(&counters, kN * sizeof(int)));
  CHECK(cudaMalloc(&cleared, kN * sizeof(int)));
  CHECK(cudaMemset(counters, 0, kN * sizeof(int)));
  // cleared = 0 (memset); counters += 1, += 2 (in a child graph), += 4, += 8 (with dynamic shared memory).
  cudaGraph_t g, sub;
  CHECK(cudaGraphCreate(&g, 0));
  CHECK(cudaGraphCreate(&sub, 0));
  cudaMemsetParams ms{};
  ms.dst = cleared;
  ms.elementSize = 4;
  ms.width = kN;
  ms.height = 1;
  cudaGraphNode_t set, first, child, third, fourth, in_sub;
  CHECK(cudaGraphAddMemsetNode(&set, g, nullptr, 0, &ms));
  int one = 1, two = 2, four = 4, eight = 8, n = kN;
  void* first_args[] = {&counters, &one, &n};
  cudaKernelNodeParams p1 = KernelParams(reinterpret_cast<void*>(AddConst), first_args);
  CHECK(cudaGraphAddKernelNode(&first, g, &set, 1, &p1));
  void* sub_args[] = {&counters, &two, &n};
  cudaKernelNodeParams p2 = KernelParams(reinterpret_cast<void*>(AddConst), sub_args);
  CHECK(cudaGraphAddKernelNode(&in_sub, sub, nullptr, 0, &p2));
  CHECK(cudaGraphAddChildGraphNode(&child, g, &first, 1, sub));
  void* third_args[] = {&counters, &four, &n};
  cudaKernelNodeParams p3 = KernelParams(reinterpret_cast<void*>(AddConst), third_args);
  CHECK(cudaGraphAddKernelNode(&third, g, &child, 1, &p3));
  void* fourth_args[] = {&counters, &eight, &n};
  cudaKernelNodeParams p4 = KernelParams(reinterpret_cast<void*>(AddConstShared), fourth_args);
  p4.sharedMemBytes = 256 * sizeof(int);
  CHECK(cudaGraphAddKernelNode(&fourth, g, &third, 1, &p4));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  cudaStream_t s, other;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamCreate(&other));

  int want = 0;
  for (int launch = 0; launch < 4; ++launch) {
    want += 15;
    LaunchAndCheck(exec, s, counters, cleared, want, "graph launched again");
  }
  // The third kernel adds 40 instead of 4 (the executable graph's own copy of the node).
  int forty = 40;
  void* third40_args[] = {&counters, &forty, &n};
  cudaKernelNodeParams p40 = KernelParams(reinterpret_cast<void*>(AddConst), third40_args);
  CHECK(cudaGraphExecKernelNodeSetParams(exec, third, &p40));
  for (int launch = 0; launch < 2; ++launch) {
    want += 51;
    LaunchAndCheck(exec, s, counters, cleared, want, "new kernel arguments");
  }
  // The third kernel is skipped, then runs again (a child-graph node cannot be disabled: see ExplicitGraph).
  CHECK(cudaGraphNodeSetEnabled(exec, third, 0));
  want += 11;
  LaunchAndCheck(exec, s, counters, cleared, want, "kernel node disabled");
  want += 11;
  LaunchAndCheck(exec, s, counters, cleared, want, "kernel node disabled, launched again");
  CHECK(cudaGraphNodeSetEnabled(exec, third, 1));
  want += 51;
  LaunchAndCheck(exec, s, counters, cleared, want, "kernel node enabled again");
  // An update from the graph edited: the first kernel adds 100 (and the third 4 again, as the graph says).
  int hundred = 100;
  void* first100_args[] = {&counters, &hundred, &n};
  cudaKernelNodeParams p100 = KernelParams(reinterpret_cast<void*>(AddConst), first100_args);
  CHECK(cudaGraphKernelNodeSetParams(first, &p100));
  cudaGraphExecUpdateResultInfo info{};
  CHECK(cudaGraphExecUpdate(exec, g, &info));
  for (int launch = 0; launch < 2; ++launch) {
    want += 114;
    LaunchAndCheck(exec, s, counters, cleared, want, "executable graph updated");
  }
  // Another stream, then the first again.
  want += 114;
  LaunchAndCheck(exec, other, counters, cleared, want, "launched on another stream");
  want += 114;
  LaunchAndCheck(exec, s, counters, cleared, want, "back on the first stream");
  // The function's dynamic shared memory limit lowered below what the fourth kernel asks, after the graph was
  // instantiated: the executable graph keeps what it was made with and runs, as NVIDIA's driver runs it (an H100's,
  // driver 580).
  CHECK(cudaFuncSetAttribute(AddConstShared, cudaFuncAttributeMaxDynamicSharedMemorySize, 16));
  want += 114;
  LaunchAndCheck(exec, s, counters, cleared, want, "shared memory limit lowered after instantiation");
  CHECK(cudaFuncSetAttribute(AddConstShared, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024));
  want += 114;
  LaunchAndCheck(exec, s, counters, cleared, want, "shared memory limit raised again");

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(sub));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(other));
  CHECK(cudaFree(counters));
  CHECK(cudaFree(cleared));
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "replay") {
    ReplayedGraph();
    std::printf("graphs: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
  }
  CHECK(cudaProfilerStart());  // Accepted without effect, as the driver does with no profiler attached.
  ExplicitGraph();
  Capture();
  GraphMemory();
  GraphMemoryFreedOutside();
  CapturePerThreadStream();
  ReplayedGraph();
  CHECK(cudaProfilerStop());
  std::printf("graphs: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
