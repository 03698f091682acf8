// The compute limiter: holds a container to its SM share on each device.
//
// Model: the container has a GPU-time budget per device in the region (tokens, in ns),
// shared by all its processes. Time refills it at share x wall time; GPU time used
// drains it. A launch pre-pays the learned GPU time of one launch, so deep asynchronous
// queues are held back before their work shows up in measurements; launches wait while
// the budget is negative. Every period one process of the container (whoever wins a CAS
// on controller_ns) reconciles: it reads the container's real SM utilisation from NVML's
// per-process samples. Measured use first consumes the lead (work pre-paid but not yet
// seen running); only use beyond it costs extra. When the GPU had idle time nothing of
// the container is queued, so any remaining lead was an over-estimate and is refunded.
// Net effect: the container pays max(estimated, measured) GPU time.
//
// Policies: force always limits; default lets a container that is alone on its card use
// idle capacity; disable never limits. Launch path: no syscall, lock or NVML call unless
// the container is over its budget (then it sleeps).
#pragma once

#include <cstdint>

#include "src/platform/cuda_api.h"

namespace gs::enforcer {

class Limiter {
 public:
  // Called on every launch path before the driver.
  static void Gate(CUstream stream);
  // Stream captures in progress in this process (launches into them are not charged).
  static void CaptureStarted();
  static void CaptureEnded();

  // One reconciliation step for a device (exposed for tests). `container_util` and
  // `others_util` are percent over the last `elapsed_ns`.
  struct Step {
    int64_t token_delta;     // to add to the budget
    int64_t lead_ns;         // pre-paid work still expected to run
    int64_t launch_cost_ns;  // learned GPU time of one launch
    unsigned share;          // share applied, percent
  };
  static Step Reconcile(int64_t lead_ns, int64_t charged_ns, uint64_t launches, int64_t launch_cost_ns,
                        unsigned sm_limit, bool force, unsigned container_util, unsigned others_util,
                        int64_t elapsed_ns);
};

}  // namespace gs::enforcer
