#include "src/scheduler/ledger.h"

#include <gtest/gtest.h>

#include "src/scheduler/test_nodes.h"

namespace gs::scheduler {
namespace {

using testing::Node;

PodDecision OneShare(const std::string& node, const std::string& uuid, int64_t mem, int cores) {
  PodDecision d;
  d.node = node;
  d.containers = {{DeviceShare{uuid, "m", mem, cores}}};
  return d;
}

TEST(Ledger, ReserveTakesCapacityAndReleaseGivesItBack) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 2)).ok());
  ASSERT_TRUE(l.Reserve("pod-a", OneShare("n1", "n1-gpu0", 10000, 30)).ok());
  EXPECT_EQ(l.FindNode("n1")->used[0].memory_mib, 10000);
  EXPECT_EQ(l.FindNode("n1")->used[0].cores, 30);
  EXPECT_EQ(l.FindNode("n1")->used[0].containers, 1);
  EXPECT_TRUE(l.Release("pod-a"));
  EXPECT_EQ(l.FindNode("n1")->used[0].memory_mib, 0);
  EXPECT_EQ(l.FindNode("n1")->used[0].containers, 0);
  EXPECT_TRUE(l.CheckConsistency().ok());
}

TEST(Ledger, ReleaseIsIdempotent) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1)).ok());
  ASSERT_TRUE(l.Reserve("pod-a", OneShare("n1", "n1-gpu0", 1000, 10)).ok());
  EXPECT_TRUE(l.Release("pod-a"));
  EXPECT_FALSE(l.Release("pod-a"));
  EXPECT_FALSE(l.Release("never-seen"));
  EXPECT_EQ(l.FindNode("n1")->used[0].memory_mib, 0);
  EXPECT_EQ(l.FindNode("n1")->used[0].containers, 0);
}

TEST(Ledger, ReserveRechecksCapacityAndTakesNothingOnFailure) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 2, 40960)).ok());
  ASSERT_TRUE(l.Reserve("a", OneShare("n1", "n1-gpu0", 30000, 10)).ok());
  PodDecision two;
  two.node = "n1";
  two.containers = {{DeviceShare{"n1-gpu1", "m", 20000, 10}, DeviceShare{"n1-gpu0", "m", 20000, 10}}};
  Status s = l.Reserve("b", two);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("n1-gpu0"), std::string::npos) << s.message();
  EXPECT_EQ(l.FindNode("n1")->used[1].memory_mib, 0) << "all or nothing";
  EXPECT_EQ(l.FindPod("b"), nullptr);
}

TEST(Ledger, ReserveSameDecisionTwiceIsANoOpAndADifferentOneIsRefused) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 2)).ok());
  ASSERT_TRUE(l.Reserve("a", OneShare("n1", "n1-gpu0", 1000, 10)).ok());
  ASSERT_TRUE(l.Reserve("a", OneShare("n1", "n1-gpu0", 1000, 10)).ok());
  EXPECT_EQ(l.FindNode("n1")->used[0].memory_mib, 1000);
  EXPECT_FALSE(l.Reserve("a", OneShare("n1", "n1-gpu1", 1000, 10)).ok());
}

TEST(Ledger, ExclusiveShareNeedsAnUnusedCard) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1)).ok());
  ASSERT_TRUE(l.Reserve("a", OneShare("n1", "n1-gpu0", 100, 0)).ok());
  EXPECT_FALSE(l.Reserve("b", OneShare("n1", "n1-gpu0", 100, 100)).ok());
}

TEST(Ledger, UnknownNodeOrCardIsNamed) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1)).ok());
  Status s = l.Reserve("a", OneShare("n2", "x", 1, 1));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("n2"), std::string::npos);
  s = l.Reserve("a", OneShare("n1", "GPU-nope", 1, 1));
  EXPECT_NE(s.message().find("GPU-nope"), std::string::npos);
}

TEST(Ledger, CommitMarksThePodCommitted) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1)).ok());
  ASSERT_TRUE(l.Reserve("a", OneShare("n1", "n1-gpu0", 1, 1)).ok());
  EXPECT_EQ(l.FindPod("a")->phase, LedgerPhase::kReserved);
  ASSERT_TRUE(l.Commit("a").ok());
  EXPECT_EQ(l.FindPod("a")->phase, LedgerPhase::kCommitted);
  EXPECT_EQ(l.Commit("b").code(), StatusCode::kNotFound);
}

TEST(Ledger, RebuildRestoresUsageAndRefusesDoubleAllocations) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1, 40960)).ok());
  ASSERT_TRUE(l.Reserve("stale", OneShare("n1", "n1-gpu0", 40000, 10)).ok());
  std::vector<LedgerRecord> records = {
      {"a", OneShare("n1", "n1-gpu0", 30000, 50)},
      {"b", OneShare("n1", "n1-gpu0", 20000, 10)},  // would exceed 40960 MiB
      {"a", OneShare("n1", "n1-gpu0", 1, 1)},       // same UID again
      {"c", OneShare("n1", "n1-gpu0", 10000, 60)},  // would exceed 100 cores
      {"d", OneShare("n1", "n1-gpu0", 10000, 50)},
  };
  RebuildReport r = l.Rebuild(records);
  EXPECT_EQ(r.applied, 2);
  ASSERT_EQ(r.refused.size(), 3u);
  EXPECT_NE(r.refused[0].find("pod b"), std::string::npos) << r.refused[0];
  EXPECT_EQ(l.FindPod("stale"), nullptr) << "rebuild starts from the records only";
  EXPECT_EQ(l.FindNode("n1")->used[0].memory_mib, 40000);
  EXPECT_EQ(l.FindNode("n1")->used[0].cores, 100);
  EXPECT_TRUE(l.CheckConsistency().ok());
}

TEST(Ledger, RecordForANodeNotYetKnownCountsWhenTheNodeArrives) {
  ClusterLedger l;
  RebuildReport r = l.Rebuild({{"a", OneShare("late", "late-gpu0", 5000, 20)}});
  EXPECT_EQ(r.applied, 1);
  ASSERT_TRUE(l.UpsertNode(Node("late", 1)).ok());
  EXPECT_EQ(l.FindNode("late")->used[0].memory_mib, 5000);
  // Re-announcing the node (same inventory) keeps the count, it does not double it.
  ASSERT_TRUE(l.UpsertNode(Node("late", 1)).ok());
  EXPECT_EQ(l.FindNode("late")->used[0].memory_mib, 5000);
  EXPECT_TRUE(l.CheckConsistency().ok());
}

// The fit loop reads each node's cards from one array (ledger.h) that moves a node's
// cards when its card count changes and compacts itself: through nodes that grow,
// shrink, leave and come back with pods on them, every lookup must find the node's own
// current cards and usage (CheckConsistency compares the array with the records).
TEST(Ledger, NodesThatChangeTheirCardCountKeepTheirUsageVisibleToTheFitLoop) {
  ClusterLedger l;
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(l.UpsertNode(Node("n" + std::to_string(i), 8)).ok());
  for (int i = 0; i < 400; i += 4)
    ASSERT_TRUE(l.Reserve("p" + std::to_string(i),
                          OneShare("n" + std::to_string(i), "n" + std::to_string(i) + "-gpu1", 1000 + i, 10))
                    .ok());
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 400; ++i) {
      std::string name = "n" + std::to_string(i);
      if (i % 10 == round) {
        l.RemoveNode(name);
        EXPECT_EQ(l.FindNode(name), nullptr);
        EXPECT_EQ(l.Lookup(name).node, nullptr);
      }
      ASSERT_TRUE(l.UpsertNode(Node(name, round % 2 == 0 ? 2 + i % 3 : 8)).ok());
    }
    Status c = l.CheckConsistency();
    ASSERT_TRUE(c.ok()) << "round " << round << ": " << c.message();
  }
  NodeView view = l.Lookup("n8");
  ASSERT_NE(view.node, nullptr);
  ASSERT_EQ(view.cards.size(), 2u + 8 % 3) << "the inventory of the last round";
  EXPECT_EQ(view.cards[1].used.memory_mib, 1008) << "pod p8 kept its share through every change";
  EXPECT_EQ(view.totals->used.containers, 1);
  EXPECT_EQ(l.Lookup("n9").cards[1].used.memory_mib, 0);
}

TEST(Ledger, UpsertRejectsABadInventoryNamingTheField) {
  ClusterLedger l;
  NodeInventory n = Node("n1", 2);
  n.gpus[1].uuid = n.gpus[0].uuid;
  Status s = l.UpsertNode(n);
  EXPECT_NE(s.message().find("twice"), std::string::npos) << s.message();
  n = Node("n1", 1);
  n.gpus[0].cores = 0;
  EXPECT_NE(l.UpsertNode(n).message().find("cores"), std::string::npos);
}

}  // namespace
}  // namespace gs::scheduler
