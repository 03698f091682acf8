// `gpuslice scheduler`: the kube-scheduler extender (src/scheduler/extender.h) on HTTP.
// Flags and wiring only; the work is in src/scheduler.
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int SchedulerCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
