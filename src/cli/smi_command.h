// `gpuslice smi`: an nvidia-smi-like table of the GPUs NVML shows this process: on a node
// the physical cards, inside a sliced container the virtual card the enforcer presents.
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int SmiCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
