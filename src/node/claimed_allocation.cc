#include "src/node/claimed_allocation.h"

#include <string>

namespace gs::node {

StatusOr<model::Allocation> AllocationForClaim(const std::vector<model::Gpu>& gpus, const ClaimedCards& claim,
                                               bool oversubscribe) {
  model::Allocation a;
  a.oversubscribe = oversubscribe;
  for (const auto& card : claim.cards) {
    const model::Gpu* gpu = nullptr;
    for (const auto& g : gpus)
      if (g.uuid == card.uuid) gpu = &g;
    std::string where = "pod " + claim.pod + " container #" + std::to_string(claim.container) + ": card " + card.uuid;
    if (gpu == nullptr) return FailedPrecondition(where + " is not on this node");
    if (!gpu->healthy) return FailedPrecondition(where + " is unhealthy");
    uint64_t bytes = static_cast<uint64_t>(card.memory_mib) << 20;
    if (card.memory_mib <= 0 || (!oversubscribe && bytes > gpu->memory))
      return FailedPrecondition(where + ": " + std::to_string(card.memory_mib) + " MiB does not fit the card");
    a.devices.push_back({gpu->uuid, gpu->minor, bytes, card.cores >= 100 ? 0u : static_cast<unsigned>(card.cores)});
  }
  return a;
}

}  // namespace gs::node
