// The slice a container asks for in its own environment, as `docker run -e` or a
// bundle's process.env gives it, in HAMi's variables (src/common/contract.h):
// CUDA_DEVICE_MEMORY_LIMIT[_<i>], CUDA_DEVICE_SM_LIMIT[_<i>], GPU_CORE_UTILIZATION_POLICY,
// CUDA_TASK_PRIORITY and CUDA_OVERSUBSCRIBE. The OCI hook turns it into the container's
// read-only limits file (LimitsFileText), so every process of the container is held to
// it whatever its own environment says. An unsuffixed limit applies to every card, a
// suffixed one to the i-th card the container sees, as the enforcer reads them.
// Pure: no I/O.
#pragma once

#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/model/container_edits.h"

namespace gs::model {

// `env`: KEY=VALUE entries, the last definition of a name winning (as for the process).
// `cards`: the cards the container gets, in the order it sees them (uuid and minor set).
// `best_priority`: the best CUDA_TASK_PRIORITY granted (also the allocation's
// card_best_priority). A value that does not parse, a share above 100, a priority better
// than best_priority or out of range, an unknown policy or switch: InvalidArgument naming
// the variable and its value.
StatusOr<Allocation> AllocationFromEnvironment(const std::vector<std::string>& env,
                                               const std::vector<DeviceGrant>& cards, int best_priority);

}  // namespace gs::model
