#include "src/node/progress.h"

namespace gs::node {

int Progress::Register(std::string name, int64_t allowance_ns, int64_t now_ns) {
  loops_.emplace_back();
  Loop& l = loops_.back();
  l.name = std::move(name);
  l.allowance_ns = allowance_ns;
  l.last_ns.store(now_ns);
  return static_cast<int>(loops_.size()) - 1;
}

void Progress::Beat(int loop, int64_t now_ns) {
  loops_[static_cast<size_t>(loop)].last_ns.store(now_ns, std::memory_order_relaxed);
}

std::string Progress::Stalled(int64_t now_ns) const {
  std::string out;
  for (const Loop& l : loops_) {
    int64_t idle = now_ns - l.last_ns.load(std::memory_order_relaxed);
    if (idle <= l.allowance_ns) continue;
    if (!out.empty()) out += "; ";
    out += l.name + ": no progress for " + std::to_string(idle / 1'000'000'000) + " s";
  }
  return out;
}

}  // namespace gs::node
