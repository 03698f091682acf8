#include "src/scheduler/placement.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace gs::scheduler {
namespace {

// Case-insensitive "haystack contains needle".
bool ContainsNoCase(const std::string& haystack, const std::string& needle) {
  if (needle.empty()) return false;
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::toupper(static_cast<unsigned char>(a)) == std::toupper(static_cast<unsigned char>(b));
  });
  return it != haystack.end();
}

bool TypeAllowed(const PodRequest& r, const std::string& model) {
  if (!r.use_types.empty() && std::none_of(r.use_types.begin(), r.use_types.end(),
                                           [&](const std::string& t) { return ContainsNoCase(model, t); }))
    return false;
  return std::none_of(r.nouse_types.begin(), r.nouse_types.end(),
                      [&](const std::string& t) { return ContainsNoCase(model, t); });
}

bool UuidAllowed(const PodRequest& r, const std::string& uuid) {
  if (!r.use_uuids.empty() && std::find(r.use_uuids.begin(), r.use_uuids.end(), uuid) == r.use_uuids.end())
    return false;
  return std::find(r.nouse_uuids.begin(), r.nouse_uuids.end(), uuid) == r.nouse_uuids.end();
}

std::string Describe(const ContainerRequest& c, const FitFailure& f) {
  std::string s = "container #" + std::to_string(f.container) + " asks " + std::to_string(c.gpus) + " GPU(s)";
  if (c.memory_mib > 0)
    s += " x " + std::to_string(c.memory_mib) + " MiB";
  else
    s += " x " + std::to_string(c.memory_percent > 0 ? c.memory_percent : 100) + "% memory";
  s += ", " + std::to_string(c.cores) + "% cores: ";
  if (f.cards == 0) return s + "node has no GPUs";
  s += std::to_string(f.fitting) + " of " + std::to_string(f.cards) + " cards fit";
  if (f.numa_short) s += " but no NUMA node has " + std::to_string(c.gpus) + " of them (numa-bind)";
  std::string parts;
  auto add = [&](int n, const char* what) {
    if (n == 0) return;
    parts += parts.empty() ? "" : ", ";
    parts += std::to_string(n) + " " + what;
  };
  add(f.type, "of an excluded type");
  add(f.uuid, "excluded by UUID");
  for (int v = 1; v < 7; ++v) add(f.verdict[v], VerdictText(static_cast<CardVerdict>(v)));
  if (!parts.empty()) s += " (" + parts + ")";
  return s;
}

// Filter's short reason: which causes occurred, not how often, so nodes that failed
// alike read alike. Bits: 0 no cards, 1 NUMA, 2 type, 3 UUID, 4.. CardVerdict 1..6.
uint32_t CauseMask(const FitFailure& f) {
  if (f.cards == 0) return 1;
  if (f.numa_short) return 2;
  uint32_t m = 0;
  if (f.type) m |= 4;
  if (f.uuid) m |= 8;
  for (int v = 1; v < 7; ++v)
    if (f.verdict[v]) m |= 1u << (3 + v);
  return m;
}

std::string ShortReason(int container, uint32_t mask) {
  if (mask == 1) return "node has no GPUs";
  std::string s = "GPUs for container #" + std::to_string(container) + ": ";
  if (mask == 2) return s + "no NUMA node has enough fitting cards (numa-bind)";
  if (mask == 0) return s + "fewer cards than asked";
  bool first = true;
  auto add = [&](const char* what) {
    s += first ? "" : ", ";
    s += what;
    first = false;
  };
  if (mask & 4) add("of an excluded type");
  if (mask & 8) add("excluded by UUID");
  for (int v = 1; v < 7; ++v)
    if (mask & (1u << (3 + v))) add(VerdictText(static_cast<CardVerdict>(v)));
  return s;
}

Policy NodePolicy(const PodRequest& r, const Policies& d) {
  return r.node_policy.value_or(d.node);
}
Policy GpuPolicy(const PodRequest& r, const Policies& d) {
  return r.gpu_policy.value_or(d.gpu);
}

}  // namespace

bool FitCards(const NodeState& node, const PodRequest& request, Policy gpu_policy, FitScratch* s) {
  const auto& cards = node.inventory.gpus;
  s->used.assign(node.used.begin(), node.used.end());
  s->chosen.clear();
  for (size_t ci = 0; ci < request.containers.size(); ++ci) {
    const ContainerRequest& c = request.containers[ci];
    if (c.gpus <= 0) continue;
    s->candidates.clear();
    s->keys.resize(cards.size());
    FitFailure& rej = s->failure;
    rej = FitFailure{};
    for (size_t i = 0; i < cards.size(); ++i) {
      const GpuDevice& g = cards[i];
      if (!TypeAllowed(request, g.model)) {
        ++rej.type;
        continue;
      }
      if (!UuidAllowed(request, g.uuid)) {
        ++rej.uuid;
        continue;
      }
      CardVerdict v = CheckCard(g, s->used[i], MemoryOnCard(c, g.memory_mib), c.cores);
      if (v != CardVerdict::kFits) {
        ++rej.verdict[static_cast<int>(v)];
        continue;
      }
      s->candidates.push_back(static_cast<int>(i));
      double full = CardFullness(g, s->used[i]);
      s->keys[i] = gpu_policy == Policy::kBinpack ? -full : full;  // ascending key = preferred first
    }
    const auto& keys = s->keys;
    std::sort(s->candidates.begin(), s->candidates.end(), [&](int a, int b) {
      if (keys[a] != keys[b]) return keys[a] < keys[b];
      return a < b;
    });
    size_t need = static_cast<size_t>(c.gpus);
    size_t first_chosen = s->chosen.size();
    bool numa_short = false;
    if (request.numa_bind && s->candidates.size() >= need) {
      // The first NUMA node, in preference order, with enough fitting cards.
      int numa = -1;
      for (int i : s->candidates) {
        int n = cards[i].numa;
        size_t count =
            std::count_if(s->candidates.begin(), s->candidates.end(), [&](int j) { return cards[j].numa == n; });
        if (count >= need) {
          numa = n;
          break;
        }
      }
      if (numa < 0)
        numa_short = true;
      else
        for (int i : s->candidates)
          if (cards[i].numa == numa && s->chosen.size() - first_chosen < need) s->chosen.push_back(i);
    } else if (s->candidates.size() >= need) {
      s->chosen.insert(s->chosen.end(), s->candidates.begin(), s->candidates.begin() + need);
    }
    if (s->chosen.size() - first_chosen < need) {
      rej.container = static_cast<int>(ci);
      rej.cards = static_cast<int>(cards.size());
      rej.fitting = static_cast<int>(s->candidates.size());
      rej.numa_short = numa_short;
      return false;
    }
    for (size_t k = first_chosen; k < s->chosen.size(); ++k) {
      int i = s->chosen[k];
      AddShare(&s->used[i], MemoryOnCard(c, cards[i].memory_mib), c.cores);
    }
  }
  return true;
}

bool FitPod(const NodeState& node, const PodRequest& request, Policy gpu_policy, FitScratch* s) {
  s->reason.clear();
  if (FitCards(node, request, gpu_policy, s)) return true;
  s->reason = Describe(request.containers[static_cast<size_t>(s->failure.container)], s->failure);
  return false;
}

PodDecision ToDecision(const NodeState& node, const PodRequest& request, const FitScratch& s) {
  PodDecision d;
  d.node = node.inventory.name;
  d.containers.resize(request.containers.size());
  size_t k = 0;
  for (size_t ci = 0; ci < request.containers.size(); ++ci) {
    const ContainerRequest& c = request.containers[ci];
    for (int n = 0; n < c.gpus && k < s.chosen.size(); ++n, ++k) {
      const GpuDevice& g = node.inventory.gpus[s.chosen[k]];
      d.containers[ci].push_back(DeviceShare{g.uuid, g.model, MemoryOnCard(c, g.memory_mib), c.cores});
    }
  }
  return d;
}

int ScoreNode(const NodeState& node, const FitScratch& s, Policy node_policy) {
  int64_t mem = 0, mem_total = 0, cores = 0, cores_total = 0, slots = 0, slots_total = 0;
  const auto& cards = node.inventory.gpus;
  for (size_t i = 0; i < cards.size() && i < s.used.size(); ++i) {
    mem += s.used[i].memory_mib;
    mem_total += cards[i].memory_mib;
    cores += s.used[i].cores;
    cores_total += cards[i].cores;
    slots += s.used[i].containers;
    slots_total += cards[i].slots;
  }
  if (mem_total == 0 || cores_total == 0 || slots_total == 0) return 0;
  double full = (static_cast<double>(mem) / mem_total + static_cast<double>(cores) / cores_total +
                 static_cast<double>(slots) / slots_total) /
                3.0;
  int score = static_cast<int>(std::lround(full * 10.0));
  score = std::clamp(score, 0, 10);
  return node_policy == Policy::kBinpack ? score : 10 - score;
}

void ScoreMemo::Put(const NodeState& node, int value) {
  if (node.slot >= version.size()) {
    version.resize(node.slot + 1, 0);
    score.resize(node.slot + 1, 0);
  }
  version[node.slot] = node.version;
  score[node.slot] = static_cast<int8_t>(value);
}

FilterResult Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string_view>& names,
                    const Policies& defaults, FitScratch* scratch, ScoreMemo* memo) {
  FilterResult out;
  Policy gpu = GpuPolicy(request, defaults);
  Policy node_policy = NodePolicy(request, defaults);
  if (memo != nullptr) {
    memo->version.assign(ledger.slot_count(), 0);
    memo->score.resize(ledger.slot_count());
  }
  // Reason texts made so far, by (container, cause mask); a pod meets only a few.
  std::vector<std::pair<uint64_t, int>> made;
  auto reason_for = [&](uint64_t key, auto make) {
    for (const auto& [k, index] : made)
      if (k == key) return index;
    out.reasons.push_back(make());
    made.emplace_back(key, static_cast<int>(out.reasons.size() - 1));
    return made.back().second;
  };
  for (size_t i = 0; i < names.size(); ++i) {
    const NodeState* node = ledger.FindNode(names[i]);
    if (node == nullptr) {
      int r = reason_for(~uint64_t{0},
                         [] { return std::string("node has no GPU inventory (no hami.io/node-nvidia-register)"); });
      out.failed.emplace_back(static_cast<int>(i), r);
      continue;
    }
    if (FitCards(*node, request, gpu, scratch)) {
      out.feasible.push_back(static_cast<int>(i));
      if (memo != nullptr) memo->Put(*node, ScoreNode(*node, *scratch, node_policy));
    } else {
      const FitFailure& f = scratch->failure;
      uint32_t mask = CauseMask(f);
      int container = mask == 1 ? 0 : f.container;
      uint64_t key = (static_cast<uint64_t>(container) << 32) | mask;
      out.failed.emplace_back(static_cast<int>(i), reason_for(key, [&] { return ShortReason(container, mask); }));
      if (memo != nullptr) memo->Put(*node, 0);
    }
  }
  return out;
}

namespace {
std::vector<std::string_view> Views(const std::vector<std::string>& names) {
  return std::vector<std::string_view>(names.begin(), names.end());
}
}  // namespace

FilterResult Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string>& names,
                    const Policies& defaults, FitScratch* scratch) {
  return Filter(ledger, request, Views(names), defaults, scratch);
}

std::vector<int> Prioritize(const ClusterLedger& ledger, const PodRequest& request,
                            const std::vector<std::string_view>& names, const Policies& defaults, FitScratch* scratch,
                            const ScoreMemo* memo) {
  std::vector<int> scores(names.size(), 0);
  Policy gpu = GpuPolicy(request, defaults);
  Policy node_policy = NodePolicy(request, defaults);
  for (size_t i = 0; i < names.size(); ++i) {
    const NodeState* node = ledger.FindNode(names[i]);
    if (node == nullptr) continue;
    int known = memo != nullptr ? memo->Get(*node) : -1;
    if (known >= 0)
      scores[i] = known;
    else if (FitCards(*node, request, gpu, scratch))
      scores[i] = ScoreNode(*node, *scratch, node_policy);
  }
  return scores;
}

std::vector<int> Prioritize(const ClusterLedger& ledger, const PodRequest& request,
                            const std::vector<std::string>& names, const Policies& defaults, FitScratch* scratch) {
  return Prioritize(ledger, request, Views(names), defaults, scratch);
}

StatusOr<PodDecision> Decide(const ClusterLedger& ledger, const PodRequest& request, std::string_view node_name,
                             const Policies& defaults, FitScratch* scratch) {
  const NodeState* node = ledger.FindNode(node_name);
  if (node == nullptr) return NotFound("node " + std::string(node_name) + " has no GPU inventory");
  if (!FitPod(*node, request, GpuPolicy(request, defaults), scratch))
    return FailedPrecondition("node " + std::string(node_name) + ": " + scratch->reason);
  return ToDecision(*node, request, *scratch);
}

}  // namespace gs::scheduler
