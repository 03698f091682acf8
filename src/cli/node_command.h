// `gpuslice node`: the node agent (src/node/agent.h). Parses the configuration, opens the
// node's GPUs and serves them until SIGTERM/SIGINT.
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int NodeCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
