#include "src/scheduler/node_index.h"

#include <algorithm>
#include <functional>

namespace gs::scheduler {

uint64_t NodeNameIndex::Hash(std::string_view name) {
  return std::hash<std::string_view>{}(name);
}

size_t NodeNameIndex::Probe(std::string_view name, uint64_t hash) const {
  size_t mask = table_.size() - 1;
  uint32_t tag = static_cast<uint32_t>(hash >> 32);
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Entry& e = table_[i];
    if (e.slot == kNone || (e.tag == tag && names_[e.slot] == name)) return i;
  }
}

uint32_t NodeNameIndex::Find(std::string_view name) const {
  if (size_ == 0) return kNone;
  return table_[Probe(name, Hash(name))].slot;
}

uint32_t NodeNameIndex::FindAt(std::string_view name, uint32_t guess) const {
  // An erased slot's name is empty: no guess matches an empty name.
  if (guess < names_.size() && !name.empty() && names_[guess] == name) return guess;
  return Find(name);
}

uint32_t NodeNameIndex::FindNext(std::string_view name, uint32_t previous) const {
  if (previous < next_size_) {
    uint32_t guess = next_[previous].load(std::memory_order_relaxed);
    if (guess < names_.size() && !name.empty() && names_[guess] == name) return guess;
  }
  uint32_t slot = Find(name);
  if (previous < next_size_ && slot != kNone) next_[previous].store(slot, std::memory_order_relaxed);
  return slot;
}

void NodeNameIndex::Grow() {
  std::vector<Entry> old = std::move(table_);
  table_.assign(old.empty() ? 16 : old.size() * 2, Entry{});
  size_t mask = table_.size() - 1;
  for (const Entry& e : old) {
    if (e.slot == kNone) continue;
    size_t i = Hash(names_[e.slot]) & mask;
    while (table_[i].slot != kNone) i = (i + 1) & mask;
    table_[i] = e;
  }
}

void NodeNameIndex::Insert(std::string_view name, uint32_t slot) {
  Erase(name);
  if ((size_ + 1) * 2 > table_.size()) Grow();
  if (names_.size() <= slot) names_.resize(slot + 1);
  if (next_size_ <= slot) {
    size_t size = std::max<size_t>(64, std::max<size_t>(slot + 1, next_size_ * 2));
    auto grown = std::make_unique<std::atomic<uint32_t>[]>(size);
    for (size_t i = 0; i < size; ++i)
      grown[i].store(i < next_size_ ? next_[i].load(std::memory_order_relaxed) : kNone, std::memory_order_relaxed);
    next_ = std::move(grown);
    next_size_ = size;
  }
  names_[slot] = std::string(name);
  uint64_t hash = Hash(name);
  size_t i = Probe(name, hash);
  table_[i] = Entry{static_cast<uint32_t>(hash >> 32), slot};
  ++size_;
}

void NodeNameIndex::Erase(std::string_view name) {
  if (size_ == 0) return;
  size_t mask = table_.size() - 1;
  size_t hole = Probe(name, Hash(name));
  if (table_[hole].slot == kNone) return;
  names_[table_[hole].slot].clear();
  table_[hole] = Entry{};
  --size_;
  // Backward shift: move later entries of the run into the hole when their home allows,
  // so every remaining entry stays reachable from its home without tombstones.
  for (size_t j = (hole + 1) & mask; table_[j].slot != kNone; j = (j + 1) & mask) {
    size_t home = Hash(names_[table_[j].slot]) & mask;
    bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
    if (!movable) continue;
    table_[hole] = table_[j];
    table_[j] = Entry{};
    hole = j;
  }
}

}  // namespace gs::scheduler
