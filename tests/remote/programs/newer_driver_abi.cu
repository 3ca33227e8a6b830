// newer_driver_abi: what CUDA 13.1 and 13.2 added to the driver ABI, which gpupool serves where it reports their
// driver version (lib/interpose/driver_variants_newer.txt), asked for as a 13.2 cudart or library asks: by name and
// version through cuGetProcAddress. Built against the CUDA 13.0 headers, so the new values are numbers here, named
// in comments. Checks:
//   - cuDriverGetVersion reports 13.2 or newer;
//   - cuLaunchHostFunc at 13010+ is the 4-argument cuLaunchHostFunc_v2 (and its _ptsz twin), not the 3-argument
//     one: its host function runs after the kernel before it on the stream, in both sync modes, and any other mode
//     is refused;
//   - cuFuncGetParamCount / cuKernelGetParamCount count a real kernel's parameters;
//   - CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED (148) is answered: 0, and such a reduction is unsupported;
//   - cuLaunchKernelEx's CU_LAUNCH_ATTRIBUTE_SHARED_MEMORY_MODE (18) and PORTABLE_CLUSTER_SIZE_MODE (17) take effect;
//   - cuGraphNodeGetContainingGraph and cuGraphNodeGetLocalId answer for nodes of a graph and of its child graph;
//   - cuMemPoolGetAttribute answers CUDA 13.2's read-only pool attributes (9..14).
#define PROGRAM_NAME "newer_driver_abi"
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "program_checks.h"

// CUDA 13.1/13.2 values (cuda.h of 13.2).
constexpr unsigned int kHostTaskBlocking = 0, kHostTaskSpinWait = 1;  // CUhostTaskSyncMode
constexpr int kAttributeAtomicReductionSupported = 148;              // CUdevice_attribute
constexpr int kLaunchAttributePortableClusterSizeMode = 17;          // CUlaunchAttributeID
constexpr int kLaunchAttributeSharedMemoryMode = 18;
constexpr int kModeRequirePortable = 1, kModeAllowNonPortable = 2;

using LaunchHostFuncV2 = CUresult (*)(CUstream, CUhostFn, void*, unsigned int);
using GetParamCount = CUresult (*)(void*, size_t*);  // CUfunction or CUkernel: both pointers.
using NodeGetContainingGraph = CUresult (*)(CUgraphNode, CUgraph*);
using NodeGetLocalId = CUresult (*)(CUgraphNode, unsigned int*);

constexpr int kN = 4096;

__global__ void Fill(int* v, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = base + i;
}

__global__ void NoParameters() {}

__global__ void UsesSharedMemory(int* out) {
  extern __shared__ int scratch[];
  scratch[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = scratch[blockDim.x - 1];
}

// What the host functions saw: the host copy the stream made of the kernel's output just before each was queued
// (had one overtaken that work, it would see the previous round's values).
struct HostCall {
  const int* host_copy = nullptr;
  int expected_last = 0;
  std::atomic<int> calls{0};
  std::atomic<int> saw_data{0};
};

void CUDA_CB RecordCall(void* data) {
  auto* call = static_cast<HostCall*>(data);
  if (call->host_copy[kN - 1] == call->expected_last) call->saw_data.fetch_add(1);
  call->calls.fetch_add(1);
}

void* Proc(const char* name, int version, cuuint64_t flags) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = cuGetProcAddress(name, &fn, version, flags, &status);
  if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) {
    std::printf(PROGRAM_NAME ": cuGetProcAddress(%s, %d): %d, status %d\n", name, version, static_cast<int>(r),
                static_cast<int>(status));
    ++failures;
    return nullptr;
  }
  return fn;
}

int main() {
  CHECK(cudaFree(nullptr));  // Creates the primary context.
  int version = 0;
  DRV(cuDriverGetVersion(&version));
  std::printf(PROGRAM_NAME ": driver version %d\n", version);
  EXPECT(version >= 13020, "the driver version of CUDA 13.2, whose ABI gpupool serves");

  // 1. cuLaunchHostFunc by 13.1's version and later: the 4-argument variant, distinct from the 3-argument one.
  void* legacy = Proc("cuLaunchHostFunc", 10000, CU_GET_PROC_ADDRESS_DEFAULT);
  auto launch_host_func =
      reinterpret_cast<LaunchHostFuncV2>(Proc("cuLaunchHostFunc", 13020, CU_GET_PROC_ADDRESS_DEFAULT));
  auto launch_host_func_ptsz = reinterpret_cast<LaunchHostFuncV2>(
      Proc("cuLaunchHostFunc", 13010, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  EXPECT(reinterpret_cast<void*>(launch_host_func) != legacy, "cuLaunchHostFunc at 13020 is not the 3-argument ABI");
  EXPECT(reinterpret_cast<void*>(launch_host_func_ptsz) != legacy &&
             launch_host_func_ptsz != launch_host_func,
         "the per-thread cuLaunchHostFunc at 13010 is its own variant");
  int* data = nullptr;
  CHECK(cudaMalloc(&data, kN * sizeof(int)));
  static int host_copy[kN];
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUstream s = reinterpret_cast<CUstream>(stream);
  HostCall call;
  call.host_copy = host_copy;
  if (launch_host_func != nullptr && launch_host_func_ptsz != nullptr) {
    // Each mode, and the per-thread variant: the kernel and the copy before it have run when it runs.
    const unsigned int modes[3] = {kHostTaskBlocking, kHostTaskSpinWait, kHostTaskBlocking};
    for (int round = 0; round < 3; ++round) {
      call.expected_last = 1000 * (round + 1) + kN - 1;
      Fill<<<kN / 256, 256, 0, stream>>>(data, kN, 1000 * (round + 1));
      CHECK(cudaMemcpyAsync(host_copy, data, sizeof(host_copy), cudaMemcpyDeviceToHost, stream));
      LaunchHostFuncV2 launch = round == 2 ? launch_host_func_ptsz : launch_host_func;
      DRV(launch(s, RecordCall, &call, modes[round]));
      CHECK(cudaStreamSynchronize(stream));
    }
    EXPECT(call.calls.load() == 3, "three host functions ran by the time their stream was synchronised");
    EXPECT(call.saw_data.load() == 3, "each host function ran after the work queued before it");
    // Any other sync mode is refused, and nothing runs.
    EXPECT(launch_host_func(s, RecordCall, &call, 2) == CUDA_ERROR_INVALID_VALUE, "sync mode 2 is refused");
    EXPECT(launch_host_func(s, RecordCall, &call, 0xffffffffu) == CUDA_ERROR_INVALID_VALUE,
           "sync mode 0xffffffff is refused");
    EXPECT(launch_host_func(s, nullptr, &call, kHostTaskBlocking) == CUDA_ERROR_INVALID_VALUE,
           "a NULL host function is refused");
    CHECK(cudaStreamSynchronize(stream));
    EXPECT(call.calls.load() == 3, "the refused calls queued nothing");
  }

  // 2. Parameter counts of real kernels, through CUfunction and CUkernel.
  auto func_param_count = reinterpret_cast<GetParamCount>(Proc("cuFuncGetParamCount", 13020, 0));
  auto kernel_param_count = reinterpret_cast<GetParamCount>(Proc("cuKernelGetParamCount", 13020, 0));
  cudaFunction_t fill_function = nullptr, empty_function = nullptr;
  CHECK(cudaGetFuncBySymbol(&fill_function, reinterpret_cast<const void*>(Fill)));
  CHECK(cudaGetFuncBySymbol(&empty_function, reinterpret_cast<const void*>(NoParameters)));
  cudaKernel_t fill_kernel = nullptr;
  CHECK(cudaGetKernel(&fill_kernel, reinterpret_cast<const void*>(Fill)));
  if (func_param_count != nullptr && kernel_param_count != nullptr) {
    size_t count = 99;
    DRV(func_param_count(fill_function, &count));
    EXPECT(count == 3, "Fill(int*, int, int) has 3 parameters");
    count = 99;
    DRV(func_param_count(empty_function, &count));
    EXPECT(count == 0, "NoParameters() has none");
    count = 99;
    DRV(kernel_param_count(fill_kernel, &count));
    EXPECT(count == 3, "Fill's CUkernel has 3 parameters");
    EXPECT(func_param_count(fill_function, nullptr) == CUDA_ERROR_INVALID_VALUE, "a NULL count is refused");
    int not_a_function = 0;
    EXPECT(func_param_count(&not_a_function, &count) == CUDA_ERROR_INVALID_HANDLE, "a foreign handle is refused");
  }

  // 3. CUDA 13.2's device attribute: answered, and past it nothing.
  CUdevice dev;
  DRV(cuCtxGetDevice(&dev));
  int atomic_reduction = -1, unused = 0;
  DRV(cuDeviceGetAttribute(&atomic_reduction, static_cast<CUdevice_attribute>(kAttributeAtomicReductionSupported),
                           dev));
  EXPECT(atomic_reduction == 0, "no atomic reductions in stream memory operations");
  EXPECT(cuDeviceGetAttribute(&unused, static_cast<CUdevice_attribute>(149), dev) == CUDA_ERROR_INVALID_VALUE,
         "the attribute past CUDA 13.2's last is refused");
  // As it says, a stream memory operation's atomic reduction (CU_STREAM_MEM_OP_ATOMIC_REDUCTION, 8) is unsupported.
  CUstreamBatchMemOpParams reduction;
  std::memset(&reduction, 0, sizeof(reduction));
  reduction.operation = static_cast<CUstreamBatchMemOpType>(8);
  EXPECT(cuStreamBatchMemOp(s, 1, &reduction, 0) == CUDA_ERROR_NOT_SUPPORTED,
         "an atomic reduction in a batch of stream memory operations is unsupported");

  // 4. Launch attributes 17 and 18 (modes in the value's first int).
  CUfunction shared_kernel = nullptr;
  CHECK(cudaGetFuncBySymbol(&shared_kernel, reinterpret_cast<const void*>(UsesSharedMemory)));
  int portable_shared = 0, optin_shared = 0;
  DRV(cuDeviceGetAttribute(&portable_shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, dev));
  DRV(cuDeviceGetAttribute(&optin_shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  const unsigned int beyond_portable = static_cast<unsigned int>(portable_shared) + 1024;
  EXPECT(optin_shared >= static_cast<int>(beyond_portable), "the slice offers shared memory beyond the portable size");
  auto launch = [&](unsigned int shared, int attribute, int mode, unsigned int cluster_x) {
    CUlaunchAttribute attrs[2];
    std::memset(attrs, 0, sizeof(attrs));
    unsigned int n = 0;
    if (attribute != 0) {
      attrs[n].id = static_cast<CUlaunchAttributeID>(attribute);
      std::memcpy(&attrs[n].value, &mode, sizeof(mode));
      ++n;
    }
    if (cluster_x != 0) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = cluster_x;
      attrs[n].value.clusterDim.y = attrs[n].value.clusterDim.z = 1;
      ++n;
    }
    CUlaunchConfig config;
    std::memset(&config, 0, sizeof(config));
    config.gridDimX = cluster_x != 0 ? cluster_x : 1;
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 64;
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = shared;
    config.hStream = s;
    config.attrs = attrs;
    config.numAttrs = n;
    int* out = data;
    void* args[] = {&out};
    return cuLaunchKernelEx(&config, shared_kernel, args, nullptr);
  };
  DRV(cuFuncSetAttribute(shared_kernel, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                         static_cast<int>(beyond_portable)));
  DRV(launch(beyond_portable, 0, 0, 0));  // Opted in: runs.
  DRV(launch(beyond_portable, kLaunchAttributeSharedMemoryMode, 0, 0));  // DEFAULT: as without the attribute.
  EXPECT(launch(beyond_portable, kLaunchAttributeSharedMemoryMode, kModeRequirePortable, 0) ==
             CUDA_ERROR_INVALID_VALUE,
         "REQUIRE_PORTABLE refuses shared memory beyond the portable size, opt-in or not");
  DRV(launch(1024, kLaunchAttributeSharedMemoryMode, kModeRequirePortable, 0));  // Within it: runs.
  DRV(launch(beyond_portable, kLaunchAttributeSharedMemoryMode, kModeAllowNonPortable, 0));  // Within the opt-in.
  EXPECT(launch(beyond_portable + 1024, kLaunchAttributeSharedMemoryMode, kModeAllowNonPortable, 0) ==
             CUDA_ERROR_NOT_SUPPORTED,
         "ALLOW_NON_PORTABLE beyond the function's opt-in is refused as unsupported");
  EXPECT(launch(1024, kLaunchAttributeSharedMemoryMode, 3, 0) == CUDA_ERROR_INVALID_VALUE, "shared memory mode 3");
  EXPECT(launch(1024, kLaunchAttributePortableClusterSizeMode, 3, 0) == CUDA_ERROR_INVALID_VALUE,
         "cluster size mode 3");
  EXPECT(launch(0, kLaunchAttributePortableClusterSizeMode, kModeRequirePortable, 16) ==
             CUDA_ERROR_INVALID_CLUSTER_SIZE,
         "REQUIRE_PORTABLE refuses a cluster of 16 blocks");
  // Attributes counted but not given: refused, not read from address 0.
  CUlaunchConfig no_attrs;
  std::memset(&no_attrs, 0, sizeof(no_attrs));
  no_attrs.gridDimX = no_attrs.gridDimY = no_attrs.gridDimZ = 1;
  no_attrs.blockDimX = no_attrs.blockDimY = no_attrs.blockDimZ = 1;
  no_attrs.hStream = s;
  no_attrs.numAttrs = 1;
  int* no_attrs_out = data;
  void* no_attrs_args[] = {&no_attrs_out};
  EXPECT(cuLaunchKernelEx(&no_attrs, shared_kernel, no_attrs_args, nullptr) == CUDA_ERROR_INVALID_VALUE,
         "numAttrs 1 with no attributes is refused");
  CHECK(cudaStreamSynchronize(stream));
  int last = -1;
  CHECK(cudaMemcpy(&last, data, sizeof(last), cudaMemcpyDeviceToHost));
  EXPECT(last == 63, "the launches that ran wrote their result");

  // 5. A graph's nodes say which graph holds them, and their ids there are distinct; a child graph's nodes name it.
  auto containing_graph =
      reinterpret_cast<NodeGetContainingGraph>(Proc("cuGraphNodeGetContainingGraph", 13010, 0));
  auto local_id = reinterpret_cast<NodeGetLocalId>(Proc("cuGraphNodeGetLocalId", 13010, 0));
  if (containing_graph != nullptr && local_id != nullptr) {
    cudaGraph_t child = nullptr, parent = nullptr;
    CHECK(cudaGraphCreate(&child, 0));
    CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphNode_t in_child = nullptr, first = nullptr, second = nullptr, child_node = nullptr;
    CHECK(cudaGraphAddEmptyNode(&in_child, child, nullptr, 0));
    CHECK(cudaGraphAddEmptyNode(&first, parent, nullptr, 0));
    CHECK(cudaGraphAddEmptyNode(&second, parent, &first, 1));
    CHECK(cudaGraphAddChildGraphNode(&child_node, parent, &second, 1, child));
    cudaGraph_t embedded = nullptr;
    CHECK(cudaGraphChildGraphNodeGetGraph(child_node, &embedded));
    cudaGraphNode_t embedded_node = nullptr;
    size_t count = 1;
    CHECK(cudaGraphGetNodes(embedded, &embedded_node, &count));
    CUgraph holder = nullptr;
    DRV(containing_graph(second, &holder));
    EXPECT(holder == parent, "a node's containing graph is the graph it was added to");
    DRV(containing_graph(embedded_node, &holder));
    EXPECT(holder == embedded && holder != parent, "a node inside a child graph is held by that child graph");
    unsigned int ids[3] = {~0u, ~0u, ~0u};
    DRV(local_id(first, &ids[0]));
    DRV(local_id(second, &ids[1]));
    DRV(local_id(child_node, &ids[2]));
    EXPECT(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2] && ids[2] != ~0u,
           "the nodes of one graph have distinct local ids");
    EXPECT(containing_graph(second, nullptr) == CUDA_ERROR_INVALID_VALUE, "a NULL graph pointer is refused");
    CHECK(cudaGraphDestroyNode(first));
    EXPECT(local_id(first, &ids[0]) == CUDA_ERROR_INVALID_VALUE, "a destroyed node is refused");
    CHECK(cudaGraphDestroy(parent));
    CHECK(cudaGraphDestroy(child));
  }

  // 6. The device's default pool, by CUDA 13.2's attributes (CUmemPool_attribute 9..14).
  CUmemoryPool pool = nullptr;
  DRV(cuDeviceGetDefaultMemPool(&pool, dev));
  size_t free_bytes = 0, total_bytes = 0;
  DRV(cuMemGetInfo(&free_bytes, &total_bytes));
  int allocation_type = -1, export_types = -1, location_id = -1, location_type = -1, decompress = -1;
  cuuint64_t max_size = 0;
  auto pool_attribute = [&](int attribute, void* value) {
    return cuMemPoolGetAttribute(pool, static_cast<CUmemPool_attribute>(attribute), value);
  };
  DRV(pool_attribute(9, &allocation_type));
  DRV(pool_attribute(10, &export_types));
  DRV(pool_attribute(11, &location_id));
  DRV(pool_attribute(12, &location_type));
  DRV(pool_attribute(13, &max_size));
  DRV(pool_attribute(14, &decompress));
  EXPECT(allocation_type == CU_MEM_ALLOCATION_TYPE_PINNED && export_types == CU_MEM_HANDLE_TYPE_NONE,
         "the default pool: pinned device memory, not shareable");
  EXPECT(location_type == CU_MEM_LOCATION_TYPE_DEVICE && location_id == dev, "the default pool is the device's");
  EXPECT(max_size == total_bytes && decompress == 0, "the pool holds up to the slice's memory; no decompression");
  EXPECT(pool_attribute(15, &decompress) == CUDA_ERROR_INVALID_VALUE, "pool attribute 15 is refused");

  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(data));
  std::printf(PROGRAM_NAME ": %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
