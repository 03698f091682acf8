// CUDA_TASK_PRIORITY across containers (or `gpuslice run`s) sharing a card. Every step:
// for each region, its live processes' best priority and host pids; for each card, the
// SM use of each region's processes from the driver's per-process samples (not from the
// regions, which their containers can write); model::ArbitrateCard decides; the decision
// goes into each region's device entry (yield, boost, arbiter_ns), which the enforcer's
// limiter applies (src/enforcer/limiter.h). Decisions expire after
// region::kArbiterFreshNs, so a stopped arbiter leaves nobody throttled.
//
// Used by the node agent for its containers and by `gpuslice run` for the runs of one
// user. Not thread-safe: one caller.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/platform/gpu_driver.h"

namespace gs::cli {

class PriorityArbiter {
 public:
  explicit PriorityArbiter(platform::GpuDriver* driver) : driver_(driver) {}
  // One round over these region files; missing, foreign and damaged ones are skipped.
  void Step(const std::vector<std::string>& region_paths);

  // The window of driver samples a step looks at: long enough to see a container that
  // launches in bursts, short enough that one which stopped is released quickly.
  static constexpr uint64_t kWindowUs = 1'000'000;

 private:
  platform::GpuDriver* driver_;
};

}  // namespace gs::cli
