// The node agent's service: serves the kubelet device plugin with slices of the node's
// GPUs, watches health, writes host pids into regions, kills a container's process when
// NVML shows the container over its memory limit (the memory watchdog), removes the
// directories of containers that are gone, keeps the CDI spec current and exports metrics. The command
// (`gpuslice node`, src/cli/node_command.cc) parses the configuration, opens the GPUs and
// calls ServeNode.
//
// Threading: ServeNode blocks the calling thread and runs its own threads (gRPC, health,
// metrics, containers, memory watchdog); it returns after they are joined.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/model/slices.h"
#include "src/node/config.h"
#include "src/platform/gpu_driver.h"

namespace gs::node {

// Serves `gpus` (the node's, from `driver`) until `stop` is set, then returns OK. Returns
// an error before serving when the node cannot be served: the state directory, the
// enforcer (`enforcer_library` is installed under the state directory) or the card files.
Status ServeNode(const Config& cfg, platform::GpuDriver* driver, const std::vector<model::Gpu>& gpus,
                 const std::string& enforcer_library, const std::atomic<bool>& stop);

}  // namespace gs::node
