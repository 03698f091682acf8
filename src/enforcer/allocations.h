// What this process has charged to the region, by handle, so every free returns exactly
// what its allocation counted. One table per kind of handle (device pointers, arrays,
// graphs, contexts, modules, libraries), since their values may collide; VMM allocations,
// which live as long as a handle or a mapping holds them, have a book of their own
// (VmmBook). Allocations is thread-safe (one mutex; not on the launch path).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gs::enforcer {

// kCapture: what a stream capture in progress allocated (by stream), the graph's at its end.
enum class HandleKind {
  kPointer,
  kArray,
  kMipmappedArray,
  kGraph,
  kModule,
  kLibrary,
  kContext,
  kContextLimit,
  kCapture,
  kCount
};

struct Charge {
  int device = -1;
  uint64_t bytes = 0;
  bool spilled = false;  // host-backed (virtual device memory)
  uint64_t context = 0;  // the CUcontext it lives in: destroying or resetting it frees it
  uint64_t pool = 0;     // the stream-ordered pool it came from (PoolBook); 0 none
  // Shared with other processes (cuIpcGetMemHandle, cuMemExportToShareableHandle, a pool
  // allocation of a pool exported or by cuMemPoolExportPointer): the memory may stay on the
  // card for them after this process frees it (KeepWhileShared, charging.h).
  bool exported = false;
  // Another process's allocation imported here: a pool's (cuMemPoolImportPointer), or a
  // legacy IPC handle opened (cuIpcOpenMemHandle), `ipc_opens` times in its context (the
  // driver hands out one pointer per handle and context and counts its opens).
  bool imported = false;
  uint32_t ipc_opens = 0;
  // Its key among the region's shared pieces (src/enforcer/shared_pieces.h), 0 if none: for
  // an exported allocation, the record its free takes back; for an imported one, the record
  // its owner made (nothing charged here: its owner pays), or 0 with `bytes` charged here.
  uint64_t piece = 0;
};

class Allocations {
 public:
  void Add(HandleKind kind, uint64_t handle, Charge c);
  // Adds bytes to an existing entry (graphs accumulate their memory nodes).
  void Accumulate(HandleKind kind, uint64_t handle, int device, uint64_t bytes);
  // Removes and returns the entry; false if unknown (allocated before the enforcer saw it).
  bool Take(HandleKind kind, uint64_t handle, Charge* out);
  // The entry, left in place; false if unknown.
  bool Find(HandleKind kind, uint64_t handle, Charge* out);
  // The entry is shared with other processes from now on; false if unknown.
  bool MarkExported(HandleKind kind, uint64_t handle);
  // The entry was recorded among the region's shared pieces under `piece`; false if unknown.
  bool MarkFollowed(HandleKind kind, uint64_t handle, uint64_t piece);
  // A legacy IPC handle opened again in its context (the driver returned the pointer it
  // already had): counts the open; false if `ptr` is not an opened handle here.
  bool ReopenedIpc(uint64_t ptr);
  // Counts a close of `ptr` (cuIpcCloseMemHandle): true, with its entry taken, when it is the
  // last open (or `ptr` is known but not an opened handle); false when opens remain or it is
  // unknown.
  bool ClosedIpc(uint64_t ptr, Charge* out);
  // Every device pointer allocated from `pool` is shared with other processes from now on.
  void MarkPoolExported(uint64_t pool);
  // Removes every entry of a context (destroyed or reset: the driver freed them all) and
  // adds their bytes per device into bytes[device] / spilled[device] / kept[device] (arrays
  // of `devices`; kept: exported entries), but appends exported pool allocations, whose
  // charge follows their pool, and imported pointers, each with its handle, to *shared (for
  // LetGoSharedPointer, shared_pieces.h); other exported entries with a shared-piece record
  // go there too, with no bytes (those are added to kept), for their record to be let go.
  void TakeContext(uint64_t context, int devices, uint64_t* bytes, uint64_t* spilled, uint64_t* kept,
                   std::vector<std::pair<uint64_t, Charge>>* shared);
  // Executable graphs. A graph's memory nodes can take their memory while the graph or an
  // executable made from it exists, so the graph's charge (kGraph) stays until the last of
  // them is gone: cuGraphDestroy of an instantiated graph returns nothing yet. The charge
  // then passes to the device's graph memory (GraphMemoryBook), which the driver keeps on
  // the card after the graph.
  void GraphInstantiated(uint64_t exec, uint64_t graph);
  // The graph is destroyed; true, with its charge in *out (taken), when no executable of
  // it is left.
  bool GraphDestroyed(uint64_t graph, Charge* out);
  // An executable is destroyed; true, with its graph's charge in *out (taken), when that
  // was the last one of a graph already destroyed.
  bool GraphExecDestroyed(uint64_t exec, Charge* out);
  // The graph `child` was moved into `parent` as a child graph node, which owns it from
  // now on: the child's charge, if any, is added to the parent's.
  void GraphMoved(uint64_t child, uint64_t parent);
  // Total bytes held by this process on a device (for tests and views).
  uint64_t Total(int device);
  // fork(): the child holds none of its parent's allocations. Lock in the parent before
  // fork, unlock in both after, and Forget in the child.
  void LockForFork() { mu_.lock(); }
  void UnlockAfterFork() { mu_.unlock(); }
  void ForgetAll();

 private:
  bool TakeLocked(HandleKind kind, uint64_t handle, Charge* out);
  // Applies `change` to the entry under the lock; false if unknown.
  template <typename Change>
  bool Update(HandleKind kind, uint64_t handle, Change change) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& m = maps_[static_cast<int>(kind)];
    auto it = m.find(handle);
    if (it == m.end()) return false;
    change(it->second);
    return true;
  }

  std::mutex mu_;
  std::unordered_map<uint64_t, Charge> maps_[static_cast<int>(HandleKind::kCount)];
  std::unordered_map<uint64_t, uint64_t> exec_graph_;  // executable -> its graph
  std::unordered_map<uint64_t, int> graph_execs_;      // graph -> executables that exist
  std::unordered_set<uint64_t> destroyed_graphs_;      // destroyed, their executables alive
};

Allocations& TheAllocations();

// What stream-ordered pools hold free. cuMemFreeAsync gives an allocation back to its pool,
// which keeps the memory on the card until it gives it back to the driver: at a
// synchronize, what it holds beyond its release threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
// 0 by default); at cuMemPoolTrimTo; when it is destroyed (CUDA driver API, "Stream Ordered
// Memory Allocator"). Its next allocations take that memory first. So the charge of a
// freed pool allocation stays, held by the pool, until the driver says the pool holds less
// free (reserved minus used memory: Trimmed); a new allocation from the pool is charged
// only beyond what the pool holds. Thread-safe (one mutex; not on the launch path).
class PoolBook {
 public:
  // `bytes` charged on device `dev` are now held free by `pool`.
  void Freed(uint64_t pool, int dev, uint64_t bytes);
  // Up to `bytes` of what `pool` holds, taken for an allocation from it; returns how many.
  uint64_t Take(uint64_t pool, uint64_t bytes);
  // The driver says `pool` holds `free_bytes` free (0: destroyed). What it held beyond that
  // is returned, with its device in *dev.
  uint64_t Trimmed(uint64_t pool, uint64_t free_bytes, int* dev);
  // The pools holding something on `dev`, at most `max` into out; returns how many.
  int PoolsOn(int dev, uint64_t* out, int max);
  // `pool` was exported to other processes (cuMemPoolExportToShareableHandle): they may
  // import any allocation of it, so its allocations count as exported. Until destroyed.
  void Exported(uint64_t pool);
  bool IsExported(uint64_t pool);
  // An exported allocation of `pool` freed here: the driver may keep it on the card for the
  // pool past its importers (docs/measurements/shared-memory.md), listed under no process,
  // so its charge stays until the pool is destroyed. Not taken by later allocations.
  void KeptForImporters(uint64_t pool, int dev, uint64_t bytes);
  // `pool` is destroyed: what KeptForImporters holds of it is returned, with its device in
  // *dev.
  uint64_t Destroyed(uint64_t pool, int* dev);
  // What KeptForImporters holds on `dev`, all pools together: charged, on the card, and
  // listed by NVML under no process.
  uint64_t KeptOn(int dev);
  // fork(): as Allocations.
  void LockForFork() { mu_.lock(); }
  void UnlockAfterFork() { mu_.unlock(); }
  void ForgetAll();

 private:
  struct Held {
    int device = -1;
    uint64_t bytes = 0;
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, Held> held_;
  std::unordered_map<uint64_t, Held> kept_;  // KeptForImporters
  std::unordered_set<uint64_t> exported_;
};

PoolBook& ThePoolBook();

// Graph memory that destroyed graphs may have left on the card. The driver takes a graph
// allocation node's memory at a launch and keeps it after the executable and the graph are
// destroyed: while the pointer is unfreed, then in the device's graph memory pool until
// cuDeviceGraphMemTrim or the end of the context (docs/measurements/h200-driver.md, "Graph
// memory"). So the charge of a destroyed graph is held here, per device, and goes only when
// the driver says the device's graph memory holds less (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT):
// what is held beyond that figure is returned. That keeps the charges of live graphs plus
// what is held here at least what graphs can put on the card: whatever a destroyed graph
// left allocated is part of that figure, and a live graph is charged whole until it goes.
// Thread-safe (one mutex; not on the launch path).
class GraphMemoryBook {
 public:
  // A destroyed graph's charge of `bytes` on device `dev`.
  void Held(int dev, uint64_t bytes);
  // The driver says the device's graph memory is `reserved` bytes: what was held on `dev`
  // beyond that is taken and returned.
  uint64_t Trimmed(int dev, uint64_t reserved);
  uint64_t HeldOn(int dev);
  // fork(): as Allocations.
  void LockForFork() { mu_.lock(); }
  void UnlockAfterFork() { mu_.unlock(); }
  void ForgetAll();

 private:
  std::mutex mu_;
  std::map<int, uint64_t> held_;
};

GraphMemoryBook& TheGraphMemoryBook();

// Physical memory made by cuMemCreate. The driver keeps such an allocation while any
// handle to it is unreleased or any address range maps it: cuMemRelease of a mapped handle
// frees nothing, the last cuMemUnmap then does (CUDA driver API, cuMemRelease and
// cuMemUnmap). So its charge ends when its last handle is released and its last mapping is
// gone, in whatever order they come, however many times it is mapped. A mapping is an
// address range; an unmap ends every mapping inside its range and trims one it covers in
// part (the driver refuses sub-ranges; were one ever unmapped, what stays mapped stays
// charged). Each charge is returned once, by whichever call ends the last handle or
// mapping. A handle value the driver hands out again names the new allocation; the old
// one stays charged through its mappings.
//
// Not thread-safe: the hooks hold mu() across each VMM driver call and its entry here,
// so nothing another thread does falls between the driver's work and the book's record.
class VmmBook {
 public:
  std::mutex& mu() { return mu_; }

  // A new allocation: one unreleased handle, no mapping.
  void Created(uint64_t handle, Charge c);
  // [ptr, ptr + size) now maps the allocation of handle (released or not). Nothing for a
  // handle not charged here (host memory, or no limit).
  void Mapped(uint64_t ptr, uint64_t size, uint64_t handle);
  // Whether any byte of [ptr, ptr + size) maps an allocation charged here.
  bool AnyMapped(uint64_t ptr, uint64_t size) const;
  // handle is one more reference to the allocation mapped at addr
  // (cuMemRetainAllocationHandle), to be released like the first.
  void Retained(uint64_t handle, uint64_t addr);
  // One reference released. True, with *freed its charge, when the allocation is gone.
  bool Released(uint64_t handle, Charge* freed);
  // The allocation of handle is shared with other processes from now on (its charge says
  // exported); false for a handle not charged here.
  bool Exported(uint64_t handle);
  // handle was made by cuMemImportFromShareableHandle: it names no allocation charged
  // here, whatever allocation that value named before.
  void Imported(uint64_t handle);
  // [ptr, ptr + size) is unmapped. The charges of the allocations it leaves with no handle
  // and no mapping are added per device into bytes[device] (an array of `devices`), those
  // of exported ones into kept[device] when kept is given (the same below).
  void Unmapped(uint64_t ptr, uint64_t size, uint64_t* bytes, int devices, uint64_t* kept = nullptr);
  // Multicast objects. mc is a multicast object's handle (cuMulticastCreate).
  void MulticastCreated(uint64_t mc);
  // [offset, offset + size) of mc now binds the allocation of handle, or the one mapped at
  // addr: one more hold on it until unbound. Nothing for an allocation not charged here.
  void BoundHandle(uint64_t mc, uint64_t offset, uint64_t size, uint64_t handle);
  void BoundAddress(uint64_t mc, uint64_t offset, uint64_t size, uint64_t addr);
  // cuMulticastUnbind: the bindings of mc on region device dev inside [offset, offset +
  // size) end; the charges of allocations nothing holds any more are added as by Unmapped.
  void Unbound(uint64_t mc, int dev, uint64_t offset, uint64_t size, uint64_t* bytes, int devices,
               uint64_t* kept = nullptr);
  // cuMemRelease of handle: true when it is a multicast object, whose bindings all end
  // (charges freed added as by Unmapped).
  bool MulticastReleased(uint64_t handle, uint64_t* bytes, int devices, uint64_t* kept = nullptr);
  // Bytes charged on a device for allocations still alive (for tests).
  uint64_t Total(int device) const;
  // fork(): the child holds none of its parent's allocations.
  void ForgetAll();

 private:
  struct Physical {
    Charge charge;
    uint32_t handles = 0;   // references not yet released
    uint32_t mappings = 0;  // address ranges mapping it and multicast bindings of it
    uint64_t handle = 0;    // its handle value while in by_handle_
  };
  struct Mapping {
    uint64_t end;
    uint64_t id;
  };
  Physical* Find(uint64_t handle, uint64_t* id);
  // Returns the charge when nothing holds the allocation any more, and forgets it.
  bool Collect(uint64_t id, Charge* freed);
  // Collect, its charge added into bytes, or kept when it was exported and kept is given.
  void AddFreed(uint64_t id, uint64_t* bytes, int devices, uint64_t* kept);

  std::mutex mu_;
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, Physical> physical_;   // by id, never reused
  std::unordered_map<uint64_t, uint64_t> by_handle_;  // handle value -> id (may be stale)
  std::map<uint64_t, Mapping> mappings_;              // start -> (end, id), never overlapping
  struct Binding {
    uint64_t offset, size, id;
  };
  std::unordered_set<uint64_t> multicasts_;    // multicast objects alive
  std::multimap<uint64_t, Binding> bindings_;  // multicast object -> what it binds
  void Bind(uint64_t mc, uint64_t offset, uint64_t size, uint64_t id);
};

VmmBook& TheVmmBook();

}  // namespace gs::enforcer
