// Node name -> the ledger's dense node slot (ledger.h), for Filter and Prioritize, which
// look up every one of up to thousands of names per call. An open-addressing table of
// (hash tag, slot) pairs in one array, with the names kept by slot: a lookup is one hash,
// usually one probe and one name comparison, where a node-based std::unordered_map costs
// a division and two or three scattered loads.
//
// Linear probing, at most half full, deletion by backward shift (no tombstones).
// Not thread-safe: the ledger's owner serialises changes; lookups may run concurrently
// with each other.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gs::scheduler {

class NodeNameIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // The slot of `name`, or kNone.
  uint32_t Find(std::string_view name) const;
  // The same, for a caller walking a list of names in order, `previous` being the slot of
  // the name before this one (kNone for the first, or when it was not found).
  // kube-scheduler sends its node names in the same order call after call (its node
  // tree's, from a rotating start), so the slot that followed `previous` in the last list
  // is tried first: one name comparison, no hash and no probe of the table, whose entries
  // are a cache miss each. A guess is only a hint: the name is compared, and on a miss the
  // lookup is Find's, which then becomes the hint.
  uint32_t FindNext(std::string_view name, uint32_t previous) const;
  // The slot of `name`, trying the caller's `guess` first (kNone: no guess); the hints
  // of FindNext are neither read nor written.
  uint32_t FindAt(std::string_view name, uint32_t guess) const;
  // Adds `name` at `slot` (a slot no other name holds); a name already present moves.
  void Insert(std::string_view name, uint32_t slot);
  void Erase(std::string_view name);
  size_t size() const { return size_; }

 private:
  struct Entry {
    uint32_t tag = 0;       // the hash's high bits, so most mismatches skip the name
    uint32_t slot = kNone;  // kNone: empty
  };
  static uint64_t Hash(std::string_view name);
  size_t Probe(std::string_view name, uint64_t hash) const;  // its entry or the empty one ending the run
  void Grow();

  std::vector<Entry> table_;        // size a power of two, or empty
  std::vector<std::string> names_;  // by slot
  size_t size_ = 0;
  // By slot: the slot whose name followed it last time (FindNext). Written by lookups
  // that run concurrently under the ledger's shared lock, so atomic (relaxed: a stale or
  // torn-between-threads hint only costs a Find). Grown by Insert, which runs alone.
  std::unique_ptr<std::atomic<uint32_t>[]> next_;
  size_t next_size_ = 0;
};

}  // namespace gs::scheduler
