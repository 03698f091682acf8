#include "src/scheduler/handoff_gate.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

namespace gs::scheduler {
namespace {

using nlohmann::json;

const json* At(const json& j, const char* a, const char* b) {
  auto x = j.find(a);
  if (x == j.end() || !x->is_object()) return nullptr;
  auto y = x->find(b);
  return y == x->end() ? nullptr : &*y;
}

// Whether the pod is known to be past pending: Allocate finished (or failed) for it, or
// it is going away. An event without decision annotations says nothing either way.
bool PastPending(const json& pod) {
  const json* phase = At(pod, "status", "phase");
  if (phase != nullptr && phase->is_string() && (*phase == "Succeeded" || *phase == "Failed")) return true;
  if (At(pod, "metadata", "deletionTimestamp") != nullptr) return true;
  const json* annos = At(pod, "metadata", "annotations");
  if (annos == nullptr || !annos->is_object()) return false;
  auto bind_phase = annos->find(hami::kBindPhase);
  return bind_phase != annos->end() && bind_phase->is_string() && *bind_phase != "allocating";
}

std::vector<PendingPod> Values(const std::unordered_map<std::string, PendingPod>& pods) {
  std::vector<PendingPod> out;
  out.reserve(pods.size());
  for (const auto& [uid, p] : pods) out.push_back(p);
  return out;
}

}  // namespace

void HandoffGate::EraseLocked(const std::string& uid) {
  auto it = node_of_.find(uid);
  if (it == node_of_.end()) return;
  auto node = by_node_.find(it->second);
  if (node != by_node_.end()) {
    node->second.erase(uid);
    if (node->second.empty()) by_node_.erase(node);
  }
  last_left_[it->second] = std::chrono::steady_clock::now();
  node_of_.erase(it);
  changed_.notify_all();
}

void HandoffGate::Observe(const json& pod) {
  const json* uid = At(pod, "metadata", "uid");
  const json* node = At(pod, "spec", "nodeName");
  if (uid == nullptr || !uid->is_string()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (PastPending(pod)) {
    EraseLocked(uid->get<std::string>());
    return;
  }
  if (node == nullptr || !node->is_string()) return;
  auto pending = PendingPodFromJson(pod, node->get<std::string>(), pod_spec_);
  if (!pending.ok() || !pending->has_value()) return;  // malformed or not pending yet: bind's entry stands
  EraseLocked((*pending)->uid);
  node_of_[(*pending)->uid] = node->get<std::string>();
  by_node_[node->get<std::string>()][(*pending)->uid] = std::move(**pending);
  changed_.notify_all();
}

void HandoffGate::Forget(const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  EraseLocked(uid);
}

std::vector<PendingPod> HandoffGate::AheadLocked(const std::string& node, uint64_t ticket) const {
  std::vector<PendingPod> ahead;
  if (auto it = by_node_.find(node); it != by_node_.end()) ahead = Values(it->second);
  if (auto it = waiting_.find(node); it != waiting_.end())
    for (const Waiting& w : it->second)
      if (w.ticket < ticket) ahead.push_back(w.pod);
  return ahead;
}

Status HandoffGate::Enter(const PodRequest& request, const std::string& node, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  PendingPod as_pending;
  as_pending.uid = request.uid;
  as_pending.namespace_name = request.namespace_name;
  as_pending.name = request.name;
  as_pending.signature = RequestSignature(request);
  for (const auto& c : request.containers) as_pending.to_allocate.emplace_back(static_cast<size_t>(c.gpus));
  const uint64_t ticket = next_ticket_++;
  std::optional<std::string> other;
  auto clear = [&] {
    other = Confusable(AheadLocked(node, ticket), request);
    return !other.has_value();
  };
  auto start = std::chrono::steady_clock::now();
  bool had_to_wait = !clear();
  bool ok = !had_to_wait;
  if (had_to_wait) {
    waiting_[node].push_back({ticket, as_pending});
    ok = changed_.wait_for(lock, wait, clear);
    if (ok)
      if (auto left = last_left_.find(node); left != last_left_.end())
        stats_.after_release_seconds_max =
            std::max(stats_.after_release_seconds_max,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - left->second).count());
    auto& queue = waiting_[node];
    queue.erase(std::remove_if(queue.begin(), queue.end(), [&](const Waiting& w) { return w.ticket == ticket; }),
                queue.end());
    if (queue.empty()) waiting_.erase(node);
    last_left_[node] = std::chrono::steady_clock::now();
    changed_.notify_all();  // binds queued behind this one look again
  }
  if (had_to_wait) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats_.wait_seconds_total += s;
    stats_.wait_seconds_max = std::max(stats_.wait_seconds_max, s);
    ++(ok ? stats_.waited : stats_.refused);
  }
  if (!ok)
    return FailedPrecondition("pod " + *other + " on node " + node +
                              " still waits for kubelet's Allocate with as many cards in its next container but "
                              "another request; binding now could give each the other's limits (retried later)");
  ++stats_.entered;
  EraseLocked(request.uid);
  node_of_[as_pending.uid] = node;
  by_node_[node][as_pending.uid] = std::move(as_pending);
  return Status::Ok();
}

std::vector<bool> HandoffGate::WouldWait(const PodRequest& request, const std::vector<std::string_view>& nodes) const {
  std::vector<bool> out(nodes.size(), false);
  std::lock_guard<std::mutex> lock(mu_);
  if (by_node_.empty()) return out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto it = by_node_.find(nodes[i]);
    out[i] = it != by_node_.end() && Confusable(Values(it->second), request).has_value();
  }
  return out;
}

void HandoffGate::Settle(const std::string& uid, const PodDecision& decision, int64_t bind_time) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = node_of_.find(uid);
  if (it == node_of_.end()) return;
  PendingPod& p = by_node_[it->second][uid];
  if (!p.resource_version.empty()) return;  // the watch already reported the real thing
  p.to_allocate = decision.containers;
  p.bind_time = bind_time;
}

HandoffGate::Stats HandoffGate::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.pending = node_of_.size();
  for (const auto& [node, binds] : waiting_) s.waiting += binds.size();
  return s;
}

size_t HandoffGate::pending_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node_of_.size();
}

}  // namespace gs::scheduler
