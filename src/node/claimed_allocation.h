// What a container gets for the cards `gpuslice scheduler` decided and the node agent
// claimed for it (src/node/scheduler_decisions.h).
#pragma once

#include <vector>

#include "src/common/status.h"
#include "src/model/container_edits.h"
#include "src/model/slices.h"
#include "src/node/scheduler_decisions.h"

namespace gs::node {

// The grants a container gets for claimed cards: each card by UUID among `gpus`, its
// memory (MiB) and compute share (percent; 0 or 100 = no compute limit). Fails, naming
// the card, for a UUID this node does not have or an unhealthy card.
StatusOr<model::Allocation> AllocationForClaim(const std::vector<model::Gpu>& gpus, const ClaimedCards& claim,
                                               bool oversubscribe);

}  // namespace gs::node
