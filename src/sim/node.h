// The simulated GPU node as seen by one process: device memory accounting, the shared
// execution timeline (processes time-slice each GPU), NVML's utilisation samples,
// running processes and XID events.
//
// Both simulated libraries use one Node per process; unit tests build one over a
// heap-allocated State with a ManualClock. Thread-safe: allocation and scheduling are
// lock-free; slot claims, sweeps and event appends take the state's robust mutex.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "src/common/clock.h"
#include "src/sim/state.h"

namespace gs::sim {

// One entry of the table of memory shared between processes (Node::ShareOf).
struct ShareInfo {
  int device = -1;
  ShareWay way = ShareWay::kLegacyIpc;
  uint64_t bytes = 0;
  uint32_t owner_pid = 0;  // 0 once the owner freed it
  uint64_t owner_start = 0;
  int owner_fd = -1;  // the owner's descriptor of the backing, which an importer maps
  uint64_t inode = 0, fs_dev = 0;
  uint32_t charged_pid = 0;  // whose slot holds its bytes
};

struct ProcessMemory {
  uint32_t pid;
  uint64_t bytes;
};

class Node {
 public:
  Node(State* state, Clock* clock, pid_t pid, uint64_t start_time);

  State* state() const { return state_; }
  Clock* clock() const { return clock_; }
  int device_count() const { return static_cast<int>(state_->device_count); }
  const DeviceSpec& spec(int dev) const { return state_->spec[dev]; }

  // Claims this process's slot (or finds the one it holds through another simulated
  // library). False when full.
  bool Attach();
  // In a child forked from the attached process: becomes `pid` and claims a slot of its
  // own, leaving the parent's slot (and what it holds) to the parent. False when full.
  bool ReattachAs(pid_t pid, uint64_t start_time);
  // This process's pids per PID namespace (src/sim/pid_namespaces.h), before Attach or
  // ReattachAs: recorded in its slot, and the namespace NVML's answers to it are in (its
  // own). Without it, answers carry the node's pids.
  void SetPidNamespaces(const PidNamespaces& mine) { namespaces_ = mine; }
  // The process's pid as the node sees it (src/sim/registration.h), not necessarily getpid().
  pid_t pid() const { return pid_; }
  uint64_t start_time() const { return start_time_; }

  // The node daemon's side (src/sim/node_daemon.h): frees what a process held — its
  // memory on every card and its queued work. ForgetProcess: that process, when the driver
  // learns it is gone (false if it held no slot); SweepDeadProcesses: every process whose
  // pid and start time no longer match a process in this namespace's /proc. Returns how
  // many were swept. Only meaningful in the node's PID namespace.
  bool ForgetProcess(pid_t pid, uint64_t start_time) { return FreeProcess(pid, start_time, true); }
  int SweepDeadProcesses();
  // The daemon's side of a process's goodbye (src/sim/registration.h): what ForgetProcess
  // frees, while the process keeps its slot until its connection closes, so that nothing
  // it still does at its exit lands in a slot another process has claimed. False if it
  // held no slot.
  bool ReleaseHoldings(pid_t pid, uint64_t start_time) { return FreeProcess(pid, start_time, false); }

  // This process's driver has shut down (libcuda at the process's exit): from now on its
  // memory and work are the daemon's to free, and nothing here charges, frees or waits.
  void Depart() { departed_.store(true); }
  bool departed() const { return departed_.load(std::memory_order_relaxed); }

  // Memory shared between processes (src/sim/node_shares.cc, docs/simulator.md): an entry
  // of the state's table per exported allocation, with the processes holding it. Its bytes
  // stay on the card, in the owner's slot, until no process holds it any more; when the
  // owner is gone first, in the slot of a process still holding it.
  // Share: this process exports `bytes` it holds on `dev` (-1: host memory), backed by the
  // memfd (inode, fs_dev), open in it as `owner_fd`; the entry starts with one reference of
  // this process. Returns its index, its id in *id; -1 when the table is full.
  int Share(int dev, uint64_t bytes, uint64_t inode, uint64_t fs_dev, int owner_fd, ShareWay way, uint64_t* id);
  // The entry, while it is `id`; false when it is gone.
  bool ShareOf(int index, uint64_t id, ShareInfo* out) const;
  // Whether the process (pid, start_time as the node sees it) holds the entry.
  bool HoldsShare(int index, uint64_t id, uint32_t pid, uint64_t start_time) const;
  // One more reference of this process to the entry; false when it is gone.
  bool JoinShare(int index, uint64_t id);
  // One reference of this process dropped (`owner`: the owner freed its allocation). The
  // memory leaves the card with the last reference, unless a pool keeps it (below). A pool
  // allocation freed by its owner while others hold it leaves every slot and stays on the
  // card, kept by the owner's pool, past the importers too, as on an H100
  // (docs/measurements/shared-memory.md); legacy IPC memory moves to the slot of a process
  // still holding it once its owner freed it or the process charged let it go; descriptor
  // memory stays in the owner's slot.
  void LeaveShare(int index, uint64_t id, bool owner);
  // This process's pool was destroyed: a pool allocation of it that it freed while imported
  // leaves the card once no importer holds it any more.
  void PoolLetGo(int index, uint64_t id);

  // Device memory: false (nothing changed) when the card has fewer free bytes.
  bool Reserve(int dev, uint64_t bytes) { return ReserveIn(dev, bytes, slot_ ? &slot_->memory[dev] : nullptr); }
  void Release(int dev, uint64_t bytes) { ReleaseIn(dev, bytes, slot_ ? &slot_->memory[dev] : nullptr); }
  // The same for memory the driver holds for this process but lists under no process (a
  // context's own, beside its listed footprint): in the device's totals, not in
  // RunningProcesses, freed with the process's other holdings.
  bool ReserveUnlisted(int dev, uint64_t bytes) {
    return ReserveIn(dev, bytes, slot_ ? &slot_->unlisted[dev] : nullptr);
  }
  void ReleaseUnlisted(int dev, uint64_t bytes) { ReleaseIn(dev, bytes, slot_ ? &slot_->unlisted[dev] : nullptr); }
  uint64_t MemoryUsed(int dev) const;
  uint64_t MemoryFree(int dev) const;

  // GPU work of this process on the device's time-sliced timeline (src/sim/timeline.h).
  // Enqueue returns the work's mark (-1: the card has no free tenant slot); the work is
  // done once WorkDone(mark); WaitWork sleeps until then; DoneAt says when it finished.
  int64_t Enqueue(int dev, int64_t work_ns);
  bool WorkDone(int dev, int64_t mark);
  void WaitWork(int dev, int64_t mark);
  int64_t DoneAt(int dev, int64_t mark);

  // NVML's views, on its sample clock: device utilisation of the last visible period,
  // and per-process samples stamped after `after_ns` (CLOCK_MONOTONIC).
  // Pids as a real driver gives them (docs/measurements/h200-driver.md, "Pids"): in this
  // process's namespace. The process list leaves out processes this namespace cannot
  // see; a sample of such a process carries its node pid.
  unsigned Utilization(int dev);
  int ProcessSamples(int dev, int64_t after_ns, ProcessSample* out, int max);
  // Processes holding memory on the device; fills up to max, returns the total count.
  int RunningProcesses(int dev, ProcessMemory* out, int max) const;

  bool IsLost(int dev) const;
  // Appends an event visible from at_ns. Marks the GPU lost for XID 79.
  void AddEvent(int dev, int64_t at_ns, uint64_t type, uint64_t xid);
  // Copies up to max events that are due now and not yet marked in `delivered` (a
  // kMaxEvents-bit set owned by the reader, e.g. one per NVML event set), marks them,
  // and returns how many were copied.
  uint32_t DueEvents(int dev, uint64_t* delivered, Event* out, uint32_t max) const;

 private:
  Timeline* timeline(int dev) const { return &state_->live[dev].timeline; }
  TenantId me() const { return {pid_, start_time_}; }
  // The device's total and this process's counter `held` (none without a slot) together.
  bool ReserveIn(int dev, uint64_t bytes, std::atomic<uint64_t>* held);
  void ReleaseIn(int dev, uint64_t bytes, std::atomic<uint64_t>* held);
  // Frees a slot's memory and shares (state mutex held); the slot stays claimed.
  void FreeHoldingsLocked(ProcessSlot* slot);
  // Frees what the process held, its queued work included, and its slot if release_slot.
  bool FreeProcess(pid_t pid, uint64_t start_time, bool release_slot);
  // A process is gone (state mutex held): its references to shared memory go, and memory
  // in its slot that others still hold moves to one of theirs (src/sim/node_shares.cc).
  void ForgetSharerLocked(uint32_t pid, uint64_t start_time);
  ProcessSlot* SlotOfLocked(uint32_t pid, uint64_t start_time) const;
  // Takes an entry's bytes off the card and frees the entry (state mutex held).
  void DropShareLocked(SharedMemory* e);
  // Moves an entry's bytes into the slot of `to` (pid 0: into no slot; state mutex held).
  void RechargeShareLocked(SharedMemory* e, uint32_t pid, uint64_t start_time);
  // The slot's process's pid in this process's namespace, 0 when it cannot be seen.
  uint32_t SeenPid(const ProcessSlot& slot) const;

  State* state_;
  Clock* clock_;
  pid_t pid_;
  uint64_t start_time_;
  PidNamespaces namespaces_{};
  ProcessSlot* slot_ = nullptr;
  std::atomic<bool> departed_{false};
};

// Kernel cost model (docs/simulator.md): blocks run in waves of
// sm_count * blocks_per_sm, blocks_per_sm = clamp(2048 / threads_per_block, 1, 32);
// each wave of gpuslice_spin(ns) lasts ns, each wave of any other kernel kDefaultWaveNs.
inline constexpr int64_t kDefaultWaveNs = 2'000;
int64_t KernelDurationNs(const DeviceSpec& spec, uint64_t blocks, uint64_t threads_per_block, int64_t ns_per_wave);

}  // namespace gs::sim
