// Device memory hooks: every allocation path reserves against the container's limit in
// the region before the driver is called, then commits or rolls back (docs/enforcer.md,
// "Memory"); what each call costs is decided in charging.h. A request that does not fit, or
// whose device cannot be told while a limit exists, returns CUDA_ERROR_OUT_OF_MEMORY
// without calling the driver.
#include <algorithm>
#include <mutex>

#include "src/common/quantity.h"
#include "src/common/raw_log.h"
#include "src/enforcer/allocations.h"
#include "src/enforcer/charging.h"
#include "src/enforcer/enforcer.h"
#include "src/enforcer/limiter.h"
#include "src/enforcer/limits.h"
#include "src/enforcer/nvml_cards.h"
#include "src/enforcer/shared_pieces.h"
#include "src/platform/cuda_array.h"

namespace gs::enforcer {
namespace {

// Modules and libraries: code and constants (docs/enforcer.md, "Memory").
constexpr uint64_t kModuleEstimate = 2ull << 20;

// Virtual device memory: the slice has room but the card does not. Back the allocation
// with pinned host memory mapped into the device's address space; data stays intact and
// kernels reach it over the bus.
CUresult Spill(int dev, uint64_t bytes, uint64_t charge, CUdeviceptr* dptr) {
  if (!g_state.cfg.oversubscribe) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!Reserve(dev, charge, true, "oversubscribed allocation")) return CUDA_ERROR_OUT_OF_MEMORY;
  void* host = nullptr;
  CUresult rc = g_cuda.cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  if (rc == CUDA_SUCCESS) rc = g_cuda.cuMemHostGetDevicePointer_v2(dptr, host, 0);
  if (rc != CUDA_SUCCESS) {
    if (host) g_cuda.cuMemFreeHost(host);
    Unreserve(dev, charge, true);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  TheAllocations().Add(HandleKind::kPointer, *dptr, Charge{dev, charge, true, CurrentContextId()});
  char b[32];
  GS_LOG(kDetail, "device %d is full: %s spilled to host memory", dev, FormatBytes(bytes, b, sizeof(b)));
  return CUDA_SUCCESS;
}

CUresult AllocDevice(CUdeviceptr* dptr, uint64_t bytes, const char* api, CUresult (*real)(CUdeviceptr*, size_t)) {
  int dev = CurrentDevice();
  DeviceCheck g = CheckDevice(dev);
  if (g == DeviceCheck::kPass) return real(dptr, bytes);
  uint64_t charge = Footprint(bytes);
  if (g == DeviceCheck::kRefuse || !Reserve(dev, charge, false, api))
    return CUDA_ERROR_OUT_OF_MEMORY;  // the slice is full
  CUresult rc = real(dptr, bytes);
  if (rc == CUDA_SUCCESS) {
    TheAllocations().Add(HandleKind::kPointer, *dptr, Charge{dev, charge, false, CurrentContextId()});
    return rc;
  }
  Unreserve(dev, charge, false);
  // The slice had room but the card did not: virtual device memory, when enabled.
  if (rc == CUDA_ERROR_OUT_OF_MEMORY && bytes > 0 && dptr) return Spill(dev, bytes, charge, dptr);
  return rc;
}

// What becomes of a device pointer's charge once the driver freed it: a pointer shared with
// other processes is let go as LetGoSharedPointer says (shared_pieces.h); one of a pool is
// held by its pool, which keeps the memory on the card (PoolBook); given back otherwise.
void PointerFreed(CUdeviceptr dptr, const Charge& c) {
  if (c.imported) {
    LetGoSharedPointer(dptr, c);
    Reconcile(c.device, true);  // as cuIpcCloseMemHandle
  } else if (c.exported && !c.spilled) {
    LetGoSharedPointer(dptr, c);
  } else if (c.pool && !c.spilled) {
    ThePoolBook().Freed(c.pool, c.device, c.bytes);
  } else {
    Unreserve(c.device, c.bytes, c.spilled);
  }
}

CUresult FreeDevicePointer(CUdeviceptr dptr, CUresult (*real)(CUdeviceptr)) {
  Charge c;
  bool known = TheAllocations().Take(HandleKind::kPointer, dptr, &c);
  CUresult rc;
  if (known && c.spilled)
    rc = g_cuda.cuMemFreeHost(reinterpret_cast<void*>(dptr));  // UVA: same address
  else
    rc = real(dptr);
  if (known && rc == CUDA_SUCCESS)
    PointerFreed(dptr, c);
  else if (known)
    TheAllocations().Add(HandleKind::kPointer, dptr, c);  // still allocated
  return rc;
}

// Gives back charges per device (bytes: an array of kMaxDevices).
// What a VMM call freed, per device: charges given back, and those of exported allocations,
// which stay charged while another process may hold them (KeepWhileShared, charging.h).
struct Freed {
  uint64_t bytes[kMaxDevices] = {};
  uint64_t kept[kMaxDevices] = {};
  void GiveBack() const {
    for (int d = 0; d < kMaxDevices; ++d) {
      if (bytes[d]) Unreserve(d, bytes[d], false);
      if (kept[d]) KeepWhileShared(d, kept[d]);
    }
  }
};

}  // namespace
}  // namespace gs::enforcer

using namespace gs::enforcer;  // NOLINT: C ABI definitions below
namespace region = gs::region;

#define GS_NEED_CUDA()                                   \
  do {                                                   \
    if (!CudaReady()) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

// Driver entry points not every driver exports (the simulator has only some of them).
#define GS_NEED_REAL(name)                                       \
  do {                                                           \
    GS_NEED_CUDA();                                              \
    if (g_cuda.name == nullptr) return CUDA_ERROR_NOT_SUPPORTED; \
  } while (0)

GS_HOOK(cuInit) CUresult gs_hook_cuInit(unsigned int Flags) {
  GS_NEED_CUDA();
  // The first context's charge asks NVML: it starts beside the driver's own start-up.
  if (g_state.region != nullptr && !g_state.region_refused) StartNvmlInBackground();
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
// The ordinal of the device stream s works on: its context's (the current context's for
// the null and per-thread streams, or when the stream's cannot be told). False when none.
bool OrdinalOfStream(CUstream s, CUdevice* ord) {
  CUcontext ctx = nullptr;
  bool pushed = s != nullptr && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && g_cuda.cuStreamGetCtx &&
                g_cuda.cuStreamGetCtx(s, &ctx) == CUDA_SUCCESS && ctx &&
                g_cuda.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
  bool ok = g_cuda.cuCtxGetDevice(ord) == CUDA_SUCCESS;
  if (pushed) g_cuda.cuCtxPopCurrent_v2(&ctx);
  return ok;
}

int DeviceOfStream(CUstream s) {
  CUdevice ord = 0;
  return OrdinalOfStream(s, &ord) ? DeviceOfOrdinal(ord) : CurrentDevice();
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

// The device `p` lives on (an imported pool piece: its pool's, whatever context is current).
int DeviceOfPointer(CUdeviceptr p) {
  int ord = 0;
  if (g_cuda.cuPointerGetAttribute != nullptr &&
      g_cuda.cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == CUDA_SUCCESS)
    return DeviceOfOrdinal(ord);
  return CurrentDevice();
}

using AllocAsyncFn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using AllocFromPoolFn = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
using FreeAsyncFn = CUresult (*)(CUdeviceptr, CUstream);

// An allocation from a pool: charged beyond what the pool holds free (already charged,
// PoolBook), recorded whole under its pointer and pool.
template <typename Call>
CUresult AllocInPool(int dev, CUmemoryPool pool, CUdeviceptr* dptr, size_t bytes, const char* api, Call call) {
  const uint64_t p = reinterpret_cast<uint64_t>(pool), want = Footprint(bytes);
  const uint64_t reused = p ? ThePoolBook().Take(p, want) : 0;
  CUresult rc = Charged(dev, want - reused, api, call, [&](Charge c) {
    c.bytes = want;
    c.pool = p;
    c.exported = p && ThePoolBook().IsExported(p);  // other processes may import it
    TheAllocations().Add(HandleKind::kPointer, *dptr, c);
  });
  if (rc != CUDA_SUCCESS && reused) ThePoolBook().Freed(p, dev, reused);
  return rc;
}

bool Capturing(CUstream s) {
  if (!Limiter::AnyCapture() || g_cuda.cuStreamIsCapturing == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return g_cuda.cuStreamIsCapturing(s, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// An allocation on a capturing stream is a graph allocation node: nothing is taken from a
// pool now, the graph's launches take it from the device's graph memory. Charged whole to
// the capture (kCapture, by stream), whose graph takes the charge at cuStreamEndCapture.
template <typename Call>
CUresult AllocInCapture(int dev, CUstream s, size_t bytes, const char* api, Call call) {
  return Charged(dev, Footprint(bytes), api, call, [&](Charge c) {
    TheAllocations().Accumulate(HandleKind::kCapture, reinterpret_cast<uint64_t>(s), c.device, c.bytes);
  });
}

// From the current pool of the stream's device.
CUresult AllocAsync(AllocAsyncFn real, CUdeviceptr* dptr, size_t bytes, CUstream s) {
  CUdevice ord = 0;
  CUmemoryPool pool = nullptr;
  bool known = OrdinalOfStream(s, &ord);
  if (Capturing(s))
    return AllocInCapture(known ? DeviceOfOrdinal(ord) : CurrentDevice(), s, bytes, "cuMemAllocAsync",
                          [&] { return real(dptr, bytes, s); });
  if (!known || g_cuda.cuDeviceGetMemPool(&pool, ord) != CUDA_SUCCESS) pool = nullptr;
  return AllocInPool(known ? DeviceOfOrdinal(ord) : CurrentDevice(), pool, dptr, bytes, "cuMemAllocAsync",
                     [&] { return real(dptr, bytes, s); });
}

CUresult AllocFromPool(AllocFromPoolFn real, CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  int dev = DeviceOfPool(pool);
  if (dev < 0) dev = DeviceOfStream(s);
  if (Capturing(s))
    return AllocInCapture(dev, s, bytes, "cuMemAllocFromPoolAsync", [&] { return real(dptr, bytes, pool, s); });
  return AllocInPool(dev, pool, dptr, bytes, "cuMemAllocFromPoolAsync", [&] { return real(dptr, bytes, pool, s); });
}

// The memory goes back to its pool, which keeps it on the card: its charge stays, held by
// the pool (PointerFreed).
CUresult FreeAsync(FreeAsyncFn real, CUdeviceptr dptr, CUstream s) {
  Charge c;
  bool known = TheAllocations().Take(HandleKind::kPointer, dptr, &c);
  CUresult rc = real(dptr, s);
  if (known && rc == CUDA_SUCCESS)
    PointerFreed(dptr, c);
  else if (known)
    TheAllocations().Add(HandleKind::kPointer, dptr, c);
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

GS_HOOK(cuMemPoolTrimTo) CUresult gs_hook_cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuMemPoolTrimTo(pool, minBytesToKeep);
  if (rc == CUDA_SUCCESS) RefreshPool(reinterpret_cast<uint64_t>(pool));
  return rc;
}
GS_HOOK(cuMemPoolDestroy) CUresult gs_hook_cuMemPoolDestroy(CUmemoryPool pool) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuMemPoolDestroy(pool);
  if (rc == CUDA_SUCCESS) PoolDestroyed(reinterpret_cast<uint64_t>(pool));
  return rc;
}

// ---- virtual memory management ---------------------------------------------------------------
// A cuMemCreate allocation on a device is charged from its creation until the driver frees
// it: once its last handle is released and its last mapping unmapped, in either order
// (VmmBook, allocations.h). Each hook holds the book's lock across its driver call and its
// entry, so no VMM call of another thread falls between them (a handle released while it
// is being mapped, an address unmapped and mapped again). Such allocations outlive
// contexts (cuCtxDestroy does not free them, CUDA driver API): their charges name none.

GS_HOOK(cuMemCreate)
CUresult gs_hook_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  GS_NEED_CUDA();
  // Host-located physical memory (NCCL uses it) is not device memory: pass it through
  // untouched. Only device locations count.
  if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return g_cuda.cuMemCreate(handle, size, prop, flags);
  int dev = DeviceOfOrdinal(prop->location.id);
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  return Charged(
      dev, Footprint(size), "cuMemCreate", [&] { return g_cuda.cuMemCreate(handle, size, prop, flags); },
      [&](Charge c) {
        c.context = 0;
        book.Created(*handle, c);
      });
}

GS_HOOK(cuMemMap)
CUresult gs_hook_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  GS_NEED_CUDA();
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  // The driver maps only into addresses not mapped yet; refused here too, so the book's
  // mappings never overlap.
  if (book.AnyMapped(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = g_cuda.cuMemMap(ptr, size, offset, handle, flags);
  if (rc == CUDA_SUCCESS) book.Mapped(ptr, size, handle);
  return rc;
}

GS_HOOK(cuMemUnmap) CUresult gs_hook_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  GS_NEED_CUDA();
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  CUresult rc = g_cuda.cuMemUnmap(ptr, size);
  if (rc != CUDA_SUCCESS) return rc;
  Freed freed;
  book.Unmapped(ptr, size, freed.bytes, kMaxDevices, freed.kept);
  freed.GiveBack();
  return rc;
}

GS_HOOK(cuMemRelease) CUresult gs_hook_cuMemRelease(CUmemGenericAllocationHandle handle) {
  GS_NEED_CUDA();
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  CUresult rc = g_cuda.cuMemRelease(handle);
  if (rc != CUDA_SUCCESS) return rc;
  // A multicast object's handle: the object goes, and its bindings with it.
  Freed freed;
  if (book.MulticastReleased(handle, freed.bytes, kMaxDevices, freed.kept)) {
    freed.GiveBack();
    return rc;
  }
  Charge c;
  if (book.Released(handle, &c) && c.device >= 0 && c.device < kMaxDevices)
    (c.exported ? freed.kept : freed.bytes)[c.device] += c.bytes;
  freed.GiveBack();
  return rc;
}

// ---- multicast objects -------------------------------------------------------------------------
// The object itself is not charged (it takes no device memory in the simulator's model, not
// measured: docs/measurements/README.md). A binding holds the physical memory it binds as a
// mapping does (VmmBook), until cuMulticastUnbind or the release of the object's handle.

GS_HOOK(cuMulticastCreate)
CUresult gs_hook_cuMulticastCreate(CUmemGenericAllocationHandle* mcHandle, const CUmulticastObjectProp* prop) {
  GS_NEED_REAL(cuMulticastCreate);
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  CUresult rc = g_cuda.cuMulticastCreate(mcHandle, prop);
  if (rc == CUDA_SUCCESS && mcHandle) book.MulticastCreated(*mcHandle);
  return rc;
}

GS_HOOK(cuMulticastBindMem)
CUresult gs_hook_cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                    CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                                    unsigned long long flags) {
  GS_NEED_REAL(cuMulticastBindMem);
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  CUresult rc = g_cuda.cuMulticastBindMem(mcHandle, mcOffset, memHandle, memOffset, size, flags);
  if (rc == CUDA_SUCCESS) book.BoundHandle(mcHandle, mcOffset, size, memHandle);
  return rc;
}

GS_HOOK(cuMulticastBindAddr)
CUresult gs_hook_cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr,
                                     size_t size, unsigned long long flags) {
  GS_NEED_REAL(cuMulticastBindAddr);
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  CUresult rc = g_cuda.cuMulticastBindAddr(mcHandle, mcOffset, memptr, size, flags);
  if (rc == CUDA_SUCCESS) book.BoundAddress(mcHandle, mcOffset, size, memptr);
  return rc;
}

GS_HOOK(cuMulticastUnbind)
CUresult gs_hook_cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size) {
  GS_NEED_REAL(cuMulticastUnbind);
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  CUresult rc = g_cuda.cuMulticastUnbind(mcHandle, dev, mcOffset, size);
  if (rc != CUDA_SUCCESS) return rc;
  Freed freed;
  book.Unbound(mcHandle, DeviceOfOrdinal(dev), mcOffset, size, freed.bytes, kMaxDevices, freed.kept);
  freed.GiveBack();
  return rc;
}

GS_HOOK(cuMemRetainAllocationHandle)
CUresult gs_hook_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  GS_NEED_CUDA();
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  CUresult rc = g_cuda.cuMemRetainAllocationHandle(handle, addr);
  if (rc == CUDA_SUCCESS && handle) book.Retained(*handle, reinterpret_cast<uint64_t>(addr));
  return rc;
}

// ---- memory shared between processes ----------------------------------------------------------
// Charged once, to the owner (docs/enforcer.md, "Memory"): an exported allocation or handle
// is marked before the driver exports it, so that no free racing the export gives its
// charge back unmarked, and once freed its charge stays while NVML shows this process still
// holding it (KeepWhileShared, charging.h). Importing allocates nothing on the card and is
// not refused for lack of room: the owner paid. Except into a container that already holds
// more than its limit (ImportRefused, charging.h), and a pool piece or legacy IPC allocation
// of no record in the region (an owner in another container), which the importer pays for
// (ChargedImport below). Descriptors (cuMemImportFromShareableHandle) keep no record: their
// importers are held by ImportRefused and the reconciliation only.

GS_HOOK(cuIpcGetMemHandle) CUresult gs_hook_cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  GS_NEED_CUDA();
  // A mark left on a pointer the driver refused to export only delays its charge's return
  // until NVML shows it gone, which the free asks at once.
  TheAllocations().MarkExported(HandleKind::kPointer, dptr);
  CUresult rc = g_cuda.cuIpcGetMemHandle(pHandle, dptr);
  if (rc == CUDA_SUCCESS && pHandle) FollowExportedPiece(dptr, *pHandle);
  return rc;
}

namespace {

// An imported pointer of the container (a record in the region) is recorded uncharged: its
// owner pays. One of no record (an owner in another container) is charged to this process
// while it holds it, and undone and refused past the slice: importing from elsewhere is not a
// way around the slice (ReserveImported).
CUresult ChargedImport(CUdeviceptr* ptr, Charge c, const char* api, CUresult (*undo)(CUdeviceptr)) {
  if (c.piece == 0 && CheckDevice(c.device) != DeviceCheck::kPass) {
    CUdeviceptr base = 0;
    size_t size = 0;
    const bool sized = g_cuda.cuMemGetAddressRange_v2(&base, &size, *ptr) == CUDA_SUCCESS;
    c.bytes = Footprint(size);
    const bool charged =
        sized && CheckDevice(c.device) == DeviceCheck::kCharge && ReserveImported(c.device, c.bytes, api);
    if (!charged) {
      undo(*ptr);
      *ptr = 0;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  TheAllocations().Add(HandleKind::kPointer, *ptr, c);
  return CUDA_SUCCESS;
}

// Opens and closes of legacy IPC handles go one at a time (IpcOpenMutex): the driver hands
// two threads that open one handle the same pointer, and its entry must count both opens,
// not be charged twice; a close must not undo over an open made meanwhile.
template <typename Open>
CUresult OpenIpcHandle(CUdeviceptr* pdptr, const CUipcMemHandle& handle, Open open) {
  if (ImportRefused("cuIpcOpenMemHandle")) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<ChildResetMutex> lock(IpcOpenMutex());
  CUresult rc = open();
  if (rc != CUDA_SUCCESS || pdptr == nullptr || TheAllocations().ReopenedIpc(*pdptr)) return rc;
  Charge c{DeviceOfPointer(*pdptr), 0, false, CurrentContextId()};
  c.imported = true;
  c.ipc_opens = 1;
  c.piece = FollowImportedPiece(c.device, handle);
  return ChargedImport(pdptr, c, "cuIpcOpenMemHandle", g_cuda.cuIpcCloseMemHandle);
}

}  // namespace

GS_HOOK(cuIpcOpenMemHandle_v2)
CUresult gs_hook_cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  GS_NEED_CUDA();
  return OpenIpcHandle(pdptr, handle, [&] { return g_cuda.cuIpcOpenMemHandle_v2(pdptr, handle, Flags); });
}

GS_HOOK(cuIpcOpenMemHandle)
CUresult gs_hook_cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  GS_NEED_CUDA();
  return OpenIpcHandle(pdptr, handle, [&] { return g_cuda.cuIpcOpenMemHandle(pdptr, handle, Flags); });
}

GS_HOOK(cuIpcCloseMemHandle) CUresult gs_hook_cuIpcCloseMemHandle(CUdeviceptr dptr) {
  GS_NEED_CUDA();
  // The driver counts opens of a handle in a context: the last close lets it go. Counted
  // before the driver is called, which may hand the address to another thread's allocation.
  Charge c;
  bool last = false;
  CUresult rc;
  {
    std::lock_guard<ChildResetMutex> lock(IpcOpenMutex());
    last = TheAllocations().ClosedIpc(dptr, &c);
    rc = g_cuda.cuIpcCloseMemHandle(dptr);
    if (rc != CUDA_SUCCESS) {  // still open
      if (last)
        TheAllocations().Add(HandleKind::kPointer, dptr, c);
      else
        TheAllocations().ReopenedIpc(dptr);
      return rc;
    }
  }
  if (last) LetGoSharedPointer(dptr, c);
  // Memory whose owner is gone is this process's on the card while it holds it (the
  // reconciliation charged it): closing it may give that back.
  Reconcile(last ? c.device : CurrentDevice(), true);
  return rc;
}

GS_HOOK(cuMemExportToShareableHandle)
CUresult gs_hook_cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags) {
  GS_NEED_CUDA();
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  book.Exported(handle);
  return g_cuda.cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
}

// A pool exported to another process lets it import any allocation of the pool: from the
// export on, all of them are marked, and so is each pointer exported on its own.
GS_HOOK(cuMemPoolExportToShareableHandle)
CUresult gs_hook_cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType handleType, unsigned long long flags) {
  GS_NEED_CUDA();
  ThePoolBook().Exported(reinterpret_cast<uint64_t>(pool));
  TheAllocations().MarkPoolExported(reinterpret_cast<uint64_t>(pool));
  return g_cuda.cuMemPoolExportToShareableHandle(handle_out, pool, handleType, flags);
}

GS_HOOK(cuMemPoolExportPointer)
CUresult gs_hook_cuMemPoolExportPointer(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr) {
  GS_NEED_CUDA();
  TheAllocations().MarkExported(HandleKind::kPointer, ptr);
  CUresult rc = g_cuda.cuMemPoolExportPointer(shareData_out, ptr);
  if (rc == CUDA_SUCCESS && shareData_out) FollowExportedPiece(ptr, *shareData_out);
  return rc;
}

// A piece another process of the container exported is recorded uncharged (its owner pays,
// and the charge follows the piece past the owner: shared_pieces.h), so that its free
// (cuMemFree, cuMemFreeAsync) is known as an importer's. A piece of no record here (an owner
// in another container, or one that kept no record) is charged to this process while it
// holds it: once its owner is gone the card keeps it for the importer listed under no
// process, where nothing else would see it. Past the slice, the import is undone and refused.
GS_HOOK(cuMemPoolImportPointer)
CUresult gs_hook_cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData* shareData) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuMemPoolImportPointer(ptr_out, pool, shareData);
  if (rc != CUDA_SUCCESS || ptr_out == nullptr) return rc;
  Charge c{DeviceOfPointer(*ptr_out), 0, false, CurrentContextId()};
  c.imported = true;
  if (shareData) c.piece = FollowImportedPiece(c.device, *shareData);
  return ChargedImport(ptr_out, c, "cuMemPoolImportPointer", g_cuda.cuMemFree_v2);
}

GS_HOOK(cuMemImportFromShareableHandle)
CUresult gs_hook_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
  GS_NEED_CUDA();
  if (ImportRefused("cuMemImportFromShareableHandle")) return CUDA_ERROR_OUT_OF_MEMORY;
  VmmBook& book = TheVmmBook();
  std::lock_guard<std::mutex> lock(book.mu());
  CUresult rc = g_cuda.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
  if (rc == CUDA_SUCCESS && handle) book.Imported(*handle);
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

// ---- graph memory nodes: charged from creation until the memory leaves the card -------------
// The driver takes a node's memory at a launch; it stays on the card after the graph and its
// executables are gone, until it is freed and the device's graph memory trimmed. A graph's
// charge stays while it or an executable of it exists, then passes to the device's graph
// memory (GraphGone), which returns it once the driver holds less (RefreshGraphMemory).

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

namespace {
// cuGraphAddNode: an allocation node on a device is charged as cuGraphAddMemAllocNode's is.
// A child graph moved into the graph (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE, the only way a
// graph with memory nodes becomes a child) brings its charge along: the parent owns and
// destroys it. Other nodes pass through.
template <typename Call>
CUresult AddGraphNode(CUgraph graph, const CUgraphNodeParams* p, Call call) {
  const auto g = reinterpret_cast<uint64_t>(graph);
  if (p != nullptr && p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
      p->alloc.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    return Charged(DeviceOfOrdinal(p->alloc.poolProps.location.id), Footprint(p->alloc.bytesize), "cuGraphAddNode",
                   call, [&](Charge c) { TheAllocations().Accumulate(HandleKind::kGraph, g, c.device, c.bytes); });
  }
  CUresult rc = call();
  if (rc == CUDA_SUCCESS && p != nullptr && p->type == CU_GRAPH_NODE_TYPE_GRAPH &&
      p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
    TheAllocations().GraphMoved(reinterpret_cast<uint64_t>(p->graph.graph), g);
  return rc;
}
}  // namespace

GS_HOOK(cuGraphAddNode)
CUresult gs_hook_cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* deps, size_t numDeps,
                                CUgraphNodeParams* nodeParams) {
  GS_NEED_CUDA();
  if (g_cuda.cuGraphAddNode == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return AddGraphNode(hGraph, nodeParams,
                      [&] { return g_cuda.cuGraphAddNode(phGraphNode, hGraph, deps, numDeps, nodeParams); });
}

GS_HOOK(cuGraphAddNode_v2)
CUresult gs_hook_cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* deps,
                                   const CUgraphEdgeData* edges, size_t numDeps, CUgraphNodeParams* nodeParams) {
  GS_NEED_CUDA();
  if (g_cuda.cuGraphAddNode_v2 == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return AddGraphNode(hGraph, nodeParams,
                      [&] { return g_cuda.cuGraphAddNode_v2(phGraphNode, hGraph, deps, edges, numDeps, nodeParams); });
}

// A clone's allocation nodes would be allocations of their own: the clone is charged what
// the original graph is, as a graph of its own. CUDA refuses to clone a graph with memory
// nodes (CUDA_ERROR_NOT_SUPPORTED, measured on the H200), so usually nothing is charged.
// Nothing reaches the card before a launch, so the charge is made after the driver's clone,
// which is destroyed again when the charge does not fit.
GS_HOOK(cuGraphClone) CUresult gs_hook_cuGraphClone(CUgraph* phGraphClone, CUgraph originalGraph) {
  GS_NEED_CUDA();
  if (g_cuda.cuGraphClone == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult rc = g_cuda.cuGraphClone(phGraphClone, originalGraph);
  Charge c;
  if (rc != CUDA_SUCCESS || phGraphClone == nullptr ||
      !TheAllocations().Find(HandleKind::kGraph, reinterpret_cast<uint64_t>(originalGraph), &c) || c.bytes == 0)
    return rc;
  DeviceCheck check = CheckDevice(c.device);
  if (check == DeviceCheck::kPass) return rc;
  if (check == DeviceCheck::kRefuse || !Reserve(c.device, c.bytes, false, "cuGraphClone")) {
    g_cuda.cuGraphDestroy(*phGraphClone);
    *phGraphClone = nullptr;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  TheAllocations().Accumulate(HandleKind::kGraph, reinterpret_cast<uint64_t>(*phGraphClone), c.device, c.bytes);
  return rc;
}

GS_HOOK(cuGraphDestroy) CUresult gs_hook_cuGraphDestroy(CUgraph hGraph) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuGraphDestroy(hGraph);
  Charge c;
  if (rc == CUDA_SUCCESS && TheAllocations().GraphDestroyed(reinterpret_cast<uint64_t>(hGraph), &c)) GraphGone(c);
  return rc;
}

GS_HOOK(cuDeviceGraphMemTrim) CUresult gs_hook_cuDeviceGraphMemTrim(CUdevice device) {
  GS_NEED_CUDA();
  if (g_cuda.cuDeviceGraphMemTrim == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult rc = g_cuda.cuDeviceGraphMemTrim(device);
  if (rc == CUDA_SUCCESS) RefreshGraphMemory(DeviceOfOrdinal(device));
  return rc;
}

namespace {
CUresult Instantiated(CUresult rc, const CUgraphExec* exec, CUgraph graph) {
  if (rc == CUDA_SUCCESS && exec != nullptr)
    TheAllocations().GraphInstantiated(reinterpret_cast<uint64_t>(*exec), reinterpret_cast<uint64_t>(graph));
  return rc;
}
}  // namespace

GS_HOOK(cuGraphInstantiate)
CUresult gs_hook_cuGraphInstantiate(CUgraphExec* e, CUgraph g, CUgraphNode* err_node, char* log, size_t log_size) {
  GS_NEED_REAL(cuGraphInstantiate);
  return Instantiated(g_cuda.cuGraphInstantiate(e, g, err_node, log, log_size), e, g);
}
GS_HOOK(cuGraphInstantiate_v2)
CUresult gs_hook_cuGraphInstantiate_v2(CUgraphExec* e, CUgraph g, CUgraphNode* err_node, char* log, size_t log_size) {
  GS_NEED_REAL(cuGraphInstantiate_v2);
  return Instantiated(g_cuda.cuGraphInstantiate_v2(e, g, err_node, log, log_size), e, g);
}
GS_HOOK(cuGraphInstantiateWithFlags)
CUresult gs_hook_cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long flags) {
  GS_NEED_REAL(cuGraphInstantiateWithFlags);
  return Instantiated(g_cuda.cuGraphInstantiateWithFlags(e, g, flags), e, g);
}
GS_HOOK(cuGraphInstantiateWithParams)
CUresult gs_hook_cuGraphInstantiateWithParams(CUgraphExec* e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  GS_NEED_REAL(cuGraphInstantiateWithParams);
  return Instantiated(g_cuda.cuGraphInstantiateWithParams(e, g, params), e, g);
}
GS_HOOK(cuGraphInstantiateWithParams_ptsz)
CUresult gs_hook_cuGraphInstantiateWithParams_ptsz(CUgraphExec* e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  GS_NEED_REAL(cuGraphInstantiateWithParams_ptsz);
  return Instantiated(g_cuda.cuGraphInstantiateWithParams_ptsz(e, g, params), e, g);
}

GS_HOOK(cuGraphExecDestroy) CUresult gs_hook_cuGraphExecDestroy(CUgraphExec hGraphExec) {
  GS_NEED_REAL(cuGraphExecDestroy);
  CUresult rc = g_cuda.cuGraphExecDestroy(hGraphExec);
  Charge c;
  if (rc == CUDA_SUCCESS && TheAllocations().GraphExecDestroyed(reinterpret_cast<uint64_t>(hGraphExec), &c))
    GraphGone(c);
  return rc;
}

// ---- contexts: their footprint is charged, and everything in them returned with them --------

namespace {
template <typename Call>
CUresult NewContext(CUcontext* pctx, CUdevice dev, Call call) {
  return CreateChargedContext(
      dev, false,
      [&](uint64_t* id) {
        CUresult rc = call();
        if (rc == CUDA_SUCCESS) *id = reinterpret_cast<uint64_t>(*pctx);
        return rc;
      },
      [&] { g_cuda.cuCtxDestroy_v2(*pctx); });
}

CUresult RetainPrimary(CUcontext* pctx, CUdevice dev) {
  return CreateChargedContext(
      dev, true,
      [&](uint64_t* id) {
        CUresult rc = g_cuda.cuDevicePrimaryCtxRetain(pctx, dev);
        if (rc == CUDA_SUCCESS) *id = reinterpret_cast<uint64_t>(*pctx);
        return rc;
      },
      [&] { g_cuda.cuDevicePrimaryCtxRelease_v2(dev); });
}

CUresult ReleasePrimary(CUdevice dev, CUresult (*real)(CUdevice)) {
  CUresult rc = real(dev);
  if (rc == CUDA_SUCCESS) PrimaryReleased(DeviceOfOrdinal(dev), 0);
  return rc;
}

CUresult ResetPrimary(CUdevice dev, CUresult (*real)(CUdevice)) {
  int idx = DeviceOfOrdinal(dev);
  uint64_t ctx = PrimaryContextOf(idx);
  CUresult rc = real(dev);
  // Everything the primary context held is freed by the driver: so it is by the books,
  // and the whole slice can be allocated again.
  if (rc == CUDA_SUCCESS) {
    ContextGone(idx, ctx);
    Limiter::ContextGone(reinterpret_cast<CUcontext>(ctx));
  }
  return rc;
}

CUresult DestroyContext(CUcontext ctx, CUresult (*real)(CUcontext)) {
  const int dev = DeviceOfOrdinal(OrdinalOfContext(ctx));
  CUresult rc = real(ctx);
  if (rc == CUDA_SUCCESS) {
    ContextGone(dev, reinterpret_cast<uint64_t>(ctx));
    Limiter::ContextGone(ctx);
  }
  return rc;
}

// A green context is a context of its own: what cuCtxFromGreenCtx returns for it is current
// while it is used, so what is allocated in it is recorded under that context and goes with
// it. It holds a reference to its device's primary context while it lives (CUDA driver API,
// cuGreenCtxCreate), which the driver creates when none is active. So a green context is
// made as the driver makes it: the primary context retained first, charged as
// cuDevicePrimaryCtxRetain is, then the green context itself charged as cuCtxCreate's
// context is (reserved ahead, then measured, refused with CUDA_ERROR_OUT_OF_MEMORY when it
// does not fit); cuGreenCtxDestroy gives back both, with everything allocated in it.
CUresult CreateGreenContext(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned flags) {
  if (phCtx == nullptr) return g_cuda.cuGreenCtxCreate(phCtx, desc, dev, flags);
  CUcontext primary = nullptr;
  CUresult rc = RetainPrimary(&primary, dev);
  if (rc != CUDA_SUCCESS) return rc;
  rc = CreateChargedContext(
      dev, false,
      [&](uint64_t* id) {
        CUresult made = g_cuda.cuGreenCtxCreate(phCtx, desc, dev, flags);
        if (made != CUDA_SUCCESS) return made;
        CUcontext ctx = nullptr;
        CUresult named = g_cuda.cuCtxFromGreenCtx ? g_cuda.cuCtxFromGreenCtx(&ctx, *phCtx) : CUDA_ERROR_NOT_SUPPORTED;
        if (named != CUDA_SUCCESS || ctx == nullptr) {  // its allocations could not be told: not made
          g_cuda.cuGreenCtxDestroy(*phCtx);
          *phCtx = nullptr;
          return named != CUDA_SUCCESS ? named : CUDA_ERROR_INVALID_CONTEXT;
        }
        *id = reinterpret_cast<uint64_t>(ctx);
        return made;
      },
      [&] {
        g_cuda.cuGreenCtxDestroy(*phCtx);
        *phCtx = nullptr;
      });
  if (rc != CUDA_SUCCESS) ReleasePrimary(dev, g_cuda.cuDevicePrimaryCtxRelease_v2);
  return rc;
}

CUresult DestroyGreenContext(CUgreenCtx green) {
  CUcontext ctx = nullptr;
  if (green == nullptr || g_cuda.cuCtxFromGreenCtx == nullptr || g_cuda.cuCtxFromGreenCtx(&ctx, green) != CUDA_SUCCESS)
    ctx = nullptr;
  const CUdevice ordinal = OrdinalOfContext(ctx);
  CUresult rc = g_cuda.cuGreenCtxDestroy(green);
  if (rc != CUDA_SUCCESS) return rc;
  ContextGone(DeviceOfOrdinal(ordinal), reinterpret_cast<uint64_t>(ctx));
  Limiter::ContextGone(ctx);
  // The reference to the primary context taken when it was made.
  if (ordinal >= 0) ReleasePrimary(ordinal, g_cuda.cuDevicePrimaryCtxRelease_v2);
  return rc;
}
}  // namespace

GS_HOOK(cuGreenCtxCreate)
CUresult gs_hook_cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
  GS_NEED_REAL(cuGreenCtxCreate);
  return CreateGreenContext(phCtx, desc, dev, flags);
}
GS_HOOK(cuGreenCtxDestroy) CUresult gs_hook_cuGreenCtxDestroy(CUgreenCtx hCtx) {
  GS_NEED_REAL(cuGreenCtxDestroy);
  return DestroyGreenContext(hCtx);
}

GS_HOOK(cuDevicePrimaryCtxRetain) CUresult gs_hook_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  GS_NEED_CUDA();
  return RetainPrimary(pctx, dev);
}
GS_HOOK(cuDevicePrimaryCtxRelease_v2) CUresult gs_hook_cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  GS_NEED_CUDA();
  return ReleasePrimary(dev, g_cuda.cuDevicePrimaryCtxRelease_v2);
}
GS_HOOK(cuDevicePrimaryCtxRelease) CUresult gs_hook_cuDevicePrimaryCtxRelease(CUdevice dev) {
  GS_NEED_CUDA();
  return ReleasePrimary(
      dev, g_cuda.cuDevicePrimaryCtxRelease ? g_cuda.cuDevicePrimaryCtxRelease : g_cuda.cuDevicePrimaryCtxRelease_v2);
}
GS_HOOK(cuDevicePrimaryCtxReset_v2) CUresult gs_hook_cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  GS_NEED_CUDA();
  return ResetPrimary(dev, g_cuda.cuDevicePrimaryCtxReset_v2);
}
GS_HOOK(cuDevicePrimaryCtxReset) CUresult gs_hook_cuDevicePrimaryCtxReset(CUdevice dev) {
  GS_NEED_CUDA();
  return ResetPrimary(
      dev, g_cuda.cuDevicePrimaryCtxReset ? g_cuda.cuDevicePrimaryCtxReset : g_cuda.cuDevicePrimaryCtxReset_v2);
}
GS_HOOK(cuCtxCreate) CUresult gs_hook_cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  GS_NEED_CUDA();
  // The same call as _v2 (which replaced it for 64-bit device pointers): made as _v2, so
  // the context is charged and destroyed by the same rules.
  return NewContext(pctx, dev, [&] { return g_cuda.cuCtxCreate_v2(pctx, flags, dev); });
}
GS_HOOK(cuCtxCreate_v2) CUresult gs_hook_cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  GS_NEED_CUDA();
  return NewContext(pctx, dev, [&] { return g_cuda.cuCtxCreate_v2(pctx, flags, dev); });
}
GS_HOOK(cuCtxCreate_v3)
CUresult gs_hook_cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n, unsigned int flags, CUdevice dev) {
  GS_NEED_CUDA();
  return NewContext(pctx, dev, [&] { return g_cuda.cuCtxCreate_v3(pctx, params, n, flags, dev); });
}
GS_HOOK(cuCtxCreate_v4)
CUresult gs_hook_cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  GS_NEED_CUDA();
  return NewContext(pctx, dev, [&] { return g_cuda.cuCtxCreate_v4(pctx, params, flags, dev); });
}
GS_HOOK(cuCtxDestroy_v2) CUresult gs_hook_cuCtxDestroy_v2(CUcontext ctx) {
  GS_NEED_CUDA();
  return DestroyContext(ctx, g_cuda.cuCtxDestroy_v2);
}
GS_HOOK(cuCtxDestroy) CUresult gs_hook_cuCtxDestroy(CUcontext ctx) {
  GS_NEED_CUDA();
  return DestroyContext(ctx, g_cuda.cuCtxDestroy ? g_cuda.cuCtxDestroy : g_cuda.cuCtxDestroy_v2);
}
GS_HOOK(cuCtxSetLimit) CUresult gs_hook_cuCtxSetLimit(CUlimit limit, size_t value) {
  GS_NEED_CUDA();
  return ChargedSetLimit(limit, value);
}

// ---- v1 entry points (32-bit sizes and device pointers) --------------------------------------
// Nothing current uses them; with a limit they are refused rather than counted by a second
// set of rules. Without one they pass through.
GS_HOOK(cuMemAlloc) CUresult gs_hook_cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  GS_NEED_CUDA();
  if (AnyMemoryLimit()) return CUDA_ERROR_NOT_SUPPORTED;
  return g_cuda.cuMemAlloc(dptr, bytesize);
}
GS_HOOK(cuMemAllocPitch)
CUresult gs_hook_cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pitch, unsigned int w, unsigned int h,
                                 unsigned int e) {
  GS_NEED_CUDA();
  if (AnyMemoryLimit()) return CUDA_ERROR_NOT_SUPPORTED;
  return g_cuda.cuMemAllocPitch(dptr, pitch, w, h, e);
}
GS_HOOK(cuArrayCreate) CUresult gs_hook_cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* desc) {
  GS_NEED_CUDA();
  if (AnyMemoryLimit()) return CUDA_ERROR_NOT_SUPPORTED;
  return g_cuda.cuArrayCreate(pHandle, desc);
}
GS_HOOK(cuArray3DCreate) CUresult gs_hook_cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc) {
  GS_NEED_CUDA();
  if (AnyMemoryLimit()) return CUDA_ERROR_NOT_SUPPORTED;
  return g_cuda.cuArray3DCreate(pHandle, desc);
}
GS_HOOK(cuMemGetInfo) CUresult gs_hook_cuMemGetInfo(unsigned int* free, unsigned int* total) {
  GS_NEED_CUDA();
  size_t f = 0, t = 0;
  CUresult rc = gs_hook_cuMemGetInfo_v2(&f, &t);
  if (rc != CUDA_SUCCESS) return rc;
  if (free) *free = static_cast<unsigned int>(std::min<size_t>(f, UINT32_MAX));
  if (total) *total = static_cast<unsigned int>(std::min<size_t>(t, UINT32_MAX));
  return rc;
}
GS_HOOK(cuDeviceTotalMem) CUresult gs_hook_cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  GS_NEED_CUDA();
  size_t b = 0;
  CUresult rc = gs_hook_cuDeviceTotalMem_v2(&b, dev);
  if (rc == CUDA_SUCCESS && bytes) *bytes = static_cast<unsigned int>(std::min<size_t>(b, UINT32_MAX));
  return rc;
}

// ---- modules and libraries -------------------------------------------------------------------

namespace {
// A module's or library's real size (its .global variables, its code) shows only after
// the driver loaded it: it is charged the estimate up front, then reconciled with NVML at
// once, and one that takes the process past its limit is unloaded again.
template <typename Handle, typename Call, typename Unload>
CUresult LoadCode(int dev, HandleKind kind, Handle* handle, const char* api, Call call, Unload unload) {
  CUresult rc = Charged(dev, kModuleEstimate, api, call,
                        [&](Charge c) { TheAllocations().Add(kind, reinterpret_cast<uint64_t>(*handle), c); });
  if (rc != CUDA_SUCCESS || Reconcile(dev, true) >= 0) return rc;
  if (unload(*handle) == CUDA_SUCCESS) {
    Release(kind, reinterpret_cast<uint64_t>(*handle));
    Reconcile(dev, true);
  }
  *handle = nullptr;
  return CUDA_ERROR_OUT_OF_MEMORY;
}

template <typename Call>
CUresult LoadModule(CUmodule* module, Call call) {
  return LoadCode(CurrentDevice(), HandleKind::kModule, module, "module load", call, g_cuda.cuModuleUnload);
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
  if (rc == CUDA_SUCCESS) {
    ForgetFunctionsUsed();
    Reconcile(Release(HandleKind::kModule, reinterpret_cast<uint64_t>(hmod)), true);
  }
  return rc;
}

// Lazy loading (charging.h, "lazily loaded code"): resolving a kernel loads its code.
GS_HOOK(cuModuleGetFunction) CUresult gs_hook_cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuModuleGetFunction(hfunc, hmod, name);
  if (rc == CUDA_SUCCESS && hfunc) NoteFunctionUsed(*hfunc);
  return rc;
}
GS_HOOK(cuKernelGetFunction) CUresult gs_hook_cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuKernelGetFunction(pFunc, kernel);
  if (rc == CUDA_SUCCESS && pFunc) NoteFunctionUsed(*pFunc);
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
  if (dev < 0) dev = DeviceOfOrdinal(0);
  return LoadCode(dev, HandleKind::kLibrary, library, "library load", call, g_cuda.cuLibraryUnload);
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
  if (rc == CUDA_SUCCESS) {
    ForgetFunctionsUsed();
    Reconcile(Release(HandleKind::kLibrary, reinterpret_cast<uint64_t>(library)), true);
  }
  return rc;
}

// ---- what the container sees ----------------------------------------------------------------

GS_HOOK(cuMemGetInfo_v2) CUresult gs_hook_cuMemGetInfo_v2(size_t* free, size_t* total) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuMemGetInfo_v2(free, total);
  const int dev = CurrentDevice();
  RefreshPools(dev);  // what pools gave back at a synchronize is free again
  region::MemoryView v;
  if (rc != CUDA_SUCCESS || free == nullptr || total == nullptr || !LimitedView(dev, *total, *free, &v)) return rc;
  *free = v.free;
  *total = v.total;
  return CUDA_SUCCESS;
}

GS_HOOK(cuDeviceTotalMem_v2) CUresult gs_hook_cuDeviceTotalMem_v2(size_t* bytes, CUdevice ord) {
  GS_NEED_CUDA();
  CUresult rc = g_cuda.cuDeviceTotalMem_v2(bytes, ord);
  if (rc == CUDA_SUCCESS && bytes && MemoryLimit(DeviceOfOrdinal(ord))) *bytes = MemoryLimit(DeviceOfOrdinal(ord));
  return rc;
}
