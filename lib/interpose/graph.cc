// CUDA graphs and stream capture in the client (see graph.h). The entry points are generated from forward_spec.h.
#include "graph.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/log.h"
#include "driver.h"
#include "forward_spec.h"
#include "graph_internal.h"
#include "managed.h"
#include "remote.h"

namespace gpupool::interpose {

// Packs a kernel node's work for the current slice (launch.cc).
CUresult PrepareKernelWork(const CUDA_KERNEL_NODE_PARAMS& p, NodeWork* work);
// With fake devices: checks a default-stream handle and the current context (stream.cc).
CUresult FakeDefaultStream(CUstream handle);

namespace graph_internal {

// Memory of a graph's allocation node: made with the node (so its address is known then, as the driver promises)
// and kept across launches. When a graph frees it (a free node), it goes back to the slice with the last graph or
// executable graph holding the allocation node. When the program frees it (cuMemFree, cuMemFreeAsync:
// MemoryFreedOutsideGraphs), it stays the graph's, as a graph's memory pool keeps it on a GPU: the next launch
// allocates it again at the same address (the allocation node's), and it goes back to the slice with the last
// holder of the node.
struct GraphMemory;
void CountGraphMemory(int device, int64_t bytes);

struct GraphMemory {
  CUdeviceptr address = 0;
  int device = 0;
  size_t bytes = 0;
  bool freed_in_graph = false;
  bool freed = false;  // By the program, outside any graph: the slice still holds it for the graph.
  ~GraphMemory() {
    CountGraphMemory(device, -static_cast<int64_t>(bytes));
    if (freed_in_graph && !freed) {
      MemFree(address);
    } else if (freed) {
      Remote::Get().session(device)->MemFree(address);
    }
  }
};

// Guards everything below and every Graph, GraphNode and GraphExec. Recursive: dropping a node's work may return
// graph memory (cuMemFree), which tells this file about it.
std::recursive_mutex mu;
using Lock = std::lock_guard<std::recursive_mutex>;
// Whether the program has slice `device`.
bool IsSlice(int device) { return device >= 0 && static_cast<size_t>(device) < Remote::Get().device_count(); }

// Never destroyed: graphs still alive at exit must not return memory to sessions that are gone.
std::set<Graph*>& graphs = *new std::set<Graph*>;  // Live graphs, the program's and the child graphs inside them.
// The program's graphs (cuGraphCreate, captures, clones), which it destroys with cuGraphDestroy.
std::map<Graph*, std::shared_ptr<Graph>>& owned = *new std::map<Graph*, std::shared_ptr<Graph>>;
std::set<GraphExec*>& execs = *new std::set<GraphExec*>;
std::map<CUdeviceptr, std::weak_ptr<GraphMemory>>& graph_memory = *new std::map<CUdeviceptr, std::weak_ptr<GraphMemory>>;
// Bytes of graph memory per device, now and at most since the program last reset the mark
// (cuDeviceGetGraphMemAttribute). A slice holds no cache of graph memory beyond what live graphs hold, so the
// memory "used" and "reserved" are the same bytes.
struct GraphMemoryUse {
  int64_t now = 0, high = 0;
};
std::map<int, GraphMemoryUse>& graph_memory_use = *new std::map<int, GraphMemoryUse>;

void CountGraphMemory(int device, int64_t bytes) {
  Lock lock(mu);
  GraphMemoryUse& use = graph_memory_use[device];
  use.now += bytes;
  use.high = std::max(use.high, use.now);
}

// Whether `g` is a live graph: one of the program's, or a child graph inside one of them.
bool LiveGraph(Graph* g) { return g != nullptr && graphs.count(g) != 0; }
bool LiveNode(GraphNode* n) { return n != nullptr && LiveGraph(n->graph) && n->index < n->graph->nodes.size() &&
                                     n->graph->nodes[n->index].get() == n && n->alive; }

void Register(Graph* g) {
  graphs.insert(g);
  for (auto& n : g->nodes) {
    if (n->work.child) Register(n->work.child.get());
  }
}
void Unregister(Graph* g) {
  graphs.erase(g);
  for (auto& n : g->nodes) {
    if (n->work.child) Unregister(n->work.child.get());
  }
}

std::shared_ptr<Graph> CloneGraph(const Graph& g);

std::unique_ptr<GraphNode> CloneNode(const GraphNode& n, Graph* into) {
  auto c = std::make_unique<GraphNode>();
  c->graph = into;
  c->index = n.index;
  c->work = n.work;
  if (n.work.child) c->work.child = CloneGraph(*n.work.child);
  c->alive = n.alive;
  c->enabled = n.enabled;
  return c;
}

std::shared_ptr<Graph> CloneGraph(const Graph& g) {
  auto c = std::make_shared<Graph>();
  for (const auto& n : g.nodes) c->nodes.push_back(CloneNode(*n, c.get()));
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (GraphNode* d : g.nodes[i]->deps) c->nodes[i]->deps.push_back(c->nodes[d->index].get());
  }
  return c;
}

// Live nodes, each after its dependencies (creation order among independent ones); false on a cycle.
bool TopologicalOrder(const Graph& g, std::vector<GraphNode*>* order) {
  std::vector<int> waiting(g.nodes.size(), 0);
  std::vector<std::vector<size_t>> dependents(g.nodes.size());
  for (const auto& n : g.nodes) {
    if (!n->alive) continue;
    for (GraphNode* d : n->deps) {
      ++waiting[n->index];
      dependents[d->index].push_back(n->index);
    }
  }
  std::set<size_t> ready;
  for (const auto& n : g.nodes) {
    if (n->alive && waiting[n->index] == 0) ready.insert(n->index);
  }
  order->clear();
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    order->push_back(g.nodes[i].get());
    for (size_t j : dependents[i]) {
      if (--waiting[j] == 0) ready.insert(j);
    }
  }
  size_t live = std::count_if(g.nodes.begin(), g.nodes.end(), [](const auto& n) { return n->alive; });
  return order->size() == live;
}

CUresult CheckDeps(Graph* g, const CUgraphNode* deps, size_t count) {
  if (count != 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    GraphNode* d = N(deps[i]);
    if (!LiveNode(d) || d->graph != g) return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < i; ++j) {
      if (deps[j] == deps[i]) return CUDA_ERROR_INVALID_VALUE;  // The driver refuses duplicate dependencies.
    }
  }
  return CUDA_SUCCESS;
}

// Adds a node to `g` (mu held).
GraphNode* AddNode(Graph* g, NodeWork work, const CUgraphNode* deps, size_t count) {
  auto n = std::make_unique<GraphNode>();
  n->graph = g;
  n->index = g->nodes.size();
  n->work = std::move(work);
  for (size_t i = 0; i < count; ++i) n->deps.push_back(N(deps[i]));
  if (n->work.child) Register(n->work.child.get());
  g->nodes.push_back(std::move(n));
  return g->nodes.back().get();
}

CUresult Checked(Graph* g, const CUgraphNode* deps, size_t count) {
  if (!LiveGraph(g)) return CUDA_ERROR_INVALID_VALUE;
  return CheckDeps(g, deps, count);
}

// Builds the work of a node from the generic parameters of cuGraphAddNode / cuGraphNodeSetParams.
CUresult WorkFromParams(const CUgraphNodeParams& p, NodeWork* work);

CUresult AddWork(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count, NodeWork work) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  Graph* g = reinterpret_cast<Graph*>(graph);
  if (CUresult r = Checked(g, deps, count); r != CUDA_SUCCESS) return r;
  *out = H(AddNode(g, std::move(work), deps, count));
  return CUDA_SUCCESS;
}

CUresult ValidateCopy(const CUDA_MEMCPY3D* copy) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Arrays are resolved when the node runs (memory.cc); a stale handle fails there, as a freed pointer does.
  Array a;
  if (copy->srcMemoryType == CU_MEMORYTYPE_ARRAY && ResolveArray(copy->srcArray, &a) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (copy->dstMemoryType == CU_MEMORYTYPE_ARRAY && ResolveArray(copy->dstArray, &a) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult ValidateMemset(const CUDA_MEMSET_NODE_PARAMS* p) {
  if (p == nullptr || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (Remote::Get().DeviceOf(p->dst) < 0 || p->width == 0 || p->height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (p->height > 1 && p->pitch < p->width * p->elementSize) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

NodeWork CopyWork(const CUDA_MEMCPY3D& copy) {
  NodeWork w;
  w.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  w.copy = copy;
  return w;
}

NodeWork MemsetWork(const CUDA_MEMSET_NODE_PARAMS& p) {
  NodeWork w;
  w.type = CU_GRAPH_NODE_TYPE_MEMSET;
  w.memset = p;
  return w;
}

NodeWork HostWork(CUhostFn fn, void* data) {
  NodeWork w;
  w.type = CU_GRAPH_NODE_TYPE_HOST;
  w.host_fn = fn;
  w.host_data = data;
  return w;
}

NodeWork EventWork(CUgraphNodeType type, CUevent event) {
  NodeWork w;
  w.type = type;
  w.event = event;
  return w;
}

CUresult ChildWork(CUgraph child, NodeWork* w) {
  Graph* g = reinterpret_cast<Graph*>(child);
  if (!LiveGraph(g)) return CUDA_ERROR_INVALID_VALUE;
  w->type = CU_GRAPH_NODE_TYPE_GRAPH;
  w->child = CloneGraph(*g);  // The node holds a copy, as the driver's does.
  return CUDA_SUCCESS;
}

// Graph memory: allocated now (counted against the slice), so the address is known when the node is made.
CUresult AllocWork(CUDA_MEM_ALLOC_NODE_PARAMS* p, NodeWork* w) {
  if (p == nullptr || p->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int dev;
  if (CUresult r = Remote::Get().CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  const int device = p->poolProps.location.id;
  if (!IsSlice(device)) return CUDA_ERROR_INVALID_DEVICE;
  CUdeviceptr address;
  if (CUresult r = MemAllocOn(device, &address, p->bytesize); r != CUDA_SUCCESS) return r;
  p->dptr = address;
  w->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  w->address = address;
  w->bytes = p->bytesize;
  w->pool = p->poolProps;
  auto memory = std::make_shared<GraphMemory>();
  memory->address = address;
  memory->device = device;
  memory->bytes = p->bytesize;
  CountGraphMemory(device, static_cast<int64_t>(p->bytesize));
  graph_memory[address] = memory;
  w->memory = memory;  // Shared by the node's copies (clones, executable graphs).
  return CUDA_SUCCESS;
}

// A free node for `address` is being made: only graph memory can be freed in a graph (the driver refuses other
// memory too), and memory freed in a graph goes back with the graph.
CUresult MarkFreedInGraph(CUdeviceptr address) {
  Lock lock(mu);
  auto it = graph_memory.find(address);
  auto memory = it == graph_memory.end() ? nullptr : it->second.lock();
  if (memory == nullptr) return CUDA_ERROR_INVALID_VALUE;
  memory->freed_in_graph = true;
  return CUDA_SUCCESS;
}

CUresult KernelWork(const CUDA_KERNEL_NODE_PARAMS& p, NodeWork* w) {
  if (p.extra != nullptr && p.kernelParams != nullptr) return CUDA_ERROR_INVALID_VALUE;
  return PrepareKernelWork(p, w);
}

// v1 is v2's prefix (v2 adds the CUkernel and the context at the end); both directions copy that prefix.
static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS, extra) == offsetof(CUDA_KERNEL_NODE_PARAMS_v1, extra) &&
              sizeof(CUDA_KERNEL_NODE_PARAMS_v1) <= sizeof(CUDA_KERNEL_NODE_PARAMS));

CUDA_KERNEL_NODE_PARAMS FromV1(const CUDA_KERNEL_NODE_PARAMS_v1& p) {
  CUDA_KERNEL_NODE_PARAMS q{};
  std::memcpy(&q, &p, sizeof(p));
  return q;
}

void KernelParamsOf(GraphNode* n, CUDA_KERNEL_NODE_PARAMS* p) {
  NodeWork& w = n->work;
  *p = CUDA_KERNEL_NODE_PARAMS{};
  p->func = reinterpret_cast<CUfunction>(w.kernel);
  p->kern = reinterpret_cast<CUkernel>(w.kernel);
  p->gridDimX = w.grid[0];
  p->gridDimY = w.grid[1];
  p->gridDimZ = w.grid[2];
  p->blockDimX = w.block[0];
  p->blockDimY = w.block[1];
  p->blockDimZ = w.block[2];
  p->sharedMemBytes = w.shared_bytes;
  // Pointers into the node's own argument buffer, as the driver returns its copy.
  w.param_pointers.clear();
  for (size_t off : w.param_offsets) w.param_pointers.push_back(w.params.data() + off);
  p->kernelParams = w.param_pointers.data();
}

// The node of `exec` that stands for node `node` of the graph it was made from.
GraphNode* InExec(GraphExec* exec, GraphNode* node) {
  if (node == nullptr || node->index >= exec->graph->nodes.size()) return nullptr;
  GraphNode* n = exec->graph->nodes[node->index].get();
  return n->alive && n->work.type == node->work.type ? n : nullptr;
}

CUresult ResolveExec(CUgraphExec handle, GraphExec** exec) {
  auto* e = reinterpret_cast<GraphExec*>(handle);
  if (e == nullptr || execs.count(e) == 0) return CUDA_ERROR_INVALID_VALUE;
  *exec = e;
  return CUDA_SUCCESS;
}

uint64_t exec_generations = 0;  // mu held.

// `exec` may be about to change: what its launches recorded no longer counts (mu held).
void Touched(GraphExec* exec) {
  exec->recorded.reset();
  exec->generation = ++exec_generations;
}

// The node of executable graph `exec_handle` made from the program's node `node`, which the caller may change
// (mu held).
CUresult NodeInExec(CUgraphExec exec_handle, CUgraphNode node, GraphNode** out) {
  GraphExec* exec;
  if (CUresult r = ResolveExec(exec_handle, &exec); r != CUDA_SUCCESS) return r;
  Touched(exec);
  *out = LiveNode(N(node)) ? InExec(exec, N(node)) : nullptr;
  return *out != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Runs node work on `stream`, through the same paths as the stream calls it stands for.
CUresult Run(const std::vector<GraphNode*>& order, CUstream stream);

CUresult RunNode(const GraphNode& n, CUstream stream) {
  const NodeWork& w = n.work;
  switch (w.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return LaunchPacked(w, stream);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return Copy3D(&w.copy, stream);
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return Memset2D(w.memset.dst, w.memset.pitch, w.memset.value, static_cast<int>(w.memset.elementSize),
                      w.memset.width, w.memset.height, stream);
    case CU_GRAPH_NODE_TYPE_HOST:
      return LaunchHostFunc(stream, w.host_fn, w.host_data);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return EventRecord(w.event, stream);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return StreamWaitEvent(stream, w.event);
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      std::vector<GraphNode*> order;
      if (!TopologicalOrder(*w.child, &order)) return CUDA_ERROR_INVALID_VALUE;
      return Run(order, stream);
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      // The memory exists from the node's creation on; freed by the program since, it is the program's again.
      Lock lock(mu);
      auto memory = std::static_pointer_cast<GraphMemory>(w.memory);
      if (memory != nullptr && memory->freed) {
        memory->freed = false;  // Still in graph_memory: an outside free keeps it there while the node lives.
        Remote& remote = Remote::Get();
        std::lock_guard<std::mutex> allocations(remote.mu());
        remote.allocations[w.address] = Allocation{w.bytes, memory->device};
      }
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      std::vector<CUstreamBatchMemOpParams> ops = w.mem_ops;  // The call takes them mutable; the node keeps its own.
      return StreamBatchMemOp(stream, static_cast<unsigned int>(ops.size()), ops.data(), 0);
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:  // Kept for the graph's next launch; returned with the graph.
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult Run(const std::vector<GraphNode*>& order, CUstream stream) {
  for (const GraphNode* n : order) {
    if (!n->enabled) continue;
    if (CUresult r = RunNode(*n, stream); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// Whether the nodes' work is only kernels and memsets (and nodes that send nothing), whose messages a launch can
// record and a later one send again; collects the kernels and the memsets' memory into `record` (mu held). Other
// work reads the host's memory or state when it runs (copies, host functions, events).
bool Replayable(const std::vector<GraphNode*>& order, RecordedLaunch* record) {
  for (const GraphNode* n : order) {
    if (!n->enabled) continue;
    const NodeWork& w = n->work;
    switch (w.type) {
      case CU_GRAPH_NODE_TYPE_KERNEL:
        record->kernels.push_back({w.kernel, 0, w.shared_bytes});  // One per node: NoteFunctions merges them.
        break;
      case CU_GRAPH_NODE_TYPE_MEMSET:
        record->memsets.push_back(w.memset.dst);
        break;
      case CU_GRAPH_NODE_TYPE_EMPTY:
      case CU_GRAPH_NODE_TYPE_MEM_FREE:
        break;
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC:  // Its launch gives memory the program freed back to it (Run).
        return false;
      case CU_GRAPH_NODE_TYPE_GRAPH: {
        std::vector<GraphNode*> child;
        if (!TopologicalOrder(*w.child, &child) || !Replayable(child, record)) return false;
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

// Whether a launch would send `r`'s messages now: its kernels resolve to the functions they named then, with room
// for the shared memory they ask, and its memsets' memory is on the stream's slice still (no lock held).
bool StillHolds(const RecordedLaunch& r) {
  Remote& remote = Remote::Get();
  for (const auto& k : r.kernels) {
    RemoteFunctionInfo info;
    if (remote.FunctionOn(k.kernel, r.dev, &info) != CUDA_SUCCESS || info.handle != k.handle ||
        k.max_shared > static_cast<unsigned int>(MaxDynamicShared(*k.kernel, r.dev, info))) {
      return false;
    }
  }
  for (CUdeviceptr d : r.memsets) {
    if (remote.DeviceOf(d) != r.dev) return false;
  }
  return true;
}

// After a launch that recorded `r`: one entry per kernel, asking the most shared memory any of its nodes asks, with
// the function it resolved to (no lock held). Only once a recording is whole: a launch that cannot be sent again
// pays nothing for it.
bool NoteFunctions(RecordedLaunch* r) {
  auto& kernels = r->kernels;
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a.kernel < b.kernel; });
  size_t kept = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (kept > 0 && kernels[kept - 1].kernel == kernels[i].kernel) {
      kernels[kept - 1].max_shared = std::max(kernels[kept - 1].max_shared, kernels[i].max_shared);
    } else {
      kernels[kept++] = kernels[i];
    }
  }
  kernels.resize(kept);
  for (auto& k : kernels) {
    RemoteFunctionInfo info;
    if (Remote::Get().FunctionOn(k.kernel, r->dev, &info) != CUDA_SUCCESS) return false;
    k.handle = info.handle;
  }
  return true;
}

}  // namespace graph_internal

using namespace graph_internal;

bool MemoryFreedOutsideGraphs(CUdeviceptr address) {
  Lock lock(mu);
  auto it = graph_memory.find(address);
  if (it == graph_memory.end()) return false;
  auto memory = it->second.lock();
  if (memory == nullptr) {
    graph_memory.erase(it);
    return false;
  }
  memory->freed = true;  // Still graph memory: a free node of another graph may name it (the driver allows that).
  return true;
}

// ---- Graphs.

CUresult GraphCreate(CUgraph* out, unsigned int flags) {
  if (out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  auto g = std::make_shared<Graph>();
  Lock lock(mu);
  Register(g.get());
  owned[g.get()] = g;
  *out = reinterpret_cast<CUgraph>(g.get());
  return CUDA_SUCCESS;
}

CUresult GraphDestroy(CUgraph graph) {
  std::shared_ptr<Graph> g;  // Freed (graph memory with it) after the lock is released.
  Lock lock(mu);
  auto it = owned.find(reinterpret_cast<Graph*>(graph));
  if (it == owned.end()) return CUDA_ERROR_INVALID_VALUE;
  if (CapturedInto(it->second.get())) return CUDA_ERROR_ILLEGAL_STATE;  // Still being captured into.
  g = it->second;
  Unregister(g.get());
  owned.erase(it);
  return CUDA_SUCCESS;
}

CUresult GraphClone(CUgraph* out, CUgraph graph) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  Graph* g = reinterpret_cast<Graph*>(graph);
  if (!LiveGraph(g)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Graph> c = CloneGraph(*g);
  Register(c.get());
  owned[c.get()] = c;
  *out = reinterpret_cast<CUgraph>(c.get());
  return CUDA_SUCCESS;
}

CUresult GraphNodeFindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  GraphNode* n = N(original);
  Graph* c = reinterpret_cast<Graph*>(clone);
  if (!LiveNode(n) || !LiveGraph(c) || n->index >= c->nodes.size() || !c->nodes[n->index]->alive ||
      c->nodes[n->index]->work.type != n->work.type) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = H(c->nodes[n->index].get());
  return CUDA_SUCCESS;
}

CUresult GraphAddKernelNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                            const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeWork w;
  if (CUresult r = KernelWork(*p, &w); r != CUDA_SUCCESS) return r;
  return AddWork(out, graph, deps, count, std::move(w));
}

CUresult GraphAddKernelNodeV1(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                              const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS q = FromV1(*p);
  return GraphAddKernelNode(out, graph, deps, count, &q);
}

CUresult GraphAddMemcpyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                            const CUDA_MEMCPY3D* copy) {
  if (CUresult r = ValidateCopy(copy); r != CUDA_SUCCESS) return r;
  return AddWork(out, graph, deps, count, CopyWork(*copy));
}

CUresult GraphAddMemsetNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                            const CUDA_MEMSET_NODE_PARAMS* p) {
  if (CUresult r = ValidateMemset(p); r != CUDA_SUCCESS) return r;
  return AddWork(out, graph, deps, count, MemsetWork(*p));
}

CUresult GraphAddHostNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                          const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AddWork(out, graph, deps, count, HostWork(p->fn, p->userData));
}

CUresult GraphAddChildGraphNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                CUgraph child) {
  NodeWork w;
  {
    Lock lock(mu);
    if (child == graph) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = ChildWork(child, &w); r != CUDA_SUCCESS) return r;
  }
  return AddWork(out, graph, deps, count, std::move(w));
}

CUresult GraphAddEmptyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count) {
  return AddWork(out, graph, deps, count, NodeWork{});
}

// The operations of a batch node, checked now as cuStreamBatchMemOp checks them (the node runs them at launch).
CUresult BatchMemOpWork(unsigned int count, const CUstreamBatchMemOpParams* array, unsigned int flags, NodeWork* w) {
  if (flags != 0 || count == 0 || count >= 256 || array == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUstreamBatchMemOpParams> ops(array, array + count);
  for (const CUstreamBatchMemOpParams& op : ops) {
    if (CUresult r = ValidateMemOp(op); r != CUDA_SUCCESS) return r;
  }
  *w = MemOpWork(std::move(ops));
  return CUDA_SUCCESS;
}

CUresult GraphAddBatchMemOpNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeWork w;
  if (CUresult r = BatchMemOpWork(p->count, p->paramArray, p->flags, &w); r != CUDA_SUCCESS) return r;
  return AddWork(out, graph, deps, count, std::move(w));
}

CUresult GraphAddEventNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count, CUevent event,
                           CUgraphNodeType type) {
  Event* e;
  if (CUresult r = Remote::Get().ResolveEvent(event, &e); r != CUDA_SUCCESS) return r;
  return AddWork(out, graph, deps, count, EventWork(type, event));
}

CUresult GraphAddMemAllocNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                              CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);  // Held throughout: the graph checked is the graph the new memory's node joins.
  Graph* g = reinterpret_cast<Graph*>(graph);
  if (CUresult r = Checked(g, deps, count); r != CUDA_SUCCESS) return r;
  NodeWork w;
  if (CUresult r = AllocWork(p, &w); r != CUDA_SUCCESS) return r;
  *out = H(AddNode(g, std::move(w), deps, count));
  return CUDA_SUCCESS;
}

CUresult GraphAddMemFreeNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                             CUdeviceptr address) {
  if (CUresult r = MarkFreedInGraph(address); r != CUDA_SUCCESS) return r;
  NodeWork w;
  w.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  w.address = address;
  return AddWork(out, graph, deps, count, std::move(w));
}

// ---- Generic node parameters (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams).

namespace graph_internal {

CUresult WorkFromParams(const CUgraphNodeParams& p, NodeWork* w) {
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k{};
      std::memcpy(&k, &p.kernel, sizeof(k));  // v3 and v2 share their layout.
      return KernelWork(k, w);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (CUresult r = ValidateCopy(&p.memcpy.copyParams); r != CUDA_SUCCESS) return r;
      *w = CopyWork(p.memcpy.copyParams);
      return CUDA_SUCCESS;
      // Boilerplate by nature: field by field from the node's parameters to the driver's.
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS m{};
      m.dst = p.memset.dst;
      m.pitch = p.memset.pitch;
      m.value = p.memset.value;
      m.elementSize = p.memset.elementSize;
      m.width = p.memset.width;
      m.height = p.memset.height;
      if (CUresult r = ValidateMemset(&m); r != CUDA_SUCCESS) return r;
      *w = MemsetWork(m);
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      if (p.host.fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
      *w = HostWork(p.host.fn, p.host.userData);
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      Lock lock(mu);
      return ChildWork(p.graph.graph, w);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
      CUevent event = p.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? p.eventRecord.event : p.eventWait.event;
      Event* e;
      if (CUresult r = Remote::Get().ResolveEvent(event, &e); r != CUDA_SUCCESS) return r;
      *w = EventWork(p.type, event);
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
      return BatchMemOpWork(p.memOp.count, p.memOp.paramArray, p.memOp.flags, w);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      *w = NodeWork{};
      return CUDA_SUCCESS;
    default:
      GP_WARN("interpose", "graph nodes of type {} are not supported", static_cast<int>(p.type));
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// Replaces the work of `n` by `w` of the same type (node parameter updates keep the node's kind).
CUresult Replace(GraphNode* n, NodeWork w) {
  if (n == nullptr || n->work.type != w.type) return CUDA_ERROR_INVALID_VALUE;
  if (n->work.child) Unregister(n->work.child.get());
  n->work = std::move(w);
  if (n->work.child && LiveGraph(n->graph)) Register(n->work.child.get());
  return CUDA_SUCCESS;
}

}  // namespace graph_internal

CUresult GraphAddNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                      size_t count, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (edges != nullptr) {
    for (size_t i = 0; i < count; ++i) {
      if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT) return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    CUDA_MEM_ALLOC_NODE_PARAMS a{};
    a.poolProps = p->alloc.poolProps;
    a.accessDescs = p->alloc.accessDescs;
    a.accessDescCount = p->alloc.accessDescCount;
    a.bytesize = p->alloc.bytesize;
    CUresult r = GraphAddMemAllocNode(out, graph, deps, count, &a);
    p->alloc.dptr = a.dptr;
    return r;
  }
  if (p->type == CU_GRAPH_NODE_TYPE_MEM_FREE) return GraphAddMemFreeNode(out, graph, deps, count, p->free.dptr);
  NodeWork w;
  if (CUresult r = WorkFromParams(*p, &w); r != CUDA_SUCCESS) return r;
  return AddWork(out, graph, deps, count, std::move(w));
}

CUresult GraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeWork w;
  if (CUresult r = WorkFromParams(*p, &w); r != CUDA_SUCCESS) return r;
  Lock lock(mu);
  if (!LiveNode(N(node))) return CUDA_ERROR_INVALID_VALUE;
  return Replace(N(node), std::move(w));
}

CUresult GraphExecNodeSetParams(CUgraphExec exec_handle, CUgraphNode node, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeWork w;
  if (CUresult r = WorkFromParams(*p, &w); r != CUDA_SUCCESS) return r;
  Lock lock(mu);
  GraphNode* n;
  if (CUresult r = NodeInExec(exec_handle, node, &n); r != CUDA_SUCCESS) return r;
  return Replace(n, std::move(w));
}

// ---- Per-type node parameters.

namespace {

// The live node `node` of type `type` (mu held), or null.
GraphNode* NodeOfType(CUgraphNode node, CUgraphNodeType type) {
  GraphNode* n = N(node);
  return LiveNode(n) && n->work.type == type ? n : nullptr;
}

// The typed getters: `read(node, out)` under the lock, for a live node of type `type`.
template <typename Out, typename Read>
CUresult ReadNode(CUgraphNode node, CUgraphNodeType type, Out* out, Read read) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  GraphNode* n = NodeOfType(node, type);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  read(*n, out);
  return CUDA_SUCCESS;
}

// Sets the work of a node of a graph (exec null) or of an executable graph.
CUresult SetWork(CUgraphExec exec_handle, CUgraphNode node, NodeWork w) {
  Lock lock(mu);
  if (exec_handle == nullptr) return Replace(NodeOfType(node, w.type), std::move(w));
  GraphNode* n;
  if (CUresult r = NodeInExec(exec_handle, node, &n); r != CUDA_SUCCESS) return r;
  return Replace(n, std::move(w));
}

}  // namespace

CUresult KernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  return ReadNode(node, CU_GRAPH_NODE_TYPE_KERNEL, p, [](GraphNode& n, auto* out) { KernelParamsOf(&n, out); });
}

CUresult KernelNodeGetParamsV1(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS q;
  if (CUresult r = KernelNodeGetParams(node, &q); r != CUDA_SUCCESS) return r;
  std::memcpy(p, &q, sizeof(*p));  // The prefix (see FromV1).
  return CUDA_SUCCESS;
}

CUresult KernelNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeWork w;
  if (CUresult r = KernelWork(*p, &w); r != CUDA_SUCCESS) return r;
  return SetWork(exec, node, std::move(w));
}

CUresult KernelNodeSetParamsV1(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS q = FromV1(*p);
  return KernelNodeSetParams(exec, node, &q);
}

CUresult MemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* p) {
  return ReadNode(node, CU_GRAPH_NODE_TYPE_MEMCPY, p, [](GraphNode& n, auto* out) { *out = n.work.copy; });
}

CUresult MemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p) {
  if (CUresult r = ValidateCopy(p); r != CUDA_SUCCESS) return r;
  return SetWork(exec, node, CopyWork(*p));
}

CUresult MemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  return ReadNode(node, CU_GRAPH_NODE_TYPE_MEMSET, p, [](GraphNode& n, auto* out) { *out = n.work.memset; });
}

CUresult MemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  if (CUresult r = ValidateMemset(p); r != CUDA_SUCCESS) return r;
  return SetWork(exec, node, MemsetWork(*p));
}

CUresult HostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) {
  return ReadNode(node, CU_GRAPH_NODE_TYPE_HOST, p, [](GraphNode& n, auto* out) {
    out->fn = n.work.host_fn;
    out->userData = n.work.host_data;
  });
}

CUresult HostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return SetWork(exec, node, HostWork(p->fn, p->userData));
}

CUresult ChildGraphNodeGetGraph(CUgraphNode node, CUgraph* graph) {
  return ReadNode(node, CU_GRAPH_NODE_TYPE_GRAPH, graph,
                  [](GraphNode& n, auto* out) { *out = reinterpret_cast<CUgraph>(n.work.child.get()); });
}

CUresult ExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  NodeWork w;
  {
    Lock lock(mu);
    if (CUresult r = ChildWork(child, &w); r != CUDA_SUCCESS) return r;
  }
  return SetWork(exec, node, std::move(w));
}

CUresult EventNodeGetEvent(CUgraphNode node, CUevent* event, CUgraphNodeType type) {
  return ReadNode(node, type, event, [](GraphNode& n, auto* out) { *out = n.work.event; });
}

CUresult EventNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event, CUgraphNodeType type) {
  Event* e;
  if (CUresult r = Remote::Get().ResolveEvent(event, &e); r != CUDA_SUCCESS) return r;
  return SetWork(exec, node, EventWork(type, event));
}

CUresult MemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  return ReadNode(node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, p, [](GraphNode& n, auto* out) {
    *out = CUDA_MEM_ALLOC_NODE_PARAMS{};
    out->poolProps = n.work.pool;
    out->bytesize = n.work.bytes;
    out->dptr = n.work.address;
  });
}

// A slice keeps no graph memory once no graph holds it (GraphMemory goes back with its last holder): a trim has
// nothing to give back, and succeeds on a device the program has.
CUresult DeviceGraphMemTrim(CUdevice device) {
  if (!IsSlice(device)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

CUresult DeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attribute, void* value) {
  if (!IsSlice(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  const GraphMemoryUse use = graph_memory_use[device];
  switch (attribute) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = static_cast<cuuint64_t>(use.now);
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = static_cast<cuuint64_t>(use.high);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Only the high marks can be set, and only to 0 (cuda.h): the mark starts again from what is held now.
CUresult DeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attribute, void* value) {
  if (!IsSlice(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (attribute != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attribute != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Lock lock(mu);
  GraphMemoryUse& use = graph_memory_use[device];
  use.high = use.now;
  return CUDA_SUCCESS;
}

// The node's own copy of its operations: valid while the node lives, as the driver's.
CUresult BatchMemOpNodeGetParams(CUgraphNode node, CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  return ReadNode(node, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p, [](GraphNode& n, auto* out) {
    *out = CUDA_BATCH_MEM_OP_NODE_PARAMS{};
    out->count = static_cast<unsigned int>(n.work.mem_ops.size());
    out->paramArray = n.work.mem_ops.data();
  });
}

// New operations for a batch node, of a graph or (`exec`) of an executable graph only, checked as when it was made.
CUresult BatchMemOpNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeWork w;
  if (CUresult r = BatchMemOpWork(p->count, p->paramArray, p->flags, &w); r != CUDA_SUCCESS) return r;
  return SetWork(exec, node, std::move(w));
}

CUresult MemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* address) {
  return ReadNode(node, CU_GRAPH_NODE_TYPE_MEM_FREE, address, [](GraphNode& n, auto* out) { *out = n.work.address; });
}

// ---- Structure.

CUresult GraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  if (!LiveNode(N(node))) return CUDA_ERROR_INVALID_VALUE;
  *type = N(node)->work.type;
  return CUDA_SUCCESS;
}

// cuGraphNodeGetContainingGraph (CUDA 13.1): the graph the node belongs to, a child graph's for a node inside one.
CUresult GraphNodeGetContainingGraph(CUgraphNode node, CUgraph* graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  if (!LiveNode(N(node))) return CUDA_ERROR_INVALID_VALUE;
  *graph = reinterpret_cast<CUgraph>(N(node)->graph);
  return CUDA_SUCCESS;
}

// cuGraphNodeGetLocalId (CUDA 13.1): the node's id within its graph. Its index there, given at creation and never
// reused (destroyed nodes keep theirs); a clone's node has its original's.
CUresult GraphNodeGetLocalId(CUgraphNode node, unsigned int* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  if (!LiveNode(N(node))) return CUDA_ERROR_INVALID_VALUE;
  if (N(node)->index > std::numeric_limits<unsigned int>::max()) return CUDA_ERROR_NOT_SUPPORTED;
  *id = static_cast<unsigned int>(N(node)->index);
  return CUDA_SUCCESS;
}

namespace {

// The cuGraphGet* convention: with a null array, *count = how many; else up to *count written, *count = written
// (the driver sets *count to the total, and fills min(total, given)).
template <typename Fill>
CUresult ListOut(size_t total, size_t* count, bool want, Fill fill) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (want) fill(std::min(total, *count));
  *count = total;
  return CUDA_SUCCESS;
}

std::vector<GraphNode*> Dependents(GraphNode* n) {
  std::vector<GraphNode*> out;
  for (auto& m : n->graph->nodes) {
    if (m->alive && std::find(m->deps.begin(), m->deps.end(), n) != m->deps.end()) out.push_back(m.get());
  }
  return out;
}

CUresult NodeList(const std::vector<GraphNode*>& nodes, CUgraphNode* out, CUgraphEdgeData* edges, size_t* count) {
  return ListOut(nodes.size(), count, out != nullptr, [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = H(nodes[i]);
      if (edges != nullptr) edges[i] = CUgraphEdgeData{};
    }
  });
}

}  // namespace

CUresult GraphGetNodes(CUgraph graph, CUgraphNode* out, size_t* count, bool roots_only) {
  Lock lock(mu);
  Graph* g = reinterpret_cast<Graph*>(graph);
  if (!LiveGraph(g)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<GraphNode*> nodes;
  for (auto& n : g->nodes) {
    if (n->alive && (!roots_only || n->deps.empty())) nodes.push_back(n.get());
  }
  return NodeList(nodes, out, nullptr, count);
}

CUresult GraphGetEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* count) {
  if ((from == nullptr) != (to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  Graph* g = reinterpret_cast<Graph*>(graph);
  if (!LiveGraph(g)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::pair<GraphNode*, GraphNode*>> all;
  for (auto& n : g->nodes) {
    if (!n->alive) continue;
    for (GraphNode* d : n->deps) all.emplace_back(d, n.get());
  }
  return ListOut(all.size(), count, from != nullptr, [&](size_t k) {
    for (size_t i = 0; i < k; ++i) {
      from[i] = H(all[i].first);
      to[i] = H(all[i].second);
      if (edges != nullptr) edges[i] = CUgraphEdgeData{};
    }
  });
}

CUresult GraphNodeGetDependencies(CUgraphNode node, CUgraphNode* out, CUgraphEdgeData* edges, size_t* count) {
  Lock lock(mu);
  if (!LiveNode(N(node))) return CUDA_ERROR_INVALID_VALUE;
  return NodeList(N(node)->deps, out, edges, count);
}

CUresult GraphNodeGetDependents(CUgraphNode node, CUgraphNode* out, CUgraphEdgeData* edges, size_t* count) {
  Lock lock(mu);
  if (!LiveNode(N(node))) return CUDA_ERROR_INVALID_VALUE;
  return NodeList(Dependents(N(node)), out, edges, count);
}

CUresult GraphChangeDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                 const CUgraphEdgeData* edges, size_t count, bool add) {
  if (count != 0 && (from == nullptr || to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (edges != nullptr) {
    for (size_t i = 0; i < count; ++i) {
      if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT) return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  Lock lock(mu);
  Graph* g = reinterpret_cast<Graph*>(graph);
  if (!LiveGraph(g)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    GraphNode *f = N(from[i]), *t = N(to[i]);
    if (!LiveNode(f) || !LiveNode(t) || f->graph != g || t->graph != g || f == t) return CUDA_ERROR_INVALID_VALUE;
    bool present = std::find(t->deps.begin(), t->deps.end(), f) != t->deps.end();
    if (add == present) return CUDA_ERROR_INVALID_VALUE;  // Adding an existing edge, removing a missing one.
  }
  for (size_t i = 0; i < count; ++i) {
    auto& deps = N(to[i])->deps;
    if (add) {
      deps.push_back(N(from[i]));
    } else {
      deps.erase(std::find(deps.begin(), deps.end(), N(from[i])));
    }
  }
  return CUDA_SUCCESS;
}

CUresult GraphDestroyNode(CUgraphNode node) {
  Lock lock(mu);
  GraphNode* n = N(node);
  if (!LiveNode(n)) return CUDA_ERROR_INVALID_VALUE;
  for (auto& m : n->graph->nodes) {
    m->deps.erase(std::remove(m->deps.begin(), m->deps.end(), n), m->deps.end());
  }
  n->deps.clear();
  n->alive = false;
  if (n->work.child) Unregister(n->work.child.get());
  n->work = NodeWork{};  // Its graph memory, argument copies and child graph go now.
  return CUDA_SUCCESS;
}

// ---- Executable graphs.

CUresult GraphInstantiate(CUgraphExec* out, CUgraph graph, unsigned long long flags, CUgraphNode* error_node,
                          CUgraphInstantiateResult* result) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (result != nullptr) *result = CUDA_GRAPH_INSTANTIATE_ERROR;
  if (error_node != nullptr) *error_node = nullptr;
  const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                   CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
    GP_WARN("interpose", "graphs launched from the device are not supported on gpupool slices");
    if (result != nullptr) *result = CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED;
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  auto exec = std::make_unique<GraphExec>();
  exec->flags = flags;
  Lock lock(mu);
  exec->generation = ++exec_generations;
  Graph* g = reinterpret_cast<Graph*>(graph);
  if (!LiveGraph(g)) return CUDA_ERROR_INVALID_VALUE;
  exec->graph = CloneGraph(*g);
  if (!TopologicalOrder(*exec->graph, &exec->order)) return CUDA_ERROR_INVALID_VALUE;  // A cycle.
  if (result != nullptr) *result = CUDA_GRAPH_INSTANTIATE_SUCCESS;
  execs.insert(exec.get());
  *out = reinterpret_cast<CUgraphExec>(exec.release());
  return CUDA_SUCCESS;
}

CUresult GraphInstantiateLegacy(CUgraphExec* out, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_size) {
  if (log != nullptr && log_size > 0) log[0] = '\0';
  return GraphInstantiate(out, graph, 0, error_node, nullptr);
}

CUresult GraphInstantiateWithParams(CUgraphExec* out, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = GraphInstantiate(out, graph, p->flags, &p->hErrNode_out, &p->result_out);
  if (r == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0 && p->hUploadStream != nullptr) {
    int dev;
    uint64_t sid;
    r = Remote::Get().ResolveStream(p->hUploadStream, &dev, &sid);
  }
  return r;
}

CUresult GraphExecGetFlags(CUgraphExec exec_handle, cuuint64_t* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  GraphExec* exec;
  if (CUresult r = ResolveExec(exec_handle, &exec); r != CUDA_SUCCESS) return r;
  *flags = exec->flags;
  return CUDA_SUCCESS;
}

CUresult GraphExecDestroy(CUgraphExec exec_handle) {
  std::unique_ptr<GraphExec> exec;  // Freed after the lock is released (graph memory goes with the last holder).
  Lock lock(mu);
  GraphExec* e;
  if (CUresult r = ResolveExec(exec_handle, &e); r != CUDA_SUCCESS) return r;
  execs.erase(e);
  exec.reset(e);
  return CUDA_SUCCESS;
}

// An executable graph's work in one go on `stream`. Launched into a capturing stream, it becomes a child graph
// node of that capture, as on a GPU.
CUresult GraphLaunch(CUgraphExec exec_handle, CUstream stream) {
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Graph> graph;
  std::vector<GraphNode*> order;
  std::shared_ptr<const RecordedLaunch> recorded;
  uint64_t generation;
  {
    Lock lock(mu);
    GraphExec* exec;
    if (CUresult r = ResolveExec(exec_handle, &exec); r != CUDA_SUCCESS) return r;
    graph = exec->graph;  // Kept alive while it runs, even if the program updates or destroys the exec meanwhile.
    order = exec->order;
    recorded = exec->recorded;
    generation = exec->generation;
  }
  // NVIDIA's driver refuses to capture a graph launch and invalidates the capture (an H100's, driver 580, in every
  // capture mode): a child graph belongs in a graph through cuGraphAddChildGraphNode.
  if (Capturing(stream)) return RefuseWhileCapturing(stream);
  // The nodes' work for the launch stream's slice travels as one message (work on other slices, and anything
  // that waits, such as a copy back to the host or a host node, is sent as it comes, after what was gathered).
  RemoteSession* session = Remote::Get().session(dev);
  // Launched again as it was: the messages the last launch built are sent as they are, without a walk of the nodes
  // (a graph of many kernels costs its launching thread microseconds, not a fraction of one per node).
  if (recorded && recorded->dev == dev && recorded->sid == sid && recorded->session == session &&
      StillHolds(*recorded)) {
    // Its kernels may use managed memory: the host's writes go first (the walk below does this per kernel).
    if (CUresult r = ManagedMemory::Get().BeforeKernel(dev, sid); r != CUDA_SUCCESS) return r;
    session->SendRecorded(recorded->batch);
    return CUDA_SUCCESS;
  }
  auto record = std::make_shared<RecordedLaunch>();
  record->dev = dev;
  record->sid = sid;
  record->session = session;
  bool replayable;
  {
    Lock lock(mu);
    replayable = Replayable(order, record.get());
  }
  session->BeginBatch(replayable ? &record->batch : nullptr);
  CUresult r = Run(order, stream);
  // A launch refused on one of its nodes sends none of what it gathered. Whole: every message of the launch is in
  // the record (a kernel's first launch on the slice, which loads its module with a call that waits, is not).
  const bool whole = session->EndBatch(r == CUDA_SUCCESS);
  if (r == CUDA_SUCCESS && replayable && whole && NoteFunctions(record.get()) && StillHolds(*record)) {
    Lock lock(mu);
    GraphExec* exec;
    if (ResolveExec(exec_handle, &exec) == CUDA_SUCCESS && exec->generation == generation) {
      GP_DEBUG("interpose", "graph launch recorded ({} message(s), {} kernel(s)): launched again unchanged, it sends them",
               record->batch.messages.size(), record->kernels.size());
      exec->recorded = std::move(record);
    }
  }
  return r;
}

CUresult GraphUpload(CUgraphExec exec_handle, CUstream stream) {
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  Lock lock(mu);
  GraphExec* exec;
  return ResolveExec(exec_handle, &exec);  // Nothing to prepare ahead: a launch sends the graph's work.
}

namespace {

// Whether `g` has the topology of `exec`'s graph: the same nodes (type and index) and the same edges.
bool SameTopology(const Graph& a, const Graph& b, GraphNode** mismatch, CUgraphExecUpdateResult* why) {
  if (a.nodes.size() != b.nodes.size()) {
    *why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return false;
  }
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const GraphNode &x = *a.nodes[i], &y = *b.nodes[i];
    if (x.alive != y.alive) {
      *why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    } else if (x.alive && x.work.type != y.work.type) {
      *why = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    } else if (x.deps.size() != y.deps.size() ||
               !std::equal(x.deps.begin(), x.deps.end(), y.deps.begin(),
                           [](GraphNode* p, GraphNode* q) { return p->index == q->index; })) {
      *why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    } else {
      continue;
    }
    *mismatch = b.nodes[i].get();
    return false;
  }
  return true;
}

}  // namespace

CUresult GraphExecUpdate(CUgraphExec exec_handle, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  if (info != nullptr) *info = CUgraphExecUpdateResultInfo{};
  Lock lock(mu);
  GraphExec* exec;
  if (CUresult r = ResolveExec(exec_handle, &exec); r != CUDA_SUCCESS) return r;
  Graph* g = reinterpret_cast<Graph*>(graph);
  if (!LiveGraph(g)) return CUDA_ERROR_INVALID_VALUE;
  GraphNode* mismatch = nullptr;
  CUgraphExecUpdateResult why = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  if (!SameTopology(*exec->graph, *g, &mismatch, &why)) {
    if (info != nullptr) {
      info->result = why;
      info->errorNode = H(mismatch);
    }
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  auto copy = CloneGraph(*g);
  for (size_t i = 0; i < copy->nodes.size(); ++i) copy->nodes[i]->enabled = exec->graph->nodes[i]->enabled;
  std::vector<GraphNode*> order;
  if (!TopologicalOrder(*copy, &order)) return CUDA_ERROR_INVALID_VALUE;
  Touched(exec);
  exec->graph = std::move(copy);
  exec->order = std::move(order);
  if (info != nullptr) info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult GraphExecUpdateV1(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node, CUgraphExecUpdateResult* result) {
  CUgraphExecUpdateResultInfo info{};
  CUresult r = GraphExecUpdate(exec, graph, &info);
  if (error_node != nullptr) *error_node = info.errorNode;
  if (result != nullptr) *result = info.result;
  return r;
}

namespace {
// The nodes an executable graph can enable and disable, as cuGraphNodeSetEnabled documents them and NVIDIA's
// driver enforces (an H100's, driver 580, refuses a child-graph node with CUDA_ERROR_INVALID_VALUE).
bool CanBeDisabled(const GraphNode& n) {
  return n.work.type == CU_GRAPH_NODE_TYPE_KERNEL || n.work.type == CU_GRAPH_NODE_TYPE_MEMCPY ||
         n.work.type == CU_GRAPH_NODE_TYPE_MEMSET;
}
}  // namespace

CUresult GraphNodeSetEnabled(CUgraphExec exec_handle, CUgraphNode node, unsigned int enabled) {
  Lock lock(mu);
  GraphNode* n;
  if (CUresult r = NodeInExec(exec_handle, node, &n); r != CUDA_SUCCESS) return r;
  if (!CanBeDisabled(*n)) return CUDA_ERROR_INVALID_VALUE;
  n->enabled = enabled != 0;
  return CUDA_SUCCESS;
}

CUresult GraphNodeGetEnabled(CUgraphExec exec_handle, CUgraphNode node, unsigned int* enabled) {
  if (enabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(mu);
  GraphNode* n;
  if (CUresult r = NodeInExec(exec_handle, node, &n); r != CUDA_SUCCESS) return r;
  if (!CanBeDisabled(*n)) return CUDA_ERROR_INVALID_VALUE;
  *enabled = n->enabled ? 1 : 0;
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_GRAPH_FORWARDS(GP_DEFINE_FORWARD)
