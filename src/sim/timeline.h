// One simulated GPU's execution engine: how the kernels of several processes share it,
// and what NVML then reports. Lives in the node's shared state (one Timeline per GPU) and
// is advanced lazily by whichever process looks at it, under the timeline's mutex.
//
// What it reproduces (docs/measurements/h100-driver.md: H100, driver 580):
// - Time-slicing. Each process ("tenant") has one queue of GPU work per card (its kernels
//   run in launch order). When several tenants have work queued, the card runs one for a
//   timeslice, then the next with work, round robin; a kernel is preempted at the end of
//   a slice and resumes on the tenant's next turn. A tenant alone runs continuously. So
//   a process's completion times are stretched by the other tenants' turns, exactly as
//   its own event timings are on hardware.
// - NVML's per-process samples: one sample per tenant per sample period (200 ms on the
//   H100), stamped at the period's end and visible 20 ms later; smUtil is the part of the
//   period in which the tenant had work RESIDENT (queued or running), not the part in which
//   it ran: two time-sliced processes each getting 53 % read 99 % and 98.5 % on hardware.
// - Device utilisation: the part of the last visible period in which any kernel ran.
//
// Work is measured in nanoseconds of GPU time. A tenant's queue is two counters: `queued`
// (all work ever enqueued) and `executed`; a launch returns the value of `queued` after
// it (a "mark"), and that launch is complete once `executed` reaches the mark. Run
// segments remember when recent work ran, for event timestamps.
//
// Threading: every function takes the timeline's mutex except where noted; the struct is
// plain data in shared memory (no pointers).
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstdint>

namespace gs::sim {

inline constexpr int kTimelineTenants = 64;
inline constexpr int kTenantSegments = 64;
inline constexpr int kSamplePeriods = 8;  // periods of history kept for NVML
// NVML's per-process sample is first returned 16-20 ms after its period ended (measured).
inline constexpr int64_t kSampleDelayNs = 20'000'000;
// What a NULL-buffer call of nvmlDeviceGetProcessUtilization answers (measured: 72,
// a fixed capacity, not the number of samples).
inline constexpr unsigned kProcessSampleCapacity = 72;

struct RunSegment {
  int64_t start_ns, end_ns;
  int64_t executed_at_start;  // the tenant's executed work when the segment began
};

struct PeriodUse {
  int64_t period;       // index: time / period_ns; -1 unused
  int64_t resident_ns;  // work queued or running
  int64_t running_ns;   // running
};

struct Tenant {
  uint32_t pid;         // as the node sees it (the node daemon's namespace); 0: free
  uint32_t gone;        // 1 once its process is gone: reusable when its samples have aged out
  uint64_t start_time;  // see common/proc_identity.h
  int64_t queued, executed;
  int64_t last_active_ns;
  uint32_t segment_head;  // next segment index (monotonic)
  uint32_t reserved1;
  RunSegment segments[kTenantSegments];
  PeriodUse periods[kSamplePeriods];
};

struct Timeline {
  pthread_mutex_t mutex;  // robust, process-shared
  char mutex_pad[64 - (sizeof(pthread_mutex_t) % 64)];
  int64_t advanced_to;  // the schedule is decided up to here; 0 before first use
  int64_t slice_end;    // end of the running tenant's slice
  int32_t runner;       // tenant index or -1
  uint32_t reserved;
  PeriodUse device_periods[kSamplePeriods];  // running_ns: any kernel ran
  Tenant tenants[kTimelineTenants];
};

// NVML's per-process sample period on the H100 (measured: a new sample every 200 +- 2 ms).
inline constexpr int64_t kDefaultSamplePeriodNs = 200'000'000;
// The driver's time slice between contexts. Not measured on the H100 (no tool there shows
// it); NVIDIA documents the default compute timeslice as a few milliseconds.
inline constexpr int64_t kDefaultTimesliceNs = 2'000'000;

// How the card slices time; written by `sim up` from the scenario.
struct TimelineConfig {
  int64_t period_ns;     // NVML sample period
  int64_t timeslice_ns;  // turn length while several tenants have work
};

struct ProcessSample {
  uint32_t pid;
  uint64_t timestamp_ns;  // CLOCK_MONOTONIC at the end of the sample's period
  unsigned sm_percent;
};

void InitTimeline(Timeline* tl);

// A tenant is a process as the node knows it: pid and start time (src/sim/registration.h).
struct TenantId {
  pid_t pid;
  uint64_t start_time;
};

// Queues `work_ns` for the tenant at `now`; returns its mark, or -1 when the card has no
// free tenant slot.
int64_t Enqueue(Timeline* tl, const TimelineConfig& cfg, TenantId who, int64_t now, int64_t work_ns);
// Whether the tenant's work up to `mark` has run by `now` (advancing the schedule).
bool WorkDone(Timeline* tl, const TimelineConfig& cfg, TenantId who, int64_t mark, int64_t now);
// When the mark will be reached if nobody else queues more work (never earlier than the
// truth: more work from others only delays it). `now` if already done.
int64_t PredictDone(Timeline* tl, const TimelineConfig& cfg, TenantId who, int64_t mark, int64_t now);
// When the mark was reached (it must be done); the oldest remembered time when the
// segment has been forgotten.
int64_t DoneAt(Timeline* tl, TenantId who, int64_t mark);
// The tenant's process is gone: its queued work is dropped (the driver tears it down) and
// its slot is reused once its samples have aged out of NVML's history.
void DropTenant(Timeline* tl, TenantId who);
// DropTenant for every tenant not yet gone for which `gone(pid, start_time)` is true.
void DropTenantsWhere(Timeline* tl, bool (*gone)(pid_t pid, uint64_t start_time));

// NVML views at `now`. Device utilisation: percent of the last visible period in which a
// kernel ran. Samples: one per tenant with resident work per visible period stamped after
// `after_ns` (CLOCK_MONOTONIC); fills up to max, returns how many exist.
unsigned DeviceUtilization(Timeline* tl, const TimelineConfig& cfg, int64_t now);
int ProcessSamples(Timeline* tl, const TimelineConfig& cfg, int64_t now, int64_t after_ns, ProcessSample* out, int max);

}  // namespace gs::sim
