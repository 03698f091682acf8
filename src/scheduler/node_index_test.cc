#include "src/scheduler/node_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

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

}  // namespace
}  // namespace gs::scheduler
