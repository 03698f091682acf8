// The simulated CUDA driver's process-wide state and the helpers its API files share
// (src/sim/cuda_*.cc, one per part of the driver API: init, device, context, memory, pool,
// vmm, arrays, module, launch, stream, graph). Device pointers are host addresses of
// lazily backed mappings, so copies move real bytes; every device allocation is charged to
// the shared node (src/sim/node.h) so all processes see one card. See docs/simulator.md.
//
// Internal to libcuda.so.1 (hidden like everything but the exports). Threading: Driver::mu
// guards the maps; a Context's and a Stream's own mutex guard their fields.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "src/platform/cuda_api.h"
#include "src/sim/objects.h"
#include "src/sim/runtime.h"

namespace gs::sim {

constexpr size_t kVmmGranularity = 2u << 20;
constexpr int kDriverApiVersion = 13000;
// The driver reserves device memory in 2 MiB pages (docs/measurements/h100-driver.md: a 1 MiB cuMemAlloc
// added 2 MiB to NVML's per-process figure).
constexpr uint64_t kDriverPage = 2u << 20;

struct Driver {
  Runtime* rt = nullptr;
  // CUDA_MODULE_LOADING, read once by cuInit as the driver does: lazy unless "EAGER"
  // (lazy is the default on Linux since CUDA 12.2).
  bool lazy_loading = true;
  std::mutex mu;
  std::map<uintptr_t, Allocation> allocations;  // by start address
  std::map<CUmemGenericAllocationHandle, std::unique_ptr<PhysicalMemory>> physical;
  std::map<uintptr_t, std::pair<PhysicalMemory*, size_t>> vmm_maps;                    // start -> (phys, size)
  std::map<CUmemGenericAllocationHandle, std::unique_ptr<MulticastObject>> multicast;  // by handle
  Context primary[kMaxDevices];
  MemPool default_pool[kMaxDevices];
  MemPool* current_pool[kMaxDevices] = {};
  // Each device's graph memory: what graph launches took from the card, kept when freed
  // until cuDeviceGraphMemTrim or the end of the context (src/sim/cuda_graph.cc).
  MemPool graph_pool[kMaxDevices];
  std::set<MemPool*> created_pools;  // by cuMemPoolCreate, until destroyed
};

// Set by cuInit (src/sim/cuda_init.cc); null before, and in a child forked after it.
extern Driver* g_driver;
extern thread_local std::vector<Context*> t_ctx_stack;
// Set in a child forked after this process initialised CUDA: CUDA is unusable there.
extern bool g_forked_after_init;
// Set when the driver shut down at the process's exit (src/sim/cuda_init.cc).
extern std::atomic<bool> g_shut_down;

inline Node* node() {
  return g_driver->rt->node;
}
inline int64_t Now() {
  return node()->clock()->NowNs();
}

#define GS_REQUIRE_INIT()                                                             \
  do {                                                                                \
    if (!g_driver) return CUDA_ERROR_NOT_INITIALIZED;                                 \
    if (g_shut_down.load(std::memory_order_relaxed)) return CUDA_ERROR_DEINITIALIZED; \
  } while (0)

inline Context* CurrentContext() {
  return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back();
}

inline bool ValidOrdinal(CUdevice dev) {
  return dev >= 0 && dev < g_driver->rt->cuda_count;
}
inline int StateIndex(CUdevice dev) {
  return g_driver->rt->cuda_devices[dev];
}
inline const DeviceSpec& Spec(int state_index) {
  return node()->spec(state_index);
}

// ---- memory (src/sim/cuda_driver.cc) ----------------------------------------------------

void* MapLazy(size_t bytes);
size_t RoundUp(size_t v, size_t to);
// Charges `bytes` to device `dev` and maps backing memory; records the allocation.
CUresult AllocateDevice(int dev, size_t bytes, AllocKind kind, MemPool* pool, CUdeviceptr* out);
CUresult FreeAllocation(uintptr_t addr, bool host);
// Gives the card back what a freed allocation held, or, when it is shared with other
// processes, this process's reference to it (src/sim/cuda_ipc.cc).
void ReleaseAllocationMemory(const Allocation& a);
// The same for physical memory of cuMemCreate or cuMemImportFromShareableHandle.
void ReleasePhysicalMemory(const PhysicalMemory& p);
// Gives the card back what `pool` holds free beyond max(keep, what is in use).
void TrimPool(MemPool* pool, uint64_t keep);
// Records an exported allocation of the pool freed here (MemPool::freed_shares), forgetting
// those the node no longer keeps.
void RememberFreedShare(MemPool* pool, int index, uint64_t id);
// A synchronize on `dev`: every pool of that device trims to its release threshold.
void TrimPoolsAtSync(int dev);
// True when [p, p+n) lies inside one known allocation (device, host or mapped VMM).
bool ValidRange(uintptr_t p, size_t n);
// Host pointers in copies may be any host memory; only device sides are checked.
CUresult CheckDevice(CUdeviceptr p, size_t n);
// cuMemAllocAsync / cuMemAllocFromPoolAsync on a capturing stream: a graph memory node
// (src/sim/cuda_graph.cc).
CUresult AllocInGraphCapture(Stream* st, size_t bytes, CUdeviceptr* dptr);
// The address of a graph allocation node on device `dev`, recorded as a kGraph allocation
// that nothing has allocated yet: nothing is charged to the card until a launch.
CUresult ReserveGraphAddress(int dev, size_t bytes, CUdeviceptr* out);

// ---- streams and time (src/sim/cuda_driver.cc) ------------------------------------------

Stream* ResolveStream(CUstream s);
bool IsNullStream(const Stream* st);
// Queues a kernel of duration_ns on st; blocks while the stream's queue is full. The
// device runs a process's work in launch order, so stream and context order hold.
CUresult EnqueueKernel(Stream* st, int64_t duration_ns);
int64_t StreamTail(Stream* st);
int64_t ContextTail(Context* ctx);
// The legacy default stream orders against all work in its context.
int64_t StreamOrderTail(Stream* st);
void WaitStream(Stream* st);
void WaitContext(Context* ctx);
bool EventDone(const CudaEvent* e);
int64_t EventTime(const CudaEvent* e);

// ---- contexts (src/sim/cuda_context.cc) ------------------------------------------------

// A new context's own footprint on its card (DeviceSpec::context_memory), and back.
CUresult ChargeContext(Context* ctx);
void UnchargeContext(Context* ctx);
// Gives back what a context holds when it goes away. Called with c->mu held.
void ReleaseContextMemory(Context* c);

// ---- memory shared between processes (src/sim/cuda_ipc.cc) -----------------------------

// What a legacy IPC handle or a pool pointer's export data carries: the entry of the node's
// table (the owner's pid and its descriptor of the backing are there), with the sizes.
struct SharePayload {
  uint64_t id;
  int32_t index;
  uint32_t reserved;
  uint64_t size;
  uint64_t map_size;
};
// The inode and file system of a descriptor's file; false when fstat fails.
bool FileIdentity(int fd, uint64_t* inode, uint64_t* fs_dev);
// A fresh memfd to back memory another process may map (memfd_create, close-on-exec), never
// descriptor 0, which the node's table of shared memory reads as "no owner's descriptor";
// -1 on failure.
int NewBacking(const char* name);
// Makes the allocation at addr shareable, once: its bytes move into a memfd mapped at the
// same address and it gets an entry in the node's table, its bytes staying in this
// process's slot. Fills *out. Caller holds g_driver->mu.
CUresult ShareAllocation(uintptr_t addr, Allocation* a, SharePayload* out);
// Opens the shared allocation of p (info: its entry, read by the caller) in this process,
// in ctx, as an allocation of `kind`: this process holds it until it lets it go, and
// nothing new is put on the card. CUDA_ERROR_INVALID_VALUE when the owner's backing cannot
// be reached.
CUresult OpenSharedAllocation(const SharePayload& p, const ShareInfo& info, Context* ctx, AllocKind kind,
                              CUdeviceptr* out);

// ---- virtual memory (src/sim/cuda_vmm.cc, src/sim/cuda_multicast.cc) --------------------

// Frees a released handle once nothing maps or binds it any more. Caller holds g_driver->mu.
void MaybeDestroyPhysical(CUmemGenericAllocationHandle key);
// cuMemRelease of a multicast object's handle: the object and its bindings go. False when
// handle is no multicast object. Caller holds g_driver->mu.
bool ReleaseMulticast(CUmemGenericAllocationHandle handle);

// ---- modules (src/sim/cuda_module.cc) ---------------------------------------------------

// Puts fn's code on its module's card if it is not there yet (lazy loading: at first
// resolution or launch); CUDA_ERROR_OUT_OF_MEMORY when the card has no room for it.
CUresult EnsureLoaded(Function* fn);

// ---- launches (src/sim/cuda_launch.cc) --------------------------------------------------

// The spin kernel's only parameter: nanoseconds each block runs.
int64_t SpinParam(void** params, void** extra);

// ---- context limits (src/sim/cuda_driver.cc) --------------------------------------------

// cuCtxGetLimit's values in a fresh context: the three memory limits' defaults are CUDA's
// documented ones (1 KiB of stack per thread, 1 MiB printf FIFO, 8 MiB malloc heap).
size_t DefaultLimit(int limit);
void ResetLimits(Context* c);

}  // namespace gs::sim
