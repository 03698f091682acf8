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
  if (!r.use_types.empty() &&
      std::none_of(r.use_types.begin(), r.use_types.end(), [&](const std::string& t) { return ContainsNoCase(model, t); }))
    return false;
  return std::none_of(r.nouse_types.begin(), r.nouse_types.end(),
                      [&](const std::string& t) { return ContainsNoCase(model, t); });
}

bool UuidAllowed(const PodRequest& r, const std::string& uuid) {
  if (!r.use_uuids.empty() && std::find(r.use_uuids.begin(), r.use_uuids.end(), uuid) == r.use_uuids.end())
    return false;
  return std::find(r.nouse_uuids.begin(), r.nouse_uuids.end(), uuid) == r.nouse_uuids.end();
}

// Why cards were turned down, counted for the reason text.
struct Rejections {
  int type = 0, uuid = 0;
  int verdict[7] = {};
};

std::string Describe(size_t container, const ContainerRequest& c, size_t cards, size_t fitting, const Rejections& rej,
                     bool numa_short) {
  std::string s = "container #" + std::to_string(container) + " asks " + std::to_string(c.gpus) + " GPU(s)";
  if (c.memory_mib > 0) s += " x " + std::to_string(c.memory_mib) + " MiB";
  else s += " x " + std::to_string(c.memory_percent > 0 ? c.memory_percent : 100) + "% memory";
  s += ", " + std::to_string(c.cores) + "% cores: ";
  if (cards == 0) return s + "node has no GPUs";
  s += std::to_string(fitting) + " of " + std::to_string(cards) + " cards fit";
  if (numa_short) s += " but no NUMA node has " + std::to_string(c.gpus) + " of them (numa-bind)";
  std::string parts;
  auto add = [&](int n, const char* what) {
    if (n == 0) return;
    parts += parts.empty() ? "" : ", ";
    parts += std::to_string(n) + " " + what;
  };
  add(rej.type, "of an excluded type");
  add(rej.uuid, "excluded by UUID");
  for (int v = 1; v < 7; ++v) add(rej.verdict[v], VerdictText(static_cast<CardVerdict>(v)));
  if (!parts.empty()) s += " (" + parts + ")";
  return s;
}

Policy NodePolicy(const PodRequest& r, const Policies& d) {
  return r.node_policy.value_or(d.node);
}
Policy GpuPolicy(const PodRequest& r, const Policies& d) {
  return r.gpu_policy.value_or(d.gpu);
}

}  // namespace

bool FitPod(const NodeState& node, const PodRequest& request, Policy gpu_policy, FitScratch* s) {
  const auto& cards = node.inventory.gpus;
  s->used.assign(node.used.begin(), node.used.end());
  s->chosen.clear();
  s->reason.clear();
  for (size_t ci = 0; ci < request.containers.size(); ++ci) {
    const ContainerRequest& c = request.containers[ci];
    if (c.gpus <= 0) continue;
    s->candidates.clear();
    s->keys.assign(cards.size(), 0.0);
    Rejections rej;
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
        size_t count = std::count_if(s->candidates.begin(), s->candidates.end(),
                                     [&](int j) { return cards[j].numa == n; });
        if (count >= need) {
          numa = n;
          break;
        }
      }
      if (numa < 0) numa_short = true;
      else
        for (int i : s->candidates)
          if (cards[i].numa == numa && s->chosen.size() - first_chosen < need) s->chosen.push_back(i);
    } else if (s->candidates.size() >= need) {
      s->chosen.insert(s->chosen.end(), s->candidates.begin(), s->candidates.begin() + need);
    }
    if (s->chosen.size() - first_chosen < need) {
      s->reason = Describe(ci, c, cards.size(), s->candidates.size(), rej, numa_short);
      return false;
    }
    for (size_t k = first_chosen; k < s->chosen.size(); ++k) {
      int i = s->chosen[k];
      AddShare(&s->used[i], MemoryOnCard(c, cards[i].memory_mib), c.cores);
    }
  }
  return true;
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

FilterResult Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string>& names,
                    const Policies& defaults, FitScratch* scratch) {
  FilterResult out;
  Policy gpu = GpuPolicy(request, defaults);
  for (size_t i = 0; i < names.size(); ++i) {
    const NodeState* node = ledger.FindNode(names[i]);
    if (node == nullptr) {
      out.failed.emplace_back(static_cast<int>(i), "node has no GPU inventory (no hami.io/node-nvidia-register)");
      continue;
    }
    if (FitPod(*node, request, gpu, scratch)) out.feasible.push_back(static_cast<int>(i));
    else out.failed.emplace_back(static_cast<int>(i), std::move(scratch->reason));
  }
  return out;
}

std::vector<int> Prioritize(const ClusterLedger& ledger, const PodRequest& request,
                            const std::vector<std::string>& names, const Policies& defaults, FitScratch* scratch) {
  std::vector<int> scores(names.size(), 0);
  Policy gpu = GpuPolicy(request, defaults);
  Policy node_policy = NodePolicy(request, defaults);
  for (size_t i = 0; i < names.size(); ++i) {
    const NodeState* node = ledger.FindNode(names[i]);
    if (node != nullptr && FitPod(*node, request, gpu, scratch)) scores[i] = ScoreNode(*node, *scratch, node_policy);
  }
  return scores;
}

StatusOr<PodDecision> Decide(const ClusterLedger& ledger, const PodRequest& request, const std::string& node_name,
                             const Policies& defaults, FitScratch* scratch) {
  const NodeState* node = ledger.FindNode(node_name);
  if (node == nullptr) return NotFound("node " + node_name + " has no GPU inventory");
  if (!FitPod(*node, request, GpuPolicy(request, defaults), scratch))
    return FailedPrecondition("node " + node_name + ": " + scratch->reason);
  return ToDecision(*node, request, *scratch);
}

}  // namespace gs::scheduler
