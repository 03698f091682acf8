// The pods pending on this node as the node agent keeps them for fractional scheduling
// (docs/scheduler.md, "The hand-off"): copies from the pod watch and from the answers to
// the agent's own claims (src/node/scheduler_decisions.h).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "src/scheduler/handoff.h"

namespace gs::node {

// The node agent's copies of the pods pending on its node (bound, bind-phase
// "allocating"), kept from the pod watch and from the answers to its own claims. The watch
// delivers in order but lags: until it brings a claim's own version, what it brings about
// that pod is older than the claim's answer and is ignored, so a pod in the middle of
// kubelet's Allocates never looks untouched again. A relist shows every claim made before
// it began. Thread-safe (one mutex).
class PendingPodCopies {
 public:
  explicit PendingPodCopies(std::string node) : node_(std::move(node)) {}
  void FromWatch(const nlohmann::json& pod);
  void FromClaim(const nlohmann::json& pod);  // the API's answer to this agent's claim
  void Deleted(const nlohmann::json& pod);
  void ListStarted();
  void Listed(const std::vector<nlohmann::json>& pods);  // a complete list, begun at ListStarted
  std::vector<scheduler::PendingPod> Pending() const;

 private:
  struct Claimed {
    std::string resource_version;
    uint64_t made = 0;  // claims_made_ when it was taken
  };
  void KeepLocked(const std::string& uid, const nlohmann::json& pod);

  const std::string node_;
  mutable std::mutex mu_;
  std::map<std::string, scheduler::PendingPod> pending_;  // by UID
  std::map<std::string, Claimed> claimed_;                // by UID: answers the watch has not brought yet
  uint64_t claims_made_ = 0, list_mark_ = 0;
};

}  // namespace gs::node
