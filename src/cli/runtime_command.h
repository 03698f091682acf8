// `gpuslice runtime configure`: prints, or with --write applies, the configuration that
// turns on CDI or the OCI hook in a container runtime (src/container/runtime_config.h).
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int RuntimeCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
