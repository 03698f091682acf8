// The compute limiter: holds a container to its SM share on each device.
//
// Model: the container has a GPU-time budget per device in the region (tokens, in ns),
// shared by all its processes. Time refills it at share x wall time; GPU time used
// drains it. A launch pre-pays the learned GPU time of one launch, so deep asynchronous
// queues are held back before their work shows up in measurements; launches wait while
// the budget is negative. Every period one process of the container (whoever wins a CAS
// on controller_ns) reconciles: it reads the container's real SM utilisation from NVML's
// per-process samples, replaces the estimates pre-paid since the last step with the
// measured GPU time, and updates the learned cost per launch.
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

  // One reconciliation step for a device (exposed for tests). `container_util` and
  // `others_util` are percent over the last `elapsed_ns`.
  struct Step {
    int64_t tokens;
    int64_t launch_cost_ns;
    unsigned share;
  };
  static Step Reconcile(int64_t tokens, int64_t charged_ns, uint64_t launches, int64_t launch_cost_ns,
                        unsigned sm_limit, bool force, unsigned container_util, unsigned others_util,
                        int64_t elapsed_ns);
};

}  // namespace gs::enforcer
