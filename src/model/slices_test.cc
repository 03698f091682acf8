#include "src/model/slices.h"

#include <gtest/gtest.h>

namespace gs::model {
namespace {

std::vector<Gpu> TwoNumaNodes() {
  // GPUs 0,1 on NUMA 0; 2,3 on NUMA 1; 80 GiB each.
  std::vector<Gpu> g;
  for (int i = 0; i < 4; ++i)
    g.push_back({"GPU-" + std::to_string(i), i, "H100", 80ull << 30, i / 2, static_cast<unsigned>(i), true});
  return g;
}

std::vector<std::string> All(const std::vector<Gpu>& gpus, int k) {
  std::vector<std::string> ids;
  for (const auto& g : gpus)
    for (int i = 0; i < k; ++i) ids.push_back(SliceId(g.uuid, i));
  return ids;
}

TEST(SplitPolicy, MemoryAndCoresPerSlice) {
  SplitPolicy p{4, 1.0, 1.0};
  EXPECT_EQ(p.SliceMemory(80ull << 30), 20ull << 30);
  EXPECT_EQ(p.SliceShare(), 25u);
  SplitPolicy scaled{4, 2.0, 4.0};  // virtual memory, no compute limit
  EXPECT_EQ(scaled.SliceMemory(80ull << 30), 40ull << 30);
  EXPECT_EQ(scaled.SliceShare(), 0u);
  EXPECT_TRUE(scaled.oversubscribed());
  SplitPolicy odd{3, 1.0, 1.0};
  EXPECT_EQ(odd.SliceMemory(81559ull << 20) % (1ull << 20), 0u);  // whole MiB
  EXPECT_EQ(odd.SliceShare(), 33u);
}

TEST(SplitPolicy, InvalidValuesNameTheFlagAndRange) {
  auto msg = [](int k, double s, double c) { return (SplitPolicy{k, s, c}).Validate().message(); };
  EXPECT_NE(msg(0, 1, 1).find("--device-split-count: 0 is out of range [1, 64]"), std::string::npos);
  EXPECT_NE(msg(4, 0, 1).find("--device-memory-scaling"), std::string::npos);
  EXPECT_NE(msg(4, 1, 5).find("--device-cores-scaling"), std::string::npos);
  EXPECT_EQ(msg(4, 1.5, 4), "");
}

TEST(Slices, IdsRoundTrip) {
  auto slices = Split(TwoNumaNodes(), SplitPolicy{4, 1, 1});
  ASSERT_EQ(slices.size(), 16u);
  EXPECT_EQ(slices[5].id, "GPU-1::1");
  std::string uuid;
  int k;
  ASSERT_TRUE(ParseSliceId("GPU-abc-def::12", &uuid, &k));
  EXPECT_EQ(uuid, "GPU-abc-def");
  EXPECT_EQ(k, 12);
  for (const char* bad : {"GPU-1", "::1", "GPU-1::", "GPU-1::x", "GPU-1::1234"})
    EXPECT_FALSE(ParseSliceId(bad, &uuid, &k)) << bad;
}

TEST(PreferSlices, DistinctGpusThenNumaLocality) {
  auto gpus = TwoNumaNodes();
  auto ids = PreferSlices(gpus, All(gpus, 4), {}, 2, {}, PackingPolicy::kSpread);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], "GPU-0::0");
  EXPECT_EQ(ids[1], "GPU-1::0");  // another GPU, same NUMA node
  ids = PreferSlices(gpus, All(gpus, 4), {"GPU-2::3"}, 2, {}, PackingPolicy::kSpread);
  EXPECT_EQ(ids[1], "GPU-3::0");  // local to the must-include slice
}

TEST(PreferSlices, SpreadAndBinpack) {
  auto gpus = TwoNumaNodes();
  std::map<std::string, int> in_use = {{"GPU-0", 3}, {"GPU-1", 1}, {"GPU-2", 2}, {"GPU-3", 0}};
  EXPECT_EQ(PreferSlices(gpus, All(gpus, 4), {}, 1, in_use, PackingPolicy::kSpread)[0], "GPU-3::0");
  EXPECT_EQ(PreferSlices(gpus, All(gpus, 4), {}, 1, in_use, PackingPolicy::kBinpack)[0], "GPU-0::0");
}

TEST(PreferSlices, UnhealthyGpusAreNotOffered) {
  auto gpus = TwoNumaNodes();
  gpus[0].healthy = false;
  EXPECT_EQ(PreferSlices(gpus, All(gpus, 2), {}, 1, {}, PackingPolicy::kSpread)[0], "GPU-1::0");
}

TEST(AllocationFor, GrantsAndErrors) {
  auto gpus = TwoNumaNodes();
  SplitPolicy p{4, 1, 1};
  auto a = AllocationFor(gpus, p, {"GPU-1::2", "GPU-3::0"});
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->devices.size(), 2u);
  EXPECT_EQ(a->devices[0].uuid, "GPU-1");
  EXPECT_EQ(a->devices[0].minor, 1u);
  EXPECT_EQ(a->devices[0].memory_limit, 20ull << 30);
  EXPECT_EQ(a->devices[0].sm_share, 25u);
  auto two = AllocationFor(gpus, p, {"GPU-1::2", "GPU-1::3"});
  EXPECT_NE(two.status().message().find("two slices of GPU GPU-1"), std::string::npos);
  EXPECT_NE(AllocationFor(gpus, p, {"GPU-9::0"}).status().message().find("unknown device ID 'GPU-9::0'"),
            std::string::npos);
  EXPECT_NE(AllocationFor(gpus, p, {"GPU-1::7"}).status().message().find("splits each GPU 4 ways"), std::string::npos);
  gpus[3].healthy = false;
  EXPECT_FALSE(AllocationFor(gpus, p, {"GPU-3::0"}).ok());
}

TEST(LegacyDistinct, RemapsOntoOtherGpus) {
  auto gpus = TwoNumaNodes();
  SplitPolicy p{2, 1, 1};
  auto ids = LegacyDistinct(gpus, p, {"GPU-0::0", "GPU-0::1"}, {"GPU-1::0"});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*ids)[0], "GPU-0::0");
  EXPECT_EQ((*ids)[1], "GPU-1::1");  // GPU-1::0 is taken
  auto same = LegacyDistinct(gpus, p, {"GPU-0::0", "GPU-2::1"}, {});
  EXPECT_EQ((*same)[1], "GPU-2::1");
}

}  // namespace
}  // namespace gs::model
