// The kube-scheduler extender protocol (nodeCacheCapable = true) over the placement core:
//  - Filter: ExtenderArgs {"Pod", "NodeNames"} -> ExtenderFilterResult {"NodeNames",
//    "FailedNodes", "Error"}: every node that can take the pod, a reason for every other;
//    no side effect on the ledger (HAMi's #2264: returning one node defeats the
//    scheduler's own scoring);
//  - Prioritize: ExtenderArgs -> HostPriorityList [{"Host", "Score" 0..10}];
//  - Bind: ExtenderBindingArgs {"PodName", "PodNamespace", "PodUID", "Node"} ->
//    ExtenderBindingResult {"Error"}: wait until no pod pending on that node could be
//    mistaken for this one by the node agent (handoff_gate.h), re-decide on the ledger's
//    current usage, reserve, write the decision annotations (hami_format.h), create the
//    Binding, commit; any failure releases the reservation.
// Keys are the Go field names (the types have no json tags); the Pod is ordinary
// Kubernetes JSON. ExtenderArgs is read in one pass (extender_args.h) and replies are
// written straight into one string; node names go back as kube-scheduler wrote them.
// Filter remembers each node's score for Prioritize of the same pod (pod_memo.h: valid
// only while that node's usage and inventory are unchanged), and both verbs parse one
// Pod text once. Bind learns the pod's request from the Filter call that saw it (a
// bounded cache by UID, which changes no placement) or, failing that, from the API.
//
// The Kubernetes side of bind goes through KubeBinder, so tests use an in-memory fake.
//
// Thread-safe: Filter and Prioritize run concurrently (shared lock); Bind and node or
// pod updates take the lock exclusively, never across a KubeBinder call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "src/common/status.h"
#include "src/scheduler/hami_format.h"
#include "src/scheduler/handoff_gate.h"
#include "src/scheduler/ledger.h"
#include "src/scheduler/placement.h"
#include "src/scheduler/pod_memo.h"
#include "src/scheduler/pod_spec.h"
#include "src/scheduler/quota.h"

namespace gs::scheduler {

// The API-server calls bind needs. Implementations must be thread-safe.
class KubeBinder {
 public:
  virtual ~KubeBinder() = default;
  // POST pods/<name>/binding with target node `node`, guarded by the pod's UID; the API
  // server sets the Binding's `annotations` on the pod in the same write as the node (no
  // moment where one is there without the other; one write instead of a patch and a bind).
  virtual Status BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                         const std::string& node, const hami::Annotations& annotations) = 0;
  // The pod as JSON (for a bind whose filter this process did not see).
  virtual StatusOr<std::string> GetPod(const std::string& ns, const std::string& name) = 0;
};

struct ExtenderOptions {
  Policies defaults;
  PodSpecOptions pod_spec;                    // resource names and HAMi's admission defaults (pod_spec.h)
  size_t pod_cache_size = 20000;              // pods seen by Filter, remembered for Bind
  std::function<int64_t()> now_unix_seconds;  // for hami.io/vgpu-time and bind-time
  // How long bind waits for a pod it could be mistaken for to be allocated on the node
  // (handoff_gate.h); below kube-scheduler's extender timeout (5 s by default).
  std::chrono::milliseconds handoff_wait{3000};
  QuotaKeys quota_keys;  // the ResourceQuota keys counted
};

class Extender {
 public:
  Extender(ExtenderOptions options, KubeBinder* binder);

  // Protocol handlers: a request body in, a response body out. Malformed input is
  // answered in the result's Error field (Prioritize: an empty list) and never throws.
  std::string Filter(std::string_view body);
  std::string Prioritize(std::string_view body);
  std::string Bind(std::string_view body);

  // Node inventory (from hami.io/node-nvidia-register or a file).
  Status UpsertNode(NodeInventory node);
  void RemoveNode(const std::string& name);
  // A pod was deleted or finished: its cards go back. Idempotent.
  bool ReleasePod(const std::string& uid);
  // A mark for ReleaseAbsent, taken before a complete pod list is asked for.
  uint64_t ReservationMark() const;
  // Releases every pod reserved before `mark` whose UID is not in `present`, the UIDs of a
  // complete pod list begun after the mark was taken: a pod that existed when it was
  // bound and is missing from a later list was deleted, even one whose every event the
  // pod watch missed (bound, deleted and compacted away while it was down). Pods reserved
  // after the mark may be newer than the list and are left to the watch. Returns them.
  std::vector<std::string> ReleaseAbsent(const std::unordered_set<std::string>& present, uint64_t mark);
  // Every pod the watch reports: keeps track of the pods still waiting for kubelet's
  // Allocate on their node (handoff_gate.h).
  void ObservePod(const nlohmann::json& pod) { gate_.Observe(pod); }
  // ResourceQuota objects (quota.h); empty limits forget the quota.
  void SetQuota(const std::string& ns, const std::string& name, const QuotaLimits& limits);
  void RemoveQuota(const std::string& ns, const std::string& name);
  const QuotaKeys& quota_keys() const { return options_.quota_keys; }
  QuotaUsage QuotaUsed(const std::string& ns) const;
  size_t pending_count() const { return gate_.pending_count(); }

  // Counters for /metrics.
  struct Stats {
    uint64_t binds = 0, bind_failures = 0;
    size_t pods = 0;  // decisions in the ledger
    HandoffGate::Stats handoff;
  };
  Stats stats() const;
  // After a restart: the decisions written on these pods (JSON), counted once each;
  // pods without a decision are skipped.
  RebuildReport RebuildFromPods(const std::vector<std::string>& pods_json);

  Status CheckConsistency() const;
  size_t pod_count() const;

 private:
  struct Cached {
    PodRequest request;
  };
  // The request in this Pod JSON text (remembered by text).
  StatusOr<std::shared_ptr<const PodRequest>> RequestFor(std::string_view pod_json);
  StatusOr<PodRequest> RequestForBind(const std::string& uid, const std::string& ns, const std::string& name);
  void Remember(const PodRequest& r);
  // Moves the feasible nodes of `r` whose placement would exceed the pod's namespace
  // quota to the failed ones (mu_ held, shared).
  void ApplyQuota(const PodRequest& request, const std::vector<std::string_view>& names, ScoreMemo* scores,
                  FilterResult* r);

  ExtenderOptions options_;
  KubeBinder* binder_;
  mutable std::shared_mutex mu_;
  ClusterLedger ledger_;
  QuotaBook quotas_;                                  // guarded by mu_, in step with ledger_
  std::unordered_map<std::string, PodRequest> seen_;  // by UID, guarded by seen_mu_
  std::deque<std::string> seen_order_;
  std::mutex seen_mu_;
  PodMemo memo_;  // guarded by memo_mu_; never held with mu_ taken after it
  std::mutex memo_mu_;
  HandoffGate gate_;  // thread-safe itself; Bind waits in it before taking mu_
  std::atomic<uint64_t> binds_{0}, bind_failures_{0};
};

}  // namespace gs::scheduler
