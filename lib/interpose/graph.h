// CUDA graphs and stream capture, kept in the client (graph.cc). A CUgraph is a client-side DAG of nodes whose
// parameters are captured when the node is made (kernel arguments packed by the function's layout, copy and memset
// descriptions, host functions, events, child graphs); nothing reaches a slice until the graph runs. An executable
// graph (CUgraphExec) is a copy of the graph in a topological order; cuGraphLaunch replays it on the launch stream
// through the same paths as the equivalent stream calls, so its work is checked and ordered exactly like them.
//
// Stream capture: while a stream captures, the forwarded calls that would queue work on it (launches, copies,
// memsets, host functions, event records and waits) add nodes to the capture's graph instead. Fork and join across
// streams follow CUDA: an event recorded in a capturing stream carries the capture's current nodes, and a stream
// that waits for it joins the capture with those nodes as its dependencies.
#ifndef GPUPOOL_INTERPOSE_GRAPH_H_
#define GPUPOOL_INTERPOSE_GRAPH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "api.h"

namespace gpupool::interpose {

struct Kernel;
struct Graph;

// One node's description; what it does when the graph runs depends on `type`.
struct NodeWork {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  // Kernel: the function, its launch shape and its argument buffer laid out as the function's parameter table says
  // (param_offsets/param_sizes, from the slice that resolved it).
  Kernel* kernel = nullptr;
  uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned int shared_bytes = 0;
  std::vector<uint8_t> params;
  std::vector<size_t> param_offsets;
  std::vector<void*> param_pointers;  // Into `params`, for cuGraphKernelNodeGetParams.
  bool clustered = false;
  uint32_t cluster[3] = {1, 1, 1};
  bool cooperative = false;  // cuLaunchCooperativeKernel: every block resident at once.
  // Memcpy (host memory is read or written when the node runs, as on a GPU) and memset.
  CUDA_MEMCPY3D copy{};
  CUDA_MEMSET_NODE_PARAMS memset{};
  // Host function.
  CUhostFn host_fn = nullptr;
  void* host_data = nullptr;
  // Event record / wait.
  CUevent event = nullptr;
  // Child graph (a copy, owned by the node, as cuGraphAddChildGraphNode makes).
  std::shared_ptr<Graph> child;
  // Memory allocation / free: the allocation's address and size.
  CUdeviceptr address = 0;
  size_t bytes = 0;
  CUmemPoolProps pool{};
  std::shared_ptr<void> memory;  // The graph memory an allocation node holds (graph.cc).
  // Batch memory operations (captured cuStreamWaitValue*/cuStreamWriteValue*, cuGraphAddBatchMemOpNode): run in
  // order on the launch stream as cuStreamBatchMemOp runs them, values and all carried in the node.
  std::vector<CUstreamBatchMemOpParams> mem_ops;
};

// Whether `stream` is capturing (cheap when no capture exists anywhere). Default streams never capture.
bool Capturing(CUstream stream);
// Adds `work` to the graph `stream` captures into, after the stream's current capture dependencies; the node then
// becomes them. Returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED if the capture was invalidated.
CUresult CaptureWork(CUstream stream, NodeWork work);
// An event recorded / waited for while capturing (the fork-join protocol of stream capture). Record: returns true
// (and *result) when `stream` captures; otherwise the event stops being a capture's event.
bool CaptureEventRecord(CUevent event, CUstream stream, CUresult* result);
// Returns true (and *result) when the wait was a capture matter: the stream captures, or the event was recorded in
// a capture.
bool CaptureEventWait(CUstream stream, CUevent event, CUresult* result);
// A call that cannot be captured (stream synchronisation, callbacks) was made on a capturing stream: the capture is
// invalidated, as the driver does, and the call answers CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
CUresult RefuseWhileCapturing(CUstream stream);

// Stream-ordered allocation while `stream` captures (mempool.cc): graph memory of `bytes` on `device` and its
// allocation node / a free node for graph memory.
CUresult CaptureMemAlloc(CUstream stream, int device, size_t bytes, CUdeviceptr* address);
CUresult CaptureMemFree(CUstream stream, CUdeviceptr address);
// The memory pool an address was allocated from (cuMemAllocAsync), or null (mempool.cc).
CUmemoryPool PoolOf(CUdeviceptr address);

// Memory the program freed with cuMemFree: true if it is a graph allocation whose node still lives, which keeps it
// (the slice must not free it: the graph's next launch gives it back to the program, at the same address).
bool MemoryFreedOutsideGraphs(CUdeviceptr address);

// Implementations the graph replays through (launch.cc, memory.cc, event.cc, stream.cc).
CUresult LaunchPacked(const NodeWork& work, CUstream stream);
CUresult Copy3D(const CUDA_MEMCPY3D* copy, CUstream stream);
CUresult Memset2D(CUdeviceptr d, size_t pitch, unsigned int value, int element, size_t width, size_t height,
                  CUstream stream);
CUresult LaunchHostFunc(CUstream stream, CUhostFn fn, void* data);
// cuLaunchHostFunc_v2: the same, with a sync mode (CU_HOST_TASK_BLOCKING or _SPINWAIT; anything else is refused).
CUresult LaunchHostFuncSynced(CUstream stream, CUhostFn fn, void* data, unsigned int sync_mode);
CUresult EventRecord(CUevent event, CUstream stream);
CUresult StreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* ops, unsigned int flags);
// Checks one stream memory operation as cuStreamBatchMemOp would (type, alignment, flags, memory of a slice), for a
// graph node that will run it later.
CUresult ValidateMemOp(const CUstreamBatchMemOpParams& op);
// A node running `ops` in order.
NodeWork MemOpWork(std::vector<CUstreamBatchMemOpParams> ops);
CUresult StreamWaitEvent(CUstream stream, CUevent event);
CUresult MemAlloc(CUdeviceptr* p, size_t n);
CUresult MemAllocOn(int device, CUdeviceptr* p, size_t n);  // On slice `device`, whatever context is current.
CUresult MemFree(CUdeviceptr p);

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_GRAPH_H_
