// The simulated CUDA driver API, contexts: create and destroy, the current-context stack,
// primary contexts, limits, and what a context costs on the card.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <sys/mman.h>

#include <algorithm>

#include "src/sim/compute_capability.h"
#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

namespace gs::sim {
namespace {

// What a per-thread stack of `stack` bytes costs beyond the context's own 1 KiB: the
// driver reserves it for every thread the card can hold at once (SMs x resident threads
// per SM, as cuDeviceGetAttribute reports them: 2048 on an H100 or A100, 1536 on an L4,
// 1024 on a T4). Measured on the H100 (docs/measurements/h100-driver.md, "What device memory costs"):
// raising the stack to 64 KiB added 16,632 MiB = (64 - 1) KiB x 132 SMs x 2048 threads.
// UINT64_MAX when it overflows.
uint64_t StackBytes(int dev, size_t stack) {
  const uint64_t base = DefaultLimit(CU_LIMIT_STACK_SIZE);
  if (stack <= base) return 0;
  const DeviceSpec& spec = Spec(dev);
  uint64_t threads = static_cast<uint64_t>(spec.sm_count) *
                     LimitsForComputeCapability(spec.cc_major, spec.cc_minor).max_threads_per_sm;
  uint64_t per_thread = stack - base;
  if (threads && per_thread > (UINT64_MAX - kDriverPage) / threads) return UINT64_MAX;
  return RoundUp(per_thread * threads, kDriverPage);
}

// The memory allocated in a context and its modules' .global memory and code, given back.
void ReleaseContextAllocations(Context* c) {
  std::lock_guard<std::mutex> lock(g_driver->mu);
  for (auto it = g_driver->allocations.begin(); it != g_driver->allocations.end();) {
    const Allocation& a = it->second;
    if (a.ctx != c) {
      ++it;
      continue;
    }
    if (a.pool) {
      a.pool->used_now -= a.size;
      a.pool->reserved_now -= a.size;
      if (a.share >= 0) RememberFreedShare(a.pool, a.share, a.share_id);
    }
    // A graph allocation is on the card only while a launch holds it (a.pool set).
    if (a.kind != AllocKind::kGraph || a.pool) ReleaseAllocationMemory(a);
    if (a.map_size) munmap(reinterpret_cast<void*>(it->first), a.map_size);
    it = g_driver->allocations.erase(it);
  }
  for (Module* m : c->modules) {
    if (m->global_bytes + m->code_charged) node()->Release(c->device, m->global_bytes + m->code_charged);
    m->global_bytes = 0;
    m->code_bytes = m->code_charged = 0;
    m->ctx = nullptr;  // the handle stays, as dead as on a real driver
  }
  c->modules.clear();
}

}  // namespace

// Gives back what a context holds when it goes away (destroyed, last primary reference
// released, reset): the memory allocated in it, its stack reservation and its modules'
// .global memory and code; its limits return to the defaults. Called with c->mu held.
void ReleaseContextMemory(Context* c) {
  if (c->stack_bytes) node()->Release(c->device, c->stack_bytes);
  c->stack_bytes = 0;
  ResetLimits(c);
  ReleaseContextAllocations(c);
  // What the device's pools and its graph memory hold free goes back with the context (the
  // simulator's process has one context per device at a time; its next one starts with
  // empty pools).
  TrimPool(&g_driver->default_pool[c->device], 0);
  TrimPool(&g_driver->graph_pool[c->device], 0);
  std::vector<MemPool*> pools;
  {
    std::lock_guard<std::mutex> lock(g_driver->mu);
    for (MemPool* p : g_driver->created_pools)
      if (p->device == c->device) pools.push_back(p);
  }
  for (MemPool* p : pools) TrimPool(p, 0);
}

// Beside its listed footprint a context holds memory that NVML lists under no process: on
// an H200 about 5.7 MiB per context and 3 MiB besides (14, 20, 31 MiB beside 2, 3, 5
// contexts, docs/measurements/h200-driver.md, 2026-11-28); on an H100 8 MiB beyond NVML's
// figure for one context and 14 for two in one process (docs/measurements/h100-driver.md).
// Modelled as 6 MiB per context, on every card whose contexts cost memory (a
// scenario with `context_memory: 0` makes them wholly free).
constexpr uint64_t kContextUnlistedBytes = 6ull << 20;

CUresult ChargeContext(Context* ctx) {
  uint64_t overhead = Spec(ctx->device).context_memory;
  if (overhead == 0) return CUDA_SUCCESS;
  if (!node()->Reserve(ctx->device, overhead)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!node()->ReserveUnlisted(ctx->device, kContextUnlistedBytes)) {
    node()->Release(ctx->device, overhead);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

void UnchargeContext(Context* ctx) {
  uint64_t overhead = Spec(ctx->device).context_memory;
  if (overhead == 0) return;
  node()->Release(ctx->device, overhead);
  node()->ReleaseUnlisted(ctx->device, kContextUnlistedBytes);
}

namespace {

CUresult CreateContext(CUcontext* pctx, unsigned flags, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  auto* ctx = new Context;
  ctx->device = StateIndex(dev);
  ctx->ordinal = dev;
  ctx->flags = flags;
  ctx->refcount = 1;
  ctx->null_stream.ctx = ctx;
  ResetLimits(ctx);
  CUresult rc = ChargeContext(ctx);
  if (rc != CUDA_SUCCESS) {
    delete ctx;
    return rc;
  }
  t_ctx_stack.push_back(ctx);
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gs::sim

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

GS_SIM_CUDA(cuCtxCreate_v2)(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
GS_SIM_CUDA(cuCtxCreate_v3)(CUcontext* pctx, CUexecAffinityParam*, int, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
GS_SIM_CUDA(cuCtxCreate_v4)(CUcontext* pctx, CUctxCreateParams*, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}

GS_SIM_CUDA(cuCtxDestroy_v2)(CUcontext ctx) {
  GS_REQUIRE_INIT();
  auto* c = reinterpret_cast<Context*>(ctx);
  // A primary context goes with its last reference, a green context's with cuGreenCtxDestroy.
  if (c == nullptr || c->primary || c->green) return CUDA_ERROR_INVALID_CONTEXT;
  WaitContext(c);
  t_ctx_stack.erase(std::remove(t_ctx_stack.begin(), t_ctx_stack.end(), c), t_ctx_stack.end());
  {
    std::lock_guard<std::mutex> lock(c->mu);
    ReleaseContextMemory(c);
  }
  UnchargeContext(c);
  delete c;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetCurrent)(CUcontext* pctx) {
  GS_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(CurrentContext());
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxSetCurrent)(CUcontext ctx) {
  GS_REQUIRE_INIT();
  if (!t_ctx_stack.empty()) t_ctx_stack.pop_back();
  if (ctx) t_ctx_stack.push_back(reinterpret_cast<Context*>(ctx));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxPushCurrent_v2)(CUcontext ctx) {
  GS_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  t_ctx_stack.push_back(reinterpret_cast<Context*>(ctx));
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxPopCurrent_v2)(CUcontext* pctx) {
  GS_REQUIRE_INIT();
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(t_ctx_stack.back());
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetDevice)(CUdevice* device) {
  GS_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = c->ordinal;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetFlags)(unsigned int* flags) {
  GS_REQUIRE_INIT();
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags) *flags = c->flags;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetApiVersion)(CUcontext, unsigned int* version) {
  GS_REQUIRE_INIT();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxSynchronize)(void) {
  GS_REQUIRE_INIT();
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  WaitContext(c);
  TrimPoolsAtSync(c->device);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetLimit)(size_t* pvalue, CUlimit limit) {
  GS_REQUIRE_INIT();
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(c->mu);
  *pvalue = c->limits[limit];
  return CUDA_SUCCESS;
}

// What the limits cost, as measured on the H100 (docs/measurements/h100-driver.md, "What device memory
// costs"): the stack is reserved at once for every resident thread (StackBytes), refused
// with CUDA_ERROR_OUT_OF_MEMORY when the card has not that much free; the malloc heap and
// the printf FIFO cost nothing until a kernel uses them (1 GiB heap, 256 MiB FIFO: +0 MiB),
// and no simulated kernel does. Lowering the stack gives its memory back (not measured).
GS_SIM_CUDA(cuCtxSetLimit)(CUlimit limit, size_t value) {
  GS_REQUIRE_INIT();
  if (limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  if (limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED) return CUDA_ERROR_INVALID_VALUE;  // query only
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(c->mu);
  if (limit == CU_LIMIT_STACK_SIZE) {
    uint64_t want = StackBytes(c->device, value);
    if (want > c->stack_bytes && !node()->Reserve(c->device, want - c->stack_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (want < c->stack_bytes) node()->Release(c->device, c->stack_bytes - want);
    c->stack_bytes = want;
  }
  c->limits[limit] = value;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxRetain)(CUcontext* pctx, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = &g_driver->primary[StateIndex(dev)];
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->refcount == 0) {
    CUresult rc = ChargeContext(c);
    if (rc != CUDA_SUCCESS) return rc;
  }
  ++c->refcount;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxRelease_v2)(CUdevice dev) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = &g_driver->primary[StateIndex(dev)];
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--c->refcount == 0) {
    ReleaseContextMemory(c);
    UnchargeContext(c);
  }
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxReset_v2)(CUdevice dev) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = &g_driver->primary[StateIndex(dev)];
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->refcount > 0) {
    ReleaseContextMemory(c);
    UnchargeContext(c);
  }
  c->refcount = 0;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int* flags, int* active) {
  GS_REQUIRE_INIT();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = &g_driver->primary[StateIndex(dev)];
  std::lock_guard<std::mutex> lock(c->mu);
  *flags = c->flags;
  *active = c->refcount > 0;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevicePrimaryCtxSetFlags_v2)(CUdevice dev, unsigned int flags) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  g_driver->primary[StateIndex(dev)].flags = flags;
  return CUDA_SUCCESS;
}
