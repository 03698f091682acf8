// Memory shared between processes, in the node's state (src/sim/node.h): which processes
// hold each exported allocation, and whose slot its bytes are in. The model
// (docs/measurements/shared-memory.md, as an H100 showed it): importing puts nothing new on
// the card; while the owner holds it, NVML lists it under the owner's pid only; the memory
// leaves the card only when its owner freed it and every importer closed it.
// - Legacy IPC and descriptor memory its owner freed or left by exiting is listed under a
//   process still holding it (descriptors: as an H200 showed it).
// - A pool allocation its owner freed is listed under no one, and the owner's pool keeps it
//   on the card, past the importers, until the pool is destroyed or the owner is gone; one
//   whose owner exited first is listed under no one until the importers let it go.
#include <cstring>

#include "src/sim/node.h"

namespace gs::sim {

ProcessSlot* Node::SlotOfLocked(uint32_t pid, uint64_t start_time) const {
  for (auto& slot : state_->procs)
    if (pid != 0 && slot.pid.load() == pid && slot.start_time == start_time) return &slot;
  return nullptr;
}

void Node::RechargeShareLocked(SharedMemory* e, uint32_t pid, uint64_t start_time) {
  if (e->device >= 0 && e->device < kMaxDevices) {
    if (ProcessSlot* from = SlotOfLocked(e->charged_pid, e->charged_start)) from->memory[e->device].fetch_sub(e->bytes);
    ProcessSlot* to = SlotOfLocked(pid, start_time);
    if (to != nullptr) to->memory[e->device].fetch_add(e->bytes);
    if (to == nullptr) pid = 0, start_time = 0;
  }
  e->charged_pid = pid;
  e->charged_start = start_time;
}

void Node::DropShareLocked(SharedMemory* e) {
  if (e->device >= 0 && e->device < kMaxDevices && e->bytes > 0) {
    if (ProcessSlot* slot = SlotOfLocked(e->charged_pid, e->charged_start)) slot->memory[e->device].fetch_sub(e->bytes);
    state_->live[e->device].memory_used.fetch_sub(e->bytes);
  }
  memset(static_cast<void*>(e), 0, sizeof(*e));
}

int Node::Share(int dev, uint64_t bytes, uint64_t inode, uint64_t fs_dev, int owner_fd, ShareWay way, uint64_t* id) {
  if (departed()) return -1;
  int index = -1;
  LockState(state_);
  for (int i = 0; i < kMaxShared && index < 0; ++i) {
    SharedMemory& e = state_->shared[i];
    if (e.id != 0) continue;
    index = i;
    memset(static_cast<void*>(&e), 0, sizeof(e));
    e.id = ++state_->last_shared_id;
    e.device = dev;
    e.way = way;
    e.bytes = dev >= 0 ? bytes : 0;
    e.charged_pid = static_cast<uint32_t>(pid_);
    e.charged_start = start_time_;
    e.owner_fd = static_cast<uint32_t>(owner_fd);
    e.inode = inode;
    e.fs_dev = fs_dev;
    e.sharers[0] = Sharer{static_cast<uint32_t>(pid_), 1, start_time_};
    *id = e.id;
  }
  UnlockState(state_);
  return index;
}

bool Node::ShareOf(int index, uint64_t id, ShareInfo* out) const {
  if (index < 0 || index >= kMaxShared || id == 0) return false;
  LockState(state_);
  const SharedMemory& e = state_->shared[index];
  bool ok = e.id == id;
  if (ok) {
    *out = ShareInfo{};
    out->device = e.device;
    out->way = e.way;
    out->bytes = e.bytes;
    // The owner is its first sharer until it frees the allocation (owner_fd is then 0).
    if (e.owner_fd != 0) {
      out->owner_pid = e.sharers[0].pid;
      out->owner_start = e.sharers[0].start_time;
      out->owner_fd = static_cast<int>(e.owner_fd);
    }
    out->inode = e.inode;
    out->fs_dev = e.fs_dev;
    out->charged_pid = e.charged_pid;
  }
  UnlockState(state_);
  return ok;
}

bool Node::HoldsShare(int index, uint64_t id, uint32_t pid, uint64_t start_time) const {
  if (index < 0 || index >= kMaxShared || id == 0 || pid == 0) return false;
  LockState(state_);
  const SharedMemory& e = state_->shared[index];
  bool holds = false;
  if (e.id == id)
    for (const auto& s : e.sharers) holds |= s.pid == pid && s.start_time == start_time && s.refs > 0;
  UnlockState(state_);
  return holds;
}

bool Node::JoinShare(int index, uint64_t id) {
  if (departed() || index < 0 || index >= kMaxShared || id == 0) return false;
  LockState(state_);
  SharedMemory& e = state_->shared[index];
  bool ok = false;
  if (e.id == id) {
    Sharer* free_entry = nullptr;
    for (auto& s : e.sharers) {
      if (s.pid == static_cast<uint32_t>(pid_) && s.start_time == start_time_) {
        ++s.refs;
        ok = true;
        break;
      }
      if (s.pid == 0 && free_entry == nullptr) free_entry = &s;
    }
    if (!ok && free_entry != nullptr) {
      *free_entry = Sharer{static_cast<uint32_t>(pid_), 1, start_time_};
      ok = true;
    }
  }
  UnlockState(state_);
  return ok;
}

void Node::LeaveShare(int index, uint64_t id, bool owner) {
  if (departed() || index < 0 || index >= kMaxShared || id == 0) return;
  LockState(state_);
  SharedMemory& e = state_->shared[index];
  if (e.id == id) {
    if (owner) e.owner_fd = 0;
    const Sharer* heir = nullptr;
    bool still_holds = false;  // this process, by another reference
    for (auto& s : e.sharers) {
      if (s.pid == static_cast<uint32_t>(pid_) && s.start_time == start_time_ && s.refs > 0) {
        if (--s.refs == 0)
          s = Sharer{};
        else
          still_holds = true;
      }
      if (s.pid != 0 && heir == nullptr) heir = &s;
    }
    const bool was_listed_here = e.charged_pid == static_cast<uint32_t>(pid_) && e.charged_start == start_time_;
    if (heir == nullptr && e.pool_holder_pid == 0) {
      DropShareLocked(&e);
    } else if (heir != nullptr && owner && e.way == ShareWay::kPoolPointer) {
      RechargeShareLocked(&e, 0, 0);
      e.pool_holder_pid = static_cast<uint32_t>(pid_);
      e.pool_holder_start = start_time_;
    } else if (heir != nullptr && e.way != ShareWay::kPoolPointer && (owner || (was_listed_here && !still_holds))) {
      // Freed by its owner, or let go by the importer it was listed under: listed under a
      // process still holding it.
      RechargeShareLocked(&e, heir->pid, heir->start_time);
    }
  }
  UnlockState(state_);
}

void Node::PoolLetGo(int index, uint64_t id) {
  if (departed() || index < 0 || index >= kMaxShared || id == 0) return;
  LockState(state_);
  SharedMemory& e = state_->shared[index];
  if (e.id == id && e.pool_holder_pid == static_cast<uint32_t>(pid_) && e.pool_holder_start == start_time_) {
    e.pool_holder_pid = 0;
    e.pool_holder_start = 0;
    bool anyone = false;
    for (const auto& s : e.sharers) anyone |= s.pid != 0;
    if (!anyone) DropShareLocked(&e);
  }
  UnlockState(state_);
}

void Node::ForgetSharerLocked(uint32_t pid, uint64_t start_time) {
  for (auto& e : state_->shared) {
    if (e.id == 0) continue;
    Sharer* heir = nullptr;
    for (auto& s : e.sharers) {
      if (s.pid == pid && s.start_time == start_time) s = Sharer{};
      if (s.pid != 0 && heir == nullptr) heir = &s;
    }
    if (e.pool_holder_pid == pid && e.pool_holder_start == start_time) {  // its pool went with it
      e.pool_holder_pid = 0;
      e.pool_holder_start = 0;
    }
    if (heir == nullptr) {
      if (e.pool_holder_pid == 0) DropShareLocked(&e);
      continue;
    }
    if (e.charged_pid != pid || e.charged_start != start_time) continue;
    // Its holder is gone and others still map it: it stays on the card, now theirs, or a
    // pool's piece listed under no one.
    e.owner_fd = 0;  // the owner's descriptor went with it
    if (e.way == ShareWay::kPoolPointer)
      RechargeShareLocked(&e, 0, 0);
    else
      RechargeShareLocked(&e, heir->pid, heir->start_time);
  }
}

}  // namespace gs::sim
