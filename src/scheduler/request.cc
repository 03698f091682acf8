#include "src/scheduler/request.h"

namespace gs::scheduler {

StatusOr<Policy> ParsePolicy(std::string_view text) {
  if (text == "binpack") return Policy::kBinpack;
  if (text == "spread") return Policy::kSpread;
  return InvalidArgument("scheduler policy '" + std::string(text) + "': want binpack or spread");
}

const char* PolicyName(Policy p) {
  return p == Policy::kBinpack ? "binpack" : "spread";
}

bool PodRequest::wants_gpus() const {
  for (const auto& c : containers)
    if (c.gpus > 0) return true;
  return false;
}

Status ValidateRequest(const PodRequest& request) {
  for (size_t i = 0; i < request.containers.size(); ++i) {
    const ContainerRequest& c = request.containers[i];
    std::string where = "container #" + std::to_string(i) + ": ";
    if (c.gpus < 0) return InvalidArgument(where + "nvidia.com/gpu must be >= 0");
    if (c.gpus > 64) return InvalidArgument(where + "nvidia.com/gpu " + std::to_string(c.gpus) + " is more than 64");
    if (c.memory_mib < 0) return InvalidArgument(where + "nvidia.com/gpumem must be >= 0");
    if (c.memory_percent < 0 || c.memory_percent > 100)
      return InvalidArgument(where + "nvidia.com/gpumem-percentage must be 0..100");
    if (c.cores < 0 || c.cores > 100) return InvalidArgument(where + "nvidia.com/gpucores must be 0..100");
  }
  return Status::Ok();
}

int64_t MemoryOnCard(const ContainerRequest& c, int64_t card_memory_mib) {
  if (c.memory_mib > 0) return c.memory_mib;
  int pct = c.memory_percent > 0 ? c.memory_percent : 100;
  return card_memory_mib * pct / 100;
}

}  // namespace gs::scheduler
