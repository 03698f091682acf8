#include "src/node/pending_pods.h"

#include <nlohmann/json.hpp>

namespace gs::node {
namespace {

using nlohmann::json;

std::string UidOf(const json& pod) {
  const json* meta = pod.is_object() && pod.contains("metadata") ? &pod["metadata"] : nullptr;
  if (meta == nullptr || !meta->is_object() || !meta->contains("uid") || !(*meta)["uid"].is_string()) return "";
  return (*meta)["uid"].get<std::string>();
}

}  // namespace

void PendingPodCopies::KeepLocked(const std::string& uid, const json& pod) {
  auto p = scheduler::PendingPodFromJson(pod, node_);
  if (p.ok() && p->has_value())
    pending_[uid] = std::move(**p);
  else
    pending_.erase(uid);  // past pending, not on this node, or malformed: nobody's to claim
}

void PendingPodCopies::FromWatch(const json& pod) {
  const std::string uid = UidOf(pod);
  if (uid.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = claimed_.find(uid); it != claimed_.end()) {
    if (it->second.resource_version != pod["metadata"].value("resourceVersion", "")) return;  // older
    claimed_.erase(it);
  }
  KeepLocked(uid, pod);
}

void PendingPodCopies::FromClaim(const json& pod) {
  const std::string uid = UidOf(pod);
  if (uid.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  claimed_[uid] = Claimed{pod["metadata"].value("resourceVersion", ""), claims_made_++};
  KeepLocked(uid, pod);
}

void PendingPodCopies::Deleted(const json& pod) {
  const std::string uid = UidOf(pod);
  std::lock_guard<std::mutex> l(mu_);
  pending_.erase(uid);
  claimed_.erase(uid);
}

void PendingPodCopies::ListStarted() {
  std::lock_guard<std::mutex> l(mu_);
  list_mark_ = claims_made_;
}

void PendingPodCopies::Listed(const std::vector<json>& pods) {
  std::lock_guard<std::mutex> l(mu_);
  for (const json& pod : pods) {
    const std::string uid = UidOf(pod);
    if (auto it = claimed_.find(uid); it != claimed_.end() && it->second.made < list_mark_) {
      claimed_.erase(it);
      KeepLocked(uid, pod);  // the list began after the claim: its copy is at least as new
    }
  }
}

std::vector<scheduler::PendingPod> PendingPodCopies::Pending() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<scheduler::PendingPod> out;
  for (const auto& [uid, p] : pending_) out.push_back(p);
  return out;
}

}  // namespace gs::node
