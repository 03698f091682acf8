#include "src/scheduler/ledger.h"

#include <algorithm>

namespace gs::scheduler {
namespace {

int CardIndex(const NodeState& node, const std::string& uuid) {
  for (size_t i = 0; i < node.inventory.gpus.size(); ++i)
    if (node.inventory.gpus[i].uuid == uuid) return static_cast<int>(i);
  return -1;
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
  }
  Touch(&node);
  node.used.assign(inventory.gpus.size(), CardUsage{});
  node.inventory = std::move(inventory);
  auto it = pods_by_node_.find(node.inventory.name);
  if (it == pods_by_node_.end()) return Status::Ok();
  // Pods already there keep their shares even if the new inventory is smaller: they run.
  for (const std::string& uid : it->second) {
    for (const auto& shares : pods_[uid].decision.containers)
      for (const DeviceShare& share : shares) {
        int i = CardIndex(node, share.uuid);
        if (i >= 0) AddShare(&node.used[i], share.memory_mib, share.cores);
      }
  }
  return Status::Ok();
}

void ClusterLedger::RemoveNode(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  free_slots_.push_back(it->second.slot);
  nodes_.erase(it);
}

const NodeState* ClusterLedger::FindNode(std::string_view name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
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
  pods_.emplace(pod_uid, LedgerEntry{decision, LedgerPhase::kReserved});
  pods_by_node_[decision.node].insert(pod_uid);
  return Status::Ok();
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
    pods_.emplace(r.pod_uid, LedgerEntry{r.decision, LedgerPhase::kCommitted});
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
  }
  return Status::Ok();
}

}  // namespace gs::scheduler
