#include "src/enforcer/charging.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "src/common/clock.h"
#include "src/common/proc_identity.h"
#include "src/common/quantity.h"
#include "src/common/raw_log.h"
#include "src/enforcer/limits.h"
#include "src/enforcer/nvml_cards.h"
#include "src/enforcer/shared_pieces.h"
#include "src/region/shared_pieces.h"

namespace gs::enforcer {
namespace {

// This process's own ledger per device (see the header: a bound the region cannot undo):
// everything charged, of which g_own_spilled lives in host memory and g_unseen is what
// reconciliation added for memory NVML shows and no hooked call accounts for.
std::atomic<uint64_t> g_own[kMaxDevices];
std::atomic<uint64_t> g_own_spilled[kMaxDevices];
std::atomic<uint64_t> g_unseen[kMaxDevices];
// Of g_unseen, bytes this process freed while other processes could still hold them
// (KeepWhileShared): kept while NVML may list them under this process, or lists memory
// beyond their charge under other processes of the container (written under
// g_reconcile_mu).
std::atomic<uint64_t> g_kept[kMaxDevices];
// What other processes of the container hold on the card beyond their charges, as this
// process's last reconciliation found it in NVML's list: memory an importer holds past its
// owner (legacy IPC and descriptors are listed under the importer then, which pays only from
// its own next reconciliation; an importer that no longer calls the driver never does), and
// memory a process spent without a call to count. Not a charge: this process's own charges
// must leave room for it (written under g_reconcile_mu).
std::atomic<uint64_t> g_held_elsewhere[kMaxDevices];
// Of g_own, pool pieces imported from processes that recorded them nowhere this process can
// see (another container): charged here, listed by NVML under their owner or under no
// process, never under this one.
std::atomic<uint64_t> g_imported[kMaxDevices];
// Of g_own, what this process's contexts hold that NVML lists under no process (the
// driver's own part of each context, kContextUnlisted): charged with each context.
std::atomic<uint64_t> g_context_unlisted[kMaxDevices];

std::mutex g_reconcile_mu;
std::atomic<int64_t> g_reconciled_at_ns[kMaxDevices];  // written under g_reconcile_mu
// How often a charge asks NVML again: lazily loaded kernels and libraries' own memory
// appear without a call to hook, so the books are brought up to date this often while the
// program allocates; an NVML process query costs well under this (docs/enforcer.md).
constexpr int64_t kReconcileEveryNs = 100'000'000;

// Devices (bit i: region device i) whose books may be behind the card because a function
// was resolved or launched for the first time since their last reconciliation.
std::atomic<uint64_t> g_code_pending{0};
static_assert(kMaxDevices <= 64, "g_code_pending has one bit per device");

bool TakeCodePending(int dev) {
  if (dev < 0 || dev >= kMaxDevices) return false;
  uint64_t bit = 1ull << dev;
  if ((g_code_pending.load(std::memory_order_relaxed) & bit) == 0) return false;  // the common case
  return (g_code_pending.fetch_and(~bit) & bit) != 0;
}

// Functions this process has resolved or launched: an open-addressed set of handles, so
// the launch path asks it without a lock. Lookups probe a few slots; a set too full to
// take a handle treats it as new every time (an early reconciliation, never a late one).
constexpr int kSeenBits = 14;
constexpr size_t kSeenSlots = size_t{1} << kSeenBits;
constexpr int kSeenProbes = 16;
std::atomic<uintptr_t> g_seen[kSeenSlots];
std::atomic<uintptr_t> g_last_noted{0};  // the function noted last (any thread)

// True the first time fn is seen.
bool FirstSeen(uintptr_t fn) {
  size_t h = static_cast<size_t>(((fn >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - kSeenBits));
  for (int i = 0; i < kSeenProbes; ++i) {
    std::atomic<uintptr_t>& slot = g_seen[(h + static_cast<size_t>(i)) & (kSeenSlots - 1)];
    uintptr_t cur = slot.load(std::memory_order_relaxed);
    if (cur == fn) return false;
    if (cur == 0) {
      if (slot.compare_exchange_strong(cur, fn, std::memory_order_relaxed)) return true;
      if (cur == fn) return false;
    }
  }
  return true;
}

int64_t MonotonicNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void SubtractClamped(std::atomic<uint64_t>* v, uint64_t bytes) {
  uint64_t cur = v->load();
  while (!v->compare_exchange_weak(cur, cur > bytes ? cur - bytes : 0)) {
  }
}

ChildResetMutex g_ctx_mu;
int g_primary_refs[kMaxDevices];  // primary-context references this process holds
// Beside its footprint NVML lists under the process, the driver keeps memory for each
// context that it lists under no process, yet counts in the card's used memory: about 5.7
// MiB a context on an H200 (31 MiB beside five, docs/measurements/h200-driver.md,
// 2026-11-28); on an H100 `cuMemGetInfo` counted 8 MiB beyond NVML's figure for one context
// and 14 for two in one process (docs/measurements/h100-driver.md). A slice pays for it
// with each context whose footprint it pays for: a context's charge holds it whenever it
// is not 0.
constexpr uint64_t kContextUnlisted = 6ull << 20;
// The footprint this process last measured for a context on each device (0: none yet).
std::atomic<uint64_t> g_context_measured[kMaxDevices];
// Whether this process (or the parent it was forked from) ever began making a context on
// each device.
std::atomic<bool> g_context_charged[kMaxDevices];
uint64_t g_primary_ctx[kMaxDevices];  // the primary context's handle, while referenced

ChildResetMutex g_slot_mu;

}  // namespace

region::ProcessSlot* ClaimProcessSlot(region::Region* r) {
  ProcView me;
  if (!OwnProcView(&me)) {
    // Named by getpid() with no start time: never judged gone by a start time it lacks.
    GS_LOG(kError,
           "cannot read /proc/self: this process's identity is unknown; its charges stay until the region goes");
    me = ProcView{getpid(), 0, OwnPidNamespace()};
  }
  region::ProcessSlot* slot = region::ClaimSlot(r, me.pid, me.start_time, me.pid_namespace);
  if (slot == nullptr) return nullptr;
  slot->priority.store(g_state.cfg.priority);
  // Without a PID namespace of our own, our pid is what NVML reports.
  slot->host_pid.store(static_cast<uint32_t>(me.pid));
  return slot;
}

namespace {

// A forked child (or a process whose region was joined before a fork) claims its own slot:
// sharing the parent's would free the child's memory from the books when the parent exits.
void ClaimOwnSlot() {
  g_slot_mu.lock();
  pid_t pid = getpid();
  if (g_state.slot_pid.load() != pid) {
    region::ProcessSlot* slot = ClaimProcessSlot(g_state.region);
    if (slot == nullptr)
      GS_LOG(kError, "the region has no free process slot for forked child %d; its allocations are refused", pid);
    g_state.slot = slot;
    g_state.slot_pid.store(pid);
  }
  g_slot_mu.unlock();
}

// In the order the hooks take them: the VMM book's lock is held across charges.
void BeforeFork() {
  TheVmmBook().mu().lock();
  g_reconcile_mu.lock();
  TheAllocations().LockForFork();
  ThePoolBook().LockForFork();
  TheGraphMemoryBook().LockForFork();
}
void AfterForkInParent() {
  TheGraphMemoryBook().UnlockAfterFork();
  ThePoolBook().UnlockAfterFork();
  TheAllocations().UnlockAfterFork();
  g_reconcile_mu.unlock();
  TheVmmBook().mu().unlock();
}
void AfterForkInChild() {
  // Nothing the parent holds is the child's: its books start empty, its slot is claimed
  // on its first charge (most children exec at once and never need one).
  TheGraphMemoryBook().UnlockAfterFork();
  ThePoolBook().UnlockAfterFork();
  TheAllocations().UnlockAfterFork();
  g_reconcile_mu.unlock();
  TheVmmBook().mu().unlock();
  // Held across driver and NVML calls, guarding nothing the child keeps: not taken at the
  // fork, so a thread of the parent may have held them.
  IpcOpenMutex().ResetInChild();
  g_ctx_mu.ResetInChild();
  g_slot_mu.ResetInChild();
  DeviceMapAfterForkInChild();
  TheAllocations().ForgetAll();
  ThePoolBook().ForgetAll();
  TheGraphMemoryBook().ForgetAll();
  TheVmmBook().ForgetAll();
  NvmlCardsAfterForkInChild();
  for (auto* books : {g_own, g_own_spilled, g_unseen, g_kept, g_held_elsewhere, g_imported, g_context_unlisted})
    for (int d = 0; d < kMaxDevices; ++d) books[d].store(0);
  for (auto& t : g_reconciled_at_ns) t.store(0);
  g_code_pending.store(0);
  for (int d = 0; d < kMaxDevices; ++d) g_primary_refs[d] = 0, g_primary_ctx[d] = 0;
  g_state.slot = nullptr;
}

// Driver defaults of the per-context limits (CUDA driver API documentation): what every
// context already has, included in its measured footprint.
constexpr uint64_t kDefaultStack = 1024, kDefaultPrintfFifo = 1ull << 20, kDefaultMallocHeap = 8ull << 20;

}  // namespace

uint64_t Footprint(uint64_t bytes) {
  return (bytes + kPage - 1) / kPage * kPage;
}

namespace {
// A context's charge: its footprint and, with a footprint, the driver's own part of it.
uint64_t WithUnlisted(uint64_t footprint) {
  return footprint > 0 ? footprint + kContextUnlisted : 0;
}
}  // namespace

DeviceCheck CheckDevice(int dev) {
  bool limited = AnyMemoryLimit();
  if (g_state.region_refused) return limited ? DeviceCheck::kRefuse : DeviceCheck::kPass;
  if (g_state.region != nullptr && g_state.slot_pid.load(std::memory_order_relaxed) != getpid()) ClaimOwnSlot();
  if (g_state.region == nullptr || g_state.slot == nullptr || dev < 0 || dev >= kMaxDevices)
    return limited ? DeviceCheck::kRefuse : DeviceCheck::kPass;
  return DeviceCheck::kCharge;
}

namespace {

// The process's own bound: bytes join the ledger only if it stays within the limit, checked
// and added in one atomic step before the region is asked, so no interleaving of the
// process's threads takes it past the limit, whatever the region (or its mutex) says.
bool TakeOwn(int dev, uint64_t bytes, uint64_t limit) {
  uint64_t cur = g_own[dev].load();
  do {
    if (limit != 0 && (bytes > limit || cur > limit - bytes)) return false;
  } while (!g_own[dev].compare_exchange_weak(cur, cur + bytes));
  return true;
}

// The container's charges may reach the limit less what its other processes hold beyond
// their charges (g_held_elsewhere); 1 byte when they hold it all, which no charge fits.
uint64_t RegionLimit(int dev, uint64_t limit) {
  const uint64_t held = g_held_elsewhere[dev].load(std::memory_order_relaxed);
  return limit == 0 ? 0 : held < limit ? limit - held : 1;
}

bool TryReserve(int dev, uint64_t bytes, bool spilled, uint64_t limit, bool* own_fits) {
  *own_fits = TakeOwn(dev, bytes, limit);
  if (!*own_fits) return false;
  if (!region::Reserve(g_state.region, g_state.slot, dev, bytes, spilled, RegionLimit(dev, limit))) {
    SubtractClamped(&g_own[dev], bytes);
    return false;
  }
  if (spilled) g_own_spilled[dev].fetch_add(bytes);
  return true;
}

// `reconcile` = false for a charge NVML already shows (a context just created): asking
// NVML first would count those bytes once as unseen and once as the charge.
bool ReserveChecked(int dev, uint64_t bytes, bool spilled, const char* api, bool reconcile) {
  uint64_t limit = MemoryLimit(dev);
  // Right after a function's first use its lazily loaded code may be on the card: look now.
  if (reconcile) Reconcile(dev, TakeCodePending(dev));
  bool own_fits = false;
  if (TryReserve(dev, bytes, spilled, limit, &own_fits)) return true;
  // What reconciliation charged or found held elsewhere may be stale (memory given back
  // since): ask NVML once more before refusing.
  if (reconcile && (g_unseen[dev].load() > 0 || g_held_elsewhere[dev].load() > 0)) {
    Reconcile(dev, true);
    if (TryReserve(dev, bytes, spilled, limit, &own_fits)) return true;
  }
  // Pools and graph memory may have given memory back since their charges were last
  // looked at.
  if (RefreshPools(dev) && TryReserve(dev, bytes, spilled, limit, &own_fits)) return true;
  if (RefreshGraphMemory(dev) && TryReserve(dev, bytes, spilled, limit, &own_fits)) return true;
  char want[32], used[32], lim[32], held[32];
  const uint64_t held_elsewhere = own_fits ? g_held_elsewhere[dev].load() : 0;
  GS_LOG(
      kInfo, "%s of %s refused: device %d would exceed its limit (%s used of %s%s%s)", api,
      FormatBytes(bytes, want, sizeof(want)), dev,
      FormatBytes(own_fits ? g_state.region->devices[dev].memory_used.load() : g_own[dev].load(), used, sizeof(used)),
      FormatBytes(limit, lim, sizeof(lim)), held_elsewhere ? "; other processes of the container hold " : "",
      held_elsewhere ? FormatBytes(held_elsewhere, held, sizeof(held)) : "");
  return false;
}

}  // namespace

bool Reserve(int dev, uint64_t bytes, bool spilled, const char* api) {
  return ReserveChecked(dev, bytes, spilled, api, /*reconcile=*/true);
}

void Unreserve(int dev, uint64_t bytes, bool spilled) {
  if (g_state.region == nullptr || g_state.slot == nullptr || dev < 0 || dev >= kMaxDevices) return;
  region::Unreserve(g_state.region, g_state.slot, dev, bytes, spilled);
  SubtractClamped(&g_own[dev], bytes);
  if (spilled) SubtractClamped(&g_own_spilled[dev], bytes);
}

bool ReserveImported(int dev, uint64_t bytes, const char* api) {
  if (!Reserve(dev, bytes, false, api)) return false;
  g_imported[dev].fetch_add(bytes);
  return true;
}

ChildResetMutex& IpcOpenMutex() {
  static constinit ChildResetMutex mu;
  return mu;
}

void UnreserveImported(int dev, uint64_t bytes) {
  if (dev < 0 || dev >= kMaxDevices) return;
  Unreserve(dev, bytes, false);
  SubtractClamped(&g_imported[dev], bytes);
}

namespace internal {
// One answer of NVML's process list for a card, pids in the caller's PID namespace
// (docs/measurements/h200-driver.md, "Pids").
struct CardListing {
  static constexpr unsigned kMax = 128;
  nvmlProcessInfo_t procs[kMax];
  unsigned n = 0;
};
bool ListCard(int dev, CardListing* out);
bool OwnUseIn(const CardListing& listing, int dev, uint64_t* bytes);
uint64_t HeldUnchargedElsewhereIn(const CardListing& listing, int dev);
uint64_t ListedUnderContainerIn(const CardListing& listing);
}  // namespace internal

bool ImportRefused(const char* api) {
  // Every card this process has bound (not the region's count: the container's to write):
  // an import needs no current context, and what it brings lives on its exporter's card,
  // which the importer cannot tell before the driver is called.
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    if (g_state.device_uuid[dev][0] == 0) continue;
    const uint64_t limit = MemoryLimit(dev);
    internal::CardListing listing;
    if (limit == 0 || CheckDevice(dev) != DeviceCheck::kCharge || !internal::ListCard(dev, &listing)) continue;
    // What NVML lists under the container's processes: each byte once, whoever pays for it
    // (the region's totals may count a piece twice while its owner and its importer both do).
    const uint64_t held = internal::ListedUnderContainerIn(listing);
    if (held <= limit) continue;
    char h[32], lim[32];
    GS_LOG(kInfo,
           "%s refused: device %d: the container's processes already hold %s on the card, past its limit of %s "
           "(memory they imported that its owners let go)",
           api, dev, FormatBytes(held, h, sizeof(h)), FormatBytes(limit, lim, sizeof(lim)));
    return true;
  }
  return false;
}

int Reconcile(int dev, bool force) {
  if (dev < 0 || dev >= kMaxDevices || g_state.region == nullptr || g_state.slot == nullptr ||
      g_state.slot_pid.load(std::memory_order_relaxed) != getpid() || MemoryLimit(dev) == 0)
    return 0;
  int64_t now = MonotonicNs();
  auto due = [&] { return force || now - g_reconciled_at_ns[dev].load() >= kReconcileEveryNs; };
  if (!due()) return 0;  // the common case: no lock
  std::lock_guard<std::mutex> lock(g_reconcile_mu);
  if (!due()) return 0;
  g_reconciled_at_ns[dev].store(now);
  uint64_t measured = 0;
  internal::CardListing listing;
  if (!internal::ListCard(dev, &listing)) return 0;  // no NVML
  uint64_t held_elsewhere = internal::HeldUnchargedElsewhereIn(listing, dev);
  if (!internal::OwnUseIn(listing, dev, &measured)) {
    // Not listed (yet): no context here, or a PID namespace without the host pid. What the
    // others hold still counts, less what this process keeps charged for them.
    g_held_elsewhere[dev].store(held_elsewhere - std::min(held_elsewhere, g_kept[dev].load()));
    return 0;
  }
  // Charges are reserved before the driver is called and given back after it freed, so
  // memory in flight is in the books before NVML sees it: a race can only make `unseen`
  // too small for a moment, never charge the same bytes twice for long. What NVML lists
  // under no process, or under another, is not in `measured`: spilled bytes (host memory),
  // pool pieces kept for importers (on the card, listed under no one), pool pieces
  // imported from another container and the driver's own part of each context.
  uint64_t unseen = g_unseen[dev].load();
  uint64_t unlisted = g_own_spilled[dev].load() + unseen + ThePoolBook().KeptOn(dev) + g_imported[dev].load() +
                      g_context_unlisted[dev].load();
  uint64_t counted = g_own[dev].load() - std::min(g_own[dev].load(), unlisted);
  uint64_t want = measured > counted ? Footprint(measured - counted) : 0;
  if (uint64_t kept = g_kept[dev].load(); kept > 0) {
    // Memory this process freed while shared: the card may list it under a process that
    // still holds it (an H100 moves legacy IPC memory to its importer), which pays for it
    // only from its own next reconciliation. Until then it stays charged here. Kept bytes
    // still listed here are the part of `want` beyond the unseen memory that is not kept.
    uint64_t elsewhere = std::min(kept, held_elsewhere);
    uint64_t not_kept = unseen - std::min(unseen, kept);
    uint64_t here = want > not_kept ? want - not_kept : 0;
    g_kept[dev].store(std::min(kept, here + elsewhere));
    want += elsewhere;
    held_elsewhere -= elsewhere;
  }
  g_held_elsewhere[dev].store(held_elsewhere);
  if (want > unseen) {
    // Already spent on the card: charged even past the limit (limit 0 = unconditional),
    // so every later allocation is refused until memory comes back.
    region::Reserve(g_state.region, g_state.slot, dev, want - unseen, false, 0);
    g_own[dev].fetch_add(want - unseen);
  } else if (want < unseen) {
    region::Unreserve(g_state.region, g_state.slot, dev, unseen - want, false);
    SubtractClamped(&g_own[dev], unseen - want);
  }
  g_unseen[dev].store(want);
  uint64_t limit = MemoryLimit(dev);
  bool over = g_own[dev].load() > limit || g_state.region->devices[dev].memory_used.load() > limit;
  char b[32], m[32];
  if (want > unseen && over)
    GS_LOG(kInfo,
           "device %d: %s spent without a call to count (libraries, lazily loaded kernels, memory imported that its "
           "owner let go; NVML: this process holds "
           "%s) puts it over its limit: further allocations are refused",
           dev, FormatBytes(want, b, sizeof(b)), FormatBytes(measured, m, sizeof(m)));
  else if (want != unseen)
    GS_LOG(kDetail, "device %d: %s that no hooked call accounts for (NVML: this process holds %s)", dev,
           FormatBytes(want, b, sizeof(b)), FormatBytes(measured, m, sizeof(m)));
  return over ? -1 : (want > unseen ? 1 : 0);
}

void NoteFunctionUsed(const void* fn) {
  // A loop launches the same kernel again and again: one load and compare for it.
  uintptr_t f = reinterpret_cast<uintptr_t>(fn);
  if (f == g_last_noted.load(std::memory_order_relaxed) || f == 0 || !AnyMemoryLimit()) return;
  g_last_noted.store(f, std::memory_order_relaxed);
  if (FirstSeen(f)) g_code_pending.store(~uint64_t{0});
}

void ForgetFunctionsUsed() {
  for (auto& slot : g_seen) slot.store(0, std::memory_order_relaxed);
  g_last_noted.store(0, std::memory_order_relaxed);
}

uint64_t CurrentContextId() {
  CUcontext ctx = nullptr;
  if (g_cuda.cuCtxGetCurrent == nullptr || g_cuda.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) return 0;
  return reinterpret_cast<uint64_t>(ctx);
}

void KeepWhileShared(int dev, uint64_t bytes) {
  if (dev < 0 || dev >= kMaxDevices || bytes == 0) return;
  {
    // Under the reconciliation's lock: it reads, recomputes and stores the figure.
    std::lock_guard<std::mutex> lock(g_reconcile_mu);
    g_unseen[dev].fetch_add(bytes);
    g_kept[dev].fetch_add(bytes);
  }
  char b[32];
  GS_LOG(kDetail, "device %d: %s freed but shared with other processes stays charged while the card holds it", dev,
         FormatBytes(bytes, b, sizeof(b)));
  Reconcile(dev, true);  // given back at once when nobody holds it any more
}

int Release(HandleKind kind, uint64_t handle) {
  Charge c;
  if (!TheAllocations().Take(kind, handle, &c)) return -1;
  Unreserve(c.device, c.bytes, c.spilled);
  return c.device;
}

// ---- contexts ------------------------------------------------------------------------------

namespace internal {

bool ListCard(int dev, CardListing* out) {
  if (dev < 0 || dev >= kMaxDevices || !NvmlReady() || g_nvml.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr)
    return false;
  // The card as the driver named it when the device was bound: the region's copy of the
  // name is the container's to rewrite, and a name NVML does not know would leave the
  // process unmeasured.
  const char* uuid = g_state.device_uuid[dev];
  nvmlDevice_t device;
  if (uuid[0] == 0 || !NvmlCardByUuid(uuid, &device)) return false;
  out->n = CardListing::kMax;
  if (g_nvml.nvmlDeviceGetComputeRunningProcesses_v3(device, &out->n, out->procs) != NVML_SUCCESS) return false;
  out->n = std::min(out->n, CardListing::kMax);
  return true;
}

bool OwnUseIn(const CardListing& listing, int dev, uint64_t* bytes) {
  // Once this process was found in NVML's list for dev, its absence means it holds
  // nothing there; before that, absence may only mean NVML knows it under another pid.
  static std::atomic<bool> seen[kMaxDevices];
  // NVML answers in the caller's PID namespace: this process is listed by its own pid,
  // in a container too.
  const uint32_t me = static_cast<uint32_t>(getpid());
  for (unsigned i = 0; i < listing.n; ++i)
    if (listing.procs[i].pid == me && listing.procs[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE_ULL) {
      seen[dev].store(true);
      *bytes = listing.procs[i].usedGpuMemory;
      return true;
    }
  *bytes = 0;
  return seen[dev].load();
}

namespace {
// The live slot of the region that stands for listed process `pid`: the same start time,
// and the pid the slot names it by (its /proc's, the node's, or that of a namespace
// nested below the caller's). The process's start time is read only once a slot could
// be it: most listed processes are other containers' and cost no system call.
const region::ProcessSlot* SlotOfListed(uint32_t pid) {
  const uint32_t my_namespace = g_state.slot->pid_namespace.load(std::memory_order_relaxed);
  uint64_t start = 0;
  for (const auto& slot : g_state.region->procs) {
    const uint32_t p = slot.pid.load(std::memory_order_relaxed);
    if (p == 0 || &slot == g_state.slot) continue;
    const bool named = p == pid || slot.host_pid.load(std::memory_order_relaxed) == pid;
    const uint32_t ns = slot.pid_namespace.load(std::memory_order_relaxed);
    if (!named && ns != 0 && ns == my_namespace) continue;  // not nested: named by one of those pids
    if (start == 0 && (start = ProcessStartTime(static_cast<pid_t>(pid))) == 0) return nullptr;
    if (slot.start_time != start) continue;
    if (named || ProcessHasNsPid(static_cast<pid_t>(pid), static_cast<pid_t>(p))) return &slot;
  }
  return nullptr;
}
}  // namespace

uint64_t HeldUnchargedElsewhereIn(const CardListing& listing, int dev) {
  if (g_state.region == nullptr) return 0;
  const uint32_t me = static_cast<uint32_t>(getpid());
  uint64_t held = 0;
  for (unsigned i = 0; i < listing.n; ++i) {
    const nvmlProcessInfo_t& p = listing.procs[i];
    if (p.pid == me || p.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULL) continue;
    const region::ProcessSlot* slot = SlotOfListed(p.pid);
    if (slot == nullptr) continue;  // not of this container: its memory is not this container's to pay
    // What the slot pays for that NVML lists under it: not its host-backed bytes, nor the
    // shared pool pieces it pays for, which NVML lists under no process, nor the driver's own
    // part of the context it is listed for. The region does not say whether its context was
    // charged that part; a process of the same container on the same card was if this one
    // was. One context's part: a process with more is counted as holding that much less
    // each.
    const uint64_t unlisted = slot->spilled[dev].load() + region::PiecesChargedTo(g_state.region, slot, dev) +
                              (g_context_unlisted[dev].load() > 0 ? kContextUnlisted : 0);
    const uint64_t charged = slot->memory[dev].load() - std::min(slot->memory[dev].load(), unlisted);
    if (p.usedGpuMemory > charged) held += p.usedGpuMemory - charged;
  }
  return held;
}

uint64_t ListedUnderContainerIn(const CardListing& listing) {
  const uint32_t me = static_cast<uint32_t>(getpid());
  uint64_t listed = 0;
  for (unsigned i = 0; i < listing.n; ++i) {
    const nvmlProcessInfo_t& p = listing.procs[i];
    if (p.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULL) continue;
    if (p.pid == me || SlotOfListed(p.pid) != nullptr) listed += p.usedGpuMemory;
  }
  return listed;
}

bool MeasureOwnDeviceUse(int dev, uint64_t* bytes) {
  CardListing listing;
  return ListCard(dev, &listing) && OwnUseIn(listing, dev, bytes);
}

uint64_t OwnDeviceUse(int dev) {
  uint64_t bytes = 0;
  return MeasureOwnDeviceUse(dev, &bytes) ? bytes : 0;
}

uint64_t DeviceUseBeforeContext(int dev) {
  if (dev < 0 || dev >= kMaxDevices) return 0;
  // Claimed up front, so that a second context made meanwhile asks NVML. Memory charged
  // without a context (cuMemCreate names its device) must be measured too.
  bool first = !g_context_charged[dev].exchange(true);
  if (first && g_own[dev].load() == 0 && g_unseen[dev].load() == 0) return 0;
  return OwnDeviceUse(dev);
}

DeviceCheck ReserveContextAhead(int dev, bool primary, uint64_t* held) {
  *held = 0;
  {
    std::lock_guard<ChildResetMutex> lock(g_ctx_mu);
    if (primary && g_primary_refs[dev] > 0) return DeviceCheck::kCharge;  // exists: charged with its first reference
  }
  // The real footprint is known only once the context exists, and by then the card holds
  // it: a slice without room for it would be over its limit (by 518 MiB on an H100) until
  // the charge is refused and the context destroyed. So the expected footprint is reserved
  // first, and a context that is not expected to fit is never created.
  uint64_t expected = g_context_measured[dev].load();
  expected = WithUnlisted(Footprint(expected ? expected : g_state.cfg.context_overhead));
  if (expected == 0) return DeviceCheck::kCharge;
  if (!ReserveChecked(dev, expected, false, "context creation", /*reconcile=*/true)) return DeviceCheck::kRefuse;
  *held = expected;
  return DeviceCheck::kCharge;
}

DeviceCheck ChargeContextFootprint(int dev, bool primary, uint64_t ctx, uint64_t measured_before, uint64_t held) {
  std::lock_guard<ChildResetMutex> lock(g_ctx_mu);
  if (primary && g_primary_refs[dev]++ > 0) {  // another thread made it first: charged once
    if (held) Unreserve(dev, held, false);
    return DeviceCheck::kCharge;
  }
  // The truth on hardware: what NVML says the context added to this process. The
  // configured overhead stands in when that cannot be measured (PID namespace without
  // the node agent's host pid, no NVML) and is the least charged when set.
  const int64_t asked = MonotonicNowNs();
  uint64_t after = OwnDeviceUse(dev);
  GS_LOG(kDebug, "device %d: NVML gave the new context's footprint in %.3f ms", dev, (MonotonicNowNs() - asked) / 1e6);
  uint64_t measured = after > measured_before ? after - measured_before : 0;
  uint64_t charge = measured ? std::max(measured, g_state.cfg.context_overhead_min) : g_state.cfg.context_overhead;
  charge = Footprint(charge);
  if (measured) g_context_measured[dev].store(charge);
  charge = WithUnlisted(charge);
  if (charge > held && !ReserveChecked(dev, charge - held, false, "context creation", /*reconcile=*/false)) {
    if (held) Unreserve(dev, held, false);
    if (primary) --g_primary_refs[dev];
    return DeviceCheck::kRefuse;
  }
  if (held > charge) Unreserve(dev, held - charge, false);
  if (primary) g_primary_ctx[dev] = ctx;
  TheAllocations().Add(HandleKind::kContext, ctx, Charge{dev, charge, false, ctx});
  if (charge > 0) g_context_unlisted[dev].fetch_add(kContextUnlisted);
  Reconcile(dev, true);  // the books now hold the context: anything beyond it is unseen
  char b[32];
  GS_LOG(kDetail, "context on device %d charged %s (%s)", dev, FormatBytes(charge, b, sizeof(b)),
         measured ? "measured by NVML" : "configured");
  return DeviceCheck::kCharge;
}

}  // namespace internal

uint64_t RefreshPool(uint64_t pool) {
  if (g_cuda.cuMemPoolGetAttribute == nullptr) return 0;
  auto* p = reinterpret_cast<CUmemoryPool>(pool);
  cuuint64_t reserved = 0, used = 0;
  if (g_cuda.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
      g_cuda.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
    return 0;
  int dev = -1;
  uint64_t back = ThePoolBook().Trimmed(pool, reserved > used ? reserved - used : 0, &dev);
  if (back) Unreserve(dev, back, false);
  return back;
}

bool RefreshPools(int dev) {
  uint64_t pools[64];
  int n = ThePoolBook().PoolsOn(dev, pools, 64);
  bool any = false;
  for (int i = 0; i < n; ++i) any |= RefreshPool(pools[i]) > 0;
  return any;
}

void PoolDestroyed(uint64_t pool) {
  int dev = -1;
  uint64_t kept = ThePoolBook().Destroyed(pool, &dev);
  if (kept) {
    // Pieces another process of the container still holds stay on the card: their charge
    // moved to its slot with the region's books; only the rest comes back.
    const uint64_t moved = std::min(kept, HandOverPoolPieces(pool, dev));
    SubtractClamped(&g_own[dev], moved);
    if (kept > moved) Unreserve(dev, kept - moved, false);
  }
  uint64_t back = ThePoolBook().Trimmed(pool, 0, &dev);
  if (back) Unreserve(dev, back, false);
}

uint64_t RefreshGraphMemory(int dev) {
  if (g_cuda.cuDeviceGetGraphMemAttribute == nullptr || TheGraphMemoryBook().HeldOn(dev) == 0) return 0;
  CUdevice ord = 0;
  while (ord < 64 && DeviceOfOrdinal(ord) != dev) ++ord;
  cuuint64_t reserved = 0;
  if (ord == 64 ||
      g_cuda.cuDeviceGetGraphMemAttribute(ord, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS)
    return 0;  // the figure cannot be had: the charge stays
  uint64_t back = TheGraphMemoryBook().Trimmed(dev, reserved);
  if (back) Unreserve(dev, back, false);
  return back;
}

void GraphGone(const Charge& c) {
  if (c.device < 0) return;
  TheGraphMemoryBook().Held(c.device, c.bytes);
  RefreshGraphMemory(c.device);  // at once when it never launched, or its memory is gone
}

void CaptureEnded(uint64_t stream, CUresult rc, uint64_t graph) {
  Charge c;
  if (!TheAllocations().Take(HandleKind::kCapture, stream, &c)) return;
  if (rc == CUDA_SUCCESS && graph != 0)
    TheAllocations().Accumulate(HandleKind::kGraph, graph, c.device, c.bytes);
  else
    Unreserve(c.device, c.bytes, false);  // no graph came of it: nothing can launch
}

void ContextGone(int dev, uint64_t ctx) {
  if (ctx == 0) return;
  ForgetFunctionsUsed();  // the context's modules went with it: their handles may be reused
  uint64_t bytes[kMaxDevices] = {}, spilled[kMaxDevices] = {}, kept[kMaxDevices] = {};
  std::vector<std::pair<uint64_t, Charge>> shared;
  // The context's own charge first: a charge that is not 0 held the driver's own part, out
  // of g_context_unlisted before the charge leaves g_own, so that a reconciliation meanwhile
  // never counts it as listed.
  Charge own;
  if (TheAllocations().Take(HandleKind::kContext, ctx, &own) && own.device >= 0 && own.device < kMaxDevices) {
    if (own.bytes > 0) SubtractClamped(&g_context_unlisted[own.device], kContextUnlisted);
    bytes[own.device] += own.bytes;
  }
  TheAllocations().TakeContext(ctx, kMaxDevices, bytes, spilled, kept, &shared);
  // As a free of each would (PointerFreed): exported pool memory stays charged until its
  // pool is destroyed, other exported memory while importers may hold it; an imported
  // pointer is let go.
  bool imported_on[kMaxDevices] = {};
  for (const auto& [ptr, c] : shared) {
    LetGoSharedPointer(ptr, c);
    if (c.imported && c.device >= 0 && c.device < kMaxDevices) imported_on[c.device] = true;
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    if (bytes[d]) Unreserve(d, bytes[d], false);
    if (kept[d]) KeepWhileShared(d, kept[d]);
    if (spilled[d]) Unreserve(d, spilled[d], true);
  }
  if (dev >= 0 && dev < kMaxDevices) {
    {
      std::lock_guard<ChildResetMutex> lock(g_ctx_mu);
      if (g_primary_ctx[dev] == ctx) g_primary_refs[dev] = 0, g_primary_ctx[dev] = 0;
    }
    Reconcile(dev, true);     // what the context's libraries held is gone with it
    RefreshPools(dev);        // and what the device's pools held free
    RefreshGraphMemory(dev);  // and its graph memory
  }
  // Memory it imported lives on its owner's card: whatever the importer held there past its
  // owner may be gone with it.
  for (int d = 0; d < kMaxDevices; ++d)
    if (imported_on[d] && d != dev) Reconcile(d, true);
}

void PrimaryReleased(int dev, uint64_t ctx) {
  if (dev < 0 || dev >= kMaxDevices) return;
  {
    std::lock_guard<ChildResetMutex> lock(g_ctx_mu);
    if (g_primary_refs[dev] == 0 || --g_primary_refs[dev] > 0) return;
    if (ctx == 0) ctx = g_primary_ctx[dev];
  }
  ContextGone(dev, ctx);
}

uint64_t PrimaryContextOf(int dev) {
  std::lock_guard<ChildResetMutex> lock(g_ctx_mu);
  return dev >= 0 && dev < kMaxDevices ? g_primary_ctx[dev] : 0;
}

// ---- cuCtxSetLimit ---------------------------------------------------------------------------

CUresult ChargedSetLimit(CUlimit limit, size_t value) {
  uint64_t per_unit = 0, baseline = 0;
  CUdevice ord = 0;
  bool known = g_cuda.cuCtxGetDevice && g_cuda.cuCtxGetDevice(&ord) == CUDA_SUCCESS;
  if (limit == CU_LIMIT_STACK_SIZE) {
    // The stack is reserved for every thread the device can hold at once: raising it to
    // 64 KiB took 16,632 MiB on the H100 (132 SMs x 2048 threads, docs/measurements/h100-driver.md).
    int sms = 0, threads = 0;
    if (known && g_cuda.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ord) == CUDA_SUCCESS &&
        g_cuda.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, ord) == CUDA_SUCCESS)
      per_unit = static_cast<uint64_t>(sms) * static_cast<uint64_t>(threads);
    else
      known = false;
    baseline = kDefaultStack;
  } else if (limit == CU_LIMIT_MALLOC_HEAP_SIZE || limit == CU_LIMIT_PRINTF_FIFO_SIZE) {
    // Free until a kernel uses them (measured), then the whole size: charged up front.
    per_unit = 1;
    baseline = limit == CU_LIMIT_MALLOC_HEAP_SIZE ? kDefaultMallocHeap : kDefaultPrintfFifo;
  } else {
    return g_cuda.cuCtxSetLimit(limit, value);  // no device memory
  }
  int dev = known ? DeviceOfOrdinal(ord) : -1;
  DeviceCheck g = CheckDevice(dev);
  if (g == DeviceCheck::kPass) return g_cuda.cuCtxSetLimit(limit, value);
  if (g == DeviceCheck::kRefuse) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t ctx = CurrentContextId();
  uint64_t want = value > baseline ? Footprint((value - baseline) * per_unit) : 0;
  if (per_unit && value > baseline && (value - baseline) > UINT64_MAX / per_unit) return CUDA_ERROR_OUT_OF_MEMORY;
  Charge old;
  uint64_t handle = ctx + static_cast<uint64_t>(limit);  // contexts are aligned: no collision
  bool had = TheAllocations().Take(HandleKind::kContextLimit, handle, &old);
  uint64_t held = had ? old.bytes : 0;
  if (want > held && !Reserve(dev, want - held, false, "cuCtxSetLimit")) {
    if (had) TheAllocations().Add(HandleKind::kContextLimit, handle, old);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult rc = g_cuda.cuCtxSetLimit(limit, value);
  uint64_t keep = rc == CUDA_SUCCESS ? want : held;
  if (want > held && rc != CUDA_SUCCESS) Unreserve(dev, want - held, false);
  if (want < held && rc == CUDA_SUCCESS) Unreserve(dev, held - want, false);
  if (keep) TheAllocations().Add(HandleKind::kContextLimit, handle, Charge{dev, keep, false, ctx});
  return rc;
}

void InstallForkHandlers() {
  pthread_atfork(BeforeFork, AfterForkInParent, AfterForkInChild);
}

}  // namespace gs::enforcer
