#include "src/scheduler/node_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace gs::scheduler {
namespace {

TEST(NodeNameIndex, FindsWhatWasInsertedAndNothingElse) {
  NodeNameIndex index;
  EXPECT_EQ(index.Find("n0"), NodeNameIndex::kNone) << "empty index";
  index.Insert("n0", 0);
  index.Insert("n1", 7);
  EXPECT_EQ(index.Find("n0"), 0u);
  EXPECT_EQ(index.Find("n1"), 7u);
  EXPECT_EQ(index.Find("n2"), NodeNameIndex::kNone);
  EXPECT_EQ(index.Find(""), NodeNameIndex::kNone);
  index.Insert("n0", 3);  // the same name again moves it
  EXPECT_EQ(index.Find("n0"), 3u);
  EXPECT_EQ(index.size(), 2u);
}

// Thousands of names inserted and erased at random (reusing slots as the ledger does),
// checked against std::map after every step: erasing from the middle of a probe run must
// leave every other name reachable.
TEST(NodeNameIndex, AgreesWithAMapUnderRandomInsertsAndErases) {
  std::mt19937 rng(15);
  NodeNameIndex index;
  std::map<std::string, uint32_t> want;
  std::vector<uint32_t> free_slots;
  uint32_t next_slot = 0;
  for (int step = 0; step < 20000; ++step) {
    std::string name = "node-" + std::to_string(rng() % 3000);
    auto it = want.find(name);
    if (it != want.end() && rng() % 2) {
      index.Erase(name);
      free_slots.push_back(it->second);
      want.erase(it);
    } else if (it == want.end()) {
      uint32_t slot = next_slot++;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      }
      index.Insert(name, slot);
      want[name] = slot;
    }
    if (step % 97 == 0) {
      ASSERT_EQ(index.size(), want.size());
      for (const auto& [n, slot] : want) ASSERT_EQ(index.Find(n), slot) << n << " at step " << step;
      ASSERT_EQ(index.Find("node-x"), NodeNameIndex::kNone);
    }
  }
  for (int i = 0; i < 3000; ++i) {
    std::string name = "node-" + std::to_string(i);
    auto it = want.find(name);
    EXPECT_EQ(index.Find(name), it == want.end() ? NodeNameIndex::kNone : it->second) << name;
  }
}

// FindNext's hints (the slot that followed the previous name last time) never change an
// answer: walking lists in one order, in another, after names moved slots or left, with a
// name unknown to the index in between, every lookup agrees with Find.
TEST(NodeNameIndex, FindNextAgreesWithFindWhateverTheHintsSay) {
  std::mt19937 rng(7);
  NodeNameIndex index;
  std::vector<std::string> names;
  for (int i = 0; i < 500; ++i) {
    names.push_back("node-" + std::to_string(i));
    index.Insert(names.back(), static_cast<uint32_t>(i));
  }
  auto walk = [&](const std::vector<std::string>& list) {
    uint32_t previous = NodeNameIndex::kNone;
    for (const auto& n : list) {
      uint32_t slot = index.FindNext(n, previous);
      ASSERT_EQ(slot, index.Find(n)) << n;
      previous = slot;
    }
  };
  for (int round = 0; round < 40; ++round) {
    std::vector<std::string> list = names;
    if (round % 4 == 1) std::shuffle(list.begin(), list.end(), rng);   // another order
    if (round % 4 == 2) list.insert(list.begin() + 17, "not-a-node");  // an unknown name
    if (round % 4 == 3) {  // names leave, their slots go to new names, names move slots
      for (int k = 0; k < 10; ++k) {
        size_t a = rng() % names.size(), b = rng() % names.size();
        uint32_t freed = index.Find(names[a]);
        index.Erase(names[a]);
        names[a] = "new-" + std::to_string(round) + "-" + std::to_string(k);
        index.Insert(names[a], freed);
        if (b == a) continue;
        index.Erase(names[b]);
        index.Insert(names[b], static_cast<uint32_t>(1000 + round * 10 + k));
      }
    }
    walk(list);
    walk(list);                   // the same order again: now from the hints
    for (const auto& n : list) {  // any guess, right or wrong
      uint32_t guess = static_cast<uint32_t>(rng() % 1500);
      ASSERT_EQ(index.FindAt(n, guess), index.Find(n)) << n << " guessed at " << guess;
      ASSERT_EQ(index.FindAt(n, index.Find(n)), index.Find(n)) << n;
    }
  }
  // An erased slot holds no name, not even the empty one.
  uint32_t erased = index.Find(names[0]);
  index.Erase(names[0]);
  EXPECT_EQ(index.FindAt("", erased), NodeNameIndex::kNone);
  EXPECT_EQ(index.FindNext("", erased), NodeNameIndex::kNone);
}

}  // namespace
}  // namespace gs::scheduler
