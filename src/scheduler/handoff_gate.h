// The extender's half of the hand-off (handoff.h): the pods bound to each node that still
// wait for kubelet's Allocate, and the one rule bind must keep so that the node agent can
// tell them apart — never two pods pending on a node with the same card count in their
// next entry and different requests. A bind that would break it waits until the other
// pod is allocated (kubelet admits pods one by one, so that is about one Allocate) or the
// wait runs out, and then fails with a reason; kube-scheduler retries the pod.
//
// Fed by the pod watch (Observe, Forget) and by the extender's own binds (Enter, then
// Settle or Abandon), so a pod is pending from the moment bind chooses to bind it, before
// the watch has seen its annotations.
//
// In arrival order: a bind that waits also holds back later binds to that node it could
// be confused with, as if it were pending already. Without that, a steady stream of
// identical pods (which never wait for each other) kept a node busy until a pod of another
// shape ran out of time, and kube-scheduler retried it with backoff.
//
// Thread-safe: one mutex; Enter sleeps on a condition variable, never with another lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/common/status.h"
#include "src/scheduler/handoff.h"
#include "src/scheduler/pod_spec.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {

class HandoffGate {
 public:
  // Pods' requests are read with `pod_spec` (the extender's).
  explicit HandoffGate(PodSpecOptions pod_spec = {}) : pod_spec_(std::move(pod_spec)) {}

  // A pod as the watch saw it: pending on its node (handoff.h's PendingPodFromJson) is
  // recorded; past pending (bind-phase success or failed, finished, deleting) is
  // forgotten; anything else (an event from before its bind) changes nothing.
  void Observe(const nlohmann::json& pod);
  void Forget(const std::string& uid);

  // Waits up to `wait` until `request` can be bound to `node` without being mistaken
  // for another pending pod there, then records it as pending (its cards still unknown:
  // one placeholder per card asked). FailedPrecondition naming the other pod when the
  // wait ran out.
  Status Enter(const PodRequest& request, const std::string& node, std::chrono::milliseconds wait);
  // For each of `nodes`, whether Enter would have to wait there now. Prioritize scores
  // those nodes lowest: with a choice, kube-scheduler then binds where no other pod's
  // Allocate must come first (with binpack, pods of different shapes would otherwise all
  // queue on the fullest node).
  std::vector<bool> WouldWait(const PodRequest& request, const std::vector<std::string_view>& nodes) const;
  // Bind decided: the pod's entries are those cards.
  void Settle(const std::string& uid, const PodDecision& decision, int64_t bind_time);
  // Bind failed: the pod is not pending.
  void Abandon(const std::string& uid) { Forget(uid); }

  size_t pending_count() const;

  // What Enter did so far (for the extender's /metrics).
  struct Stats {
    uint64_t entered = 0;  // binds let through
    uint64_t waited = 0;   // of those, binds that first waited for another pod's Allocate
    uint64_t refused = 0;  // binds whose wait ran out
    double wait_seconds_total = 0, wait_seconds_max = 0;
    // Of a wait, the part after what it waited for was over (the pod ahead allocated, as
    // the pod watch reported, or gone; a bind ahead gone through): the longest such tail.
    // Near zero, unlike a node lock's, which outlives its holder's Allocate until expiry.
    double after_release_seconds_max = 0;
    size_t pending = 0;
    size_t waiting = 0;  // binds waiting in Enter now
  };
  Stats stats() const;

 private:
  void EraseLocked(const std::string& uid);
  const PodSpecOptions pod_spec_;
  // What a bind with `ticket` must not be confused with on `node`: its pending pods and
  // the binds that came before it and still wait (mu_ held).
  std::vector<PendingPod> AheadLocked(const std::string& node, uint64_t ticket) const;

  struct Waiting {
    uint64_t ticket;
    PendingPod pod;  // as it would be pending: its signature and card counts
  };

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::unordered_map<std::string, PendingPod>, std::less<>> by_node_;  // node -> uid -> pod
  std::unordered_map<std::string, std::string> node_of_;                                     // uid -> node
  std::map<std::string, std::vector<Waiting>, std::less<>> waiting_;  // node -> binds waiting in Enter
  uint64_t next_ticket_ = 0;
  // When a pending pod or a waiting bind last left each node (for after_release_seconds).
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> last_left_;
  Stats stats_;  // under mu_
};

}  // namespace gs::scheduler
