#include "src/enforcer/launch_cost.h"

#include <algorithm>

namespace gs::enforcer {

int64_t LaunchCost::Learned() const {
  int64_t cost = learned_ns_.load(std::memory_order_relaxed);
  return cost != 0 ? cost : kInitialNs;
}

int64_t LaunchCost::High(int64_t now) const {
  int64_t high = high_ns_.load(std::memory_order_relaxed);
  int64_t age = now - high_at_.load(std::memory_order_relaxed);
  if (high > 0 && age > kMemoryNs) high >>= std::min<int64_t>(62, (age - 1) / kMemoryNs);
  return high;
}

int64_t LaunchCost::Admit(int64_t now) const {
  return std::max<int64_t>(1, std::max(Learned(), High(now)));
}

void LaunchCost::Learn(uint64_t launches, int64_t joined, int64_t closed, int64_t drained) {
  if (launches == 0) return;
  const auto n = static_cast<int64_t>(launches);
  const int64_t cost = learned_ns_.load(std::memory_order_relaxed);  // 0: none yet
  if (drained - closed > kBusyDrainNs) {  // the card was busy with our launches until `drained`
    int64_t sample = std::max<int64_t>(1, (drained - joined) / n);
    learned_ns_.store((cost == 0 || sample > cost) ? sample : (cost + sample) / 2, std::memory_order_relaxed);
    // A high cost is remembered when it is a kernel's: at least kHighFromNs a launch, and
    // the drain waited at least half of it (the card was still busy with our launches when
    // the gate closed). What a turn's few launches spent on waking threads and on the drain
    // itself is neither. The first sample also holds the first launch's one-time costs.
    if (++exact_samples_ > 1 && sample >= kHighFromNs && drained - closed >= sample / 2 && sample >= High(drained)) {
      high_ns_.store(sample, std::memory_order_relaxed);
      high_at_.store(drained, std::memory_order_relaxed);
    }
    return;
  }
  // The work was done before the gate closed: what it took is at most this.
  int64_t bound = std::max<int64_t>(1, (closed - joined) / n);
  if (cost == 0 || bound < cost) learned_ns_.store(cost == 0 ? bound : (cost + bound) / 2, std::memory_order_relaxed);
}

}  // namespace gs::enforcer
