// The shared region: one file per container, mapped by every process in it (the
// enforcer) and read by the node agent and `gpuslice smi`. It holds each visible
// device's limits and usage and one slot per process.
//
// Rules (docs/enforcer.md, "The region"):
// - Fixed layout owned by this header; kRegionAbiMajor changes on any incompatible edit;
//   the static_asserts below pin every offset.
// - A process is (pid, start time); a reused PID never inherits a slot.
// - Every change to memory accounting happens under `mutex` (robust, process-shared), in
//   a reserve -> driver call -> commit/rollback sequence, so two processes can never both
//   pass a limit only one fits. Device totals always equal the sum of the slots; when a
//   process dies holding the mutex (EOWNERDEAD) the next locker recomputes them.
// - Readers take consistent snapshots through `seq` (odd while a writer is inside)
//   without blocking writers; lock-free atomics are read directly on hot paths.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "src/common/contract.h"

namespace gs::region {

inline constexpr uint64_t kRegionMagic = 0x4E4F494745525347ULL;  // "GSREGION"
inline constexpr uint32_t kRegionAbiMajor = 2;                   // 2: shared pieces (the region grew)
inline constexpr uint32_t kRegionAbiMinor = 0;
using contract::kMaxDevices;
inline constexpr int kMaxProcesses = 1024;

using contract::CorePolicy;  // stored as uint32_t in Region::core_policy

struct Device {
  char uuid[96];                       // "GPU-..."; empty while unused
  std::atomic<uint64_t> memory_limit;  // bytes; 0 = no limit. For readers only: never enforced
  std::atomic<uint32_t> sm_limit;      // percent; 0 or >= 100 = no limit. For readers only
  uint32_t reserved0;
  std::atomic<uint64_t> memory_used;  // bytes charged, all processes (= sum of slots)
  std::atomic<uint64_t> memory_peak;
  std::atomic<uint64_t> spilled;  // bytes backed by host memory (oversubscription)
  // Compute limiter, shared by the container's processes (src/enforcer/limiter.h).
  std::atomic<int64_t> tokens;            // GPU-time budget in ns; launches wait while negative
  std::atomic<int64_t> charged_ns;        // estimated GPU time pre-paid by launches, not yet reconciled
  std::atomic<int64_t> launch_cost_ns;    // learned GPU time of one launch (EWMA)
  std::atomic<uint64_t> launches;         // launches since the last controller step
  std::atomic<int64_t> controller_ns;     // last controller step (one process steps per period)
  std::atomic<uint32_t> measured_util;    // container's SM utilisation over the last step, percent
  std::atomic<uint32_t> effective_share;  // share applied in the last step, percent
  std::atomic<uint64_t> spilled_peak;     // most bytes ever spilled at once
  std::atomic<int64_t> lead_ns;           // pre-paid GPU time of launched work not yet seen running
  // Unused: priorities act through the card region (src/region/card.h); the fields keep
  // their place so the pinned layout does not move.
  std::atomic<uint32_t> yield;
  std::atomic<uint32_t> boost;
  std::atomic<int64_t> arbiter_ns;
  // The container's identity among the tenants of this device's card region
  // (src/region/card.h); set once by the first process that computes on the device.
  std::atomic<uint64_t> card_tenant_id;
  uint8_t reserved[32];  // room for later fields without a layout break
};

struct ProcessSlot {
  std::atomic<uint32_t> pid;       // 0 = free
  std::atomic<uint32_t> host_pid;  // pid as the node sees it (NVML), 0 if unknown
  uint64_t start_time;
  std::atomic<uint64_t> memory[kMaxDevices];   // bytes charged by this process
  std::atomic<uint64_t> spilled[kMaxDevices];  // of which host-backed
  std::atomic<int32_t> priority;
  // The inode of its PID namespace (ns inodes are 32-bit), 0 = unknown: containers' first
  // processes share pid 1 and may share a start time (10 ms ticks), so the node agent
  // needs it to find the process's host pid.
  std::atomic<uint32_t> pid_namespace;
};

// A pool allocation one process of the container exported (cuMemPoolExportPointer) and
// others of it imported. The card keeps it past its owner, listed by NVML under no process,
// until the last importer lets go (docs/measurements/shared-memory.md), so its charge follows
// it: from the owner's slot to a live importer's when the owner goes first, and out of the
// books with the last holder. src/region/shared_pieces.h keeps the table; all under `mutex`.
inline constexpr int kMaxSharedPieces = 512;
struct SharedPiece {
  uint64_t key;  // a hash of the driver's export data; 0 = free entry
  int32_t device;
  int32_t charged_slot;  // index of the slot whose memory[device] holds `bytes`
  uint64_t bytes;
  uint64_t owner_ptr;                    // the owner's device pointer, while the owner holds it; else 0
  uint64_t owner_pool;                   // the owner's pool it came from
  uint64_t holders[kMaxProcesses / 64];  // bit i: slot i imported it
};

struct Region {
  uint64_t magic;
  uint32_t abi_major;
  uint32_t abi_minor;
  uint64_t size;                      // sizeof(Region) of the creator
  std::atomic<uint32_t> initialized;  // 1 once limits are written
  std::atomic<uint32_t> device_count;
  std::atomic<uint32_t> core_policy;  // CorePolicy
  std::atomic<uint32_t> oversubscribe;
  std::atomic<uint64_t> seq;  // seqlock for snapshots
  pthread_mutex_t mutex;
  alignas(64) Device devices[kMaxDevices];
  ProcessSlot procs[kMaxProcesses];
  SharedPiece pieces[kMaxSharedPieces];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);
static_assert(offsetof(Region, magic) == 0);
static_assert(offsetof(Region, abi_major) == 8);
static_assert(offsetof(Region, abi_minor) == 12);
static_assert(offsetof(Region, size) == 16);
static_assert(offsetof(Region, initialized) == 24);
static_assert(offsetof(Region, seq) == 40);
static_assert(offsetof(Region, mutex) == 48);
static_assert(offsetof(Region, devices) == 128);
static_assert(sizeof(Device) == 256);
static_assert(offsetof(Device, memory_limit) == 96);
static_assert(offsetof(Device, memory_used) == 112);
static_assert(offsetof(Device, tokens) == 136);
static_assert(offsetof(Device, controller_ns) == 168);
static_assert(offsetof(Device, lead_ns) == 192);
static_assert(offsetof(Device, yield) == 200);
static_assert(offsetof(Device, arbiter_ns) == 208);
static_assert(offsetof(Device, card_tenant_id) == 216);
static_assert(sizeof(ProcessSlot) == 280);
static_assert(offsetof(ProcessSlot, pid_namespace) == 276);
static_assert(offsetof(Region, procs) == 128 + 16 * 256);
static_assert(sizeof(SharedPiece) == 168);
static_assert(offsetof(Region, pieces) == 128 + 16 * 256 + 1024 * 280);

enum class OpenError { kNone, kIo, kForeign, kVersion, kTooSmall };

// Opens (creating when absent) the region file at path and maps it. A new or all-zero
// file is initialised; a file written by something else or by an incompatible version is
// refused (nullptr, *error set, message in msg). Thread-safe; not on a hot path.
Region* OpenRegion(const char* path, OpenError* error, char* msg, size_t msg_size);
Region* OpenRegionReadOnly(const char* path, OpenError* error, char* msg, size_t msg_size);
// An anonymous region for this process alone (when the shared one cannot be used).
Region* CreatePrivateRegion();
void CloseRegion(Region* r);

// Locks the region mutex. If the previous owner died inside, repairs: recomputes every
// device total from the slots (the state is consistent under the mutex's rules).
void Lock(Region* r);
void Unlock(Region* r);
// With the mutex held: brackets a change that readers' snapshots must not copy halfway.
void WriteBegin(Region* r);
void WriteEnd(Region* r);

// Finds the caller's slot or claims a free one (sweeping dead processes first). The caller
// names itself as its /proc shows it (OwnProcView: pid, start time, and the PID namespace
// of those pids), so that every process sharing that /proc judges the slot by the right
// process. nullptr when all slots hold live processes.
ProcessSlot* ClaimSlot(Region* r, pid_t pid, uint64_t start_time, uint32_t pid_namespace);
void ReleaseSlot(Region* r, ProcessSlot* slot);

// Returns memory of processes that are gone to the device totals. Returns the count. A
// slot's pid means something only in its PID namespace: a slot of another namespace than
// the one the caller's /proc shows is never judged gone here, so a process cannot free
// another's charge by looking at a pid it cannot see. A process that unshared a PID
// namespace and kept its container's /proc is named by its pid there, and judged by its
// container; one that mounted a /proc of its own stays charged until the processes of its
// namespace sweep it or the region goes.
int SweepDead(Region* r);

// Memory accounting. Reserve fails (false, nothing changed) if `limit` (bytes, 0 = none)
// would be exceeded by the container's use of the device. The limit is the caller's: the
// region's own memory_limit is written for readers (smi, node agent) and never trusted,
// since every process of the container can write the region. Unreserve returns bytes.
// `spilled` marks host-backed bytes.
bool Reserve(Region* r, ProcessSlot* slot, int dev, uint64_t bytes, bool spilled, uint64_t limit);
void Unreserve(Region* r, ProcessSlot* slot, int dev, uint64_t bytes, bool spilled);

// Usage as the container's virtual card reports it: total = limit (the card's
// physical_total when limit is 0), used clamped to total so "free" is never negative or
// wrapped, even when usage is over a lowered limit.
struct MemoryView {
  uint64_t total, used, free;
};
MemoryView ViewMemory(const Region* r, int dev, uint64_t limit, uint64_t physical_total);

// A consistent copy for readers (node agent, smi); retries while writers are active.
void Snapshot(const Region* r, Region* out);

}  // namespace gs::region
