// Stream capture (cuStreamBeginCapture ... cuStreamEndCapture): the work a capturing stream is given becomes nodes
// of a graph, joined across streams through events, as the driver records it (see graph.h). The entry points are
// generated from forward_spec.h.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "driver.h"
#include "forward_spec.h"
#include "graph_internal.h"

namespace gpupool::interpose {

// With fake devices: checks a default-stream handle and the current context (stream.cc).
CUresult FakeDefaultStream(CUstream handle);

using namespace graph_internal;

namespace {

struct Capture {
  uint64_t id = 0;
  std::shared_ptr<Graph> graph;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  bool invalidated = false;
  CUstream origin = nullptr;
};
struct StreamCapture {
  std::shared_ptr<Capture> capture;
  std::vector<CUgraphNode> deps;  // Where the stream's next captured node goes (cuStreamGetCaptureInfo).
  std::vector<CUgraphEdgeData> edges;
};
std::map<CUstream, StreamCapture>& capturing = *new std::map<CUstream, StreamCapture>;
struct EventCapture {
  std::shared_ptr<Capture> capture;
  std::vector<CUgraphNode> nodes;
};
std::map<CUevent, EventCapture>& captured_events = *new std::map<CUevent, EventCapture>;
std::atomic<int> capturing_streams{0};
std::atomic<uint64_t> next_capture_id{1};
thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

// ---- Capture helpers (mu held).

// The per-thread default stream is one handle for every thread, but each thread's is a stream of its own: its
// captures are kept under an address unique to the thread.
CUstream CaptureKey(CUstream stream) {
  static thread_local char this_thread;
  return stream == CU_STREAM_PER_THREAD ? reinterpret_cast<CUstream>(&this_thread) : stream;
}

StreamCapture* CaptureEntry(CUstream stream) {
  auto it = capturing.find(CaptureKey(stream));
  return it == capturing.end() ? nullptr : &it->second;
}

void Join(CUstream stream, const std::shared_ptr<Capture>& capture, std::vector<CUgraphNode> deps) {
  auto [it, added] = capturing.try_emplace(CaptureKey(stream));
  if (added) capturing_streams.fetch_add(1);
  it->second.capture = capture;
  it->second.deps = std::move(deps);
  it->second.edges.assign(it->second.deps.size(), CUgraphEdgeData{});
}

void SetDeps(StreamCapture* s, std::vector<CUgraphNode> deps) {
  s->deps = std::move(deps);
  s->edges.assign(s->deps.size(), CUgraphEdgeData{});
}

// Ends every stream's and event's part in `capture`.
void EndCapture(const std::shared_ptr<Capture>& capture) {
  for (auto it = capturing.begin(); it != capturing.end();) {
    if (it->second.capture == capture) {
      it = capturing.erase(it);
      capturing_streams.fetch_sub(1);
    } else {
      ++it;
    }
  }
  for (auto it = captured_events.begin(); it != captured_events.end();) {
    it = it->second.capture == capture ? captured_events.erase(it) : std::next(it);
  }
}

// Whether every node of `nodes` is among `tips` or their ancestors.
bool AllReach(const std::vector<CUgraphNode>& nodes, const std::vector<CUgraphNode>& tips) {
  std::set<GraphNode*> seen;
  std::vector<GraphNode*> todo;
  for (CUgraphNode t : tips) todo.push_back(N(t));
  while (!todo.empty()) {
    GraphNode* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    for (GraphNode* d : n->deps) todo.push_back(d);
  }
  return std::all_of(nodes.begin(), nodes.end(), [&](CUgraphNode n) { return seen.count(N(n)) != 0; });
}

CUresult ResolveCapturable(CUstream stream) {
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  // The legacy default stream cannot be captured (as with the driver); the per-thread one, named by its handle, can.
  // (Programs built with --default-stream per-thread reach here with NULL through the _ptsz entry points, which
  // share the legacy ones' implementation: their NULL stream is refused.)
  if (sid == 0 && stream != CU_STREAM_PER_THREAD) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return CUDA_SUCCESS;
}

}  // namespace

namespace graph_internal {

bool CapturedInto(const Graph* g) {
  for (const auto& [stream, entry] : capturing) {
    if (entry.capture->graph.get() == g) return true;
  }
  return false;
}

}  // namespace graph_internal

// ---- Capture, as the stream and event calls see it.

bool Capturing(CUstream stream) {
  if (capturing_streams.load(std::memory_order_relaxed) == 0) return false;
  Lock lock(mu);
  return CaptureEntry(stream) != nullptr;
}

CUresult CaptureWork(CUstream stream, NodeWork work) {
  Lock lock(mu);
  StreamCapture* s = CaptureEntry(stream);
  if (s == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (s->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  GraphNode* n = AddNode(s->capture->graph.get(), std::move(work), s->deps.data(), s->deps.size());
  SetDeps(s, {H(n)});
  return CUDA_SUCCESS;
}

bool CaptureEventRecord(CUevent event, CUstream stream, CUresult* result) {
  if (capturing_streams.load(std::memory_order_relaxed) == 0 && captured_events.empty()) return false;
  Lock lock(mu);
  StreamCapture* s = CaptureEntry(stream);
  if (s == nullptr) {
    captured_events.erase(event);  // Recorded again outside any capture: no longer a capture's event.
    return false;
  }
  captured_events[event] = EventCapture{s->capture, s->deps};
  *result = s->capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  return true;
}

bool CaptureEventWait(CUstream stream, CUevent event, CUresult* result) {
  if (capturing_streams.load(std::memory_order_relaxed) == 0) return false;
  Lock lock(mu);
  StreamCapture* s = CaptureEntry(stream);
  auto e = captured_events.find(event);
  if (e == captured_events.end()) {
    if (s == nullptr) return false;
    // An event of work outside the capture: the graph waits for it when it runs.
    GraphNode* n = AddNode(s->capture->graph.get(), EventWork(CU_GRAPH_NODE_TYPE_WAIT_EVENT, event), s->deps.data(),
                           s->deps.size());
    SetDeps(s, {H(n)});
    *result = CUDA_SUCCESS;
    return true;
  }
  const EventCapture& ec = e->second;
  if (s == nullptr) {
    Join(stream, ec.capture, ec.nodes);  // The fork: this stream now captures into the same graph.
  } else if (s->capture != ec.capture) {
    s->capture->invalidated = true;
    *result = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    return true;
  } else {
    std::vector<CUgraphNode> deps = s->deps;
    for (CUgraphNode n : ec.nodes) {
      if (std::find(deps.begin(), deps.end(), n) == deps.end()) deps.push_back(n);
    }
    SetDeps(s, std::move(deps));
  }
  *result = CUDA_SUCCESS;
  return true;
}

CUresult RefuseWhileCapturing(CUstream stream) {
  Lock lock(mu);
  if (StreamCapture* s = CaptureEntry(stream)) s->capture->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult CaptureMemAlloc(CUstream stream, int device, size_t bytes, CUdeviceptr* address) {
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  p.bytesize = bytes;
  NodeWork work;
  {
    Lock lock(mu);
    if (CUresult r = AllocWork(&p, &work); r != CUDA_SUCCESS) return r;
  }
  std::shared_ptr<void> memory = work.memory;
  if (CUresult r = CaptureWork(stream, std::move(work)); r != CUDA_SUCCESS) {
    MemFree(p.dptr);  // Not in any graph: nothing else would return it.
    return r;
  }
  *address = p.dptr;
  return CUDA_SUCCESS;
}

CUresult CaptureMemFree(CUstream stream, CUdeviceptr address) {
  if (CUresult r = MarkFreedInGraph(address); r != CUDA_SUCCESS) return r;
  NodeWork work;
  work.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  work.address = address;
  return CaptureWork(stream, std::move(work));
}

// ---- Stream capture entry points.

CUresult StreamBeginCapture(CUstream stream, CUgraph graph, const CUgraphNode* deps, size_t count,
                            CUstreamCaptureMode mode) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = ResolveCapturable(stream); r != CUDA_SUCCESS) return r;
  Lock lock(mu);
  if (CaptureEntry(stream) != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  auto capture = std::make_shared<Capture>();
  capture->id = next_capture_id.fetch_add(1);
  capture->mode = mode;
  capture->origin = CaptureKey(stream);
  if (graph != nullptr) {  // cuStreamBeginCaptureToGraph: into the program's graph, after `deps`.
    auto it = owned.find(reinterpret_cast<Graph*>(graph));
    if (it == owned.end()) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = CheckDeps(it->first, deps, count); r != CUDA_SUCCESS) return r;
    capture->graph = it->second;
  } else {
    capture->graph = std::make_shared<Graph>();
    Register(capture->graph.get());
  }
  Join(stream, capture, std::vector<CUgraphNode>(deps, deps + count));
  return CUDA_SUCCESS;
}

CUresult StreamEndCapture(CUstream stream, CUgraph* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ResolveCapturable(stream); r != CUDA_SUCCESS) return r;
  Lock lock(mu);
  StreamCapture* s = CaptureEntry(stream);
  if (s == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  std::shared_ptr<Capture> capture = s->capture;
  const CUstream key = CaptureKey(stream);
  if (capture->origin != key) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  // Every stream that forked from the capture must have been joined back into the origin stream.
  bool joined = true;
  for (const auto& [other, entry] : capturing) {
    if (other != key && entry.capture == capture && !AllReach(entry.deps, s->deps)) joined = false;
  }
  EndCapture(capture);
  *out = nullptr;
  const bool into_program_graph = owned.count(capture->graph.get()) != 0;
  if (capture->invalidated || !joined) {
    if (!into_program_graph) Unregister(capture->graph.get());
    return capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  if (!into_program_graph) owned[capture->graph.get()] = capture->graph;
  *out = reinterpret_cast<CUgraph>(capture->graph.get());
  return CUDA_SUCCESS;
}

CUresult StreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  if (!remote.attached()) {
    if (CUresult r = FakeDefaultStream(stream); r != CUDA_SUCCESS) return r;
  } else {
    int dev;
    uint64_t sid;
    if (CUresult r = remote.ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  }
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (capturing_streams.load(std::memory_order_relaxed) == 0) return CUDA_SUCCESS;
  Lock lock(mu);
  if (StreamCapture* s = CaptureEntry(stream)) {
    *status = s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  return CUDA_SUCCESS;
}

CUresult StreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                              const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count) {
  if (CUresult r = StreamIsCapturing(stream, status); r != CUDA_SUCCESS) return r;
  if (id != nullptr) *id = 0;
  if (graph != nullptr) *graph = nullptr;
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = 0;
  if (*status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  Lock lock(mu);
  StreamCapture* s = CaptureEntry(stream);
  if (s == nullptr) return CUDA_SUCCESS;  // Ended meanwhile by another thread.
  if (id != nullptr) *id = s->capture->id;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(s->capture->graph.get());
  // The arrays stay valid until the stream's next captured call, as the driver promises.
  if (deps != nullptr) *deps = s->deps.data();
  if (edges != nullptr) *edges = s->edges.data();
  if (count != nullptr) *count = s->deps.size();
  return CUDA_SUCCESS;
}

CUresult StreamUpdateCaptureDependencies(CUstream stream, CUgraphNode* deps, const CUgraphEdgeData* edges, size_t count,
                                         unsigned int flags) {
  if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (edges != nullptr) {
    for (size_t i = 0; i < count; ++i) {
      if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT) return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  if (CUresult r = ResolveCapturable(stream); r != CUDA_SUCCESS) return r;
  Lock lock(mu);
  StreamCapture* s = CaptureEntry(stream);
  if (s == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (CUresult r = CheckDeps(s->capture->graph.get(), deps, count); r != CUDA_SUCCESS) return r;
  std::vector<CUgraphNode> now = flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES ? std::vector<CUgraphNode>{} : s->deps;
  for (size_t i = 0; i < count; ++i) {
    if (std::find(now.begin(), now.end(), deps[i]) == now.end()) now.push_back(deps[i]);
  }
  SetDeps(s, std::move(now));
  return CUDA_SUCCESS;
}

CUresult ThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::swap(*mode, thread_mode);
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_CAPTURE_FORWARDS(GP_DEFINE_FORWARD)
