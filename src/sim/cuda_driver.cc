// The simulated CUDA driver's shared state and helpers (src/sim/cuda_driver.h).
#include "src/sim/cuda_driver.h"

#include <sys/mman.h>

#include <algorithm>

namespace gs::sim {

Driver* g_driver = nullptr;
thread_local std::vector<Context*> t_ctx_stack;
bool g_forked_after_init = false;
std::atomic<bool> g_shut_down{false};

// ---- memory helpers -------------------------------------------------------------------

void* MapLazy(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

size_t RoundUp(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

// Charges `bytes` to device `dev` and maps backing memory; records the allocation.
CUresult AllocateDevice(int dev, size_t bytes, AllocKind kind, MemPool* pool, CUdeviceptr* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (node()->IsLost(dev)) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  // A pool serves what it holds free first; only the rest is new memory on the card.
  uint64_t reused = 0;
  if (pool) {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    reused = std::min<uint64_t>(bytes, pool->reserved_now - pool->used_now);
    pool->used_now += reused;
  }
  auto unreuse = [&] {
    if (reused == 0) return;
    std::lock_guard<std::mutex> lock(g_driver->mu);
    pool->used_now -= reused;
  };
  if (bytes > reused && !node()->Reserve(dev, bytes - reused)) {
    unreuse();
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  size_t map_size = RoundUp(bytes, 4096);
  void* p = MapLazy(map_size);
  if (p == nullptr) {
    if (bytes > reused) node()->Release(dev, bytes - reused);
    unreuse();
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Context* ctx = CurrentContext();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, map_size, dev, kind, pool, ctx};
  if (pool) {
    pool->used_now += bytes - reused;
    pool->reserved_now += bytes - reused;
    pool->used_high = std::max(pool->used_high, pool->used_now);
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved_now);
  }
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

void RememberFreedShare(MemPool* pool, int index, uint64_t id) {
  auto& kept = pool->freed_shares;
  ShareInfo info;
  kept.erase(std::remove_if(kept.begin(), kept.end(),
                            [&](const auto& e) { return !node()->ShareOf(e.first, e.second, &info); }),
             kept.end());
  kept.emplace_back(index, id);
}

void TrimPool(MemPool* pool, uint64_t keep) {
  uint64_t given_back = 0;
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    uint64_t floor = std::max(keep, pool->used_now);
    if (pool->reserved_now <= floor) return;
    given_back = pool->reserved_now - floor;
    pool->reserved_now = floor;
  }
  node()->Release(pool->device, given_back);
}

void TrimPoolsAtSync(int dev) {
  std::vector<MemPool*> pools;
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    pools.push_back(&g_driver->default_pool[dev]);
    for (MemPool* p : g_driver->created_pools)
      if (p->device == dev) pools.push_back(p);
  }
  for (MemPool* p : pools) TrimPool(p, p->release_threshold);
}

CUresult FreeAllocation(uintptr_t addr, bool host) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    auto it = g_driver->allocations.find(addr);
    if (it == g_driver->allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    bool is_host = it->second.kind == AllocKind::kHost;
    if (is_host != host || it->second.kind == AllocKind::kHostRegistered || it->second.kind == AllocKind::kVmm ||
        it->second.kind == AllocKind::kIpc)
      return CUDA_ERROR_INVALID_VALUE;
    if (it->second.kind == AllocKind::kGraph) {
      // Graph memory goes back to its device's graph memory pool, still on the card; the
      // address stays while its graph or an executable of it exists.
      Allocation& g = it->second;
      if (g.pool == nullptr) return CUDA_ERROR_INVALID_VALUE;  // no launch allocated it
      g.pool->used_now -= g.size;
      g.pool = nullptr;
      if (g.graph_held) return CUDA_SUCCESS;
      a = g;
      g_driver->allocations.erase(it);
      munmap(reinterpret_cast<void*>(addr), a.map_size);
      return CUDA_SUCCESS;
    }
    a = it->second;
    if (a.pool) a.pool->used_now -= a.size;  // stays reserved in the pool (TrimPool)
    // Exported from its pool: it leaves the pool's figures and stays on the card while
    // importers hold it, and then while the pool lives (src/sim/node_shares.cc).
    if (a.pool && a.share >= 0) {
      a.pool->reserved_now -= a.size;
      RememberFreedShare(a.pool, a.share, a.share_id);
    }
    g_driver->allocations.erase(it);
  }
  if (a.pool == nullptr || a.share >= 0) ReleaseAllocationMemory(a);
  if (a.map_size) munmap(reinterpret_cast<void*>(addr), a.map_size);
  return CUDA_SUCCESS;
}

// True when [p, p+n) lies inside one known allocation (device, host or mapped VMM).
bool ValidRange(uintptr_t p, size_t n) {
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->allocations.upper_bound(p);
  if (it == g_driver->allocations.begin()) return false;
  --it;
  size_t extent = it->second.map_size ? it->second.map_size : it->second.size;
  return p >= it->first && p + n <= it->first + std::max(extent, it->second.size);
}

// Host pointers in copies may be any host memory; only device sides are checked.
CUresult CheckDevice(CUdeviceptr p, size_t n) {
  return ValidRange(static_cast<uintptr_t>(p), n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- streams and time -----------------------------------------------------------------

Stream* ResolveStream(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
    Context* ctx = CurrentContext();
    return ctx ? &ctx->null_stream : nullptr;
  }
  return reinterpret_cast<Stream*>(s);
}

bool IsNullStream(const Stream* st) {
  return st == &st->ctx->null_stream;
}

// Queues a kernel of duration_ns on st; blocks while the stream's queue is full. The
// device runs a process's work in launch order, so stream and context order hold.
CUresult EnqueueKernel(Stream* st, int64_t duration_ns) {
  Context* ctx = st->ctx;
  std::lock_guard<std::mutex> lock(st->mu);
  int64_t& oldest = st->pending[st->launches % Stream::kMaxPending];
  node()->WaitWork(ctx->device, oldest);
  int64_t mark = node()->Enqueue(ctx->device, duration_ns);
  if (mark < 0) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;  // more processes than the card serves
  oldest = mark;
  ++st->launches;
  st->tail = mark;
  std::lock_guard<std::mutex> ctx_lock(ctx->mu);
  ctx->tail = std::max(ctx->tail, mark);
  return CUDA_SUCCESS;
}

int64_t StreamTail(Stream* st) {
  std::lock_guard<std::mutex> lock(st->mu);
  return st->tail;
}

int64_t ContextTail(Context* ctx) {
  std::lock_guard<std::mutex> lock(ctx->mu);
  return ctx->tail;
}

// The legacy default stream orders against all work in its context.
int64_t StreamOrderTail(Stream* st) {
  return IsNullStream(st) ? std::max(StreamTail(st), ContextTail(st->ctx)) : StreamTail(st);
}

void WaitStream(Stream* st) {
  node()->WaitWork(st->ctx->device, StreamOrderTail(st));
}

void WaitContext(Context* ctx) {
  node()->WaitWork(ctx->device, ContextTail(ctx));
}

bool EventDone(const CudaEvent* e) {
  return !e->recorded || node()->WorkDone(e->device, e->mark);
}

int64_t EventTime(const CudaEvent* e) {
  return std::max(e->recorded_at, node()->DoneAt(e->device, e->mark));
}

// ---- contexts -------------------------------------------------------------------------

// cuCtxGetLimit's values in a fresh context: the three memory limits' defaults are CUDA's
// documented ones (1 KiB of stack per thread, 1 MiB printf FIFO, 8 MiB malloc heap).
size_t DefaultLimit(int limit) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
      return 1024;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
      return 1u << 20;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      return 8u << 20;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
      return 2;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      return 2048;
    default:
      return 0;
  }
}

void ResetLimits(Context* c) {
  for (int i = 0; i < CU_LIMIT_MAX; ++i) c->limits[i] = DefaultLimit(i);
}

}  // namespace gs::sim
