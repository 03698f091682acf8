// `gpuslice sim up|down|status|env|inject`: brings a simulated GPU node up in a directory,
// shows it, injects faults, and takes it down. See docs/simulator.md.
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int SimCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
