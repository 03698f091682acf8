#include "src/scheduler/quota.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gs::scheduler {
namespace {

using nlohmann::json;

json Quota(const std::string& ns, const std::string& name, json hard) {
  return {{"apiVersion", "v1"},
          {"kind", "ResourceQuota"},
          {"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec", {{"hard", hard}}}};
}

TEST(Quota, ReadsTheLimitsKeysOfGpuMemoryAndCoresOnly) {
  QuotaLimits l;
  ASSERT_TRUE(QuotaLimitsFromJson(Quota("a", "q",
                                        {{"limits.nvidia.com/gpumem", "8192"},
                                         {"limits.nvidia.com/gpucores", "150"},
                                         {"requests.nvidia.com/gpumem", "1"},
                                         {"limits.nvidia.com/gpu", "1"},
                                         {"pods", "10"}}),
                                  QuotaKeys{}, &l)
                  .ok());
  EXPECT_EQ(l.memory_mib, 8192);
  EXPECT_EQ(l.cores, 150);

  ASSERT_TRUE(QuotaLimitsFromJson(Quota("a", "q", {{"requests.nvidia.com/gpumem", "1"}}), QuotaKeys{}, &l).ok());
  EXPECT_TRUE(l.empty());
  ASSERT_TRUE(QuotaLimitsFromJson(Quota("a", "q", {{"limits.nvidia.com/gpumem", "10k"}}), QuotaKeys{}, &l).ok());
  EXPECT_EQ(l.memory_mib, 10000);
  EXPECT_FALSE(l.cores);

  // Other resource names (HAMi's resourceMem / resourceCores) give other keys.
  QuotaKeys renamed{"limits.example.com/vmem", "limits.example.com/vcores"};
  ASSERT_TRUE(QuotaLimitsFromJson(Quota("a", "q", {{"limits.example.com/vmem", "100"}}), renamed, &l).ok());
  EXPECT_EQ(l.memory_mib, 100);
}

// The scheduler's resource names and memory factor (--resource-memory-name, ...,
// --memory-factor) decide the keys, and the memory key counts in units of the factor.
TEST(Quota, KeysFollowTheResourceNamesAndTheMemoryFactor) {
  PodSpecOptions o;
  o.memory_name = "example.com/vmem";
  o.cores_name = "example.com/vcores";
  o.memory_factor = 1024;
  QuotaKeys keys = QuotaKeysFor(o);
  EXPECT_EQ(keys.memory, "limits.example.com/vmem");
  EXPECT_EQ(keys.cores, "limits.example.com/vcores");
  QuotaLimits l;
  ASSERT_TRUE(QuotaLimitsFromJson(
                  Quota("a", "q", {{"limits.example.com/vmem", "8"}, {"limits.example.com/vcores", "50"}}), keys, &l)
                  .ok());
  EXPECT_EQ(l.memory_mib, 8 * 1024);  // 8 units of 1 GiB
  EXPECT_EQ(l.cores, 50);             // cores are never scaled
  ASSERT_TRUE(
      QuotaLimitsFromJson(Quota("a", "q", {{"limits.example.com/vmem", "9223372036854775807"}}), keys, &l).ok());
  EXPECT_EQ(l.memory_mib, INT64_MAX);  // saturates, never wraps
  QuotaKeys defaults = QuotaKeysFor(PodSpecOptions{});
  EXPECT_EQ(defaults.memory, "limits.nvidia.com/gpumem");
  EXPECT_EQ(defaults.cores, "limits.nvidia.com/gpucores");
  EXPECT_EQ(defaults.memory_factor, 1);
}

TEST(Quota, AnUnreadableValueIsAnErrorNamingTheQuotaAndTheKey) {
  QuotaLimits l;
  Status s = QuotaLimitsFromJson(
      Quota("team-a", "gpu", {{"limits.nvidia.com/gpumem", "1.5"}, {"limits.nvidia.com/gpucores", "50"}}), QuotaKeys{},
      &l);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ResourceQuota team-a/gpu"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("limits.nvidia.com/gpumem '1.5'"), std::string::npos) << s.message();
  EXPECT_FALSE(l.memory_mib);
  EXPECT_EQ(l.cores, 50);  // what could be read still counts
  EXPECT_FALSE(QuotaLimitsFromJson(Quota("a", "q", {{"limits.nvidia.com/gpucores", "-1"}}), QuotaKeys{}, &l).ok());
}

TEST(Quota, UsageIsTheMemoryAndCoresOfEveryShareChosen) {
  PodDecision d;
  d.node = "n1";
  d.containers = {{{"GPU-a", "A100", 40960, 30}, {"GPU-b", "A100", 40960, 30}}, {}, {{"GPU-a", "A100", 1024, 0}}};
  EXPECT_EQ(UsageOf(d), (QuotaUsage{40960 * 2 + 1024, 60}));
}

TEST(Quota, APodFitsWhileUsedPlusRequestedStaysWithinHard) {
  QuotaBook book;
  book.SetQuota("team-a", "gpu", {8192, 100});
  EXPECT_TRUE(book.Limited("team-a"));
  EXPECT_FALSE(book.Limited("team-b"));
  EXPECT_EQ(book.Check("team-a", {8192, 100}), "");
  book.AddPod("p1", "team-a", {6144, 20});
  book.AddPod("other", "team-b", {100000, 100});  // another namespace counts elsewhere
  EXPECT_EQ(book.Used("team-a"), (QuotaUsage{6144, 20}));
  EXPECT_EQ(book.Check("team-a", {2048, 80}), "");
  EXPECT_EQ(book.Check("team-a", {4096, 10}),
            "ResourceQuota team-a/gpu: limits.nvidia.com/gpumem used 6144 + requested 4096 > hard 8192");
  EXPECT_EQ(book.Check("team-a", {1024, 81}),
            "ResourceQuota team-a/gpu: limits.nvidia.com/gpucores used 20 + requested 81 > hard 100");
  EXPECT_EQ(book.Check("team-b", {1 << 30, 100}), "");  // no quota there

  // Usage is released with the pod; adding a UID again replaces its count.
  EXPECT_TRUE(book.RemovePod("p1"));
  EXPECT_FALSE(book.RemovePod("p1"));
  EXPECT_EQ(book.Check("team-a", {8192, 100}), "");
  book.AddPod("p2", "team-a", {1000, 0});
  book.AddPod("p2", "team-a", {3000, 0});
  EXPECT_EQ(book.Used("team-a"), (QuotaUsage{3000, 0}));
  book.ClearPods();
  EXPECT_EQ(book.Used("team-a"), QuotaUsage{});
}

TEST(Quota, TheTightestOfSeveralQuotasDecidesAndZeroAdmitsNothing) {
  QuotaBook book;
  book.SetQuota("ns", "wide", {100000, std::nullopt});
  book.SetQuota("ns", "narrow", {4096, std::nullopt});
  book.SetQuota("ns", "cores", {std::nullopt, 0});
  EXPECT_EQ(book.Check("ns", {4096, 0}), "");  // asks no cores: the zero cores quota does not hold it
  EXPECT_EQ(book.Check("ns", {4097, 0}),
            "ResourceQuota ns/narrow: limits.nvidia.com/gpumem used 0 + requested 4097 > hard 4096");
  EXPECT_EQ(book.Check("ns", {1, 1}),
            "ResourceQuota ns/cores: limits.nvidia.com/gpucores used 0 + requested 1 > hard 0");
  // A quota deleted, or rewritten without the key, stops holding.
  book.RemoveQuota("ns", "narrow");
  book.SetQuota("ns", "cores", {});
  EXPECT_EQ(book.Check("ns", {50000, 100}), "");
  book.RemoveQuota("ns", "wide");
  EXPECT_FALSE(book.Limited("ns"));
}

}  // namespace
}  // namespace gs::scheduler
