#include "src/node/unlisted_memory.h"

namespace gs::node {

std::vector<UnlistedReport> UnlistedMemoryWatch::Observe(const std::vector<platform::GpuInfo>& gpus) {
  std::vector<UnlistedReport> out;
  for (const auto& g : gpus) {
    if (g.lost || !g.memory_unlisted) continue;
    const uint64_t bytes = *g.memory_unlisted;
    const uint64_t slack = kSlackBytes + kSlackPerProcessBytes * g.processes.size();
    Card& c = cards_[g.uuid];
    UnlistedReport r{UnlistedReport::Kind::kAppeared, g.uuid, bytes, g.processes.size()};
    if (bytes > slack) {
      c.under = 0;
      if (c.reported == 0 && ++c.over >= kConfirm) {
        c.reported = bytes;
        out.push_back(r);
      } else if (c.reported != 0 && bytes >= 2 * c.reported) {
        c.reported = bytes;
        r.kind = UnlistedReport::Kind::kGrew;
        out.push_back(r);
      }
    } else {
      c.over = 0;
      if (c.reported != 0 && ++c.under >= kConfirm) {
        c.reported = 0;
        c.under = 0;
        r.kind = UnlistedReport::Kind::kGone;
        out.push_back(r);
      }
    }
  }
  return out;
}

}  // namespace gs::node
