// The scheduler's record of who holds what: every node's cards (inventory) and, keyed by
// pod UID, every decision made, with the per-card usage kept up to date incrementally
// (a reserve or release touches only the cards of that pod; nothing is recomputed per
// call). A restarted extender rebuilds it from the decisions written on pods
// (hami.io/vgpu-node + hami.io/vgpu-devices-allocated), refusing any record that would
// over-commit a card, so it never hands out the same capacity twice.
//
// Life of a pod: Reserve (bind re-checked the decision against current usage) ->
// Commit (the binding was accepted by the API server) -> Release (pod deleted or
// finished; idempotent). A failed bind releases its reservation.
//
// Every node has a dense `slot` (reused after RemoveNode) and a `version` drawn from one
// ledger-wide counter whenever its inventory or usage changes, so a (slot, version) pair
// names one exact state of one node: what a result computed from that state may be
// remembered by (placement.h's ScoreMemo).
//
// For the fit loop the ledger also keeps every node's cards as CardState (capacity and
// usage side by side, capacity.h) in one array, rewritten for a node whenever its version
// moves, and finds nodes by name through a flat index (node_index.h): Filter over
// thousands of names reads a few cache lines per node and no strings.
//
// Not thread-safe: the owner (the extender) serialises access. Costs: Reserve/Release
// O(shares x cards on the node); UpsertNode O(pods on that node); Rebuild O(records);
// FindNode / Lookup one hash of the name, no allocation.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "src/common/status.h"
#include "src/scheduler/capacity.h"
#include "src/scheduler/inventory.h"
#include "src/scheduler/node_index.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {

struct NodeState {
  NodeInventory inventory;
  std::vector<CardUsage> used;  // parallel to inventory.gpus
  uint32_t slot = 0;            // dense index, < ClusterLedger::slot_count()
  uint64_t version = 0;         // changes with inventory or usage; never 0, never reused
};

// Hashes std::string and std::string_view alike, so lookups by view allocate nothing.
struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Sums over a node's cards, kept with its CardStates: a node's score after a pod is these
// plus the pod's shares, without a pass over the cards.
struct NodeTotals {
  CardUsage used;
  int64_t memory_mib = 0;
  int64_t cores = 0;
  int64_t slots = 0;
  bool same_memory = true;  // every card has the same memory (a percentage asks the same MiB of each)
  bool operator==(const NodeTotals&) const = default;
};

// A node as the fit loop reads it: its slot, version and cards in the ledger's CardState
// array, all from one contiguous record (the NodeState itself, elsewhere in memory, is
// only read for card names). Valid until the ledger changes; `node` is null for a name
// the ledger lacks.
struct NodeView {
  const NodeState* node = nullptr;
  uint32_t slot = 0;
  uint64_t version = 0;
  std::span<const CardState> cards;
  const NodeTotals* totals = nullptr;
};

enum class LedgerPhase { kReserved, kCommitted };

struct LedgerEntry {
  PodDecision decision;
  LedgerPhase phase = LedgerPhase::kReserved;
  uint64_t made = 0;  // ClusterLedger::entries_made() when it was made: an order, not a time
};

// One pod's decision as found on the pod (for Rebuild).
struct LedgerRecord {
  std::string pod_uid;
  PodDecision decision;
};

struct RebuildReport {
  int applied = 0;
  // "pod <uid>: <why>" for each record refused (it would over-commit a card, or names a
  // card the node does not have, or repeats a UID).
  std::vector<std::string> refused;
};

class ClusterLedger {
 public:
  ClusterLedger() = default;
  // Not copyable: the CardState array's slots point at this ledger's own nodes.
  ClusterLedger(const ClusterLedger&) = delete;
  ClusterLedger& operator=(const ClusterLedger&) = delete;
  ClusterLedger(ClusterLedger&&) = default;
  ClusterLedger& operator=(ClusterLedger&&) = default;

  // Adds or replaces a node's inventory and recounts that node's usage from the ledger
  // (pods already decided there keep their shares; cards that vanished drop theirs).
  Status UpsertNode(NodeInventory inventory);
  void RemoveNode(const std::string& name);
  const NodeState* FindNode(std::string_view name) const;
  NodeView Lookup(std::string_view name) const;
  // The same for the names of a list in order: `previous` is the slot of the view found
  // for the name before (NodeNameIndex::kNone for the first or when not found).
  NodeView LookupNext(std::string_view name, uint32_t previous) const;
  // The same, trying the slot `guess` first (NodeNameIndex::FindAt).
  NodeView LookupAt(std::string_view name, uint32_t guess) const;
  const std::unordered_map<std::string, NodeState, NameHash, std::equal_to<>>& nodes() const { return nodes_; }
  // One more than the highest slot in use (sizes arrays indexed by NodeState::slot).
  uint32_t slot_count() const { return slot_count_; }

  // Re-checks every share against current usage (health included) and takes it, all or
  // nothing. Reserving the same UID with the same decision again is a no-op (a retried
  // bind); with a different decision it is an error.
  Status Reserve(const std::string& pod_uid, const PodDecision& decision);
  Status Commit(const std::string& pod_uid);
  // Gives the pod's shares back. Returns false (and changes nothing) for an unknown UID.
  bool Release(const std::string& pod_uid);

  const LedgerEntry* FindPod(const std::string& pod_uid) const;
  size_t pod_count() const { return pods_.size(); }
  // Entries made so far (Reserve, Rebuild), never decreasing: a mark for PodsMadeBefore.
  uint64_t entries_made() const { return entries_made_; }
  // The UIDs of the pods whose entries were made before entries_made() was `mark`.
  std::vector<std::string> PodsMadeBefore(uint64_t mark) const;

  // Clears all decisions and usage (inventories stay), then applies the records in
  // order as committed. A record for a node not known yet is kept and counted once the
  // node arrives.
  RebuildReport Rebuild(const std::vector<LedgerRecord>& records);

  // For tests and the bench: usage equals the sum of the ledger's shares, and no card
  // is over its memory, cores or slots. The error names the node and card.
  Status CheckConsistency() const;

 private:
  NodeView ViewOf(uint32_t slot) const;  // kNone: the empty view
  // Checks (and, with apply, takes) every share of `decision` on `node`.
  Status Apply(NodeState* node, const PodDecision& decision, bool check_health, bool apply);
  void Unapply(NodeState* node, const PodDecision& decision);
  // After any change to a node's inventory or usage: a new version, and its CardStates
  // rewritten.
  void Touch(NodeState* node);
  void CompactCards();

  // Where a node's CardStates lie in cards_, by slot; node null for a free slot.
  struct SlotCards {
    const NodeState* node = nullptr;
    uint64_t version = 0;  // the node's
    uint32_t first = 0, count = 0;
    NodeTotals totals;
  };

  std::unordered_map<std::string, NodeState, NameHash, std::equal_to<>> nodes_;
  NodeNameIndex index_;             // name -> slot
  std::vector<SlotCards> by_slot_;  // NodeState pointers stay valid: map nodes never move
  std::vector<CardState> cards_;    // every node's cards, each node's contiguous
  size_t cards_unused_ = 0;         // entries of cards_ no node owns (moved or removed)
  std::vector<uint32_t> free_slots_;
  uint32_t slot_count_ = 0;
  uint64_t last_version_ = 0;
  std::unordered_map<std::string, LedgerEntry> pods_;
  uint64_t entries_made_ = 0;
  std::unordered_map<std::string, std::unordered_set<std::string>> pods_by_node_;
};

}  // namespace gs::scheduler
