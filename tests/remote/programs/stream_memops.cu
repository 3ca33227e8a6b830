// stream_memops: stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64, cuStreamBatchMemOp)
// on a slice: writes in stream order, waits that order one stream after another's write, every condition, and
// the refusals. `stream_memops deadlock`: a wait nothing queued before it satisfies (on a GPU it would wait for
// another stream or the host; the emulated device runs every stream in one order, so it reports the deadlock).
#define PROGRAM_NAME "stream_memops"
#include <cuda.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "program_checks.h"

__global__ void Fill(int* v, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = base + i;
}

constexpr int kN = 1024;

int main(int argc, char** argv) {
  CHECK(cudaFree(nullptr));  // Creates the primary context.
  CUdevice dev;
  DRV(cuCtxGetDevice(&dev));
  int has64 = 0, nor = 0;
  DRV(cuDeviceGetAttribute(&has64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
  DRV(cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev));
  EXPECT(has64 == 1 && nor == 1, "the slice reports 64-bit stream memory operations and NOR waits");

  uint32_t* flag32 = nullptr;
  uint64_t* flag64 = nullptr;
  int* data = nullptr;
  CHECK(cudaMalloc(&flag32, 256));
  CHECK(cudaMalloc(&flag64, 256));
  CHECK(cudaMalloc(&data, kN * sizeof(int)));
  CHECK(cudaMemset(flag32, 0, 256));
  CHECK(cudaMemset(flag64, 0, 256));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CUdeviceptr f32 = reinterpret_cast<CUdeviceptr>(flag32), f64 = reinterpret_cast<CUdeviceptr>(flag64);

  if (argc > 1 && std::strcmp(argv[1], "deadlock") == 0) {
    DRV(cuStreamWaitValue32(s1, f32, 42, CU_STREAM_WAIT_VALUE_EQ));
    CUresult r = cuStreamSynchronize(s1);
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::printf("stream_memops: a wait nothing can satisfy: %s\n", name ? name : "?");
    return r == CUDA_SUCCESS ? 2 : 1;
  }

  // 1. A producer stream fills the data and then raises a flag; a consumer stream waits for the flag before it
  //    copies the data back: the wait orders the consumer after the producer without an event.
  Fill<<<kN / 256, 256, 0, s1>>>(data, kN, 100);
  DRV(cuStreamWriteValue32(reinterpret_cast<CUstream>(s1), f32, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  DRV(cuStreamWaitValue32(reinterpret_cast<CUstream>(s2), f32, 1, CU_STREAM_WAIT_VALUE_GEQ));
  int host[kN] = {};
  CHECK(cudaMemcpyAsync(host, data, sizeof(host), cudaMemcpyDeviceToHost, s2));
  CHECK(cudaStreamSynchronize(s2));
  int wrong = 0;
  for (int i = 0; i < kN; ++i) wrong += host[i] != 100 + i;
  EXPECT(wrong == 0, "the consumer saw the producer's data");

  // 2. Every condition, 32 and 64 bits (GEQ is cyclic: 0x1 >= 0xffffffff).
  CUstream c1 = reinterpret_cast<CUstream>(s1);
  // cuda.h's cuStreamWriteValue64 is the v2 API, which takes no CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER (NVIDIA's
  // driver refuses it: an H100's, driver 580).
  EXPECT(cuStreamWriteValue64(c1, f64, 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) == CUDA_ERROR_INVALID_VALUE,
         "a write without its memory barrier is refused in the v2 API");
  DRV(cuStreamWriteValue64(c1, f64, 0x100000002ull, CU_STREAM_WRITE_VALUE_DEFAULT));
  DRV(cuStreamWaitValue64(c1, f64, 0x100000002ull, CU_STREAM_WAIT_VALUE_EQ));
  DRV(cuStreamWaitValue64(c1, f64, 0x2ull, CU_STREAM_WAIT_VALUE_AND));
  DRV(cuStreamWaitValue64(c1, f64, 0x100000001ull, CU_STREAM_WAIT_VALUE_GEQ));
  DRV(cuStreamWaitValue64(c1, f64, 0x1ull, CU_STREAM_WAIT_VALUE_NOR));
  DRV(cuStreamWaitValue32(c1, f32, 0xffffffffu, CU_STREAM_WAIT_VALUE_GEQ));
  // A flush of remote writes where the device says it can (slices: nothing writes to them remotely); a GPU that
  // cannot refuses it (an H100 with driver 580: CUDA_ERROR_NOT_SUPPORTED).
  int can_flush = 0;
  DRV(cuDeviceGetAttribute(&can_flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, dev));
  if (can_flush) {
    DRV(cuStreamWaitValue32(c1, f32, 0xfffffffcu, CU_STREAM_WAIT_VALUE_NOR | CU_STREAM_WAIT_VALUE_FLUSH));
  } else {
    EXPECT(cuStreamWaitValue32(c1, f32, 0xfffffffcu, CU_STREAM_WAIT_VALUE_NOR | CU_STREAM_WAIT_VALUE_FLUSH) ==
               CUDA_ERROR_NOT_SUPPORTED,
           "a flush the device cannot do is refused");
    DRV(cuStreamWaitValue32(c1, f32, 0xfffffffcu, CU_STREAM_WAIT_VALUE_NOR));
  }
  CHECK(cudaStreamSynchronize(s1));
  uint64_t v64 = 0;
  CHECK(cudaMemcpy(&v64, flag64, sizeof(v64), cudaMemcpyDeviceToHost));
  EXPECT(v64 == 0x100000002ull, "cuStreamWriteValue64 wrote its value");

  // 3. A batch: two writes, a barrier, a wait on the first write.
  CUstreamBatchMemOpParams ops[4];
  std::memset(ops, 0, sizeof(ops));
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = f32 + 4;
  ops[0].writeValue.value = 77;
  ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  ops[1].writeValue.address = f64 + 8;
  ops[1].writeValue.value64 = 0xabcdef0123ull;
  ops[2].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  ops[3].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[3].waitValue.address = f32 + 4;
  ops[3].waitValue.value = 77;
  ops[3].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  DRV(cuStreamBatchMemOp(c1, 4, ops, 0));
  CHECK(cudaStreamSynchronize(s1));
  uint32_t v32 = 0;
  CHECK(cudaMemcpy(&v32, flag32 + 1, sizeof(v32), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&v64, flag64 + 1, sizeof(v64), cudaMemcpyDeviceToHost));
  EXPECT(v32 == 77 && v64 == 0xabcdef0123ull, "the batch's writes");

  // 4. Refusals, at once: a misaligned address, unknown flags, host memory.
  uint32_t on_host = 0;
  EXPECT(cuStreamWaitValue32(c1, f32 + 2, 1, 0) == CUDA_ERROR_INVALID_VALUE, "a misaligned wait is refused");
  EXPECT(cuStreamWriteValue64(c1, f64 + 4, 1, 0) == CUDA_ERROR_INVALID_VALUE, "a misaligned write is refused");
  EXPECT(cuStreamWaitValue32(c1, f32, 1, 0x10) == CUDA_ERROR_INVALID_VALUE, "unknown wait flags are refused");
  EXPECT(cuStreamWaitValue32(c1, reinterpret_cast<CUdeviceptr>(&on_host), 1, 0) == CUDA_ERROR_INVALID_VALUE,
         "a wait on host memory is refused");
  CHECK(cudaStreamSynchronize(s1));  // Nothing of the refused calls reached the stream.

  // 5. A 32-bit write captured into a graph writes its value each time the graph runs (not bytes read later from
  //    the capturing call's stack).
  cudaGraph_t writes = nullptr;
  CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal));
  DRV(cuStreamWriteValue32(reinterpret_cast<CUstream>(s2), f32 + 8, 0xc0ffee, 0));
  CHECK(cudaStreamEndCapture(s2, &writes));
  cudaGraphExec_t writes_exec = nullptr;
  CHECK(cudaGraphInstantiate(&writes_exec, writes, 0));
  CHECK(cudaMemset(flag32 + 2, 0, 4));
  CHECK(cudaGraphLaunch(writes_exec, s2));
  CHECK(cudaStreamSynchronize(s2));
  CHECK(cudaMemcpy(&v32, flag32 + 2, sizeof(v32), cudaMemcpyDeviceToHost));
  EXPECT(v32 == 0xc0ffee, "a captured cuStreamWriteValue32");
  CHECK(cudaGraphExecDestroy(writes_exec));
  CHECK(cudaGraphDestroy(writes));
  // The v1 entry point takes CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER, captured too: the graph still writes.
  using WriteV1 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto write_v1 = cuda ? reinterpret_cast<WriteV1>(dlsym(cuda, "cuStreamWriteValue32")) : nullptr;
  EXPECT(write_v1 != nullptr, "the driver's v1 cuStreamWriteValue32 is found");
  if (write_v1 != nullptr) {
    CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal));
    DRV(write_v1(reinterpret_cast<CUstream>(s2), f32 + 16, 0xbeef, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    CHECK(cudaStreamEndCapture(s2, &writes));
    CHECK(cudaGraphInstantiate(&writes_exec, writes, 0));
    CHECK(cudaMemset(flag32 + 4, 0, 4));
    CHECK(cudaGraphLaunch(writes_exec, s2));
    CHECK(cudaStreamSynchronize(s2));
    CHECK(cudaMemcpy(&v32, flag32 + 4, sizeof(v32), cudaMemcpyDeviceToHost));
    EXPECT(v32 == 0xbeef, "a captured v1 write without a memory barrier");
    CHECK(cudaGraphExecDestroy(writes_exec));
    CHECK(cudaGraphDestroy(writes));
  }

  // 6. A 64-bit write and a wait captured with a kernel after them, as NVIDIA's driver captures them (an H100's,
  //    driver 580): the graph writes both values and runs the kernel once the wait holds, at every launch.
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal));
  DRV(cuStreamWriteValue64(reinterpret_cast<CUstream>(s2), f64 + 16, 0x1122334455667788ull, 0));
  DRV(cuStreamWriteValue32(reinterpret_cast<CUstream>(s2), f32 + 12, 5, 0));
  DRV(cuStreamWaitValue32(reinterpret_cast<CUstream>(s2), f32 + 12, 5, CU_STREAM_WAIT_VALUE_EQ));
  Fill<<<kN / 256, 256, 0, s2>>>(data, kN, 300);
  CHECK(cudaStreamEndCapture(s2, &graph));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 2; ++round) {
    CHECK(cudaMemset(flag32 + 3, 0, 4));
    CHECK(cudaMemset(flag64 + 2, 0, 8));
    CHECK(cudaMemset(data, 0, kN * sizeof(int)));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaGraphLaunch(exec, s2));
    CHECK(cudaStreamSynchronize(s2));
    CHECK(cudaMemcpy(&v32, flag32 + 3, sizeof(v32), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&v64, flag64 + 2, sizeof(v64), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(host, data, sizeof(host), cudaMemcpyDeviceToHost));
    int after_wait = 0;
    for (int i = 0; i < kN; ++i) after_wait += host[i] != 300 + i;
    EXPECTF(v32 == 5 && v64 == 0x1122334455667788ull && after_wait == 0,
            "round %d of the captured writes and wait: 0x%x, 0x%llx, %d wrong", round, v32,
            static_cast<unsigned long long>(v64), after_wait);
  }
  // The 64-bit write is a batch node: read through cuGraphBatchMemOpNodeGetParams, and given a new value in the
  // executable graph (cuGraphExecBatchMemOpNodeSetParams), which the next launch writes.
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  CUgraphNode write64 = nullptr;
  for (cudaGraphNode_t node : nodes) {
    CUgraphNodeType type;
    DRV(cuGraphNodeGetType(reinterpret_cast<CUgraphNode>(node), &type));
    if (type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) continue;
    CUDA_BATCH_MEM_OP_NODE_PARAMS read = {};
    DRV(cuGraphBatchMemOpNodeGetParams(reinterpret_cast<CUgraphNode>(node), &read));
    if (read.count == 1 && read.paramArray[0].operation == CU_STREAM_MEM_OP_WRITE_VALUE_64) {
      write64 = reinterpret_cast<CUgraphNode>(node);
    }
  }
  EXPECT(write64 != nullptr, "the captured 64-bit write is a batch node with one operation");
  if (write64 != nullptr) {
    CUstreamBatchMemOpParams op = {};
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op.writeValue.address = f64 + 16;
    op.writeValue.value64 = 0x8877665544332211ull;
    CUDA_BATCH_MEM_OP_NODE_PARAMS changed = {};
    DRV(cuCtxGetCurrent(&changed.ctx));
    changed.count = 1;
    changed.paramArray = &op;
    DRV(cuGraphExecBatchMemOpNodeSetParams(reinterpret_cast<CUgraphExec>(exec), write64, &changed));
    CHECK(cudaMemset(flag64 + 2, 0, 8));
    CHECK(cudaGraphLaunch(exec, s2));
    CHECK(cudaStreamSynchronize(s2));
    CHECK(cudaMemcpy(&v64, flag64 + 2, sizeof(v64), cudaMemcpyDeviceToHost));
    EXPECTF(v64 == 0x8877665544332211ull, "the executable graph's write changed: 0x%llx",
            static_cast<unsigned long long>(v64));
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));

  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(flag32));
  CHECK(cudaFree(flag64));
  CHECK(cudaFree(data));
  std::printf("stream_memops: %d wrong, %d failure(s): %s\n", wrong, failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
