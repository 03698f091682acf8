#include "src/sim/node.h"

#include <algorithm>

#include "src/common/proc_identity.h"
#include "src/platform/nvml_api.h"
#include "src/sim/compute_capability.h"

namespace gs::sim {

Node::Node(State* state, Clock* clock, pid_t pid, uint64_t start_time)
    : state_(state), clock_(clock), pid_(pid), start_time_(start_time) {}

bool Node::Attach() {
  LockState(state_);
  ProcessSlot* free_slot = nullptr;
  for (auto& slot : state_->procs) {
    uint32_t pid = slot.pid.load();
    if (pid == static_cast<uint32_t>(pid_) && slot.start_time == start_time_) {
      free_slot = &slot;  // the slot our other simulated library claimed
      break;
    }
    if (pid == 0 && free_slot == nullptr) free_slot = &slot;
  }
  if (free_slot != nullptr && free_slot->pid.load() == 0) {
    free_slot->start_time = start_time_;
    free_slot->namespaces = namespaces_;
    for (auto& m : free_slot->memory) m.store(0);
    for (auto& m : free_slot->unlisted) m.store(0);
    free_slot->pid.store(static_cast<uint32_t>(pid_));
  }
  UnlockState(state_);
  slot_ = free_slot;
  return slot_ != nullptr;
}

bool Node::ReattachAs(pid_t pid, uint64_t start_time) {
  pid_ = pid;
  start_time_ = start_time;
  slot_ = nullptr;
  return Attach();
}

void Node::FreeHoldingsLocked(ProcessSlot* slot) {
  const uint32_t pid = slot->pid.load();
  ForgetSharerLocked(pid, slot->start_time);
  for (int d = 0; d < kMaxDevices; ++d) {
    uint64_t held = slot->memory[d].exchange(0) + slot->unlisted[d].exchange(0);
    if (held) state_->live[d].memory_used.fetch_sub(held);
  }
}

bool Node::FreeProcess(pid_t pid, uint64_t start_time, bool release_slot) {
  bool found = false;
  LockState(state_);
  for (auto& slot : state_->procs)
    if (slot.pid.load() == static_cast<uint32_t>(pid) && slot.start_time == start_time) {
      FreeHoldingsLocked(&slot);
      if (release_slot) slot.pid.store(0);
      found = true;
    }
  UnlockState(state_);
  // The driver tears down the process's contexts, and its queued work with them.
  for (int d = 0; d < kMaxDevices; ++d) DropTenant(timeline(d), {pid, start_time});
  return found;
}

int Node::SweepDeadProcesses() {
  int swept = 0;
  LockState(state_);
  for (auto& slot : state_->procs) {
    uint32_t pid = slot.pid.load();
    if (pid == 0 || ProcessIsAlive(static_cast<pid_t>(pid), slot.start_time)) continue;
    ++swept;
    FreeHoldingsLocked(&slot);
    slot.pid.store(0);
  }
  UnlockState(state_);
  // Every dead process's work goes, whether or not it still held a slot.
  for (int d = 0; d < kMaxDevices; ++d)
    DropTenantsWhere(timeline(d), [](pid_t pid, uint64_t start) { return !ProcessIsAlive(pid, start); });
  return swept;
}

bool Node::ReserveIn(int dev, uint64_t bytes, std::atomic<uint64_t>* held) {
  if (departed()) return false;
  auto& used = state_->live[dev].memory_used;
  const uint64_t total = state_->spec[dev].memory_total;
  uint64_t cur = used.load();
  do {
    if (bytes > total || cur > total - bytes) return false;
  } while (!used.compare_exchange_weak(cur, cur + bytes));
  // A kill between the two adds leaks `bytes` until `sim up` again: a window of a few
  // instructions, accepted for a simulator (the enforcer's region is exact).
  if (held) held->fetch_add(bytes);
  return true;
}

void Node::ReleaseIn(int dev, uint64_t bytes, std::atomic<uint64_t>* held) {
  if (departed()) return;  // the daemon freed it
  state_->live[dev].memory_used.fetch_sub(bytes);
  if (held) held->fetch_sub(bytes);
}

uint64_t Node::MemoryUsed(int dev) const {
  return state_->live[dev].memory_used.load();
}

uint64_t Node::MemoryFree(int dev) const {
  uint64_t used = MemoryUsed(dev), total = state_->spec[dev].memory_total;
  return used >= total ? 0 : total - used;
}

int64_t Node::Enqueue(int dev, int64_t work_ns) {
  if (departed()) return -1;
  return sim::Enqueue(timeline(dev), state_->timing, me(), clock_->NowNs(), work_ns);
}

bool Node::WorkDone(int dev, int64_t mark) {
  if (departed()) return true;  // dropped with the process's other work
  return sim::WorkDone(timeline(dev), state_->timing, me(), mark, clock_->NowNs());
}

void Node::WaitWork(int dev, int64_t mark) {
  // The prediction assumes nobody else queues more work; if someone does, our work
  // finishes later than predicted and we look again then.
  while (!departed()) {
    int64_t now = clock_->NowNs();
    int64_t at = PredictDone(timeline(dev), state_->timing, me(), mark, now);
    if (at <= now) return;
    clock_->SleepUntil(at);
  }
}

int64_t Node::DoneAt(int dev, int64_t mark) {
  return sim::DoneAt(timeline(dev), me(), mark);
}

unsigned Node::Utilization(int dev) {
  return DeviceUtilization(timeline(dev), state_->timing, clock_->NowNs());
}

uint32_t Node::SeenPid(const ProcessSlot& slot) const {
  const uint32_t levels = namespaces_.levels;
  const uint64_t viewer = levels > 0 && levels <= kMaxPidNamespaceLevels ? namespaces_.ns[levels - 1] : 0;
  if (viewer == 0 || slot.namespaces.levels == 0) return slot.pid.load();
  return PidSeenFrom(slot.namespaces, viewer);
}

int Node::ProcessSamples(int dev, int64_t after_ns, ProcessSample* out, int max) {
  int n = sim::ProcessSamples(timeline(dev), state_->timing, clock_->NowNs(), after_ns, out, max);
  for (int i = 0; i < n && i < max; ++i) {
    for (const auto& slot : state_->procs) {
      if (slot.pid.load() != out[i].pid) continue;
      if (uint32_t seen = SeenPid(slot)) out[i].pid = seen;
      break;
    }
  }
  return n;
}

int Node::RunningProcesses(int dev, ProcessMemory* out, int max) const {
  int n = 0;
  for (const auto& slot : state_->procs) {
    if (slot.pid.load() == 0) continue;
    uint64_t bytes = slot.memory[dev].load();
    if (bytes == 0) continue;
    uint32_t seen = SeenPid(slot);
    if (seen == 0) continue;
    if (n < max) out[n] = {seen, bytes};
    ++n;
  }
  return n;
}

bool Node::IsLost(int dev) const {
  return state_->live[dev].lost_at_ns.load() <= clock_->NowNs();
}

void Node::AddEvent(int dev, int64_t at_ns, uint64_t type, uint64_t xid) {
  auto& live = state_->live[dev];
  LockState(state_);
  uint32_t n = live.event_count.load();
  if (n < kMaxEvents) {
    live.events[n] = {at_ns, type, xid};
    live.event_count.store(n + 1);
  }
  if (xid == 79) {  // "GPU has fallen off the bus"
    int64_t cur = live.lost_at_ns.load();
    if (at_ns < cur) live.lost_at_ns.store(at_ns);
  }
  UnlockState(state_);
}

uint32_t Node::DueEvents(int dev, uint64_t* delivered, Event* out, uint32_t max) const {
  const auto& live = state_->live[dev];
  uint32_t count = live.event_count.load();
  int64_t now = clock_->NowNs();
  uint32_t got = 0;
  for (uint32_t i = 0; i < count && got < max; ++i) {
    uint64_t bit = 1ULL << (i % 64);
    if ((delivered[i / 64] & bit) || live.events[i].at_ns > now) continue;
    delivered[i / 64] |= bit;
    out[got++] = live.events[i];
  }
  return got;
}

int64_t KernelDurationNs(const DeviceSpec& spec, uint64_t blocks, uint64_t threads_per_block, int64_t ns_per_wave) {
  if (blocks == 0) return 0;
  const ComputeCapabilityLimits cc = LimitsForComputeCapability(spec.cc_major, spec.cc_minor);
  uint64_t per_sm = threads_per_block ? cc.max_threads_per_sm / threads_per_block : cc.max_blocks_per_sm;
  per_sm = std::clamp<uint64_t>(per_sm, 1, cc.max_blocks_per_sm);
  uint64_t slots = std::max<uint64_t>(1, static_cast<uint64_t>(spec.sm_count) * per_sm);
  uint64_t waves = (blocks + slots - 1) / slots;
  return static_cast<int64_t>(waves) * ns_per_wave;
}

}  // namespace gs::sim
