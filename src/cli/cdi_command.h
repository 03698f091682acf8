// `gpuslice cdi generate|list`: writes the CDI spec of this node's GPUs, or shows the
// device names a spec offers (src/container/cdi.h does the work).
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int CdiCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
