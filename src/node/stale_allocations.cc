#include "src/node/stale_allocations.h"

#include <algorithm>
#include <set>

namespace gs::node {

std::vector<std::string> StaleAllocations::Observe(const std::vector<AllocationRecord>& records,
                                                   const std::vector<ContainerDevices>& pods, int64_t now_unix) {
  std::set<std::string> held;
  for (const auto& p : pods) held.insert(p.device_ids.begin(), p.device_ids.end());
  std::map<std::string, int64_t> seen;  // only records that still exist are remembered
  std::vector<std::string> stale;
  for (const auto& r : records) {
    bool listed = std::any_of(r.device_ids.begin(), r.device_ids.end(), [&](const auto& id) { return held.count(id); });
    auto it = last_listed_.find(r.id);
    int64_t last = std::max(r.created_unix, started_);
    if (it != last_listed_.end()) last = std::max(last, it->second);
    if (listed) last = now_unix;
    seen[r.id] = last;
    if (now_unix - last >= grace_) stale.push_back(r.id);
  }
  last_listed_.swap(seen);
  return stale;
}

}  // namespace gs::node
