// The simulated CUDA driver API, graphs: stream capture, kernel, memset and memory nodes
// (their own calls and cuGraphAddNode), cloning, instantiation, launch, and the device's
// graph memory (trim, attributes).
// Shared state and helpers: src/sim/cuda_driver.h.
#include <sys/mman.h>

#include <algorithm>
#include <vector>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

CUresult gs::sim::ReserveGraphAddress(int dev, size_t bytes, CUdeviceptr* out) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t map_size = RoundUp(bytes, 4096);
  void* p = MapLazy(map_size);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a{bytes, map_size, dev, AllocKind::kGraph, nullptr, CurrentContext()};
  a.graph_held = true;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->allocations[reinterpret_cast<uintptr_t>(p)] = a;
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult gs::sim::AllocInGraphCapture(Stream* st, size_t bytes, CUdeviceptr* dptr) {
  // A captured allocation is a graph allocation node: its address now, its memory at launch.
  CUresult rc = ReserveGraphAddress(st->ctx->device, bytes, dptr);
  if (rc != CUDA_SUCCESS) return rc;
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemAlloc;
  n->ptr = *dptr;
  n->bytes = bytes;
  st->capture->owned_allocations.push_back(*dptr);
  st->capture->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

namespace {
// No graph names the address any more: it goes now unless a launch's memory is still
// allocated there (then it goes when that is freed, FreeAllocation).
void ForgetGraphAddress(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.find(static_cast<uintptr_t>(p));
  if (it == g_driver->allocations.end() || it->second.kind != AllocKind::kGraph) return;  // gone with its context
  if (it->second.pool) {
    it->second.graph_held = false;
    return;
  }
  munmap(reinterpret_cast<void*>(it->first), it->second.map_size);
  g_driver->allocations.erase(it);
}

// Deletes the graph once neither it nor an executable of it exists.
void DeleteGraphIfUnused(Graph* g) {
  if (!g->destroyed || g->execs > 0) return;
  for (CUdeviceptr p : g->owned_allocations) ForgetGraphAddress(p);
  for (Graph* child : g->children) delete child;
  delete g;
}

// A graph with memory allocation or free nodes is not cloned, nor made a child by cloning,
// and has at most one executable at a time (CUDA documents it; the H200 answered a clone
// and a second instantiation with CUDA_ERROR_NOT_SUPPORTED, docs/measurements/h200-driver.md,
// "Graph memory").
bool HasMemoryNodes(const Graph& g) {
  for (const auto& n : g.nodes)
    if (n->type == GraphNode::Type::kMemAlloc || n->type == GraphNode::Type::kMemFree) return true;
  return false;
}

// A launch's allocation nodes take their memory, all or none, before anything runs: from
// what the device's graph memory pool holds free first, the rest from the card. An address
// whose previous launch's memory is not freed yet is CUDA_ERROR_INVALID_VALUE (measured on
// the H200: a second launch before the free); a card without room, CUDA_ERROR_OUT_OF_MEMORY.
CUresult TakeGraphMemory(const std::vector<uintptr_t>& addrs) {
  std::lock_guard<std::mutex> lock(g_driver->mu);
  std::vector<Allocation*> todo;
  for (uintptr_t p : addrs) {
    auto it = g_driver->allocations.find(p);
    if (it == g_driver->allocations.end() || it->second.kind != AllocKind::kGraph || it->second.pool != nullptr)
      return CUDA_ERROR_INVALID_VALUE;
    todo.push_back(&it->second);
  }
  std::vector<uint64_t> fresh;  // what each took from the card
  for (Allocation* a : todo) {
    MemPool* pool = &g_driver->graph_pool[a->device];
    uint64_t reused = std::min<uint64_t>(a->size, pool->reserved_now - pool->used_now);
    uint64_t need = a->size - reused;
    if (need > 0 && !node()->Reserve(a->device, need)) {
      for (size_t i = 0; i < fresh.size(); ++i) {  // undo the ones taken
        Allocation* done = todo[i];
        done->pool->used_now -= done->size;
        done->pool->reserved_now -= fresh[i];
        if (fresh[i]) node()->Release(done->device, fresh[i]);
        done->pool = nullptr;
      }
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->used_now += a->size;
    pool->reserved_now += need;
    pool->used_high = std::max(pool->used_high, pool->used_now);
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved_now);
    a->pool = pool;
    fresh.push_back(need);
  }
  return CUDA_SUCCESS;
}

// The device's graph memory pool, by CUdevice; null for an invalid ordinal.
MemPool* GraphPool(CUdevice dev) {
  return ValidOrdinal(dev) ? &g_driver->graph_pool[StateIndex(dev)] : nullptr;
}
}  // namespace

GS_SIM_CUDA(cuStreamBeginCapture_v2)(CUstream hStream, CUstreamCaptureMode) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (IsNullStream(st)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (st->capture) return CUDA_ERROR_ILLEGAL_STATE;
  st->capture = new Graph;
  st->capture->device = st->ctx->device;
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2)

GS_SIM_CUDA(cuStreamEndCapture)(CUstream hStream, CUgraph* phGraph) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr || phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (st->capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  *phGraph = reinterpret_cast<CUgraph>(st->capture);
  st->capture = nullptr;
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamEndCapture_ptsz, cuStreamEndCapture)

GS_SIM_CUDA(cuStreamIsCapturing)(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr || captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *captureStatus = st->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamIsCapturing_ptsz, cuStreamIsCapturing)

GS_SIM_CUDA(cuGraphCreate)(CUgraph* phGraph, unsigned int flags) {
  GS_REQUIRE_INIT();
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *phGraph = reinterpret_cast<CUgraph>(new Graph);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphDestroy)(CUgraph hGraph) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || g->destroyed || g->moved) return CUDA_ERROR_INVALID_VALUE;
  g->destroyed = true;
  DeleteGraphIfUnused(g);
  return CUDA_SUCCESS;
}

namespace {
CUgraphNode AddNode(Graph* g, std::unique_ptr<GraphNode> n) {
  auto* handle = reinterpret_cast<CUgraphNode>(n.get());
  g->nodes.push_back(std::move(n));
  return handle;
}

CUresult AddKernelNode(Graph* g, CUfunction func, const unsigned grid[3], const unsigned block[3], void** params,
                       void** extra, CUgraphNode* out) {
  if (func == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* fn = reinterpret_cast<Function*>(func);
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kKernel;
  n->fn = fn;
  n->blocks = static_cast<uint64_t>(grid[0]) * grid[1] * grid[2];
  n->threads = static_cast<uint64_t>(block[0]) * block[1] * block[2];
  n->spin_ns = fn->kind == KernelKind::kSpin ? SpinParam(params, extra) : kDefaultWaveNs;
  *out = AddNode(g, std::move(n));
  return CUDA_SUCCESS;
}

// An allocation node: its address reserved now (the graph owns it), its memory at launch.
CUresult AddAllocNode(Graph* g, const CUmemPoolProps& props, size_t bytes, CUdeviceptr* dptr, CUgraphNode* out) {
  if (g->moved) return CUDA_ERROR_INVALID_VALUE;
  if (props.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !ValidOrdinal(props.location.id))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = ReserveGraphAddress(StateIndex(props.location.id), bytes, dptr);
  if (rc != CUDA_SUCCESS) return rc;
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemAlloc;
  n->ptr = *dptr;
  n->bytes = bytes;
  g->owned_allocations.push_back(*dptr);
  *out = AddNode(g, std::move(n));
  return CUDA_SUCCESS;
}

CUgraphNode AddFreeNode(Graph* g, CUdeviceptr dptr) {
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemFree;
  n->ptr = dptr;
  return AddNode(g, std::move(n));
}

// A memset node: `height` rows of `width` elements of 1, 2 or 4 bytes, `pitch` bytes apart.
CUresult AddMemsetNode(Graph* g, const CUDA_MEMSET_NODE_PARAMS_v2& p, CUgraphNode* out) {
  if (p.elementSize != 1 && p.elementSize != 2 && p.elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
  if (p.width == 0 || p.height == 0 || (p.height > 1 && p.pitch < p.width * p.elementSize))
    return CUDA_ERROR_INVALID_VALUE;
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemset;
  n->ptr = p.dst;
  n->bytes = p.width;
  n->rows = p.height;
  n->pitch = p.pitch;
  n->value = p.value;
  n->elem = p.elementSize;
  *out = AddNode(g, std::move(n));
  return CUDA_SUCCESS;
}

CUresult RunMemset(const GraphNode& n) {
  for (size_t row = 0; row < n.rows; ++row) {
    CUdeviceptr dst = n.ptr + row * n.pitch;
    CUresult rc = n.elem == 1   ? gs_sim_cuda_cuMemsetD8_v2(dst, static_cast<unsigned char>(n.value), n.bytes)
                  : n.elem == 2 ? gs_sim_cuda_cuMemsetD16_v2(dst, static_cast<unsigned short>(n.value), n.bytes)
                                : gs_sim_cuda_cuMemsetD32_v2(dst, n.value, n.bytes);
    if (rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

// A child graph node: the child's nodes run in the parent, in order, after an empty node
// that stands for them. Cloned (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE, and
// cuGraphAddChildGraphNode): a child with memory nodes is CUDA_ERROR_NOT_SUPPORTED. Moved:
// its nodes and allocations become the parent's, and the parent destroys it.
CUresult AddChildGraph(Graph* g, Graph* child, bool move, CUgraphNode* out) {
  if (child == nullptr || child == g || child->destroyed || child->moved) return CUDA_ERROR_INVALID_VALUE;
  if (!move && HasMemoryNodes(*child)) return CUDA_ERROR_NOT_SUPPORTED;
  if (g->device < 0) g->device = child->device;
  *out = AddNode(g, std::make_unique<GraphNode>());
  for (auto& n : child->nodes) g->nodes.push_back(move ? std::move(n) : std::make_unique<GraphNode>(*n));
  if (!move) return CUDA_SUCCESS;
  child->nodes.clear();
  g->owned_allocations.insert(g->owned_allocations.end(), child->owned_allocations.begin(),
                              child->owned_allocations.end());
  child->owned_allocations.clear();
  child->moved = true;
  g->children.push_back(child);
  return CUDA_SUCCESS;
}

// cuGraphAddNode: the node types the simulator's graphs model.
CUresult AddNodeOfType(Graph* g, CUgraphNodeParams* p, CUgraphNode* out) {
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
      *out = AddNode(g, std::make_unique<GraphNode>());
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS_v3& k = p->kernel;
      const unsigned grid[3] = {k.gridDimX, k.gridDimY, k.gridDimZ};
      const unsigned block[3] = {k.blockDimX, k.blockDimY, k.blockDimZ};
      // A CUkernel is the simulator's Function too (src/sim/cuda_module.cc).
      CUfunction fn = k.func != nullptr ? k.func : reinterpret_cast<CUfunction>(k.kern);
      return AddKernelNode(g, fn, grid, block, k.kernelParams, k.extra, out);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return AddMemsetNode(g, p->memset, out);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return AddAllocNode(g, p->alloc.poolProps, p->alloc.bytesize, &p->alloc.dptr, out);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      if (g->moved) return CUDA_ERROR_INVALID_VALUE;
      *out = AddFreeNode(g, p->free.dptr);
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE &&
          p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
        return CUDA_ERROR_INVALID_VALUE;
      return AddChildGraph(g, reinterpret_cast<Graph*>(p->graph.graph),
                           p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE, out);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}
}  // namespace

GS_SIM_CUDA(cuGraphAddKernelNode_v2)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS* p) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || p == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  return AddKernelNode(g, p->func, grid, block, p->kernelParams, p->extra, phGraphNode);
}

GS_SIM_CUDA(cuGraphAddChildGraphNode)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, CUgraph childGraph) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AddChildGraph(g, reinterpret_cast<Graph*>(childGraph), false, phGraphNode);
}

GS_SIM_CUDA(cuGraphAddMemAllocNode)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || nodeParams == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AddAllocNode(g, nodeParams->poolProps, nodeParams->bytesize, &nodeParams->dptr, phGraphNode);
}

GS_SIM_CUDA(cuGraphAddMemFreeNode)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || g->moved || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phGraphNode = AddFreeNode(g, dptr);
  return CUDA_SUCCESS;
}

// Empty, kernel, memset, memory allocation and free nodes; other types are
// CUDA_ERROR_NOT_SUPPORTED. An allocation node is cuGraphAddMemAllocNode's, and its address
// is returned in nodeParams->alloc.dptr.
GS_SIM_CUDA(cuGraphAddNode)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, CUgraphNodeParams* nodeParams) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || nodeParams == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AddNodeOfType(g, nodeParams, phGraphNode);
}

GS_SIM_CUDA(cuGraphAddNode_v2)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
 CUgraphNodeParams* nodeParams) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || nodeParams == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AddNodeOfType(g, nodeParams, phGraphNode);
}

// A graph with memory allocation or free nodes is not cloned: CUDA_ERROR_NOT_SUPPORTED, as
// CUDA documents and the H200 answered (docs/measurements/h200-driver.md, "Graph memory").
// Other graphs are copied node by node.
GS_SIM_CUDA(cuGraphClone)(CUgraph* phGraphClone, CUgraph originalGraph) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(originalGraph);
  if (g == nullptr || g->destroyed || phGraphClone == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (HasMemoryNodes(*g)) return CUDA_ERROR_NOT_SUPPORTED;
  auto* clone = new Graph;
  clone->device = g->device;
  for (const auto& n : g->nodes) clone->nodes.push_back(std::make_unique<GraphNode>(*n));
  *phGraphClone = reinterpret_cast<CUgraph>(clone);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphInstantiateWithFlags)(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || phGraphExec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A child graph moved into its parent is not instantiated on its own: an H100 answered
  // CUDA_ERROR_NOT_SUPPORTED (docs/measurements/README.md, "Child graphs").
  if (g->moved) return CUDA_ERROR_NOT_SUPPORTED;
  if (g->execs > 0 && HasMemoryNodes(*g)) return CUDA_ERROR_NOT_SUPPORTED;
  // Instantiation prepares every kernel node, so kernels not loaded yet (lazy loading) are
  // loaded here: memory no launch or resolution call shows.
  for (auto& n : g->nodes)
    if (n->type == GraphNode::Type::kKernel && n->fn)
      if (CUresult rc = EnsureLoaded(n->fn); rc != CUDA_SUCCESS) return rc;
  auto* e = new GraphExec;
  e->graph = g;
  e->auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  ++g->execs;
  for (auto& n : g->nodes) e->nodes.push_back(*n);
  *phGraphExec = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphExecDestroy)(CUgraphExec hGraphExec) {
  GS_REQUIRE_INIT();
  if (hGraphExec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = reinterpret_cast<GraphExec*>(hGraphExec);
  Graph* g = e->graph;
  delete e;
  --g->execs;
  DeleteGraphIfUnused(g);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphLaunch)(CUgraphExec hGraphExec, CUstream hStream) {
  GS_REQUIRE_INIT();
  auto* e = reinterpret_cast<GraphExec*>(hGraphExec);
  Stream* st = ResolveStream(hStream);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<uintptr_t> allocs;
  for (auto& n : e->nodes)
    if (n.type == GraphNode::Type::kMemAlloc) allocs.push_back(static_cast<uintptr_t>(n.ptr));
  if (e->auto_free && !allocs.empty()) {
    WaitStream(st);
    for (uintptr_t p : allocs) FreeAllocation(p, false);  // those not allocated: nothing to free
  }
  if (CUresult rc = TakeGraphMemory(allocs); rc != CUDA_SUCCESS) return rc;
  for (auto& n : e->nodes) {
    switch (n.type) {
      case GraphNode::Type::kKernel:
        if (CUresult rc = EnqueueKernel(st, KernelDurationNs(Spec(st->ctx->device), n.blocks, n.threads, n.spin_ns));
            rc != CUDA_SUCCESS)
          return rc;
        break;
      case GraphNode::Type::kMemset:
        WaitStream(st);
        if (CUresult rc = RunMemset(n); rc != CUDA_SUCCESS) return rc;
        break;
      case GraphNode::Type::kMemFree:
        // Back to the device's graph memory pool, which keeps it on the card.
        WaitStream(st);
        FreeAllocation(static_cast<uintptr_t>(n.ptr), false);
        break;
      default:
        break;
    }
  }
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuGraphLaunch_ptsz, cuGraphLaunch)

// The device's graph memory pool gives the card back what it holds free.
GS_SIM_CUDA(cuDeviceGraphMemTrim)(CUdevice device) {
  GS_REQUIRE_INIT();
  MemPool* pool = GraphPool(device);
  if (pool == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  TrimPool(pool, 0);
  return CUDA_SUCCESS;
}

// USED: graph memory allocated by launches and not freed; RESERVED: what the graph memory
// pool holds on the card (that and what it keeps free); HIGH: their watermarks.
GS_SIM_CUDA(cuDeviceGetGraphMemAttribute)(CUdevice device, CUgraphMem_attribute attr, void* value) {
  GS_REQUIRE_INIT();
  MemPool* pool = GraphPool(device);
  if (pool == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  cuuint64_t v = 0;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      v = pool->used_now;
      break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      v = pool->used_high;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      v = pool->reserved_now;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      v = pool->reserved_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<cuuint64_t*>(value) = v;
  return CUDA_SUCCESS;
}

// Only the watermarks can be set, and only to zero (CUDA documents it): they restart from
// what is used or reserved now.
GS_SIM_CUDA(cuDeviceSetGraphMemAttribute)(CUdevice device, CUgraphMem_attribute attr, void* value) {
  GS_REQUIRE_INIT();
  MemPool* pool = GraphPool(device);
  if (pool == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
    pool->used_high = pool->used_now;
  else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
    pool->reserved_high = pool->reserved_now;
  else
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
