// What each driver call costs the container's slice, and the books that record it: the
// reserve -> driver call -> commit/roll back sequence every allocating hook goes through
// (docs/enforcer.md, "Memory"), what contexts, stack/heap limits and modules are charged, and
// how a destroyed or reset context gives everything back. The hooks
// (memory_hooks.cc) only say which device and how many bytes.
//
// Fail closed: when any device has a memory limit, a call whose device cannot be told,
// or that runs while the limits file's region is unusable, is refused, never let through
// uncounted. A forked child charges its own process slot (claimed on its first charge).
// Besides the region (which every process of the container can write), the process keeps
// its own ledger per device and never holds more than the limit by it: a charge is checked
// against it and added to it in one atomic step before the region is asked, so neither an
// interleaving of the process's threads nor forged region totals (or a held region mutex)
// give one process anything past its limit.
//
// Thread-safety: every function is safe from any thread (region mutex, the allocation
// table's mutex, atomics). Cost: one region lock per charge; nothing on the launch path.
#pragma once

#include <cstdint>

#include "src/enforcer/allocations.h"
#include "src/enforcer/child_reset_mutex.h"
#include "src/enforcer/enforcer.h"

namespace gs::enforcer {

inline constexpr uint64_t kPage = 2ull << 20;

// What an allocation of `bytes` costs on the card: the driver hands out device memory in
// 2 MiB pages (a 1 MiB cuMemAlloc took 2 MiB on the H100, docs/measurements/h100-driver.md).
uint64_t Footprint(uint64_t bytes);

// Finds or claims this process's slot in region r, named as its /proc shows it (OwnProcView),
// and stamps it with what the node agent needs to know it by: its priority, its pid (the
// host pid until the agent learns another) and its PID namespace. nullptr when the region
// has no free slot.
region::ProcessSlot* ClaimProcessSlot(region::Region* r);

enum class DeviceCheck { kPass, kCharge, kRefuse };
// Whether a call on region device `dev` (-1: unknown) passes uncounted, is charged, or is
// refused. Claims this process's own slot first when it is a forked child.
DeviceCheck CheckDevice(int dev);

// Reserves bytes on dev against its limit; false (logged, nothing changed) if they do not
// fit. Unreserve gives them back.
bool Reserve(int dev, uint64_t bytes, bool spilled, const char* api);
void Unreserve(int dev, uint64_t bytes, bool spilled);
// Importing memory shared by another process of the container (cuIpcOpenMemHandle,
// cuMemImportFromShareableHandle) charges nothing, its owner pays; but what the card keeps for
// an importer once the owner let go is the importer's container's, so a container that holds
// more than its limit on any of its devices already (NVML asked now) gets no more imports:
// an owner that exports, frees and allocates again in a loop fills the importer's slice
// once, not without end. Logs the refusal.
bool ImportRefused(const char* api);
// A pool piece or legacy IPC allocation imported from a process that recorded it nowhere this
// process can see (another container): charged here as Reserve does (`api` names the call),
// and known to the reconciliation as memory NVML does not list under this process (a pool's
// piece never is; IPC memory is listed under its owner until the owner lets go, then under
// this process, and counted twice until it is closed: strict, never loose).
bool ReserveImported(int dev, uint64_t bytes, const char* api);
void UnreserveImported(int dev, uint64_t bytes);
// Serialises legacy IPC opens and closes (memory_hooks.cc): two threads opening one handle
// get one pointer from the driver, paid once. The outermost enforcer lock; a forked child
// starts with it free.
ChildResetMutex& IpcOpenMutex();

// Reconciliation with the card (docs/enforcer.md, "Memory"): NVML's figure for this
// process on dev is the truth on hardware, and part of it comes from no call the enforcer
// sees (kernels loaded lazily at first launch, libraries' own buffers). The difference
// between that figure and the device bytes charged is charged too, as "unseen" memory,
// raised or lowered to match, and past the limit if it must be (it is already spent; later
// allocations are then refused). Runs with `force`, or at most every 100 ms from
// Reserve. Returns -1 when the process is over dev's limit afterwards, 1 when the charge
// grew, 0 otherwise (also when nothing could be measured: no NVML, a PID namespace
// without the host pid, no limit on dev).
int Reconcile(int dev, bool force);

// ---- lazily loaded code -------------------------------------------------------------------
// Since CUDA 12.2 the driver loads a kernel's code when the kernel is first resolved
// (cuModuleGetFunction, cuKernelGetFunction) or launched (a library's CUkernel, as the CUDA
// runtime launches), not when its module is loaded (CUDA C++ Programming Guide, "Lazy
// Loading"): device memory grows at the first launch, with no allocation call to hook.
// The first time this process resolves or launches a function, every device's books are
// marked as possibly behind the card, and the next charge on a device reconciles with
// NVML at once instead of waiting for the 100 ms window. What no hooked call shows (the
// kernels of a graph, loaded at cuGraphInstantiate) is still found within 100 ms.
//
// Call after the driver call that may have loaded the code. Cost: one load and compare
// when fn was noted last, else one lookup in a lock-free table of functions seen (no
// lock, no syscall); nothing without a memory limit.
void NoteFunctionUsed(const void* fn);
// A module, library or context is gone: function handles may be reused by the next load.
void ForgetFunctionsUsed();

// The current context, as charges record it (0 when none).
uint64_t CurrentContextId();

// Reserve, call, commit or roll back. `call` returns the driver's result; on success
// `record` stores the charge under the new handle.
template <typename Call, typename Record>
CUresult Charged(int dev, uint64_t bytes, const char* api, Call call, Record record) {
  DeviceCheck g = CheckDevice(dev);
  if (g == DeviceCheck::kPass) return call();
  if (g == DeviceCheck::kRefuse || !Reserve(dev, bytes, false, api)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = call();
  if (rc == CUDA_SUCCESS)
    record(Charge{dev, bytes, false, CurrentContextId()});
  else
    Unreserve(dev, bytes, false);
  return rc;
}

// Gives back what the handle was charged, if anything; returns its device (-1: nothing).
int Release(HandleKind kind, uint64_t handle);

// ---- memory shared between processes ---------------------------------------------------------
// Memory this process exported (cuIpcGetMemHandle, cuMemExportToShareableHandle, pool
// allocations: cuMemPoolExportToShareableHandle, cuMemPoolExportPointer) stays on the card
// after it frees it for as long as an importer holds it, and the card lists it under this
// process or, as an H100 does for legacy IPC memory, under the importer
// (docs/measurements/shared-memory.md). So a freed exported allocation's `bytes` on `dev`
// are not given back: they stay charged as memory only NVML sees ("unseen", see Reconcile),
// which the reconciliation lowers only once NVML lists them neither under this process nor,
// beyond what those are charged, under other processes of the container (the importer pays
// from its own next reconciliation) — asked at once here, and again before any allocation
// is refused. Without NVML they stay charged. Importing charges nothing (the owner pays),
// but for what has no record in the region (ReserveImported).
void KeepWhileShared(int dev, uint64_t bytes);

// ---- stream-ordered pools (PoolBook, allocations.h) ------------------------------------------
// Asks the driver what `pool` holds free and returns the charges it held beyond that;
// returns how many bytes went back.
uint64_t RefreshPool(uint64_t pool);
// The pool is destroyed: what it held free goes back.
void PoolDestroyed(uint64_t pool);
// RefreshPool for every pool holding charges on `dev` (a synchronize or a trim the enforcer
// does not see may have given memory back); true when something went back.
bool RefreshPools(int dev);

// ---- graph memory (GraphMemoryBook, allocations.h) -----------------------------------------
// A graph and every executable of it are gone: its charge `c` passes to its device's graph
// memory, which the driver keeps on the card after the graph.
void GraphGone(const Charge& c);
// Asks the driver how much graph memory device `dev` holds and returns what the book held
// beyond that (a trim, the end of a context, a graph that never launched); returns how
// many bytes went back.
uint64_t RefreshGraphMemory(int dev);
// cuStreamEndCapture on `stream` returned rc and `graph`: what the capture allocated
// (kCapture) becomes that graph's charge, or goes back when no graph came of it.
void CaptureEnded(uint64_t stream, CUresult rc, uint64_t graph);

// ---- contexts ----------------------------------------------------------------------------
// A context's own footprint (docs/enforcer.md, "Memory"): what it is expected to take is
// reserved before the driver is asked (the last footprint this process measured on the
// device, else GPUSLICE_CONTEXT_OVERHEAD), so the card never holds a context the slice has
// no room for, not even until it is measured; once created, the charge is set to what
// NVML shows it took. Everything charged inside it is returned when it is destroyed,
// reset, or its last primary reference released. `create` makes the context and returns
// its handle in *ctx; `undo` destroys it again when its measured footprint does not fit.
template <typename Create, typename Undo>
CUresult CreateChargedContext(CUdevice ordinal, bool primary, Create create, Undo undo);
// The context ctx on device dev is gone (destroyed, reset, last primary release).
void ContextGone(int dev, uint64_t ctx);
// cuDevicePrimaryCtxRelease: the primary context lives until its last reference goes.
void PrimaryReleased(int dev, uint64_t ctx);
// The primary context of dev while this process references it; 0 otherwise.
uint64_t PrimaryContextOf(int dev);

// cuCtxSetLimit: the memory a new stack size, malloc heap or printf FIFO takes on the
// current context's device is charged (or the call refused) before the driver is asked.
CUresult ChargedSetLimit(CUlimit limit, size_t value);

// Called from the library constructor: fork handlers.
void InstallForkHandlers();

// ---- implementation of the template above -------------------------------------------------
namespace internal {
// Reserves what a context about to be created on dev is expected to take; *held = what was
// reserved (0 when it is the primary context this process already references).
DeviceCheck ReserveContextAhead(int dev, bool primary, uint64_t* held);
// Sets the charge of the context just created to its measured footprint (held: what
// ReserveContextAhead reserved for it).
DeviceCheck ChargeContextFootprint(int dev, bool primary, uint64_t ctx, uint64_t measured_before, uint64_t held);
uint64_t OwnDeviceUse(int dev);  // what NVML says this process holds on dev; 0 unknown
// What this process holds on dev before it creates a context there: 0 without asking NVML
// when it never began one there and holds nothing charged there, so that a process's first
// context does not wait for NVML's start-up (docs/enforcer.md, the contexts row).
uint64_t DeviceUseBeforeContext(int dev);
// The same, false when it cannot be told (no NVML, the process not found under its pid).
bool MeasureOwnDeviceUse(int dev, uint64_t* bytes);
}  // namespace internal

template <typename Create, typename Undo>
CUresult CreateChargedContext(CUdevice ordinal, bool primary, Create create, Undo undo) {
  if (NotGranted(ordinal)) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  int dev = DeviceOfOrdinal(ordinal);
  DeviceCheck g = CheckDevice(dev);
  if (g == DeviceCheck::kRefuse) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t before = g == DeviceCheck::kCharge ? internal::DeviceUseBeforeContext(dev) : 0;
  uint64_t held = 0;
  if (g == DeviceCheck::kCharge && internal::ReserveContextAhead(dev, primary, &held) == DeviceCheck::kRefuse)
    return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t ctx = 0;
  CUresult rc = create(&ctx);
  if (rc != CUDA_SUCCESS || g == DeviceCheck::kPass) {
    if (held) Unreserve(dev, held, false);
    return rc;
  }
  if (internal::ChargeContextFootprint(dev, primary, ctx, before, held) == DeviceCheck::kRefuse) {
    undo();
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

}  // namespace gs::enforcer
