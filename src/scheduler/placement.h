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
// Filter's reasons are short and drawn from a small set (the container, then what kept
// cards out, in a fixed order), so kube-scheduler's "0/N nodes are available: ..."
// summary groups them; FitPod and Decide say more (counts per cause).
//
// Pure: reads the ledger's state, changes nothing. Not thread-safe only in that the
// scratch must not be shared. Cost per node: O(containers x cards log cards), no heap
// allocation once the scratch and the result have grown. Filter and Prioritize read the
// ledger's CardState array (ledger.h), never a card's records unless the pod names
// types, UUIDs or indexes; FitPod and Decide run the same code on the node's own records.
// For the common pod (one GPU container asking the same MiB of every card of the node, no
// type, UUID or index lists) Filter and Prioritize only count the cards that pass CheckCard
// and score from the node's totals, since no choice of cards changes either answer
// (placement_test.cc compares both ways on random clusters).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/common/status.h"
#include "src/scheduler/ledger.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {

// Why a pod did not fit on a node: the first container that found too few cards, and
// its cards counted by what kept each out.
struct FitFailure {
  int container = 0;
  int cards = 0;                    // on the node
  int fitting = 0;                  // cards that could take the container
  int type = 0, uuid = 0;           // excluded by the pod's type or UUID lists
  int index = 0;                    // excluded by the pod's index lists
  int verdict[kCardVerdicts] = {};  // by CardVerdict
  bool numa_short = false;          // enough cards fit, but not on one NUMA node (numa-bind)
};

// Reusable buffers for FitPod; keep one per thread.
struct FitScratch {
  std::vector<CardState> cards;  // the node's cards, usage plus this pod's containers placed so far
  std::vector<int> candidates;
  std::vector<double> keys;
  std::vector<int> chosen;  // card indexes: container 0's cards, then container 1's, ...
  FitFailure failure;       // when FitCards / FitPod return false
  std::string reason;       // FitPod only: `failure` in words
};

// Chooses cards for every container of `request` on `node`. On success scratch->chosen
// and scratch->cards hold the placement; on failure scratch->failure says why.
bool FitCards(const NodeState& node, const PodRequest& request, Policy gpu_policy, FitScratch* scratch);

// FitCards, and on failure scratch->reason names the container and counts the cards by
// what stopped them.
bool FitPod(const NodeState& node, const PodRequest& request, Policy gpu_policy, FitScratch* scratch);

// The decision for a successful FitPod (scratch as FitPod left it).
PodDecision ToDecision(const NodeState& node, const PodRequest& request, const FitScratch& scratch);

// 0..10 for a node after a successful FitPod (scratch as FitPod left it).
int ScoreNode(const NodeState& node, const FitScratch& scratch, Policy node_policy);

struct FilterResult {
  std::vector<int> feasible;                // indexes into the node names given
  std::vector<std::pair<int, int>> failed;  // index into the names, index into `reasons`
  std::vector<std::string> reasons;         // distinct texts, each once
  const std::string& reason(size_t k) const { return reasons[static_cast<size_t>(failed[k].second)]; }
  void Clear() {
    feasible.clear();
    failed.clear();
    reasons.clear();
  }
};

struct Policies {
  Policy node = Policy::kBinpack;  // HAMi's defaults
  Policy gpu = Policy::kSpread;
};

// Prioritize's score of each node one pod was checked against, by node slot, valid
// while the node's version (ledger.h) is unchanged: Filter fills it, Prioritize for the
// same request and defaults reads it instead of fitting the pod again. The owner keys
// it by pod (score_cache.h).
struct ScoreMemo {
  std::vector<uint64_t> version;  // by slot; 0 = nothing known
  std::vector<int8_t> score;      // 0..10
  // The slots of the nodes Filter found feasible, in its order: kube-scheduler sends
  // Prioritize those names in that order, so each is first looked for there.
  std::vector<uint32_t> feasible;
  void Clear() {
    version.clear();
    feasible.clear();
  }
  void Put(uint32_t slot, uint64_t node_version, int value);
  void Put(const NodeState& node, int value) { Put(node.slot, node.version, value); }
  // -1 when nothing is known for this node's current state.
  int Get(uint32_t slot, uint64_t node_version) const {
    return slot < version.size() && version[slot] == node_version ? score[slot] : -1;
  }
  int Get(const NodeState& node) const { return Get(node.slot, node.version); }
};

// Every node of `names` that can take the pod, and a reason for each that cannot
// (including names the ledger has no inventory for). A refused pod (request.h) fails on
// every node with its request's `refused` as the reason. With `memo`, also records every
// known node's score for Prioritize.
FilterResult Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string_view>& names,
                    const Policies& defaults, FitScratch* scratch, ScoreMemo* memo = nullptr);
// The same into `out`, cleared first: a caller that keeps one per thread allocates
// nothing once it has grown.
void Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string_view>& names,
            const Policies& defaults, FitScratch* scratch, ScoreMemo* memo, FilterResult* out);
FilterResult Filter(const ClusterLedger& ledger, const PodRequest& request, const std::vector<std::string>& names,
                    const Policies& defaults, FitScratch* scratch);

// Scores parallel to `names`; a node that cannot take the pod scores 0. Scores found in
// `memo` (filled by Filter for this request) are taken as they are.
std::vector<int> Prioritize(const ClusterLedger& ledger, const PodRequest& request,
                            const std::vector<std::string_view>& names, const Policies& defaults, FitScratch* scratch,
                            const ScoreMemo* memo = nullptr);
std::vector<int> Prioritize(const ClusterLedger& ledger, const PodRequest& request,
                            const std::vector<std::string>& names, const Policies& defaults, FitScratch* scratch);

// Chooses the cards on `node` against the ledger's current usage (what bind does); a
// refused pod gets FailedPrecondition with its reason.
StatusOr<PodDecision> Decide(const ClusterLedger& ledger, const PodRequest& request, std::string_view node,
                             const Policies& defaults, FitScratch* scratch);

}  // namespace gs::scheduler
