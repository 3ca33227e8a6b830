// What graph.cc (graphs, nodes, executable graphs and their launches) and graph_capture.cc (stream capture) share:
// the objects behind CUgraph, CUgraphNode and CUgraphExec, the lock that guards them all, and the helpers capture
// builds its graphs with. Internal to lib/interpose.
#ifndef GPUPOOL_INTERPOSE_GRAPH_INTERNAL_H_
#define GPUPOOL_INTERPOSE_GRAPH_INTERNAL_H_

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "graph.h"
#include "remote.h"

namespace gpupool::interpose {

struct GraphNode {
  Graph* graph = nullptr;
  size_t index = 0;  // In graph->nodes; a clone's node has its original's index.
  NodeWork work;
  std::vector<GraphNode*> deps;
  bool alive = true;
  bool enabled = true;  // cuGraphNodeSetEnabled, on executable graphs.
};

struct Graph {
  std::vector<std::unique_ptr<GraphNode>> nodes;  // Destroyed nodes stay (alive = false): indexes are stable.
};

// What a launch of an executable graph sent, kept to be sent again as it was (GraphLaunch): a graph of kernels and
// memsets only, whose messages depend on nothing but the nodes, the launch stream, and what `kernels` and `memsets`
// name, which a later launch checks (StillHolds) before it sends them.
struct RecordedLaunch {
  int dev = -1;
  uint64_t sid = 0;
  RemoteSession* session = nullptr;
  RemoteSession::RecordedBatch batch;
  struct KernelUse {
    Kernel* kernel;
    uint64_t handle;          // The function on the slice that the launches name.
    unsigned int max_shared;  // The most dynamic shared memory a launch of it asks for.
  };
  std::vector<KernelUse> kernels;
  std::vector<CUdeviceptr> memsets;  // Each memset's memory: on the launch stream's slice.
};

struct GraphExec {
  std::shared_ptr<Graph> graph;   // A copy of the instantiated graph.
  std::vector<GraphNode*> order;  // Its live nodes, dependencies first.
  unsigned long long flags = 0;
  // The last launch's messages, if they can be sent again; dropped whenever a node of the executable graph is
  // touched or the graph updated, which also gives `generation` a new number, never used before (so a launch that
  // recorded meanwhile, or one of an executable graph destroyed since, keeps nothing).
  std::shared_ptr<const RecordedLaunch> recorded;
  uint64_t generation = 0;
};

namespace graph_internal {

struct GraphMemory;

// Guards everything below and every Graph, GraphNode and GraphExec. Recursive: dropping a node's work may return
// graph memory (cuMemFree), which tells graph.cc about it.
extern std::recursive_mutex mu;
using Lock = std::lock_guard<std::recursive_mutex>;
extern std::set<Graph*>& graphs;                         // Live graphs, the program's and the child graphs inside them.
extern std::map<Graph*, std::shared_ptr<Graph>>& owned;  // The program's graphs, destroyed with cuGraphDestroy.
extern std::map<CUdeviceptr, std::weak_ptr<GraphMemory>>& graph_memory;

inline GraphNode* N(CUgraphNode h) { return reinterpret_cast<GraphNode*>(h); }
inline CUgraphNode H(GraphNode* n) { return reinterpret_cast<CUgraphNode>(n); }

// Adds `g` (and the child graphs inside it) to the live graphs, or takes them out.
void Register(Graph* g);
void Unregister(Graph* g);
// Checks that `deps` are `count` live nodes of `g`.
CUresult CheckDeps(Graph* g, const CUgraphNode* deps, size_t count);
// Appends a node doing `work` after `deps` (checked) to `g`.
GraphNode* AddNode(Graph* g, NodeWork work, const CUgraphNode* deps, size_t count);
NodeWork EventWork(CUgraphNodeType type, CUevent event);
// A memory allocation node's work: the memory is allocated now (its address known when the node is made).
CUresult AllocWork(CUDA_MEM_ALLOC_NODE_PARAMS* p, NodeWork* w);
// A free node for `address` is being made: only graph memory can be freed in a graph.
CUresult MarkFreedInGraph(CUdeviceptr address);

// Whether a stream capture is building `g` (graph_capture.cc): it cannot be destroyed then.
bool CapturedInto(const Graph* g);

}  // namespace graph_internal
}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_GRAPH_INTERNAL_H_
