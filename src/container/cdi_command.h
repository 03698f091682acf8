// `gpuslice cdi generate|list`.
#pragma once

#include <string>
#include <vector>

namespace gs::container {

int CdiCommand(const std::vector<std::string>& args);

}  // namespace gs::container
