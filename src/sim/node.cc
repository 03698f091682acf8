#include "src/sim/node.h"

#include <algorithm>

#include "src/common/proc_identity.h"
#include "src/platform/nvml_api.h"

namespace gs::sim {

Node::Node(State* state, Clock* clock, pid_t pid, uint64_t start_time)
    : state_(state), clock_(clock), pid_(pid), start_time_(start_time) {}

bool Node::Attach() {
  SweepDeadProcesses();
  LockState(state_);
  ProcessSlot* free_slot = nullptr;
  for (auto& slot : state_->procs) {
    uint32_t pid = slot.pid.load();
    if (pid == static_cast<uint32_t>(pid_) && slot.start_time == start_time_) {
      free_slot = &slot;  // re-attach after fork-exec of the same process image
      break;
    }
    if (pid == 0 && free_slot == nullptr) free_slot = &slot;
  }
  if (free_slot != nullptr && free_slot->pid.load() == 0) {
    free_slot->start_time = start_time_;
    for (auto& m : free_slot->memory) m.store(0);
    free_slot->pid.store(static_cast<uint32_t>(pid_));
  }
  UnlockState(state_);
  slot_ = free_slot;
  return slot_ != nullptr;
}

void Node::Detach() {
  if (slot_ == nullptr) return;
  LockState(state_);
  for (int d = 0; d < kMaxDevices; ++d) {
    uint64_t held = slot_->memory[d].exchange(0);
    if (held) state_->live[d].memory_used.fetch_sub(held);
  }
  slot_->pid.store(0);
  UnlockState(state_);
  slot_ = nullptr;
}

int Node::SweepDeadProcesses() {
  int swept = 0;
  LockState(state_);
  for (auto& slot : state_->procs) {
    uint32_t pid = slot.pid.load();
    if (pid == 0 || ProcessIsAlive(static_cast<pid_t>(pid), slot.start_time)) continue;
    for (int d = 0; d < kMaxDevices; ++d) {
      uint64_t held = slot.memory[d].exchange(0);
      if (held) state_->live[d].memory_used.fetch_sub(held);
    }
    slot.pid.store(0);
    ++swept;
  }
  UnlockState(state_);
  return swept;
}

bool Node::Reserve(int dev, uint64_t bytes) {
  auto& used = state_->live[dev].memory_used;
  const uint64_t total = state_->spec[dev].memory_total;
  uint64_t cur = used.load();
  do {
    if (bytes > total || cur > total - bytes) return false;
  } while (!used.compare_exchange_weak(cur, cur + bytes));
  // A kill between the two adds leaks `bytes` until `sim up` again: a window of a few
  // instructions, accepted for a simulator (the enforcer's region is exact).
  if (slot_) slot_->memory[dev].fetch_add(bytes);
  return true;
}

void Node::Release(int dev, uint64_t bytes) {
  state_->live[dev].memory_used.fetch_sub(bytes);
  if (slot_) slot_->memory[dev].fetch_sub(bytes);
}

uint64_t Node::MemoryUsed(int dev) const {
  return state_->live[dev].memory_used.load();
}

uint64_t Node::MemoryFree(int dev) const {
  uint64_t used = MemoryUsed(dev), total = state_->spec[dev].memory_total;
  return used >= total ? 0 : total - used;
}

int64_t Node::ScheduleKernel(int dev, int64_t earliest_ns, int64_t duration_ns) {
  auto& busy = state_->live[dev].busy_until_ns;
  int64_t cur = busy.load();
  int64_t start, end;
  do {
    start = std::max(earliest_ns, cur);
    end = start + duration_ns;
  } while (!busy.compare_exchange_weak(cur, end));
  RecordKernel(dev, start, end);
  return end;
}

void Node::RecordKernel(int dev, int64_t start, int64_t end) {
  auto& live = state_->live[dev];
  uint64_t head = live.kernel_head.load();
  if (head > 0) {
    KernelRecord& prev = live.kernels[(head - 1) % kKernelRing];
    uint64_t seq = prev.seq.load();
    if ((seq & 1) == 0 && prev.pid.load() == static_cast<uint32_t>(pid_) && prev.end_ns.load() == start &&
        prev.seq.compare_exchange_strong(seq, seq + 1)) {
      prev.end_ns.store(end);  // back-to-back with our previous run: extend it
      prev.seq.store(seq + 2);
      return;
    }
  }
  uint64_t idx = live.kernel_head.fetch_add(1);
  KernelRecord& r = live.kernels[idx % kKernelRing];
  uint64_t seq = r.seq.load();
  r.seq.store(seq | 1);
  r.start_ns.store(start);
  r.end_ns.store(end);
  r.pid.store(static_cast<uint32_t>(pid_));
  r.seq.store((seq | 1) + 1);
}

namespace {
int64_t Overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  int64_t lo = std::max(a0, b0), hi = std::min(a1, b1);
  return hi > lo ? hi - lo : 0;
}

// Calls fn(start, end, pid) for every consistent kernel record overlapping [from, to].
template <typename Fn>
void ForEachKernel(const DeviceLive& live, int64_t from, int64_t to, Fn fn) {
  uint64_t head = live.kernel_head.load();
  uint64_t n = std::min<uint64_t>(head, kKernelRing);
  for (uint64_t i = 0; i < n; ++i) {
    const KernelRecord& r = live.kernels[(head - 1 - i) % kKernelRing];
    uint64_t s1 = r.seq.load();
    if (s1 & 1) continue;
    int64_t start = r.start_ns.load(), end = r.end_ns.load();
    uint32_t pid = r.pid.load();
    if (r.seq.load() != s1) continue;
    if (end <= from || start >= to) continue;
    fn(start, end, pid);
  }
}
}  // namespace

unsigned Node::Utilization(int dev, int64_t window_ns) const {
  int64_t now = clock_->NowNs(), from = now - window_ns;
  int64_t busy = 0;
  ForEachKernel(state_->live[dev], from, now,
                [&](int64_t s, int64_t e, uint32_t) { busy += Overlap(s, e, from, now); });
  return static_cast<unsigned>(std::min<int64_t>(100, (busy * 100 + window_ns / 2) / window_ns));
}

int Node::ProcessUtilization(int dev, int64_t since_ns, ProcessBusy* out, int max) const {
  int64_t now = clock_->NowNs();
  int64_t from = std::min(since_ns, now - 1'000'000);  // at least a 1 ms window
  int64_t window = now - from;
  struct Acc {
    uint32_t pid;
    int64_t busy;
  } acc[64];
  int n = 0;
  ForEachKernel(state_->live[dev], from, now, [&](int64_t s, int64_t e, uint32_t pid) {
    int i = 0;
    while (i < n && acc[i].pid != pid) ++i;
    if (i == n) {
      if (n == 64) return;
      acc[n++] = {pid, 0};
    }
    acc[i].busy += Overlap(s, e, from, now);
  });
  int out_n = std::min(n, max);
  for (int i = 0; i < out_n; ++i)
    out[i] = {acc[i].pid, static_cast<unsigned>(std::min<int64_t>(100, (acc[i].busy * 100 + window / 2) / window))};
  return out_n;
}

int Node::RunningProcesses(int dev, ProcessMemory* out, int max) const {
  int n = 0;
  for (const auto& slot : state_->procs) {
    uint32_t pid = slot.pid.load();
    if (pid == 0) continue;
    uint64_t bytes = slot.memory[dev].load();
    if (bytes == 0) continue;
    if (n < max) out[n] = {pid, bytes};
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
  uint64_t per_sm = threads_per_block ? 2048 / threads_per_block : 32;
  per_sm = std::clamp<uint64_t>(per_sm, 1, 32);
  uint64_t slots = std::max<uint64_t>(1, static_cast<uint64_t>(spec.sm_count) * per_sm);
  uint64_t waves = (blocks + slots - 1) / slots;
  return static_cast<int64_t>(waves) * ns_per_wave;
}

}  // namespace gs::sim
