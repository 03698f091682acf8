// `gpuslice node`: the node agent. Discovers GPUs through NVML in the driver root, splits
// them into slices, serves the kubelet device plugin, watches health, writes host pids into
// regions, removes the directories of containers that are gone,
// exports metrics. Blocks until SIGTERM/SIGINT.
#pragma once

#include <string>
#include <vector>

namespace gs::node {

int RunNode(const std::vector<std::string>& args);

}  // namespace gs::node
