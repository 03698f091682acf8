// Where a pod's GPU containers go: on one node, which cards (FitPod); over a list of
// nodes, which can take the pod and why the others cannot (Filter); how good each
// node is, 0..10 (Score), the range kube-scheduler's extender protocol takes so its own
// scoring still counts.
//
// Policies, as HAMi defines them (and gets backwards in its #1589):
//  - node binpack: a node that will be fuller after the pod scores higher; spread: lower;
//  - GPU binpack: within a node, the fullest card that fits is chosen first; spread: the
//    emptiest. Ties go to the lower card index.
// "Full" is the mean of memory, cores and slots handed out (capacity.h).
//
// Pure: reads the ledger's state, changes nothing. Not thread-safe only in that the
// scratch must not be shared. Cost per node: O(containers x cards log cards), no heap
// allocation once the scratch has grown, except for the reason text of a node that fails.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "src/common/status.h"
#include "src/scheduler/ledger.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {

// Reusable buffers for FitPod; keep one per thread.
struct FitScratch {
  std::vector<CardUsage> used;  // the node's usage plus this pod's containers placed so far
  std::vector<int> candidates;
  std::vector<double> keys;
  std::vector<int> chosen;      // card indexes: container 0's cards, then container 1's, ...
  std::string reason;           // why the pod does not fit (when FitPod returns false)
};

// Chooses cards for every container of `request` on `node`. On success scratch->chosen
// and scratch->used hold the placement; on failure scratch->reason says why, naming the
// container and counting the cards by what stopped them.
bool FitPod(const NodeState& node, const PodRequest& request, Policy gpu_policy, FitScratch* scratch);

// The decision for a successful FitPod (scratch as FitPod left it).
PodDecision ToDecision(const NodeState& node, const PodRequest& request, const FitScratch& scratch);

// 0..10 for a node after a successful FitPod (scratch as FitPod left it).
int ScoreNode(const NodeState& node, const FitScratch& scratch, Policy node_policy);

struct FilterResult {
  std::vector<int> feasible;                     // indexes into the node names given
  std::vector<std::pair<int, std::string>> failed;  // index, reason
};

struct Policies {
  Policy node = Policy::kBinpack;  // HAMi's defaults
  Policy gpu = Policy::kSpread;
};

// Every node of `names` that can take the pod, and a reason for each that cannot
// (including names the ledger has no inventory for).
FilterResult Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string>& names,
                    const Policies& defaults, FitScratch* scratch);

// Scores parallel to `names`; a node that cannot take the pod scores 0.
std::vector<int> Prioritize(const ClusterLedger& ledger, const PodRequest& request,
                            const std::vector<std::string>& names, const Policies& defaults, FitScratch* scratch);

// Chooses the cards on `node` against the ledger's current usage (what bind does).
StatusOr<PodDecision> Decide(const ClusterLedger& ledger, const PodRequest& request, const std::string& node,
                             const Policies& defaults, FitScratch* scratch);

}  // namespace gs::scheduler
