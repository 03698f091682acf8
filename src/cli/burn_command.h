// `gpuslice burn`: a workload that runs on the simulator and on a real GPU unchanged.
// Allocates device memory, writes and verifies a pattern, then keeps the GPU busy at a
// duty cycle with a spin kernel, printing the achieved figures each second.
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int BurnCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
