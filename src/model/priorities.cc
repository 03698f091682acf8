#include "src/model/priorities.h"

#include <climits>
#include <cstddef>

namespace gs::model {

std::vector<CardDecision> ArbitrateCard(const std::vector<CardUser>& users) {
  int best = INT_MAX;
  for (const auto& u : users)
    if (u.util > 0 && u.priority < best) best = u.priority;
  std::vector<CardDecision> out(users.size());
  for (size_t i = 0; i < users.size(); ++i) {
    out[i].yield = users[i].priority > best;
    if (users[i].util == 0 || users[i].priority != best) continue;
    bool alone_at_best = true;
    bool others_active = false;
    for (size_t j = 0; j < users.size(); ++j) {
      if (j == i || users[j].util == 0) continue;
      others_active = true;
      alone_at_best &= users[j].priority > best;
    }
    out[i].boost = others_active && alone_at_best;
  }
  return out;
}

}  // namespace gs::model
