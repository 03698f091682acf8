// The simulated CUDA driver API, green contexts: the device's SM resource, its split into
// groups, descriptors, and green contexts made from them (cuGreenCtxCreate and the calls
// that use one). A green context is a context of its own, as cuCtxFromGreenCtx hands it out:
// it can be made current, allocated in and launched in like any other, and it holds a
// reference to its device's primary context while it lives, as CUDA documents.
//
// What it costs is not measured: modelled as the least convenient for gpuslice, each green
// context costs on the card what a context does (DeviceSpec::context_memory), beside the
// primary context it retains; its kernels run on the card's timeline like any other (the SM
// split makes the card neither faster nor slower for other tenants).
// docs/measurements/README.md, "Green contexts"; tests/gpu/run.sh measures it.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

namespace gs::sim {
namespace {

// Marks a CUdevResource as the simulator's, with the ordinal it describes, in the padding
// CUDA reserves for the driver.
constexpr uint32_t kResourceMagic = 0x47534752;  // "GSGR"
struct ResourceTag {
  uint32_t magic;
  int32_t ordinal;
};
static_assert(sizeof(ResourceTag) <= sizeof(CUdevResource::_internal_padding));

// CUDA's figures for an SM resource (not measured): Hopper partitions SMs in groups of 8
// co-scheduled SMs (a GPC's clusters), earlier architectures in pairs (a TPC).
unsigned SmAlignment(int ordinal) {
  return Spec(StateIndex(ordinal)).cc_major >= 9 ? 8 : 2;
}

void FillSm(CUdevResource* r, int ordinal, unsigned sms) {
  memset(r, 0, sizeof(*r));
  r->type = CU_DEV_RESOURCE_TYPE_SM;
  r->sm.smCount = sms;
  r->sm.minSmPartitionSize = SmAlignment(ordinal);
  r->sm.smCoscheduledAlignment = SmAlignment(ordinal);
  ResourceTag tag{kResourceMagic, ordinal};
  memcpy(r->_internal_padding, &tag, sizeof(tag));
}

// The ordinal a resource was made for; -1 when it is no SM resource of the simulator's.
int OrdinalOf(const CUdevResource* r) {
  if (r == nullptr || r->type != CU_DEV_RESOURCE_TYPE_SM) return -1;
  ResourceTag tag;
  memcpy(&tag, r->_internal_padding, sizeof(tag));
  return tag.magic == kResourceMagic && ValidOrdinal(tag.ordinal) ? tag.ordinal : -1;
}

GreenContext* Green(CUgreenCtx h) {
  return reinterpret_cast<GreenContext*>(h);
}

std::atomic<unsigned long long> g_next_green_id{1};

}  // namespace
}  // namespace gs::sim

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

GS_SIM_CUDA(cuDeviceGetDevResource)(CUdevice device, CUdevResource* resource, CUdevResourceType type) {
  GS_REQUIRE_INIT();
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  FillSm(resource, device, Spec(StateIndex(device)).sm_count);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxGetDevResource)(CUcontext hCtx, CUdevResource* resource, CUdevResourceType type) {
  GS_REQUIRE_INIT();
  auto* c = reinterpret_cast<Context*>(hCtx);
  if (c == nullptr) c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  FillSm(resource, c->ordinal, c->green_sms ? c->green_sms : Spec(c->device).sm_count);
  return CUDA_SUCCESS;
}

// Groups of max(minCount, the minimum partition) SMs rounded up to the alignment, as many as
// fit (or as asked for); what is left goes to `remaining`.
GS_SIM_CUDA(cuDevSmResourceSplitByCount)
(CUdevResource* result, unsigned int* nbGroups, const CUdevResource* input, CUdevResource* remaining,
 unsigned int useFlags, unsigned int minCount) {
  GS_REQUIRE_INIT();
  const int ordinal = OrdinalOf(input);
  if (nbGroups == nullptr || ordinal < 0) return CUDA_ERROR_INVALID_VALUE;
  if (input->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  if (minCount > input->sm.smCount || (useFlags & ~3u) != 0) return CUDA_ERROR_INVALID_VALUE;
  const unsigned align = (useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) ? 1 : SmAlignment(ordinal);
  const unsigned per = std::max((minCount + align - 1) / align * align, align);
  unsigned groups = input->sm.smCount / per;
  if (result != nullptr) groups = std::min(groups, *nbGroups);
  for (unsigned i = 0; result != nullptr && i < groups; ++i) FillSm(&result[i], ordinal, per);
  if (remaining != nullptr) FillSm(remaining, ordinal, input->sm.smCount - groups * per);
  *nbGroups = groups;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDevResourceGenerateDesc)(CUdevResourceDesc* phDesc, CUdevResource* resources, unsigned int nbResources) {
  GS_REQUIRE_INIT();
  if (phDesc == nullptr || resources == nullptr || nbResources == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* d = new ResourceDesc;
  d->ordinal = OrdinalOf(&resources[0]);
  for (unsigned i = 0; i < nbResources; ++i) {
    int ord = OrdinalOf(&resources[i]);
    if (ord < 0 || ord != d->ordinal) {
      delete d;
      return ord < 0 ? CUDA_ERROR_INVALID_RESOURCE_TYPE : CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    }
    d->sms += resources[i].sm.smCount;
  }
  *phDesc = reinterpret_cast<CUdevResourceDesc>(d);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGreenCtxCreate)(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
  GS_REQUIRE_INIT();
  auto* d = reinterpret_cast<ResourceDesc*>(desc);
  if (phCtx == nullptr || d == nullptr || flags != CU_GREEN_CTX_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev) || d->ordinal != dev) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext primary = nullptr;
  CUresult rc = gs_sim_cuda_cuDevicePrimaryCtxRetain(&primary, dev);
  if (rc != CUDA_SUCCESS) return rc;
  auto* g = new GreenContext;
  Context* c = &g->ctx;
  c->device = StateIndex(dev);
  c->ordinal = dev;
  c->refcount = 1;
  c->null_stream.ctx = c;
  c->green = g;
  c->green_sms = d->sms;
  ResetLimits(c);
  rc = ChargeContext(c);
  if (rc != CUDA_SUCCESS) {
    delete g;
    gs_sim_cuda_cuDevicePrimaryCtxRelease_v2(dev);
    return rc;
  }
  g->id = g_next_green_id.fetch_add(1);
  *phCtx = reinterpret_cast<CUgreenCtx>(g);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGreenCtxDestroy)(CUgreenCtx hCtx) {
  GS_REQUIRE_INIT();
  GreenContext* g = Green(hCtx);
  if (g == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = &g->ctx;
  WaitContext(c);
  t_ctx_stack.erase(std::remove(t_ctx_stack.begin(), t_ctx_stack.end(), c), t_ctx_stack.end());
  {
    std::lock_guard<std::mutex> lock(c->mu);
    ReleaseContextMemory(c);
  }
  UnchargeContext(c);
  const int ordinal = c->ordinal;
  delete g;
  gs_sim_cuda_cuDevicePrimaryCtxRelease_v2(ordinal);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuCtxFromGreenCtx)(CUcontext* pContext, CUgreenCtx hCtx) {
  GS_REQUIRE_INIT();
  if (pContext == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (hCtx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *pContext = reinterpret_cast<CUcontext>(&Green(hCtx)->ctx);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuGreenCtxGetDevResource)(CUgreenCtx hCtx, CUdevResource* resource, CUdevResourceType type) {
  GS_REQUIRE_INIT();
  if (hCtx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return gs_sim_cuda_cuCtxGetDevResource(reinterpret_cast<CUcontext>(&Green(hCtx)->ctx), resource, type);
}

GS_SIM_CUDA(cuGreenCtxGetId)(CUgreenCtx greenCtx, unsigned long long* greenCtxId) {
  GS_REQUIRE_INIT();
  if (greenCtx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (greenCtxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *greenCtxId = Green(greenCtx)->id;
  return CUDA_SUCCESS;
}

// CUDA requires CU_STREAM_NON_BLOCKING.
GS_SIM_CUDA(cuGreenCtxStreamCreate)(CUstream* phStream, CUgreenCtx greenCtx, unsigned int flags, int priority) {
  GS_REQUIRE_INIT();
  if (greenCtx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (phStream == nullptr || (flags & CU_STREAM_NON_BLOCKING) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* st = new Stream;
  st->ctx = &Green(greenCtx)->ctx;
  st->flags = flags;
  st->priority = priority;
  *phStream = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

// The regular context of a stream and, when it belongs to one, its green context.
GS_SIM_CUDA(cuStreamGetCtx_v2)(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  GS_REQUIRE_INIT();
  if (pCtx == nullptr && pGreenCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = ResolveStream(hStream);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pCtx) *pCtx = reinterpret_cast<CUcontext>(st->ctx);
  if (pGreenCtx) *pGreenCtx = reinterpret_cast<CUgreenCtx>(st->ctx->green);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuStreamGetCtx_v2_ptsz, cuStreamGetCtx_v2)
