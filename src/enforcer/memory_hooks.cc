// Device memory: every allocation path reserves against the container's limit in the
// region before the driver is called, then commits or rolls back (ARCHITECTURE.md 3.2).
// A request that does not fit returns CUDA_ERROR_OUT_OF_MEMORY without calling the driver.
#include <algorithm>

#include "src/common/quantity.h"
#include "src/common/raw_log.h"
#include "src/enforcer/allocations.h"
#include "src/enforcer/enforcer.h"
#include "src/platform/cuda_array.h"

namespace gs::enforcer {
namespace {

constexpr uint64_t kPage = 2ull << 20;
constexpr uint64_t kModuleEstimate = 2ull << 20;  // code and constants of one module

// What an allocation costs on the card: the driver hands out large allocations in 2 MiB
// pages and sub-allocates small ones at 512-byte granularity.
uint64_t Footprint(uint64_t bytes) {
  uint64_t g = bytes >= kPage ? kPage : 512;
  return (bytes + g - 1) / g * g;
}

bool Limited(int dev) {
  return g_state.region != nullptr && g_state.slot != nullptr && dev >= 0;
}

bool ReserveOrLog(int dev, uint64_t bytes, bool spilled, const char* api) {
  if (region::Reserve(g_state.region, g_state.slot, dev, bytes, spilled, g_state.cfg.memory_limit[dev])) return true;
  char want[32], used[32], limit[32];
  const auto& d = g_state.region->devices[dev];
  uint64_t lim = d.memory_limit.load();
  if (g_state.cfg.memory_limit[dev] && (lim == 0 || g_state.cfg.memory_limit[dev] < lim))
    lim = g_state.cfg.memory_limit[dev];
  GS_LOG(kInfo, "%s of %s refused: device %d would exceed its limit (%s used of %s)", api,
         FormatBytes(bytes, want, sizeof(want)), dev, FormatBytes(d.memory_used.load(), used, sizeof(used)),
         FormatBytes(lim, limit, sizeof(limit)));
  return false;
}

// Reserve, call, commit or roll back. `call` returns the driver's result; on success
// `record` stores the charge under the new handle.
template <typename Call, typename Record>
CUresult Charged(int dev, uint64_t bytes, const char* api, Call call, Record record) {
  if (!Limited(dev)) return call();
  if (!ReserveOrLog(dev, bytes, false, api)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = call();
  if (rc == CUDA_SUCCESS)
    record(Charge{dev, bytes, false});
  else
    region::Unreserve(g_state.region, g_state.slot, dev, bytes, false);
  return rc;
}

void Release(HandleKind kind, uint64_t handle) {
  Charge c;
  if (g_state.region && g_state.slot && TheAllocations().Take(kind, handle, &c))
    region::Unreserve(g_state.region, g_state.slot, c.device, c.bytes, c.spilled);
}

// Virtual device memory: the slice has room but the card does not. Back the allocation
// with pinned host memory mapped into the device's address space; data stays intact and
// kernels reach it over the bus.
CUresult Spill(int dev, uint64_t bytes, uint64_t charge, CUdeviceptr* dptr) {
  if (!g_state.cfg.oversubscribe || !Limited(dev)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!ReserveOrLog(dev, charge, true, "oversubscribed allocation")) return CUDA_ERROR_OUT_OF_MEMORY;
  void* host = nullptr;
  CUresult rc = g_cuda.cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  if (rc == CUDA_SUCCESS) rc = g_cuda.cuMemHostGetDevicePointer_v2(dptr, host, 0);
  if (rc != CUDA_SUCCESS) {
    if (host) g_cuda.cuMemFreeHost(host);
    region::Unreserve(g_state.region, g_state.slot, dev, charge, true);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  TheAllocations().Add(HandleKind::kPointer, *dptr, Charge{dev, charge, true});
  char b[32];
  GS_LOG(kDetail, "device %d is full: %s spilled to host memory", dev, FormatBytes(bytes, b, sizeof(b)));
  return CUDA_SUCCESS;
}

CUresult AllocDevice(CUdeviceptr* dptr, uint64_t bytes, const char* api, CUresult (*real)(CUdeviceptr*, size_t)) {
  int dev = CurrentDevice();
  if (!Limited(dev)) return real(dptr, bytes);
  uint64_t charge = Footprint(bytes);
  if (!ReserveOrLog(dev, charge, false, api)) return CUDA_ERROR_OUT_OF_MEMORY;  // the slice is full
  CUresult rc = real(dptr, bytes);
  if (rc == CUDA_SUCCESS) {
    TheAllocations().Add(HandleKind::kPointer, *dptr, Charge{dev, charge, false});
    return rc;
  }
  region::Unreserve(g_state.region, g_state.slot, dev, charge, false);
  // The slice had room but the card did not: virtual device memory, when enabled.
  if (rc == CUDA_ERROR_OUT_OF_MEMORY && bytes > 0 && dptr) return Spill(dev, bytes, charge, dptr);
  return rc;
}

CUresult FreeDevicePointer(CUdeviceptr dptr, CUresult (*real)(CUdeviceptr)) {
  Charge c;
  bool known = g_state.region && g_state.slot && TheAllocations().Take(HandleKind::kPointer, dptr, &c);
  CUresult rc;
  if (known && c.spilled)
    rc = g_cuda.cuMemFreeHost(reinterpret_cast<void*>(dptr));  // UVA: same address
  else
    rc = real(dptr);
  if (known) {
    if (rc == CUDA_SUCCESS)
      region::Unreserve(g_state.region, g_state.slot, c.device, c.bytes, c.spilled);
    else
      TheAllocations().Add(HandleKind::kPointer, dptr, c);  // still allocated
  }
  return rc;
}

}  // namespace
}  // namespace gs::enforcer

using namespace gs::enforcer;  // NOLINT: C ABI definitions below
namespace region = gs::region;

#define GS_NEED_CUDA()                                   \
  do {                                                   \
    if (!CudaReady()) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

GS_HOOK(cuInit) CUresult gs_hook_cuInit(unsigned int Flags) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuInit(Flags);
  if (rc == CUDA_SUCCESS) MapCudaDevices();
  return rc;
}

GS_HOOK(cuMemAlloc_v2) CUresult gs_hook_cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  GS_NEED_CUDA();
  return AllocDevice(dptr, bytesize, "cuMemAlloc", g_cuda.cuMemAlloc_v2);
}

GS_HOOK(cuMemAllocPitch_v2)
CUresult gs_hook_cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes) {
  GS_NEED_CUDA();
  // The pitch is the driver's choice: charge the worst case (rows aligned to 512 bytes).
  uint64_t estimate = Footprint(((WidthInBytes + 511) / 512 * 512) * Height);
  int dev = CurrentDevice();
  return Charged(
      dev, estimate, "cuMemAllocPitch",
      [&] { return g_cuda.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes); },
      [&](Charge c) { TheAllocations().Add(HandleKind::kPointer, *dptr, c); });
}

GS_HOOK(cuMemAllocManaged)
CUresult gs_hook_cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  GS_NEED_CUDA();
  // Managed memory may live on the device: it counts against the slice.
  int dev = CurrentDevice();
  return Charged(
      dev, Footprint(bytesize), "cuMemAllocManaged", [&] { return g_cuda.cuMemAllocManaged(dptr, bytesize, flags); },
      [&](Charge c) { TheAllocations().Add(HandleKind::kPointer, *dptr, c); });
}

GS_HOOK(cuMemFree_v2) CUresult gs_hook_cuMemFree_v2(CUdeviceptr dptr) {
  GS_NEED_CUDA();
  return FreeDevicePointer(dptr, g_cuda.cuMemFree_v2);
}

// ---- stream-ordered allocation and pools ------------------------------------------------

namespace {
int DeviceOfStream(CUstream s) {
  CUcontext ctx = nullptr;
  if (s != nullptr && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && g_cuda.cuStreamGetCtx &&
      g_cuda.cuStreamGetCtx(s, &ctx) == CUDA_SUCCESS && ctx) {
    CUdevice ord;
    if (g_cuda.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
      CUresult rc = g_cuda.cuCtxGetDevice(&ord);
      g_cuda.cuCtxPopCurrent_v2(&ctx);
      if (rc == CUDA_SUCCESS) return DeviceOfOrdinal(ord);
    }
  }
  return CurrentDevice();
}

int DeviceOfPool(CUmemoryPool pool) {
  // Pools are per device: find which device's pools include this one.
  int count = 0;
  g_cuda.cuDeviceGetCount(&count);
  for (int ord = 0; ord < count; ++ord) {
    CUmemoryPool p = nullptr;
    if (g_cuda.cuDeviceGetDefaultMemPool(&p, ord) == CUDA_SUCCESS && p == pool) return DeviceOfOrdinal(ord);
    if (g_cuda.cuDeviceGetMemPool(&p, ord) == CUDA_SUCCESS && p == pool) return DeviceOfOrdinal(ord);
  }
  return -1;
}

using AllocAsyncFn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using AllocFromPoolFn = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
using FreeAsyncFn = CUresult (*)(CUdeviceptr, CUstream);

CUresult AllocAsync(AllocAsyncFn real, CUdeviceptr* dptr, size_t bytes, CUstream s) {
  return Charged(
      DeviceOfStream(s), Footprint(bytes), "cuMemAllocAsync", [&] { return real(dptr, bytes, s); },
      [&](Charge c) { TheAllocations().Add(HandleKind::kPointer, *dptr, c); });
}

CUresult AllocFromPool(AllocFromPoolFn real, CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  int dev = DeviceOfPool(pool);
  if (dev < 0) dev = DeviceOfStream(s);
  return Charged(
      dev, Footprint(bytes), "cuMemAllocFromPoolAsync", [&] { return real(dptr, bytes, pool, s); },
      [&](Charge c) { TheAllocations().Add(HandleKind::kPointer, *dptr, c); });
}

CUresult FreeAsync(FreeAsyncFn real, CUdeviceptr dptr, CUstream s) {
  Charge c;
  bool known = g_state.region && g_state.slot && TheAllocations().Take(HandleKind::kPointer, dptr, &c);
  CUresult rc = real(dptr, s);
  if (known) {
    if (rc == CUDA_SUCCESS)
      region::Unreserve(g_state.region, g_state.slot, c.device, c.bytes, c.spilled);
    else
      TheAllocations().Add(HandleKind::kPointer, dptr, c);
  }
  return rc;
}
}  // namespace

GS_HOOK(cuMemAllocAsync) CUresult gs_hook_cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  GS_NEED_CUDA();
  return AllocAsync(g_cuda.cuMemAllocAsync, dptr, bytesize, hStream);
}
GS_HOOK(cuMemAllocAsync_ptsz)
CUresult gs_hook_cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  GS_NEED_CUDA();
  return AllocAsync(g_cuda.cuMemAllocAsync_ptsz, dptr, bytesize, hStream);
}
GS_HOOK(cuMemAllocFromPoolAsync)
CUresult gs_hook_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  GS_NEED_CUDA();
  return AllocFromPool(g_cuda.cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
}
GS_HOOK(cuMemAllocFromPoolAsync_ptsz)
CUresult gs_hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  GS_NEED_CUDA();
  return AllocFromPool(g_cuda.cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
}
GS_HOOK(cuMemFreeAsync) CUresult gs_hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  GS_NEED_CUDA();
  return FreeAsync(g_cuda.cuMemFreeAsync, dptr, hStream);
}
GS_HOOK(cuMemFreeAsync_ptsz) CUresult gs_hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  GS_NEED_CUDA();
  return FreeAsync(g_cuda.cuMemFreeAsync_ptsz, dptr, hStream);
}

// ---- virtual memory management: physical allocations count, mappings do not -------------

GS_HOOK(cuMemCreate)
CUresult gs_hook_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  GS_NEED_CUDA();
  // Host-located physical memory (NCCL uses it) is not device memory: pass it through
  // untouched. Only device locations count.
  if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return g_cuda.cuMemCreate(handle, size, prop, flags);
  int dev = DeviceOfOrdinal(prop->location.id);
  return Charged(
      dev, size, "cuMemCreate", [&] { return g_cuda.cuMemCreate(handle, size, prop, flags); },
      [&](Charge c) { TheAllocations().Add(HandleKind::kVmm, *handle, c); });
}

GS_HOOK(cuMemRelease) CUresult gs_hook_cuMemRelease(CUmemGenericAllocationHandle handle) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuMemRelease(handle);
  if (rc == CUDA_SUCCESS) Release(HandleKind::kVmm, handle);
  return rc;
}

// ---- arrays --------------------------------------------------------------------------------

using gs::platform::CudaArrayBytes;

GS_HOOK(cuArrayCreate_v2) CUresult gs_hook_cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  GS_NEED_CUDA();
  if (desc == nullptr) return g_cuda.cuArrayCreate_v2(pHandle, desc);
  uint64_t bytes = Footprint(CudaArrayBytes(desc->Width, desc->Height, 0, desc->NumChannels, desc->Format));
  return Charged(
      CurrentDevice(), bytes, "cuArrayCreate", [&] { return g_cuda.cuArrayCreate_v2(pHandle, desc); },
      [&](Charge c) { TheAllocations().Add(HandleKind::kArray, reinterpret_cast<uint64_t>(*pHandle), c); });
}

GS_HOOK(cuArray3DCreate_v2)
CUresult gs_hook_cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  GS_NEED_CUDA();
  if (desc == nullptr) return g_cuda.cuArray3DCreate_v2(pHandle, desc);
  uint64_t bytes = Footprint(CudaArrayBytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format));
  return Charged(
      CurrentDevice(), bytes, "cuArray3DCreate", [&] { return g_cuda.cuArray3DCreate_v2(pHandle, desc); },
      [&](Charge c) { TheAllocations().Add(HandleKind::kArray, reinterpret_cast<uint64_t>(*pHandle), c); });
}

GS_HOOK(cuArrayDestroy) CUresult gs_hook_cuArrayDestroy(CUarray hArray) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuArrayDestroy(hArray);
  if (rc == CUDA_SUCCESS) Release(HandleKind::kArray, reinterpret_cast<uint64_t>(hArray));
  return rc;
}

GS_HOOK(cuMipmappedArrayCreate)
CUresult gs_hook_cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                        unsigned int levels) {
  GS_NEED_CUDA();
  if (desc == nullptr) return g_cuda.cuMipmappedArrayCreate(pHandle, desc, levels);
  return Charged(
      CurrentDevice(), Footprint(gs::platform::CudaMipmappedBytes(*desc, levels)), "cuMipmappedArrayCreate",
      [&] { return g_cuda.cuMipmappedArrayCreate(pHandle, desc, levels); },
      [&](Charge c) { TheAllocations().Add(HandleKind::kMipmappedArray, reinterpret_cast<uint64_t>(*pHandle), c); });
}

GS_HOOK(cuMipmappedArrayDestroy) CUresult gs_hook_cuMipmappedArrayDestroy(CUmipmappedArray h) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuMipmappedArrayDestroy(h);
  if (rc == CUDA_SUCCESS) Release(HandleKind::kMipmappedArray, reinterpret_cast<uint64_t>(h));
  return rc;
}

// ---- graph memory nodes: charged from creation until the graph is destroyed ----------------

GS_HOOK(cuGraphAddMemAllocNode)
CUresult gs_hook_cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* deps,
                                        size_t numDeps, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  GS_NEED_CUDA();
  if (params == nullptr || params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return g_cuda.cuGraphAddMemAllocNode(phGraphNode, hGraph, deps, numDeps, params);
  int dev = DeviceOfOrdinal(params->poolProps.location.id);
  return Charged(
      dev, Footprint(params->bytesize), "cuGraphAddMemAllocNode",
      [&] { return g_cuda.cuGraphAddMemAllocNode(phGraphNode, hGraph, deps, numDeps, params); },
      [&](Charge c) {
        TheAllocations().Accumulate(HandleKind::kGraph, reinterpret_cast<uint64_t>(hGraph), c.device, c.bytes);
      });
}

GS_HOOK(cuGraphDestroy) CUresult gs_hook_cuGraphDestroy(CUgraph hGraph) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuGraphDestroy(hGraph);
  if (rc == CUDA_SUCCESS) Release(HandleKind::kGraph, reinterpret_cast<uint64_t>(hGraph));
  return rc;
}

// ---- contexts and modules: their footprint is estimated (docs/enforcer.md) ------------------

namespace {
std::mutex g_ctx_mu;
int g_ctx_refs[region::kMaxDevices];  // contexts this process holds per device

CUresult ChargeContext(int dev) {
  if (!Limited(dev)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  if (g_ctx_refs[dev]++ > 0) return CUDA_SUCCESS;
  if (ReserveOrLog(dev, g_state.cfg.context_overhead, false, "context creation")) return CUDA_SUCCESS;
  g_ctx_refs[dev] = 0;
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void UnchargeContext(int dev, bool all) {
  if (!Limited(dev)) return;
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  if (g_ctx_refs[dev] == 0) return;
  if (all) g_ctx_refs[dev] = 1;
  if (--g_ctx_refs[dev] == 0) region::Unreserve(g_state.region, g_state.slot, dev, g_state.cfg.context_overhead, false);
}

template <typename Call>
CUresult CreateContext(CUdevice ord, Call call) {
  int dev = DeviceOfOrdinal(ord);
  CUresult rc = ChargeContext(dev);
  if (rc != CUDA_SUCCESS) return rc;
  rc = call();
  if (rc != CUDA_SUCCESS) UnchargeContext(dev, false);
  return rc;
}
}  // namespace

GS_HOOK(cuDevicePrimaryCtxRetain) CUresult gs_hook_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  GS_NEED_CUDA();
  return CreateContext(dev, [&] { return g_cuda.cuDevicePrimaryCtxRetain(pctx, dev); });
}
GS_HOOK(cuDevicePrimaryCtxRelease_v2) CUresult gs_hook_cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuDevicePrimaryCtxRelease_v2(dev);
  if (rc == CUDA_SUCCESS) UnchargeContext(DeviceOfOrdinal(dev), false);
  return rc;
}
GS_HOOK(cuDevicePrimaryCtxReset_v2) CUresult gs_hook_cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuDevicePrimaryCtxReset_v2(dev);
  if (rc == CUDA_SUCCESS) UnchargeContext(DeviceOfOrdinal(dev), true);
  return rc;
}
GS_HOOK(cuCtxCreate_v2) CUresult gs_hook_cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  GS_NEED_CUDA();
  return CreateContext(dev, [&] { return g_cuda.cuCtxCreate_v2(pctx, flags, dev); });
}
GS_HOOK(cuCtxCreate_v3)
CUresult gs_hook_cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n, unsigned int flags, CUdevice dev) {
  GS_NEED_CUDA();
  return CreateContext(dev, [&] { return g_cuda.cuCtxCreate_v3(pctx, params, n, flags, dev); });
}
GS_HOOK(cuCtxCreate_v4)
CUresult gs_hook_cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  GS_NEED_CUDA();
  return CreateContext(dev, [&] { return g_cuda.cuCtxCreate_v4(pctx, params, flags, dev); });
}
GS_HOOK(cuCtxDestroy_v2) CUresult gs_hook_cuCtxDestroy_v2(CUcontext ctx) {
  GS_NEED_CUDA();
  int dev = -1;
  if (g_cuda.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
    dev = CurrentDevice();
    CUcontext popped;
    g_cuda.cuCtxPopCurrent_v2(&popped);
  }
  CUresult rc = g_cuda.cuCtxDestroy_v2(ctx);
  if (rc == CUDA_SUCCESS) UnchargeContext(dev, false);
  return rc;
}

namespace {
template <typename Call>
CUresult LoadModule(CUmodule* module, Call call) {
  return Charged(CurrentDevice(), kModuleEstimate, "module load", call,
                 [&](Charge c) { TheAllocations().Add(HandleKind::kModule, reinterpret_cast<uint64_t>(*module), c); });
}
}  // namespace

GS_HOOK(cuModuleLoadData) CUresult gs_hook_cuModuleLoadData(CUmodule* module, const void* image) {
  GS_NEED_CUDA();
  return LoadModule(module, [&] { return g_cuda.cuModuleLoadData(module, image); });
}
GS_HOOK(cuModuleLoadDataEx)
CUresult gs_hook_cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int n, CUjit_option* o, void** v) {
  GS_NEED_CUDA();
  return LoadModule(module, [&] { return g_cuda.cuModuleLoadDataEx(module, image, n, o, v); });
}
GS_HOOK(cuModuleLoad) CUresult gs_hook_cuModuleLoad(CUmodule* module, const char* fname) {
  GS_NEED_CUDA();
  return LoadModule(module, [&] { return g_cuda.cuModuleLoad(module, fname); });
}
GS_HOOK(cuModuleLoadFatBinary) CUresult gs_hook_cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  GS_NEED_CUDA();
  return LoadModule(module, [&] { return g_cuda.cuModuleLoadFatBinary(module, fatCubin); });
}
GS_HOOK(cuModuleUnload) CUresult gs_hook_cuModuleUnload(CUmodule hmod) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuModuleUnload(hmod);
  if (rc == CUDA_SUCCESS) Release(HandleKind::kModule, reinterpret_cast<uint64_t>(hmod));
  return rc;
}

// A library (the CUDA runtime's way of loading a program's kernels since 12.0) is loaded
// into every context that uses it, lazily. It is charged once, to the current context's
// device, or to the container's first device when none is current yet (as at program
// start): exact for the usual one-GPU container, an estimate otherwise (docs/enforcer.md).
namespace {
template <typename Call>
CUresult LoadLibrary(CUlibrary* library, Call call) {
  int dev = CurrentDevice();
  if (dev < 0) dev = 0;
  return Charged(dev, kModuleEstimate, "library load", call, [&](Charge c) {
    TheAllocations().Add(HandleKind::kLibrary, reinterpret_cast<uint64_t>(*library), c);
  });
}
}  // namespace

GS_HOOK(cuLibraryLoadData)
CUresult gs_hook_cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jit_options, void** jit_values,
                                   unsigned int n_jit, CUlibraryOption* lib_options, void** lib_values,
                                   unsigned int n_lib) {
  GS_NEED_CUDA();
  return LoadLibrary(library, [&] {
    return g_cuda.cuLibraryLoadData(library, code, jit_options, jit_values, n_jit, lib_options, lib_values, n_lib);
  });
}
GS_HOOK(cuLibraryLoadFromFile)
CUresult gs_hook_cuLibraryLoadFromFile(CUlibrary* library, const char* file, CUjit_option* jit_options,
                                       void** jit_values, unsigned int n_jit, CUlibraryOption* lib_options,
                                       void** lib_values, unsigned int n_lib) {
  GS_NEED_CUDA();
  return LoadLibrary(library, [&] {
    return g_cuda.cuLibraryLoadFromFile(library, file, jit_options, jit_values, n_jit, lib_options, lib_values, n_lib);
  });
}
GS_HOOK(cuLibraryUnload) CUresult gs_hook_cuLibraryUnload(CUlibrary library) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuLibraryUnload(library);
  if (rc == CUDA_SUCCESS) Release(HandleKind::kLibrary, reinterpret_cast<uint64_t>(library));
  return rc;
}

// ---- what the container sees ----------------------------------------------------------------

GS_HOOK(cuMemGetInfo_v2) CUresult gs_hook_cuMemGetInfo_v2(size_t* free, size_t* total) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuMemGetInfo_v2(free, total);
  int dev = CurrentDevice();
  if (rc != CUDA_SUCCESS || !Limited(dev)) return rc;
  if (g_state.region->devices[dev].memory_limit.load() == 0 && g_state.cfg.memory_limit[dev] == 0) return rc;
  region::MemoryView v = region::ViewMemory(g_state.region, dev, *total);
  if (g_state.cfg.memory_limit[dev] && g_state.cfg.memory_limit[dev] < v.total) {
    v.total = g_state.cfg.memory_limit[dev];
    v.used = std::min(v.used, v.total);
    v.free = v.total - v.used;
  }
  // Never report more free than the card physically has, unless oversubscribing.
  if (!g_state.cfg.oversubscribe) v.free = std::min<uint64_t>(v.free, *free);
  *free = v.free;
  *total = v.total;
  return CUDA_SUCCESS;
}

GS_HOOK(cuDeviceTotalMem_v2) CUresult gs_hook_cuDeviceTotalMem_v2(size_t* bytes, CUdevice ord) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuDeviceTotalMem_v2(bytes, ord);
  int dev = DeviceOfOrdinal(ord);
  if (rc != CUDA_SUCCESS || !Limited(dev)) return rc;
  uint64_t limit = g_state.region->devices[dev].memory_limit.load();
  uint64_t own = g_state.cfg.memory_limit[dev];
  if (own && (limit == 0 || own < limit)) limit = own;
  if (limit) *bytes = limit;
  return rc;
}
