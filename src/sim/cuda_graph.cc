// The simulated CUDA driver API, graphs: stream capture, kernel and memory nodes,
// instantiation, launch.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <algorithm>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

CUresult gs::sim::AllocInGraphCapture(Stream* st, size_t bytes, CUdeviceptr* dptr) {
  // Graph allocations get their address at capture and are charged from then until a
  // free node runs or the graph is destroyed (the simulator does not defer the charge).
  CUresult rc = AllocateDevice(st->ctx->device, bytes, AllocKind::kGraph, nullptr, dptr);
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
void ReleaseGraphAllocation(Graph* g, CUdeviceptr p) {
  auto it = std::find(g->owned_allocations.begin(), g->owned_allocations.end(), p);
  if (it == g->owned_allocations.end()) return;
  g->owned_allocations.erase(it);
  FreeAllocation(static_cast<uintptr_t>(p), false);
}

// Frees the graph and its memory once neither it nor an executable of it exists.
void DeleteGraphIfUnused(Graph* g) {
  if (!g->destroyed || g->execs > 0) return;
  while (!g->owned_allocations.empty()) ReleaseGraphAllocation(g, g->owned_allocations.back());
  delete g;
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
  if (g == nullptr || g->destroyed) return CUDA_ERROR_INVALID_VALUE;
  g->destroyed = true;
  DeleteGraphIfUnused(g);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphAddKernelNode_v2)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS* p) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || p == nullptr || phGraphNode == nullptr || p->func == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* fn = reinterpret_cast<Function*>(p->func);
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kKernel;
  n->fn = fn;
  n->blocks = static_cast<uint64_t>(p->gridDimX) * p->gridDimY * p->gridDimZ;
  n->threads = static_cast<uint64_t>(p->blockDimX) * p->blockDimY * p->blockDimZ;
  n->spin_ns = fn->kind == KernelKind::kSpin ? SpinParam(p->kernelParams, p->extra) : kDefaultWaveNs;
  *phGraphNode = reinterpret_cast<CUgraphNode>(n.get());
  g->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphAddMemAllocNode)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || nodeParams == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !ValidOrdinal(nodeParams->poolProps.location.id))
    return CUDA_ERROR_INVALID_VALUE;
  int dev = StateIndex(nodeParams->poolProps.location.id);
  CUresult rc = AllocateDevice(dev, nodeParams->bytesize, AllocKind::kGraph, nullptr, &nodeParams->dptr);
  if (rc != CUDA_SUCCESS) return rc;
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemAlloc;
  n->ptr = nodeParams->dptr;
  n->bytes = nodeParams->bytesize;
  g->owned_allocations.push_back(nodeParams->dptr);
  *phGraphNode = reinterpret_cast<CUgraphNode>(n.get());
  g->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphAddMemFreeNode)
(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t, CUdeviceptr dptr) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto n = std::make_unique<GraphNode>();
  n->type = GraphNode::Type::kMemFree;
  n->ptr = dptr;
  *phGraphNode = reinterpret_cast<CUgraphNode>(n.get());
  g->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGraphInstantiateWithFlags)(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long) {
  GS_REQUIRE_INIT();
  auto* g = reinterpret_cast<Graph*>(hGraph);
  if (g == nullptr || phGraphExec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Instantiation prepares every kernel node, so kernels not loaded yet (lazy loading) are
  // loaded here: memory no launch or resolution call shows.
  for (auto& n : g->nodes)
    if (n->type == GraphNode::Type::kKernel && n->fn)
      if (CUresult rc = EnsureLoaded(n->fn); rc != CUDA_SUCCESS) return rc;
  auto* e = new GraphExec;
  e->graph = g;
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
  for (auto& n : e->nodes) {
    switch (n.type) {
      case GraphNode::Type::kKernel:
        if (CUresult rc = EnqueueKernel(st, KernelDurationNs(Spec(st->ctx->device), n.blocks, n.threads, n.spin_ns));
            rc != CUDA_SUCCESS)
          return rc;
        break;
      case GraphNode::Type::kMemFree:
        WaitStream(st);
        ReleaseGraphAllocation(e->graph, n.ptr);
        break;
      default:
        break;
    }
  }
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuGraphLaunch_ptsz, cuGraphLaunch)
