// Stream-ordered allocation and memory pools on a slice, through the CUDA runtime: cudaMallocAsync / cudaFreeAsync
// around kernels on a stream, the default pool's attributes (used and reserved memory, high marks and their reset,
// release threshold), a created pool (cudaMallocFromPoolAsync, set as the device's pool, access, destroy), the
// pointer's pool attribute, the slice's quota (an allocation beyond it fails cleanly and leaves the pool usable),
// and stream-ordered allocation captured into a graph (allocation and free nodes) replayed several times.
// Prints "N failure(s): PASSED/FAILED".
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#define PROGRAM_NAME "stream_ordered"
#include "program_checks.h"

constexpr int kN = 1 << 16;

__global__ void Fill(int* p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

__global__ void Twice(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * in[i];
}

uint64_t Attr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  uint64_t v = 0;
  CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
  return v;
}

int main() {
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  EXPECT(supported == 1, "memory pools supported");
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t bytes = kN * sizeof(int);
  const int blocks = (kN + 255) / 256;

  // Allocate, use and free in stream order.
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  int *a = nullptr, *b = nullptr;
  CHECK(cudaMallocAsync(&a, bytes, s));
  CHECK(cudaMallocAsync(&b, bytes, s));
  EXPECT(Attr(pool, cudaMemPoolAttrUsedMemCurrent) >= 2 * bytes, "two allocations in use");
  Fill<<<blocks, 256, 0, s>>>(a, 10, kN);
  Twice<<<blocks, 256, 0, s>>>(a, b, kN);
  CHECK(cudaFreeAsync(a, s));
  std::vector<int> out(kN);
  CHECK(cudaMemcpyAsync(out.data(), b, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaFreeAsync(b, s));
  CHECK(cudaStreamSynchronize(s));
  bool ok = true;
  for (int i = 0; i < kN; ++i) ok = ok && out[i] == 2 * (10 + i);
  EXPECT(ok, "kernels on stream-ordered memory");
  EXPECT(Attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0, "everything freed");
  EXPECT(Attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0, "the pool keeps nothing back");
  EXPECT(Attr(pool, cudaMemPoolAttrUsedMemHigh) >= 2 * bytes, "high mark");
  uint64_t zero = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  EXPECT(Attr(pool, cudaMemPoolAttrUsedMemHigh) == 0, "high mark reset");
  uint64_t threshold = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  EXPECT(Attr(pool, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX, "release threshold kept");
  CHECK(cudaMemPoolTrimTo(pool, 0));

  // Beyond the slice: a clean out-of-memory, and the pool still works.
  size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total));
  void* huge = nullptr;
  cudaError_t e = cudaMallocAsync(&huge, total + (1u << 20), s);
  EXPECT(e == cudaErrorMemoryAllocation, "more than the slice fails");
  cudaGetLastError();
  CHECK(cudaMallocAsync(&a, bytes, s));
  CHECK(cudaFreeAsync(a, s));

  // A created pool, made the device's current pool.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t mine;
  CHECK(cudaMemPoolCreate(&mine, &props));
  int* c = nullptr;
  CHECK(cudaMallocFromPoolAsync(&c, bytes, mine, s));
  cudaMemPool_t owner = nullptr;
  EXPECT(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, reinterpret_cast<CUdeviceptr>(c + 5)) ==
             CUDA_SUCCESS,
         "pointer attribute");
  EXPECT(owner == mine, "the pointer knows its pool");
  EXPECT(Attr(mine, cudaMemPoolAttrUsedMemCurrent) == bytes, "created pool in use");
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 0;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(cudaMemPoolSetAccess(mine, &access, 1));
  CHECK(cudaDeviceSetMemPool(0, mine));
  cudaMemPool_t current = nullptr;
  CHECK(cudaDeviceGetMemPool(&current, 0));
  EXPECT(current == mine, "the device's pool");
  int* d = nullptr;
  CHECK(cudaMallocAsync(&d, bytes, s));  // From the current pool.
  EXPECT(Attr(mine, cudaMemPoolAttrUsedMemCurrent) == 2 * bytes, "cudaMallocAsync uses the current pool");
  CHECK(cudaFreeAsync(c, s));
  CHECK(cudaFreeAsync(d, s));
  CHECK(cudaDeviceSetMemPool(0, pool));
  CHECK(cudaMemPoolDestroy(mine));
  CHECK(cudaStreamSynchronize(s));

  // Captured: the allocation and the free become graph memory nodes; the graph runs several times.
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  int *t = nullptr, *u = nullptr;
  CHECK(cudaMallocAsync(&t, bytes, s));
  CHECK(cudaMallocAsync(&u, bytes, s));
  Fill<<<blocks, 256, 0, s>>>(t, 3, kN);
  Twice<<<blocks, 256, 0, s>>>(t, u, kN);
  CHECK(cudaMemcpyAsync(out.data(), u, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaFreeAsync(t, s));
  CHECK(cudaFreeAsync(u, s));
  CHECK(cudaStreamEndCapture(s, &g));
  size_t count = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT(count == 7, "two allocations, two kernels, a copy, two frees");
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int round = 0; round < 3; ++round) {
    out.assign(kN, 0);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    ok = true;
    for (int i = 0; i < kN; ++i) ok = ok && out[i] == 2 * (3 + i);
    EXPECT(ok, "captured stream-ordered allocation");
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  // A GPU keeps graph memory in the device's graph pool after the graph is gone, until it is trimmed.
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaDeviceGraphMemTrim(0));
  const size_t free_after = FreeMemoryWhenIdle();
  // On a slice exactly; a GPU's driver keeps some of it in its pools even after a trim (an H100: 34 MiB).
  if (OnSlice()) EXPECT(free_after == free_bytes, "all memory back with the graph");
  if (free_after != free_bytes) std::printf("stream_ordered: %zu bytes free at the end, %zu before\n", free_after, free_bytes);

  CHECK(cudaStreamDestroy(s));
  std::printf("stream_ordered: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
