// The simulated CUDA driver API, stream-ordered allocation and memory pools (shared between
// processes: src/sim/cuda_pool_ipc.cc).
// Shared state and helpers: src/sim/cuda_driver.h.
#include <unistd.h>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

GS_SIM_CUDA(cuDeviceGetDefaultMemPool)(CUmemoryPool* pool_out, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = reinterpret_cast<CUmemoryPool>(&g_driver->default_pool[StateIndex(dev)]);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetMemPool)(CUmemoryPool* pool, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = reinterpret_cast<CUmemoryPool>(g_driver->current_pool[StateIndex(dev)]);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceSetMemPool)(CUdevice dev, CUmemoryPool pool) {
  GS_REQUIRE_INIT();
  // An imported pool allocates nothing (src/sim/cuda_pool_ipc.cc).
  if (!ValidOrdinal(dev) || pool == nullptr || reinterpret_cast<MemPool*>(pool)->imported)
    return CUDA_ERROR_INVALID_VALUE;
  g_driver->current_pool[StateIndex(dev)] = reinterpret_cast<MemPool*>(pool);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolCreate)(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  GS_REQUIRE_INIT();
  if (pool == nullptr || poolProps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !ValidOrdinal(poolProps->location.id))
    return CUDA_ERROR_NOT_SUPPORTED;
  auto* p = new MemPool;
  p->device = StateIndex(poolProps->location.id);
  p->handle_types = poolProps->handleTypes;
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    g_driver->created_pools.insert(p);
  }
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolDestroy)(CUmemoryPool pool) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (auto& d : g_driver->default_pool)
    if (&d == p) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    if (g_driver->created_pools.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  TrimPool(p, 0);
  // Memory still allocated from it stays charged to the card until freed; the pool's
  // record of it goes with the pool (the allocations no longer name it).
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    for (auto& [addr, a] : g_driver->allocations)
      if (a.pool == p) a.pool = nullptr;
  }
  // What it kept of its allocations freed while imported leaves once no importer holds it.
  for (const auto& [index, id] : p->freed_shares) node()->PoolLetGo(index, id);
  if (p->fd >= 0) close(p->fd);
  delete p;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolTrimTo)(CUmemoryPool pool, size_t minBytesToKeep) {
  GS_REQUIRE_INIT();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  TrimPool(reinterpret_cast<MemPool*>(pool), minBytesToKeep);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolSetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) p->release_threshold = *static_cast<cuuint64_t*>(value);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemPoolGetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  cuuint64_t v = 0;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      v = p->release_threshold;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      v = p->reserved_now;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      v = p->used_now;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      v = p->used_high;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      v = p->reserved_high;
      break;
    default:
      *static_cast<int*>(value) = 0;
      return CUDA_SUCCESS;
  }
  *static_cast<cuuint64_t*>(value) = v;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAllocFromPoolAsync)(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  GS_REQUIRE_INIT();
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || p->imported) return CUDA_ERROR_INVALID_VALUE;  // an imported pool allocates nothing
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) return AllocInGraphCapture(st, bytesize, dptr);
  return AllocateDevice(p->device, bytesize, AllocKind::kPool, p, dptr);
}
GS_SIM_CUDA_SAME(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync)

GS_SIM_CUDA(cuMemAllocAsync)(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) return AllocInGraphCapture(st, bytesize, dptr);
  MemPool* p = g_driver->current_pool[st->ctx->device];
  return AllocateDevice(p->device, bytesize, AllocKind::kPool, p, dptr);
}
GS_SIM_CUDA_SAME(cuMemAllocAsync_ptsz, cuMemAllocAsync)

GS_SIM_CUDA(cuMemFreeAsync)(CUdeviceptr dptr, CUstream hStream) {
  GS_REQUIRE_INIT();
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (st->capture) {
    auto n = std::make_unique<GraphNode>();
    n->type = GraphNode::Type::kMemFree;
    n->ptr = dptr;
    st->capture->nodes.push_back(std::move(n));
    return CUDA_SUCCESS;
  }
  WaitStream(st);
  return FreeAllocation(static_cast<uintptr_t>(dptr), false);
}
GS_SIM_CUDA_SAME(cuMemFreeAsync_ptsz, cuMemFreeAsync)
