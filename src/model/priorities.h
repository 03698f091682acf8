// CUDA_TASK_PRIORITY across containers that share a card (lower number = higher
// priority). While a container of the best priority among those active on a card runs,
// the card's lower-priority containers yield (they keep a small share), and an active
// container whose other active neighbours all have lower priority may take the capacity
// they give up. Pure: the node agent and `gpuslice run` feed it measurements and write the
// decisions into the regions (src/cli/arbiter.h).
#pragma once

#include <vector>

namespace gs::model {

struct CardUser {
  int priority = 1;   // the best (lowest) priority among the container's processes
  unsigned util = 0;  // the container's SM utilisation on the card, percent (0 = idle)
};

struct CardDecision {
  bool yield = false;  // a higher-priority container is active on the card
  bool boost = false;  // active, and every other active container has lower priority
};

// One decision per user, in order.
std::vector<CardDecision> ArbitrateCard(const std::vector<CardUser>& users);

}  // namespace gs::model
