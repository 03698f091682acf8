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

bool IndexAllowed(const PodRequest& r, int index) {
  if (!r.use_indexes.empty() && !std::binary_search(r.use_indexes.begin(), r.use_indexes.end(), index)) return false;
  return !std::binary_search(r.nouse_indexes.begin(), r.nouse_indexes.end(), index);
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
  add(f.index, "excluded by index");
  for (int v = 1; v < kCardVerdicts; ++v) add(f.verdict[v], VerdictText(static_cast<CardVerdict>(v)));
  if (!parts.empty()) s += " (" + parts + ")";
  return s;
}

// Filter's short reason: which causes occurred, not how often, so nodes that failed
// alike read alike. Bits: 0 no cards, 1 NUMA, 2 type, 3 UUID, 3 + v for CardVerdict v
// (v >= 1), then index.
constexpr uint32_t kIndexBit = 1u << (3 + kCardVerdicts);
static_assert(3 + kCardVerdicts < 32);
uint32_t CauseMask(const FitFailure& f) {
  if (f.cards == 0) return 1;
  if (f.numa_short) return 2;
  uint32_t m = 0;
  if (f.type) m |= 4;
  if (f.uuid) m |= 8;
  if (f.index) m |= kIndexBit;
  for (int v = 1; v < kCardVerdicts; ++v)
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
  if (mask & kIndexBit) add("excluded by index");
  for (int v = 1; v < kCardVerdicts; ++v)
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

namespace {

bool HasCardFilters(const PodRequest& r) {
  return !r.use_types.empty() || !r.nouse_types.empty() || !r.use_uuids.empty() || !r.nouse_uuids.empty() ||
         !r.use_indexes.empty() || !r.nouse_indexes.empty();
}

// The one fit algorithm, on s->cards as the caller loaded them (a node's cards with their
// usage); `gpus` (the same cards' records) is read only for type, UUID and index lists.
bool FitLoaded(const std::vector<GpuDevice>& gpus, const PodRequest& request, Policy gpu_policy, FitScratch* s) {
  std::vector<CardState>& cards = s->cards;
  const bool card_filters = HasCardFilters(request);
  s->chosen.clear();
  for (size_t ci = 0; ci < request.containers.size(); ++ci) {
    const ContainerRequest& c = request.containers[ci];
    if (c.gpus <= 0) continue;
    s->candidates.clear();
    s->keys.resize(cards.size());
    FitFailure& rej = s->failure;
    rej = FitFailure{};
    for (size_t i = 0; i < cards.size(); ++i) {
      const CardState& g = cards[i];
      if (card_filters) {
        if (!TypeAllowed(request, gpus[i].model)) {
          ++rej.type;
          continue;
        }
        if (!UuidAllowed(request, gpus[i].uuid)) {
          ++rej.uuid;
          continue;
        }
        if (!IndexAllowed(request, gpus[i].index)) {
          ++rej.index;
          continue;
        }
      }
      CardVerdict v = CheckCard(g, MemoryOnCard(c, g.memory_mib), c.cores);
      if (v != CardVerdict::kFits) {
        ++rej.verdict[static_cast<int>(v)];
        continue;
      }
      s->candidates.push_back(static_cast<int>(i));
      double full = CardFullness(g);
      s->keys[i] = gpu_policy == Policy::kBinpack ? -full : full;  // ascending key = preferred first
    }
    const auto& keys = s->keys;
    auto preferred = [&](int a, int b) {
      if (keys[a] != keys[b]) return keys[a] < keys[b];
      return a < b;
    };
    size_t need = static_cast<size_t>(c.gpus);
    size_t first_chosen = s->chosen.size();
    bool numa_short = false;
    if (need == 1 && !request.numa_bind && !s->candidates.empty()) {
      // The common one-card container: the most preferred card, no sort.
      s->chosen.push_back(*std::min_element(s->candidates.begin(), s->candidates.end(), preferred));
    } else if (s->candidates.size() >= need) {
      std::sort(s->candidates.begin(), s->candidates.end(), preferred);
      if (request.numa_bind) {
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
      } else {
        s->chosen.insert(s->chosen.end(), s->candidates.begin(),
                         s->candidates.begin() + static_cast<std::ptrdiff_t>(need));
      }
    }
    if (s->chosen.size() - first_chosen < need) {
      rej.container = static_cast<int>(ci);
      rej.cards = static_cast<int>(cards.size());
      rej.fitting = static_cast<int>(s->candidates.size());
      rej.numa_short = numa_short;
      return false;
    }
    for (size_t k = first_chosen; k < s->chosen.size(); ++k) {
      CardState& card = cards[s->chosen[k]];
      AddShare(&card.used, MemoryOnCard(c, card.memory_mib), c.cores);
    }
  }
  return true;
}

bool FitView(const NodeView& view, const PodRequest& request, Policy gpu_policy, FitScratch* s) {
  s->cards.assign(view.cards.begin(), view.cards.end());
  return FitLoaded(view.node->inventory.gpus, request, gpu_policy, s);
}

}  // namespace

bool FitCards(const NodeState& node, const PodRequest& request, Policy gpu_policy, FitScratch* s) {
  const auto& gpus = node.inventory.gpus;
  s->cards.resize(gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i)
    s->cards[i] = MakeCardState(gpus[i], i < node.used.size() ? node.used[i] : CardUsage{});
  return FitLoaded(gpus, request, gpu_policy, s);
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

namespace {

// 0..10 from a node's sums after the pod; binpack scores the fuller node higher.
int ScoreSums(int64_t mem, int64_t mem_total, int64_t cores, int64_t cores_total, int64_t slots, int64_t slots_total,
              Policy node_policy) {
  if (mem_total == 0 || cores_total == 0 || slots_total == 0) return 0;
  double full = (static_cast<double>(mem) / static_cast<double>(mem_total) +
                 static_cast<double>(cores) / static_cast<double>(cores_total) +
                 static_cast<double>(slots) / static_cast<double>(slots_total)) /
                3.0;
  int score = static_cast<int>(std::lround(full * 10.0));
  score = std::clamp(score, 0, 10);
  return node_policy == Policy::kBinpack ? score : 10 - score;
}

// ScoreNode on the cards as FitCards left them (their capacities travel with them).
int ScoreCards(const FitScratch& s, Policy node_policy) {
  int64_t mem = 0, mem_total = 0, cores = 0, cores_total = 0, slots = 0, slots_total = 0;
  for (const CardState& card : s.cards) {
    mem += card.used.memory_mib;
    mem_total += card.memory_mib;
    cores += card.used.cores;
    cores_total += card.cores;
    slots += card.used.containers;
    slots_total += card.slots;
  }
  return ScoreSums(mem, mem_total, cores, cores_total, slots, slots_total, node_policy);
}

// Filter and Prioritize need whether the pod fits and the node's score, not which cards.
// When the pod has one GPU container, names no types, UUIDs or indexes, and asks the same
// MiB of every card of the node (memory in MiB, or cards alike), no choice can change either:
// it fits when enough cards pass CheckCard (on one NUMA node with numa-bind), and the
// score is the node's totals plus `gpus` shares. So the cards are only counted: no copy,
// no fullness, no sort. Returns the score, -1 when the pod does not fit (s->failure as
// FitLoaded leaves it), or -2 when the shortcut does not apply.
constexpr int kNoShortcut = -2;
int CountAndScore(const NodeView& view, const PodRequest& request, Policy node_policy, FitScratch* s) {
  const ContainerRequest* c = nullptr;
  int ci = 0;
  for (size_t i = 0; i < request.containers.size(); ++i) {
    if (request.containers[i].gpus <= 0) continue;
    if (c != nullptr) return kNoShortcut;
    c = &request.containers[i];
    ci = static_cast<int>(i);
  }
  const NodeTotals& totals = *view.totals;
  if (c == nullptr || HasCardFilters(request) || (c->memory_mib <= 0 && !totals.same_memory)) return kNoShortcut;
  FitFailure& rej = s->failure;
  rej = FitFailure{};
  int per_numa[8] = {};  // fitting cards on NUMA nodes 0..7; beyond that: no shortcut
  int fitting = 0;
  int64_t share = 0;
  for (const CardState& g : view.cards) {
    share = MemoryOnCard(*c, g.memory_mib);
    CardVerdict v = CheckCard(g, share, c->cores);
    if (v != CardVerdict::kFits) {
      ++rej.verdict[static_cast<int>(v)];
      continue;
    }
    ++fitting;
    if (request.numa_bind) {
      if (g.numa >= static_cast<int>(std::size(per_numa))) return kNoShortcut;
      ++per_numa[g.numa];
    }
  }
  bool fits = fitting >= c->gpus;
  bool numa_short = false;
  if (fits && request.numa_bind) {
    numa_short = std::none_of(std::begin(per_numa), std::end(per_numa), [&](int n) { return n >= c->gpus; });
    fits = !numa_short;
  }
  if (!fits) {
    rej.container = ci;
    rej.cards = static_cast<int>(view.cards.size());
    rej.fitting = fitting;
    rej.numa_short = numa_short;
    return -1;
  }
  int64_t n = c->gpus;
  return ScoreSums(totals.used.memory_mib + n * share, totals.memory_mib, totals.used.cores + n * c->cores,
                   totals.cores, totals.used.containers + n, totals.slots, node_policy);
}

// Filter's and Prioritize's question: the node's score for the pod, or -1 when it does
// not fit (s->failure says why).
int FitAndScore(const NodeView& view, const PodRequest& request, Policy gpu_policy, Policy node_policy, FitScratch* s) {
  int score = CountAndScore(view, request, node_policy, s);
  if (score != kNoShortcut) return score;
  return FitView(view, request, gpu_policy, s) ? ScoreCards(*s, node_policy) : -1;
}

}  // namespace

int ScoreNode(const NodeState&, const FitScratch& s, Policy node_policy) {
  return ScoreCards(s, node_policy);
}

void ScoreMemo::Put(uint32_t slot, uint64_t node_version, int value) {
  if (slot >= version.size()) {
    version.resize(slot + 1, 0);
    score.resize(slot + 1, 0);
  }
  version[slot] = node_version;
  score[slot] = static_cast<int8_t>(value);
}

void Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string_view>& names,
            const Policies& defaults, FitScratch* scratch, ScoreMemo* memo, FilterResult* out) {
  out->Clear();
  out->feasible.reserve(names.size());
  out->failed.reserve(names.size());
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
    out->reasons.push_back(make());
    made.emplace_back(key, static_cast<int>(out->reasons.size() - 1));
    return made.back().second;
  };
  if (!request.refused.empty()) {
    // Nothing to weigh: the same reason for every node.
    int r = reason_for(~uint64_t{1}, [&] { return request.refused; });
    for (size_t i = 0; i < names.size(); ++i) {
      out->failed.emplace_back(static_cast<int>(i), r);
      if (memo == nullptr) continue;
      NodeView view = ledger.Lookup(names[i]);
      if (view.node != nullptr) memo->Put(view.slot, view.version, 0);
    }
    return;
  }
  uint32_t previous = NodeNameIndex::kNone;
  for (size_t i = 0; i < names.size(); ++i) {
    NodeView view = ledger.LookupNext(names[i], previous);
    previous = view.node != nullptr ? view.slot : NodeNameIndex::kNone;
    if (view.node == nullptr) {
      int r = reason_for(~uint64_t{0},
                         [] { return std::string("node has no GPU inventory (no hami.io/node-nvidia-register)"); });
      out->failed.emplace_back(static_cast<int>(i), r);
      continue;
    }
    int score = FitAndScore(view, request, gpu, node_policy, scratch);
    if (score >= 0) {
      out->feasible.push_back(static_cast<int>(i));
      if (memo != nullptr) {
        memo->Put(view.slot, view.version, score);
        memo->feasible.push_back(view.slot);
      }
    } else {
      const FitFailure& f = scratch->failure;
      uint32_t mask = CauseMask(f);
      int container = mask == 1 ? 0 : f.container;
      uint64_t key = (static_cast<uint64_t>(container) << 32) | mask;
      out->failed.emplace_back(static_cast<int>(i), reason_for(key, [&] { return ShortReason(container, mask); }));
      if (memo != nullptr) memo->Put(view.slot, view.version, 0);
    }
  }
}

FilterResult Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string_view>& names,
                    const Policies& defaults, FitScratch* scratch, ScoreMemo* memo) {
  FilterResult out;
  Filter(ledger, request, names, defaults, scratch, memo, &out);
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
  if (!request.refused.empty()) return scores;
  Policy gpu = GpuPolicy(request, defaults);
  Policy node_policy = NodePolicy(request, defaults);
  for (size_t i = 0; i < names.size(); ++i) {
    NodeView view = ledger.LookupAt(
        names[i], memo != nullptr && i < memo->feasible.size() ? memo->feasible[i] : NodeNameIndex::kNone);
    if (view.node == nullptr) continue;
    int known = memo != nullptr ? memo->Get(view.slot, view.version) : -1;
    scores[i] = known >= 0 ? known : std::max(0, FitAndScore(view, request, gpu, node_policy, scratch));
  }
  return scores;
}

std::vector<int> Prioritize(const ClusterLedger& ledger, const PodRequest& request,
                            const std::vector<std::string>& names, const Policies& defaults, FitScratch* scratch) {
  return Prioritize(ledger, request, Views(names), defaults, scratch);
}

StatusOr<PodDecision> Decide(const ClusterLedger& ledger, const PodRequest& request, std::string_view node_name,
                             const Policies& defaults, FitScratch* scratch) {
  if (!request.refused.empty()) return FailedPrecondition(request.refused);
  const NodeState* node = ledger.FindNode(node_name);
  if (node == nullptr) return NotFound("node " + std::string(node_name) + " has no GPU inventory");
  if (!FitPod(*node, request, GpuPolicy(request, defaults), scratch))
    return FailedPrecondition("node " + std::string(node_name) + ": " + scratch->reason);
  return ToDecision(*node, request, *scratch);
}

}  // namespace gs::scheduler
