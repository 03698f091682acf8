#include "src/scheduler/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "src/scheduler/test_nodes.h"

namespace gs::scheduler {
namespace {

using testing::Card;
using testing::Node;

PodRequest Pod(const std::string& uid, int gpus, int64_t mem_mib, int cores) {
  PodRequest r;
  r.uid = uid;
  r.containers = {ContainerRequest{gpus, mem_mib, 0, cores}};
  return r;
}

// Reserves a fresh pod on `node` with the ledger's own decision; fails the test if it cannot.
void Place(ClusterLedger* l, const PodRequest& r, const std::string& node, Policies p = {}) {
  FitScratch s;
  auto d = Decide(*l, r, node, p, &s);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_TRUE(l->Reserve(r.uid, *d).ok());
}

TEST(Placement, MemoryByMibByPercentOrWholeCard) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1, 40000)).ok());
  FitScratch s;
  PodRequest r = Pod("a", 1, 0, 10);
  r.containers[0].memory_percent = 25;
  auto d = Decide(l, r, "n1", {}, &s);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->containers[0][0].memory_mib, 10000);
  r.containers[0].memory_percent = 0;
  d = Decide(l, r, "n1", {}, &s);
  EXPECT_EQ(d->containers[0][0].memory_mib, 40000) << "neither gpumem nor percentage: the whole card";
  r.containers[0].memory_mib = 123;
  r.containers[0].memory_percent = 50;
  d = Decide(l, r, "n1", {}, &s);
  EXPECT_EQ(d->containers[0][0].memory_mib, 123) << "gpumem wins over the percentage";
}

TEST(Placement, NoCardGoesOverItsMemoryOrCores) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1, 40000)).ok());
  Place(&l, Pod("a", 1, 30000, 30), "n1");
  FitScratch s;
  EXPECT_FALSE(FitPod(*l.FindNode("n1"), Pod("b", 1, 10001, 10), Policy::kSpread, &s));
  EXPECT_NE(s.reason.find("too little free memory"), std::string::npos) << s.reason;
  EXPECT_FALSE(FitPod(*l.FindNode("n1"), Pod("b", 1, 100, 71), Policy::kSpread, &s));
  EXPECT_NE(s.reason.find("too few free cores"), std::string::npos) << s.reason;
  EXPECT_TRUE(FitPod(*l.FindNode("n1"), Pod("b", 1, 10000, 70), Policy::kSpread, &s));
}

TEST(Placement, SlotsLimitHowManyContainersShareACard) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1, 40000, /*slots=*/2)).ok());
  Place(&l, Pod("a", 1, 1, 0), "n1");
  Place(&l, Pod("b", 1, 1, 0), "n1");
  FitScratch s;
  EXPECT_FALSE(FitPod(*l.FindNode("n1"), Pod("c", 1, 1, 0), Policy::kSpread, &s));
  EXPECT_NE(s.reason.find("all slots in use"), std::string::npos) << s.reason;
}

TEST(Placement, HundredCoresMeansAWholeUnusedCard) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 2, 40000)).ok());
  Place(&l, Pod("small", 1, 100, 0), "n1");
  FitScratch s;
  auto d = Decide(l, Pod("whole", 1, 100, 100), "n1", {}, &s);
  ASSERT_TRUE(d.ok());
  std::string used_card = l.FindPod("small")->decision.containers[0][0].uuid;
  EXPECT_NE(d->containers[0][0].uuid, used_card);
  ASSERT_TRUE(l.Reserve("whole", *d).ok());
  // Both cards now taken: one exclusively (no one may join, even with cores = 0), one shared.
  EXPECT_FALSE(FitPod(*l.FindNode("n1"), Pod("x", 1, 100, 100), Policy::kSpread, &s));
  EXPECT_NE(s.reason.find("exclusive"), std::string::npos) << s.reason;
  auto z = Decide(l, Pod("zero", 1, 100, 0), "n1", {}, &s);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->containers[0][0].uuid, used_card) << "cores = 0 may not join the exclusive card";
}

TEST(Placement, SeveralCardsPerContainerAreDistinct) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 4, 40000)).ok());
  FitScratch s;
  auto d = Decide(l, Pod("a", 3, 1000, 10), "n1", {}, &s);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->containers[0].size(), 3u);
  EXPECT_NE(d->containers[0][0].uuid, d->containers[0][1].uuid);
  EXPECT_NE(d->containers[0][1].uuid, d->containers[0][2].uuid);
  EXPECT_NE(d->containers[0][0].uuid, d->containers[0][2].uuid);
  EXPECT_FALSE(Decide(l, Pod("b", 5, 1000, 10), "n1", {}, &s).ok());
  EXPECT_NE(s.reason.find("4 of 4 cards fit"), std::string::npos) << s.reason;
}

TEST(Placement, MultiContainerPodSeesItsOwnEarlierContainers) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 1, 40000)).ok());
  PodRequest r;
  r.uid = "p";
  r.containers = {ContainerRequest{1, 25000, 0, 10}, ContainerRequest{0, 0, 0, 0}, ContainerRequest{1, 25000, 0, 10}};
  FitScratch s;
  EXPECT_FALSE(FitPod(*l.FindNode("n1"), r, Policy::kSpread, &s)) << "2 x 25000 MiB on one 40000 MiB card";
  EXPECT_NE(s.reason.find("container #2"), std::string::npos) << s.reason;
  r.containers[2].memory_mib = 15000;
  ASSERT_TRUE(FitPod(*l.FindNode("n1"), r, Policy::kSpread, &s));
  PodDecision d = ToDecision(*l.FindNode("n1"), r, s);
  ASSERT_EQ(d.containers.size(), 3u);
  EXPECT_TRUE(d.containers[1].empty());
  ASSERT_TRUE(l.Reserve("p", d).ok());
  EXPECT_EQ(l.FindNode("n1")->used[0].memory_mib, 40000);
  EXPECT_EQ(l.FindNode("n1")->used[0].containers, 2);
}

TEST(Placement, TypeIncludeExcludeIsACaseInsensitiveSubstring) {
  NodeInventory n;
  n.name = "n1";
  n.gpus = {Card("a", 0, 40000, 0, "NVIDIA-A100-SXM4-40GB"), Card("h", 1, 80000, 0, "NVIDIA-H100-80GB-HBM3")};
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(n).ok());
  FitScratch s;
  PodRequest r = Pod("p", 1, 1000, 10);
  r.use_types = {"h100"};
  EXPECT_EQ(Decide(l, r, "n1", {}, &s)->containers[0][0].uuid, "h");
  r.use_types = {};
  r.nouse_types = {"H100", "V100"};
  EXPECT_EQ(Decide(l, r, "n1", {}, &s)->containers[0][0].uuid, "a");
  r.nouse_types = {"nvidia"};
  EXPECT_FALSE(Decide(l, r, "n1", {}, &s).ok());
  EXPECT_NE(s.reason.find("2 of an excluded type"), std::string::npos) << s.reason;
}

TEST(Placement, UuidIncludeExcludeMatchExactly) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 3)).ok());
  FitScratch s;
  PodRequest r = Pod("p", 1, 1000, 10);
  r.use_uuids = {"n1-gpu2"};
  EXPECT_EQ(Decide(l, r, "n1", {}, &s)->containers[0][0].uuid, "n1-gpu2");
  r.use_uuids = {"n1-gpu"};
  EXPECT_FALSE(Decide(l, r, "n1", {}, &s).ok()) << "a prefix is not a UUID";
  r.use_uuids = {};
  r.nouse_uuids = {"n1-gpu0", "n1-gpu1"};
  EXPECT_EQ(Decide(l, r, "n1", {}, &s)->containers[0][0].uuid, "n1-gpu2");
}

// The index is the card's "index" in the node's inventory (hami.io/node-nvidia-register),
// not its position in the list: a node agent that leaves a card out registers the others
// with their own indexes.
TEST(Placement, IndexIncludeExcludeMatchTheRegisteredIndex) {
  NodeInventory n;
  n.name = "n1";
  n.gpus = {Card("c3", 3, 40000), Card("c5", 5, 40000), Card("c7", 7, 40000)};
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(n).ok());
  struct Case {
    std::vector<int> use, nouse;
    int gpus;
    std::vector<std::string> want;  // empty: does not fit
    const char* reason;             // when it does not fit
  } cases[] = {
      {{5}, {}, 1, {"c5"}, ""},
      {{0, 1}, {}, 1, {}, "0 of 3 cards fit (3 excluded by index)"},  // positions 0 and 1 are not indexes 0 and 1
      {{1, 7}, {}, 1, {"c7"}, ""},
      {{}, {3, 7}, 1, {"c5"}, ""},
      {{}, {3}, 2, {"c5", "c7"}, ""},
      {{}, {3, 5, 7}, 1, {}, "0 of 3 cards fit (3 excluded by index)"},
      {{3, 5}, {5}, 1, {"c3"}, ""},  // both lists apply
      {{5}, {5}, 1, {}, "0 of 3 cards fit (3 excluded by index)"},
      {{3, 5}, {}, 3, {}, "2 of 3 cards fit (1 excluded by index)"},
  };
  FitScratch s;
  for (const Case& c : cases) {
    PodRequest r = Pod("p", c.gpus, 1000, 10);
    r.use_indexes = c.use;
    r.nouse_indexes = c.nouse;
    std::string what = "use " + ::testing::PrintToString(c.use) + " nouse " + ::testing::PrintToString(c.nouse);
    auto d = Decide(l, r, "n1", {}, &s);
    if (c.want.empty()) {
      EXPECT_FALSE(d.ok()) << what;
      EXPECT_NE(s.reason.find(c.reason), std::string::npos) << what << ": " << s.reason;
      FilterResult f = Filter(l, r, std::vector<std::string>{"n1"}, {}, &s);
      ASSERT_EQ(f.failed.size(), 1u) << what;
      EXPECT_NE(f.reason(0).find("excluded by index"), std::string::npos) << what << ": " << f.reason(0);
      continue;
    }
    ASSERT_TRUE(d.ok()) << what << ": " << d.status().message();
    std::vector<std::string> got;
    for (const DeviceShare& share : d->containers[0]) got.push_back(share.uuid);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, c.want) << what;
    FilterResult f = Filter(l, r, std::vector<std::string>{"n1"}, {}, &s);
    EXPECT_EQ(f.feasible, std::vector<int>{0}) << what;
  }
}

// A pod that states something gpuslice does not implement is placed nowhere, with that
// as the reason on every node, never as if it had not said it.
TEST(Placement, ARefusedPodFitsNowhereAndSaysWhy) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 2)).ok());
  ASSERT_TRUE(l.UpsertNode(Node("n2", 2)).ok());
  PodRequest r = Pod("p", 1, 1000, 10);
  r.refused = "nvidia.com/vgpu-mode 'mig' is not supported by gpuslice";
  std::vector<std::string> names = {"n1", "n2", "ghost"};
  FitScratch s;
  ScoreMemo memo;
  std::vector<std::string_view> views(names.begin(), names.end());
  FilterResult f = Filter(l, r, views, {}, &s, &memo);
  EXPECT_TRUE(f.feasible.empty());
  ASSERT_EQ(f.failed.size(), 3u);
  for (size_t k = 0; k < f.failed.size(); ++k) {
    EXPECT_EQ(f.failed[k].first, static_cast<int>(k));
    EXPECT_EQ(f.reason(k), r.refused);
  }
  EXPECT_EQ(Prioritize(l, r, names, {}, &s), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(Prioritize(l, r, views, {}, &s, &memo), (std::vector<int>{0, 0, 0}));
  auto d = Decide(l, r, "n1", {}, &s);
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), r.refused);
  r.refused.clear();
  EXPECT_EQ(Filter(l, r, names, {}, &s).feasible, (std::vector<int>{0, 1})) << "the same pod without it fits";
}

TEST(Placement, UnhealthyCardsAreSkipped) {
  NodeInventory n = Node("n1", 2);
  n.gpus[0].healthy = false;
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(n).ok());
  FitScratch s;
  EXPECT_EQ(Decide(l, Pod("p", 1, 1, 1), "n1", {}, &s)->containers[0][0].uuid, "n1-gpu1");
  EXPECT_FALSE(Decide(l, Pod("p", 2, 1, 1), "n1", {}, &s).ok());
  EXPECT_NE(s.reason.find("1 unhealthy"), std::string::npos) << s.reason;
}

TEST(Placement, NumaBindKeepsAContainersCardsOnOneNumaNode) {
  // 4 cards: gpu0, gpu1 on NUMA 0; gpu2, gpu3 on NUMA 1. Fill gpu1 so NUMA 0 has one free card.
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 4, 40000)).ok());
  PodRequest filler = Pod("f", 1, 40000, 10);
  filler.use_uuids = {"n1-gpu1"};
  Place(&l, filler, "n1");
  PodRequest r = Pod("p", 2, 1000, 10);
  r.numa_bind = true;
  Policies binpack{Policy::kBinpack, Policy::kBinpack};
  FitScratch s;
  auto d = Decide(l, r, "n1", binpack, &s);
  ASSERT_TRUE(d.ok()) << s.reason;
  EXPECT_EQ(d->containers[0][0].uuid, "n1-gpu2");
  EXPECT_EQ(d->containers[0][1].uuid, "n1-gpu3");
  r.containers[0].gpus = 3;
  EXPECT_FALSE(Decide(l, r, "n1", binpack, &s).ok());
  EXPECT_NE(s.reason.find("no NUMA node has 3"), std::string::npos) << s.reason;
  r.numa_bind = false;
  EXPECT_TRUE(Decide(l, r, "n1", binpack, &s).ok()) << "without numa-bind any 3 cards do";
}

TEST(Placement, GpuBinpackPicksTheFullestCardAndSpreadTheEmptiest) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("n1", 3, 40000)).ok());
  PodRequest a = Pod("a", 1, 20000, 20);
  a.use_uuids = {"n1-gpu1"};
  Place(&l, a, "n1");
  FitScratch s;
  Policies binpack{Policy::kBinpack, Policy::kBinpack};
  Policies spread{Policy::kBinpack, Policy::kSpread};
  EXPECT_EQ(Decide(l, Pod("p", 1, 1000, 10), "n1", binpack, &s)->containers[0][0].uuid, "n1-gpu1");
  EXPECT_EQ(Decide(l, Pod("p", 1, 1000, 10), "n1", spread, &s)->containers[0][0].uuid, "n1-gpu0");
  // The pod's own annotation overrides the default.
  PodRequest p = Pod("p", 1, 1000, 10);
  p.gpu_policy = Policy::kBinpack;
  EXPECT_EQ(Decide(l, p, "n1", spread, &s)->containers[0][0].uuid, "n1-gpu1");
}

TEST(Placement, NodeBinpackScoresTheFullerNodeHigherAndSpreadLower) {
  ClusterLedger l;
  ASSERT_TRUE(l.UpsertNode(Node("busy", 2, 40000)).ok());
  ASSERT_TRUE(l.UpsertNode(Node("idle", 2, 40000)).ok());
  Place(&l, Pod("a", 2, 30000, 60), "busy");
  std::vector<std::string> names = {"busy", "idle"};
  FitScratch s;
  PodRequest p = Pod("p", 1, 1000, 10);
  auto bin = Prioritize(l, p, names, Policies{Policy::kBinpack, Policy::kSpread}, &s);
  EXPECT_GT(bin[0], bin[1]);
  auto spr = Prioritize(l, p, names, Policies{Policy::kSpread, Policy::kSpread}, &s);
  EXPECT_LT(spr[0], spr[1]);
  for (int v : bin) EXPECT_TRUE(v >= 0 && v <= 10);
  for (int v : spr) EXPECT_TRUE(v >= 0 && v <= 10);
  p.node_policy = Policy::kSpread;
  auto own = Prioritize(l, p, names, Policies{Policy::kBinpack, Policy::kSpread}, &s);
  EXPECT_LT(own[0], own[1]) << "hami.io/node-scheduler-policy on the pod wins";
}

TEST(Placement, FilterReturnsEveryFeasibleNodeAndAReasonForEachOther) {
  ClusterLedger l;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(l.UpsertNode(Node("n" + std::to_string(i), 1, 40000)).ok());
  Place(&l, Pod("big", 1, 39000, 10), "n3");
  std::vector<std::string> names = {"n0", "n1", "n2", "n3", "n4", "ghost"};
  FitScratch s;
  FilterResult f = Filter(l, Pod("p", 1, 2000, 10), names, {}, &s);
  EXPECT_EQ(f.feasible, (std::vector<int>{0, 1, 2, 4}));
  ASSERT_EQ(f.failed.size(), 2u);
  EXPECT_EQ(f.failed[0].first, 3);
  EXPECT_EQ(f.reason(0), "GPUs for container #0: too little free memory");
  EXPECT_EQ(f.failed[1].first, 5);
  EXPECT_NE(f.reason(1).find("no GPU inventory"), std::string::npos);
  EXPECT_EQ(l.pod_count(), 1u) << "filter changes nothing";
}

TEST(Placement, FilterReasonsAreFewAndNameTheCausesNotTheirCounts) {
  ClusterLedger l;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(l.UpsertNode(Node("n" + std::to_string(i), 2, 40000, 2)).ok());
  Place(&l, Pod("a", 1, 39000, 10), "n0");  // n0: one card short of memory
  Place(&l, Pod("b", 2, 39000, 10), "n1");  // n1: both cards short of memory
  Place(&l, Pod("c", 1, 1000, 10), "n2");
  Place(&l, Pod("d", 1, 1000, 10), "n2");
  Place(&l, Pod("e", 1, 1000, 10), "n2");
  Place(&l, Pod("f", 1, 1000, 10), "n2");  // n2: both cards' slots full
  std::vector<std::string> names = {"n0", "n1", "n2", "n3"};
  FitScratch s;
  FilterResult f = Filter(l, Pod("p", 2, 2000, 10), names, {}, &s);
  EXPECT_EQ(f.feasible, (std::vector<int>{3}));
  ASSERT_EQ(f.failed.size(), 3u);
  EXPECT_EQ(f.reason(0), f.reason(1)) << "1 of 2 and 0 of 2 cards short of memory read alike";
  EXPECT_EQ(f.reason(1), "GPUs for container #0: too little free memory");
  EXPECT_EQ(f.reason(2), "GPUs for container #0: all slots in use");
  EXPECT_EQ(f.reasons.size(), 2u) << "each distinct text once";
  // FitPod and Decide still count.
  EXPECT_FALSE(FitPod(*l.FindNode("n0"), Pod("p", 2, 2000, 10), Policy::kSpread, &s));
  EXPECT_NE(s.reason.find("1 of 2 cards fit (1 too little free memory)"), std::string::npos) << s.reason;
}

TEST(Placement, PrioritizeTakesFilterScoresOnlyForNodesThatDidNotChange) {
  ClusterLedger l;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.UpsertNode(Node("n" + std::to_string(i), 2, 40000)).ok());
  std::vector<std::string_view> names = {"n0", "n1", "n2", "ghost"};
  PodRequest p = Pod("p", 1, 4000, 20);
  FitScratch s;
  ScoreMemo memo;
  FilterResult f = Filter(l, p, names, {}, &s, &memo);
  EXPECT_EQ(f.feasible.size(), 3u);
  EXPECT_EQ(Prioritize(l, p, names, {}, &s, &memo), Prioritize(l, p, names, {}, &s));
  // Usage changes on n0 and n1, the inventory on n2: no stale score may come back.
  Place(&l, Pod("a", 2, 30000, 50), "n0");
  Place(&l, Pod("b", 1, 39000, 10), "n1");
  ASSERT_TRUE(l.UpsertNode(Node("n2", 2, 80000)).ok());
  EXPECT_EQ(Prioritize(l, p, names, {}, &s, &memo), Prioritize(l, p, names, {}, &s));
  EXPECT_GT(Prioritize(l, p, names, {}, &s)[0], 0);
  ASSERT_TRUE(l.Release("a"));
  EXPECT_EQ(Prioritize(l, p, names, {}, &s, &memo), Prioritize(l, p, names, {}, &s));
  // A node removed and another added in its slot: a new version, so nothing stale.
  (void)Filter(l, p, names, {}, &s, &memo);
  l.RemoveNode("n1");
  ASSERT_TRUE(l.UpsertNode(Node("n9", 2, 40000)).ok());
  Place(&l, Pod("c", 2, 30000, 50), "n9");
  names[1] = "n9";
  EXPECT_EQ(Prioritize(l, p, names, {}, &s, &memo), Prioritize(l, p, names, {}, &s));
  // A memo in which every score is wrong is used only where versions match.
  ScoreMemo wrong = memo;
  for (auto& v : wrong.score) v = 7;
  std::vector<int> fresh = Prioritize(l, p, names, {}, &s);
  std::vector<int> with_wrong = Prioritize(l, p, names, {}, &s, &wrong);
  EXPECT_EQ(with_wrong[1], fresh[1]) << "n9 took n1's slot after the filter";
}

// Filter and Prioritize count fitting cards and score from a node's totals where no
// choice of cards can matter (placement.cc's CountAndScore); FitPod chooses the cards.
// On random clusters (cards of mixed memory, cores and slots within a node, three NUMA
// nodes, unhealthy cards) and random pods (one or two GPU containers, MiB, percent or
// whole cards, exclusive, numa-bind, type lists) both must say the same of every node:
// feasible or not, the same score, and a reason naming exactly the causes FitPod found.
TEST(Placement, FilterAndPrioritizeAgreeWithChoosingTheCardsOnEveryNode) {
  std::mt19937 rng(5000);
  const int64_t kMemory[] = {24576, 40960, 49152, 81920};
  ClusterLedger l;
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) {
    NodeInventory n;
    n.name = "n" + std::to_string(i);
    int cards = static_cast<int>(rng() % 9);  // 0..8, some nodes without GPUs
    for (int g = 0; g < cards; ++g) {
      GpuDevice d = Card(n.name + "-gpu" + std::to_string(g), g, kMemory[i % 4], static_cast<int>(rng() % 3),
                         i % 2 ? "NVIDIA-L4-24GB" : "NVIDIA-H100-80GB-HBM3", 1 + static_cast<int>(rng() % 4));
      if (i % 5 == 0) d.memory_mib = kMemory[rng() % 4];  // cards of mixed memory on one node
      if (i % 7 == 0) d.cores = 50 + static_cast<int>(rng() % 51);
      d.healthy = rng() % 15 != 0;
      n.gpus.push_back(d);
    }
    ASSERT_TRUE(l.UpsertNode(n).ok());
    names.push_back(n.name);
  }
  std::vector<std::string_view> views(names.begin(), names.end());
  auto random_pod = [&](const std::string& uid) {
    PodRequest r;
    r.uid = uid;
    int containers = 1 + static_cast<int>(rng() % 2);
    for (int c = 0; c < containers; ++c) {
      ContainerRequest cr;
      cr.gpus = static_cast<int>(rng() % 4);
      int memory = static_cast<int>(rng() % 3);
      if (memory == 0) cr.memory_mib = 1000 + static_cast<int64_t>(rng() % 40000);
      if (memory == 1) cr.memory_percent = 5 + static_cast<int>(rng() % 60);
      cr.cores = rng() % 8 == 0 ? 100 : rng() % 5 == 0 ? 0 : static_cast<int>(rng() % 60);
      r.containers.push_back(cr);
    }
    r.numa_bind = rng() % 3 == 0;
    if (rng() % 6 == 0) r.use_types = {"h100"};
    if (rng() % 6 == 0) r.use_indexes = {static_cast<int>(rng() % 4), 4 + static_cast<int>(rng() % 4)};
    if (rng() % 6 == 0) r.nouse_indexes = {static_cast<int>(rng() % 8)};
    return r;
  };
  FitScratch s, check;
  int compared = 0, feasible = 0;
  for (int step = 0; step < 400; ++step) {
    // Fill and churn: a random pod goes where it fits first, or a random one leaves.
    PodRequest filler = random_pod("fill-" + std::to_string(step));
    for (const std::string& name : names) {
      auto d = Decide(l, filler, name, {}, &s);
      if (d.ok() && l.Reserve(filler.uid, *d).ok()) break;
    }
    if (step % 3 == 0) (void)l.Release("fill-" + std::to_string(rng() % (step + 1)));

    PodRequest r = random_pod("p");
    Policies p{rng() % 2 ? Policy::kBinpack : Policy::kSpread, rng() % 2 ? Policy::kBinpack : Policy::kSpread};
    ScoreMemo memo;
    FilterResult f = Filter(l, r, views, p, &s, &memo);
    std::vector<int> scores = Prioritize(l, r, views, p, &s);
    ASSERT_EQ(Prioritize(l, r, views, p, &s, &memo), scores);
    size_t next_feasible = 0, next_failed = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const NodeState& node = *l.FindNode(names[i]);
      bool fits = FitCards(node, r, r.gpu_policy.value_or(p.gpu), &check);
      std::string where = "step " + std::to_string(step) + " node " + names[i];
      ++compared;
      if (fits) {
        ++feasible;
        ASSERT_TRUE(next_feasible < f.feasible.size() && f.feasible[next_feasible] == static_cast<int>(i)) << where;
        ++next_feasible;
        EXPECT_EQ(scores[i], ScoreNode(node, check, r.node_policy.value_or(p.node))) << where;
        continue;
      }
      ASSERT_TRUE(next_failed < f.failed.size() && f.failed[next_failed].first == static_cast<int>(i)) << where;
      const std::string& reason = f.reason(next_failed++);
      EXPECT_EQ(scores[i], 0) << where;
      const FitFailure& why = check.failure;
      if (why.cards == 0) {
        EXPECT_EQ(reason, "node has no GPUs") << where;
        continue;
      }
      EXPECT_EQ(reason.rfind("GPUs for container #" + std::to_string(why.container) + ": ", 0), 0u)
          << where << ": " << reason;
      EXPECT_EQ(reason.find("numa-bind") != std::string::npos, why.numa_short) << where << ": " << reason;
      if (why.numa_short) continue;
      EXPECT_EQ(reason.find("of an excluded type") != std::string::npos, why.type > 0) << where << ": " << reason;
      EXPECT_EQ(reason.find("excluded by index") != std::string::npos, why.index > 0) << where << ": " << reason;
      for (int v = 1; v < kCardVerdicts; ++v)
        EXPECT_EQ(reason.find(VerdictText(static_cast<CardVerdict>(v))) != std::string::npos, why.verdict[v] > 0)
            << where << ": " << reason;
    }
    EXPECT_EQ(next_feasible, f.feasible.size());
    EXPECT_EQ(next_failed, f.failed.size());
    Status c = l.CheckConsistency();
    ASSERT_TRUE(c.ok()) << "step " << step << ": " << c.message();
  }
  EXPECT_GT(feasible, compared / 5) << "the comparison should see many feasible nodes";
  EXPECT_GT(compared - feasible, compared / 5) << "and many infeasible ones";
}

// Random churn over a small cluster: pods of random shapes are placed wherever the
// filter and score say, and random ones leave. After every step the ledger must be
// consistent: no card over its memory, cores or slots, usage equal to the pods' shares.
TEST(Placement, NoCardEverOverCommittedUnderRandomChurn) {
  std::mt19937 rng(20261115);
  ClusterLedger l;
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) {
    NodeInventory n = Node("n" + std::to_string(i), 4, i % 3 == 0 ? 24576 : i % 3 == 1 ? 49152 : 81920, 4);
    if (i == 5) n.gpus[2].healthy = false;
    ASSERT_TRUE(l.UpsertNode(n).ok());
    names.push_back(n.name);
  }
  std::vector<std::string> live;
  FitScratch s;
  int placed = 0, refused = 0;
  for (int step = 0; step < 4000; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      size_t k = rng() % live.size();
      ASSERT_TRUE(l.Release(live[k]));
      live.erase(live.begin() + static_cast<long>(k));
    } else {
      PodRequest r;
      r.uid = "pod-" + std::to_string(step);
      int containers = 1 + static_cast<int>(rng() % 2);
      for (int c = 0; c < containers; ++c) {
        ContainerRequest cr;
        cr.gpus = static_cast<int>(rng() % 3);
        if (rng() % 2)
          cr.memory_mib = 1000 + static_cast<int64_t>(rng() % 30000);
        else
          cr.memory_percent = 5 + static_cast<int>(rng() % 50);
        cr.cores = rng() % 10 == 0 ? 100 : static_cast<int>(rng() % 60);
        r.containers.push_back(cr);
      }
      r.numa_bind = rng() % 4 == 0;
      Policies p{rng() % 2 ? Policy::kBinpack : Policy::kSpread, rng() % 2 ? Policy::kBinpack : Policy::kSpread};
      ScoreMemo memo;
      FilterResult f = Filter(l, r, std::vector<std::string_view>(names.begin(), names.end()), p, &s, &memo);
      std::vector<int> scores = Prioritize(l, r, names, p, &s);
      ASSERT_EQ(Prioritize(l, r, std::vector<std::string_view>(names.begin(), names.end()), p, &s, &memo), scores);
      int best = -1;
      for (int i : f.feasible)
        if (best < 0 || scores[i] > scores[best]) best = i;
      if (best < 0) {
        ++refused;
        continue;
      }
      auto d = Decide(l, r, names[best], p, &s);
      ASSERT_TRUE(d.ok()) << d.status().message();
      ASSERT_TRUE(l.Reserve(r.uid, *d).ok());
      live.push_back(r.uid);
      ++placed;
    }
    Status c = l.CheckConsistency();
    ASSERT_TRUE(c.ok()) << "step " << step << ": " << c.message();
  }
  EXPECT_GT(placed, 500);
  EXPECT_GT(refused, 0) << "the cluster should fill up at times";
}

}  // namespace
}  // namespace gs::scheduler
