#include "src/scheduler/ledger.h"

#include <algorithm>

namespace gs::scheduler {
namespace {

int CardIndex(const NodeState& node, const std::string& uuid) {
  for (size_t i = 0; i < node.inventory.gpus.size(); ++i)
    if (node.inventory.gpus[i].uuid == uuid) return static_cast<int>(i);
  return -1;
}

NodeTotals SumCards(const NodeState& node) {
  NodeTotals t;
  const auto& gpus = node.inventory.gpus;
  for (size_t i = 0; i < gpus.size(); ++i) {
    t.used.memory_mib += node.used[i].memory_mib;
    t.used.cores += node.used[i].cores;
    t.used.containers += node.used[i].containers;
    t.memory_mib += gpus[i].memory_mib;
    t.cores += gpus[i].cores;
    t.slots += gpus[i].slots;
    t.same_memory = t.same_memory && gpus[i].memory_mib == gpus[0].memory_mib;
  }
  return t;
}

}  // namespace

Status ClusterLedger::Apply(NodeState* node, const PodDecision& decision, bool check_health, bool apply) {
  std::vector<CardUsage> scratch = node->used;
  for (size_t c = 0; c < decision.containers.size(); ++c) {
    const auto& shares = decision.containers[c];
    for (size_t s = 0; s < shares.size(); ++s) {
      const DeviceShare& share = shares[s];
      for (size_t t = 0; t < s; ++t)
        if (shares[t].uuid == share.uuid)
          return InvalidArgument("container #" + std::to_string(c) + " has card " + share.uuid + " twice");
      int i = CardIndex(*node, share.uuid);
      if (i < 0) return NotFound("node " + node->inventory.name + " has no card " + share.uuid);
      if (share.memory_mib < 0 || share.cores < 0 || share.cores > 100)
        return InvalidArgument("card " + share.uuid + ": share out of range");
      CardVerdict v = CheckCard(node->inventory.gpus[i], scratch[i], share.memory_mib, share.cores, check_health);
      if (v != CardVerdict::kFits)
        return FailedPrecondition("node " + node->inventory.name + " card " + share.uuid + ": " + VerdictText(v));
      AddShare(&scratch[i], share.memory_mib, share.cores);
    }
  }
  if (apply) {
    node->used = std::move(scratch);
    Touch(node);
  }
  return Status::Ok();
}

void ClusterLedger::Unapply(NodeState* node, const PodDecision& decision) {
  for (const auto& shares : decision.containers)
    for (const DeviceShare& share : shares) {
      int i = CardIndex(*node, share.uuid);
      if (i >= 0) RemoveShare(&node->used[i], share.memory_mib, share.cores);
    }
  Touch(node);
}

void ClusterLedger::Touch(NodeState* node) {
  node->version = ++last_version_;
  if (by_slot_.size() <= node->slot) by_slot_.resize(node->slot + 1);
  SlotCards& where = by_slot_[node->slot];
  where.node = node;
  where.version = node->version;
  uint32_t count = static_cast<uint32_t>(node->inventory.gpus.size());
  if (where.count != count || where.first + count > cards_.size()) {
    // A new node, or its card count changed: its cards go to the end of the array.
    cards_unused_ += where.count;
    where.count = 0;
    if (cards_unused_ > 1024 && cards_unused_ * 2 > cards_.size()) CompactCards();
    where.first = static_cast<uint32_t>(cards_.size());
    where.count = count;
    cards_.resize(cards_.size() + count);
  }
  for (uint32_t i = 0; i < count; ++i) cards_[where.first + i] = MakeCardState(node->inventory.gpus[i], node->used[i]);
  where.totals = SumCards(*node);
}

void ClusterLedger::CompactCards() {
  std::vector<CardState> packed;
  packed.reserve(cards_.size() - cards_unused_);
  for (SlotCards& where : by_slot_) {
    if (where.node == nullptr) continue;
    uint32_t first = static_cast<uint32_t>(packed.size());
    packed.insert(packed.end(), cards_.begin() + where.first, cards_.begin() + where.first + where.count);
    where.first = first;
  }
  cards_ = std::move(packed);
  cards_unused_ = 0;
}

Status ClusterLedger::UpsertNode(NodeInventory inventory) {
  GS_RETURN_IF_ERROR(ValidateNode(inventory));
  auto [pos, added] = nodes_.try_emplace(inventory.name);
  NodeState& node = pos->second;
  if (added) {
    if (free_slots_.empty()) {
      node.slot = slot_count_++;
    } else {
      node.slot = free_slots_.back();
      free_slots_.pop_back();
    }
    index_.Insert(pos->first, node.slot);
  }
  node.used.assign(inventory.gpus.size(), CardUsage{});
  node.inventory = std::move(inventory);
  auto it = pods_by_node_.find(node.inventory.name);
  if (it != pods_by_node_.end()) {
    // Pods already there keep their shares even if the new inventory is smaller: they run.
    for (const std::string& uid : it->second) {
      for (const auto& shares : pods_[uid].decision.containers)
        for (const DeviceShare& share : shares) {
          int i = CardIndex(node, share.uuid);
          if (i >= 0) AddShare(&node.used[i], share.memory_mib, share.cores);
        }
    }
  }
  Touch(&node);
  return Status::Ok();
}

void ClusterLedger::RemoveNode(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  uint32_t slot = it->second.slot;
  free_slots_.push_back(slot);
  cards_unused_ += by_slot_[slot].count;
  by_slot_[slot] = SlotCards{};
  index_.Erase(name);
  nodes_.erase(it);
}

const NodeState* ClusterLedger::FindNode(std::string_view name) const {
  return Lookup(name).node;
}

NodeView ClusterLedger::Lookup(std::string_view name) const {
  return LookupNext(name, NodeNameIndex::kNone);
}

NodeView ClusterLedger::LookupNext(std::string_view name, uint32_t previous) const {
  return ViewOf(index_.FindNext(name, previous));
}

NodeView ClusterLedger::LookupAt(std::string_view name, uint32_t guess) const {
  return ViewOf(index_.FindAt(name, guess));
}

NodeView ClusterLedger::ViewOf(uint32_t slot) const {
  if (slot == NodeNameIndex::kNone) return {};
  const SlotCards& where = by_slot_[slot];
  return NodeView{where.node, slot, where.version, std::span<const CardState>(cards_.data() + where.first, where.count),
                  &where.totals};
}

Status ClusterLedger::Reserve(const std::string& pod_uid, const PodDecision& decision) {
  if (pod_uid.empty()) return InvalidArgument("reserve: empty pod UID");
  auto existing = pods_.find(pod_uid);
  if (existing != pods_.end()) {
    if (existing->second.decision == decision) return Status::Ok();
    return FailedPrecondition("pod " + pod_uid + " already holds cards on node " + existing->second.decision.node);
  }
  auto node = nodes_.find(decision.node);
  if (node == nodes_.end()) return NotFound("node " + decision.node + " is not in the inventory");
  GS_RETURN_IF_ERROR(Apply(&node->second, decision, /*check_health=*/true, /*apply=*/true));
  pods_.emplace(pod_uid, LedgerEntry{decision, LedgerPhase::kReserved, entries_made_++});
  pods_by_node_[decision.node].insert(pod_uid);
  return Status::Ok();
}

std::vector<std::string> ClusterLedger::PodsMadeBefore(uint64_t mark) const {
  std::vector<std::string> uids;
  for (const auto& [uid, entry] : pods_)
    if (entry.made < mark) uids.push_back(uid);
  return uids;
}

Status ClusterLedger::Commit(const std::string& pod_uid) {
  auto it = pods_.find(pod_uid);
  if (it == pods_.end()) return NotFound("commit: pod " + pod_uid + " holds nothing");
  it->second.phase = LedgerPhase::kCommitted;
  return Status::Ok();
}

bool ClusterLedger::Release(const std::string& pod_uid) {
  auto it = pods_.find(pod_uid);
  if (it == pods_.end()) return false;
  const PodDecision& d = it->second.decision;
  auto node = nodes_.find(d.node);
  if (node != nodes_.end()) Unapply(&node->second, d);
  auto by_node = pods_by_node_.find(d.node);
  if (by_node != pods_by_node_.end()) {
    by_node->second.erase(pod_uid);
    if (by_node->second.empty()) pods_by_node_.erase(by_node);
  }
  pods_.erase(it);
  return true;
}

const LedgerEntry* ClusterLedger::FindPod(const std::string& pod_uid) const {
  auto it = pods_.find(pod_uid);
  return it == pods_.end() ? nullptr : &it->second;
}

RebuildReport ClusterLedger::Rebuild(const std::vector<LedgerRecord>& records) {
  pods_.clear();
  pods_by_node_.clear();
  for (auto& [name, node] : nodes_) {
    node.used.assign(node.inventory.gpus.size(), CardUsage{});
    Touch(&node);
  }
  RebuildReport report;
  for (const LedgerRecord& r : records) {
    if (r.pod_uid.empty()) {
      report.refused.push_back("pod with empty UID on node " + r.decision.node);
      continue;
    }
    if (pods_.count(r.pod_uid)) {
      report.refused.push_back("pod " + r.pod_uid + ": listed twice");
      continue;
    }
    auto node = nodes_.find(r.decision.node);
    if (node != nodes_.end()) {
      Status s = Apply(&node->second, r.decision, /*check_health=*/false, /*apply=*/true);
      if (!s.ok()) {
        report.refused.push_back("pod " + r.pod_uid + ": " + s.message());
        continue;
      }
    }
    pods_.emplace(r.pod_uid, LedgerEntry{r.decision, LedgerPhase::kCommitted, entries_made_++});
    pods_by_node_[r.decision.node].insert(r.pod_uid);
    ++report.applied;
  }
  return report;
}

Status ClusterLedger::CheckConsistency() const {
  for (const auto& [name, node] : nodes_) {
    std::vector<CardUsage> sum(node.inventory.gpus.size());
    auto it = pods_by_node_.find(name);
    if (it != pods_by_node_.end())
      for (const std::string& uid : it->second)
        for (const auto& shares : pods_.at(uid).decision.containers)
          for (const DeviceShare& share : shares) {
            int i = CardIndex(node, share.uuid);
            if (i >= 0) AddShare(&sum[i], share.memory_mib, share.cores);
          }
    for (size_t i = 0; i < sum.size(); ++i) {
      const GpuDevice& g = node.inventory.gpus[i];
      const CardUsage& u = node.used[i];
      std::string where = "node " + name + " card " + g.uuid;
      if (u.memory_mib != sum[i].memory_mib || u.cores != sum[i].cores || u.containers != sum[i].containers)
        return Internal(where + ": usage differs from the sum of its pods' shares");
      if (u.memory_mib > g.memory_mib) return Internal(where + ": memory over capacity");
      if (u.cores > g.cores) return Internal(where + ": cores over capacity");
      if (u.containers > g.slots) return Internal(where + ": more containers than slots");
      if (u.memory_mib < 0 || u.cores < 0 || u.containers < 0) return Internal(where + ": negative usage");
    }
    NodeView view = Lookup(name);
    if (view.node != &node || view.slot != node.slot || view.version != node.version)
      return Internal("node " + name + ": the name index does not find it");
    NodeTotals totals;
    for (size_t i = 0; i < node.inventory.gpus.size(); ++i) {
      const GpuDevice& g = node.inventory.gpus[i];
      if (i >= view.cards.size() || !(view.cards[i] == MakeCardState(g, node.used[i])))
        return Internal("node " + name + " card " + g.uuid +
                        ": the fit loop's copy differs from the inventory and usage");
      totals.used.memory_mib += node.used[i].memory_mib;
      totals.used.cores += node.used[i].cores;
      totals.used.containers += node.used[i].containers;
      totals.memory_mib += g.memory_mib;
      totals.cores += g.cores;
      totals.slots += g.slots;
      totals.same_memory = totals.same_memory && g.memory_mib == node.inventory.gpus[0].memory_mib;
    }
    if (!(*view.totals == totals)) return Internal("node " + name + ": the fit loop's totals differ from its cards");
  }
  if (index_.size() != nodes_.size()) return Internal("the name index holds names of removed nodes");
  return Status::Ok();
}

}  // namespace gs::scheduler
