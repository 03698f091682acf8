// `gpuslice run`: runs a program with a slice on this machine (simulated or real), no
// Kubernetes. Creates the slice's region, preloads the enforcer, waits, cleans up.
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int RunCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
