#include "src/sim/timeline.h"

#include <algorithm>
#include <cstring>

#include "src/common/robust_mutex.h"

namespace gs::sim {
namespace {

// What decides who runs next: the queues and the running slice. Copied out of the
// timeline so a prediction can run ahead without touching it.
struct Sched {
  int64_t queued[kTimelineTenants];
  int64_t executed[kTimelineTenants];
  int32_t runner;
  int64_t slice_end;
};

Sched Load(const Timeline* tl) {
  Sched s;
  for (int i = 0; i < kTimelineTenants; ++i) {
    s.queued[i] = tl->tenants[i].queued;
    s.executed[i] = tl->tenants[i].executed;
  }
  s.runner = tl->runner;
  s.slice_end = tl->slice_end;
  return s;
}

int Pending(const Sched& s) {
  int n = 0;
  for (int i = 0; i < kTimelineTenants; ++i) n += s.queued[i] > s.executed[i];
  return n;
}

// Runs the card from t for at most until `limit`: the running tenant keeps the card until
// its slice ends (only while others wait), then the next tenant with work, round robin.
// Returns the end of the step; *who is the tenant that ran, -1 if the card was idle.
int64_t Step(Sched& s, const TimelineConfig& cfg, int64_t t, int64_t limit, int* who) {
  int pending = Pending(s);
  if (pending == 0) {
    s.runner = -1;
    *who = -1;
    return limit;
  }
  int r = s.runner;
  bool keep = r >= 0 && s.queued[r] > s.executed[r] && (pending == 1 || t < s.slice_end);
  if (!keep) {
    for (int k = 1; k <= kTimelineTenants; ++k) {
      int i = ((r < 0 ? -1 : r) + k + kTimelineTenants) % kTimelineTenants;
      if (s.queued[i] > s.executed[i]) {
        r = i;
        break;
      }
    }
    s.runner = r;
    s.slice_end = t + cfg.timeslice_ns;
  } else if (pending == 1) {
    s.slice_end = t + cfg.timeslice_ns;  // alone: its slice starts when someone else arrives
  }
  int64_t end = std::min(limit, t + (s.queued[r] - s.executed[r]));
  if (pending > 1) end = std::min(end, s.slice_end);
  s.executed[r] += end - t;
  *who = r;
  return end;
}

PeriodUse& Use(PeriodUse* ring, int64_t period) {
  PeriodUse& u = ring[period % kSamplePeriods];
  if (u.period != period) u = {period, 0, 0};
  return u;
}

void AddSegment(Tenant& tn, int64_t start, int64_t end, int64_t executed_at_start) {
  if (tn.segment_head > 0) {
    RunSegment& last = tn.segments[(tn.segment_head - 1) % kTenantSegments];
    if (last.end_ns == start && last.executed_at_start + (last.end_ns - last.start_ns) == executed_at_start) {
      last.end_ns = end;  // continuous run: extend
      return;
    }
  }
  tn.segments[tn.segment_head++ % kTenantSegments] = {start, end, executed_at_start};
}

// Decides the schedule up to `now` and books it: segments, resident and running time per
// sample period.
void Advance(Timeline* tl, const TimelineConfig& cfg, int64_t now) {
  if (tl->advanced_to == 0) tl->advanced_to = now;
  int64_t t = tl->advanced_to;
  if (t >= now) return;
  Sched s = Load(tl);
  while (t < now) {
    int64_t period = t / cfg.period_ns;
    int64_t limit = std::min(now, (period + 1) * cfg.period_ns);
    bool resident[kTimelineTenants];
    for (int i = 0; i < kTimelineTenants; ++i) resident[i] = s.queued[i] > s.executed[i];
    int who;
    int64_t end = Step(s, cfg, t, limit, &who);
    if (who >= 0) {
      Tenant& tn = tl->tenants[who];
      AddSegment(tn, t, end, s.executed[who] - (end - t));
      Use(tn.periods, period).running_ns += end - t;
      Use(tl->device_periods, period).running_ns += end - t;
      for (int i = 0; i < kTimelineTenants; ++i)
        if (resident[i]) {
          Use(tl->tenants[i].periods, period).resident_ns += end - t;
          tl->tenants[i].last_active_ns = end;
        }
    }
    t = end;
  }
  for (int i = 0; i < kTimelineTenants; ++i) tl->tenants[i].executed = s.executed[i];
  tl->runner = s.runner;
  tl->slice_end = s.slice_end;
  tl->advanced_to = now;
}

int Find(const Timeline* tl, TenantId who) {
  for (int i = 0; i < kTimelineTenants; ++i)
    if (tl->tenants[i].pid == static_cast<uint32_t>(who.pid) && tl->tenants[i].start_time == who.start_time &&
        !tl->tenants[i].gone)
      return i;
  return -1;
}

void Drop(Timeline* tl, int i) {
  tl->tenants[i].queued = tl->tenants[i].executed;
}

int Claim(Timeline* tl, const TimelineConfig& cfg, TenantId who, int64_t now) {
  if (int i = Find(tl, who); i >= 0) return i;
  for (int k = 0; k < kTimelineTenants; ++k) {
    Tenant& tn = tl->tenants[k];
    // A slot is reusable once its process is gone (the node daemon said so) and its
    // samples have aged out of NVML.
    bool reusable = tn.pid == 0 || (tn.gone && tn.last_active_ns < now - kSamplePeriods * cfg.period_ns);
    if (!reusable) continue;
    memset(static_cast<void*>(&tn), 0, sizeof(tn));
    for (auto& p : tn.periods) p.period = -1;
    tn.pid = static_cast<uint32_t>(who.pid);
    tn.start_time = who.start_time;
    tn.last_active_ns = now;
    if (tl->runner == k) tl->runner = -1;
    return k;
  }
  return -1;
}

class Locked {
 public:
  explicit Locked(Timeline* tl) : tl_(tl) {
    // The timeline's invariants hold between whole Advance calls of a simulator; a
    // process killed inside one leaves at most a step unbooked.
    if (LockRobust(&tl_->mutex)) MarkConsistent(&tl_->mutex);
  }
  ~Locked() { pthread_mutex_unlock(&tl_->mutex); }

 private:
  Timeline* tl_;
};

}  // namespace

void InitTimeline(Timeline* tl) {
  memset(static_cast<void*>(tl), 0, sizeof(Timeline));
  InitRobustMutex(&tl->mutex);
  tl->runner = -1;
  for (auto& p : tl->device_periods) p.period = -1;
}

int64_t Enqueue(Timeline* tl, const TimelineConfig& cfg, TenantId who, int64_t now, int64_t work_ns) {
  Locked lock(tl);
  Advance(tl, cfg, now);
  int i = Claim(tl, cfg, who, now);
  if (i < 0) return -1;
  Tenant& tn = tl->tenants[i];
  tn.queued += std::max<int64_t>(work_ns, 1);
  tn.last_active_ns = now;
  return tn.queued;
}

bool WorkDone(Timeline* tl, const TimelineConfig& cfg, TenantId who, int64_t mark, int64_t now) {
  if (mark <= 0) return true;
  Locked lock(tl);
  Advance(tl, cfg, now);
  int i = Find(tl, who);
  return i < 0 || tl->tenants[i].executed >= mark;
}

int64_t PredictDone(Timeline* tl, const TimelineConfig& cfg, TenantId who, int64_t mark, int64_t now) {
  if (mark <= 0) return now;
  Locked lock(tl);
  Advance(tl, cfg, now);
  int me = Find(tl, who);
  if (me < 0 || tl->tenants[me].executed >= mark) return now;
  Sched s = Load(tl);
  int64_t t = now;
  while (s.executed[me] < mark) {
    int who;
    // Stop exactly when the mark is reached: limit the step to our remaining need.
    int64_t limit = s.runner == me ? t + (mark - s.executed[me]) : INT64_MAX / 2;
    t = Step(s, cfg, t, limit, &who);
    if (who < 0) break;  // cannot happen: our own work is pending
  }
  return t;
}

int64_t DoneAt(Timeline* tl, TenantId who, int64_t mark) {
  Locked lock(tl);
  int i = Find(tl, who);
  if (i < 0 || mark <= 0) return 0;
  const Tenant& tn = tl->tenants[i];
  uint32_t n = std::min<uint32_t>(tn.segment_head, kTenantSegments);
  int64_t oldest = 0;
  for (uint32_t k = 1; k <= n; ++k) {
    const RunSegment& seg = tn.segments[(tn.segment_head - k) % kTenantSegments];
    int64_t len = seg.end_ns - seg.start_ns;
    if (mark > seg.executed_at_start && mark <= seg.executed_at_start + len)
      return seg.start_ns + (mark - seg.executed_at_start);
    oldest = seg.start_ns;
  }
  return oldest;
}

void DropTenant(Timeline* tl, TenantId who) {
  Locked lock(tl);
  if (int i = Find(tl, who); i >= 0) {
    Drop(tl, i);
    tl->tenants[i].gone = 1;
  }
}

void DropTenantsWhere(Timeline* tl, bool (*gone)(pid_t pid, uint64_t start_time)) {
  Locked lock(tl);
  for (int i = 0; i < kTimelineTenants; ++i) {
    Tenant& tn = tl->tenants[i];
    if (tn.pid == 0 || tn.gone || !gone(static_cast<pid_t>(tn.pid), tn.start_time)) continue;
    Drop(tl, i);
    tn.gone = 1;
  }
}

unsigned DeviceUtilization(Timeline* tl, const TimelineConfig& cfg, int64_t now) {
  Locked lock(tl);
  Advance(tl, cfg, now);
  int64_t last = (now - kSampleDelayNs) / cfg.period_ns - 1;  // the newest visible period
  const PeriodUse& u = tl->device_periods[last % kSamplePeriods];
  if (last < 0 || u.period != last) return 0;
  return static_cast<unsigned>(std::min<int64_t>(100, (u.running_ns * 100 + cfg.period_ns / 2) / cfg.period_ns));
}

int ProcessSamples(Timeline* tl, const TimelineConfig& cfg, int64_t now, int64_t after_ns, ProcessSample* out,
                   int max) {
  Locked lock(tl);
  Advance(tl, cfg, now);
  int64_t current = now / cfg.period_ns;
  int64_t last = (now - kSampleDelayNs) / cfg.period_ns - 1;
  int n = 0;
  for (int64_t k = std::max<int64_t>(0, current - (kSamplePeriods - 1)); k <= last; ++k) {
    int64_t stamp = (k + 1) * cfg.period_ns;
    if (stamp <= after_ns) continue;
    for (const Tenant& tn : tl->tenants) {
      if (tn.pid == 0) continue;
      const PeriodUse& u = tn.periods[k % kSamplePeriods];
      if (u.period != k || u.resident_ns == 0) continue;
      if (n < max)
        out[n] = {
            tn.pid, static_cast<uint64_t>(stamp),
            static_cast<unsigned>(std::min<int64_t>(100, (u.resident_ns * 100 + cfg.period_ns / 2) / cfg.period_ns))};
      ++n;
    }
  }
  return n;
}

}  // namespace gs::sim
