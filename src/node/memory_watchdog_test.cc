#include "src/node/memory_watchdog.h"

#include <gtest/gtest.h>

namespace gs::node {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

ContainerGpuUse Use(const std::string& allocation, uint64_t limit, std::vector<WatchedProcess> processes) {
  ContainerGpuUse u;
  u.allocation = allocation;
  u.uuid = "GPU-0";
  u.limit = limit;
  u.processes = std::move(processes);
  return u;
}

TEST(OverLimitRule, OverOnceIsNothing) {
  OverLimitRule rule;
  EXPECT_TRUE(rule.Observe({Use("a", 2048 * kMiB, {{10, 1400 * kMiB, 1}, {11, 1400 * kMiB, 1}})}).empty());
  // Back within the limit (a context the enforcer refused, destroyed): the count starts again.
  EXPECT_TRUE(rule.Observe({Use("a", 2048 * kMiB, {{10, 1400 * kMiB, 1}})}).empty());
  EXPECT_TRUE(rule.Observe({Use("a", 2048 * kMiB, {{10, 1400 * kMiB, 1}, {12, 700 * kMiB, 1}})}).empty());
}

TEST(OverLimitRule, OverTwiceInARowKillsTheLargestProcessOnce) {
  OverLimitRule rule;
  auto over = Use("a", 2048 * kMiB, {{10, 1000 * kMiB, 1}, {11, 1400 * kMiB, 7}, {12, 100 * kMiB, 1}});
  EXPECT_TRUE(rule.Observe({over}).empty());
  auto kills = rule.Observe({over});
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].allocation, "a");
  EXPECT_EQ(kills[0].uuid, "GPU-0");
  EXPECT_EQ(kills[0].victim.pid, 11u);
  EXPECT_EQ(kills[0].victim.start_time, 7u);
  EXPECT_EQ(kills[0].used, 2500 * kMiB);
  EXPECT_EQ(kills[0].limit, 2048 * kMiB);
  // The killed process may still be listed in the next sample: that is a first sample over.
  EXPECT_TRUE(rule.Observe({over}).empty());
  EXPECT_EQ(rule.Observe({over}).size(), 1u);
}

TEST(OverLimitRule, TheLimitPlusTheDriversGranularityIsNotOver) {
  OverLimitRule rule;
  auto exact = Use("a", 2039 * kMiB, {{10, 2040 * kMiB, 1}});  // 2039 MiB allocated: 2040 held
  auto slack = Use("a", 2039 * kMiB, {{10, 2039 * kMiB + OverLimitRule::kSlackBytes, 1}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(rule.Observe({exact}).empty());
    EXPECT_TRUE(rule.Observe({slack}).empty());
  }
}

TEST(OverLimitRule, ASampleWithoutTheContainerStartsTheCountAgain) {
  OverLimitRule rule;
  auto over = Use("a", 100 * kMiB, {{10, 200 * kMiB, 1}});
  EXPECT_TRUE(rule.Observe({over}).empty());
  EXPECT_TRUE(rule.Observe({}).empty());  // e.g. NVML failed for the GPU
  EXPECT_TRUE(rule.Observe({over}).empty());
  EXPECT_EQ(rule.Observe({over}).size(), 1u);
  // Each (container, GPU) counts on its own.
  auto other = Use("b", 100 * kMiB, {{20, 200 * kMiB, 1}});
  EXPECT_TRUE(rule.Observe({over, other}).empty());
  auto kills = rule.Observe({other});
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].allocation, "b");
}

host::ProcessMounts Mounts(uint32_t minor, const std::string& point = "/var/run/gpuslice", bool same_ns = false) {
  host::ProcessMounts m;
  m.entries = host::ParseMountinfo("1 0 0:1 / / rw - overlay o rw\n2 1 0:" + std::to_string(minor) + " / " + point +
                                   " rw - tmpfs gpuslice-shared rw\n");
  m.start_time = 100 + minor;
  m.same_namespace_as_reader = same_ns;
  return m;
}

TEST(Attribute, AProcessBelongsToTheContainerWhoseTmpfsItHasAtTheRegionDirectory) {
  std::vector<WatchedContainer> containers{{"a", 0, 58, {{"GPU-0", 2048 * kMiB}}},
                                           {"b", 0, 59, {{"GPU-0", 4096 * kMiB}, {"GPU-1", 1024 * kMiB}}}};
  std::map<uint32_t, host::ProcessMounts> mounts{{10, Mounts(58)},
                                                 {11, Mounts(58, "/run/gpuslice")},  // /var/run -> /run in the image
                                                 {12, Mounts(59)},
                                                 {13, Mounts(58, "/var/run/gpuslice", /*same_ns=*/true)},
                                                 {14, Mounts(58, "/elsewhere")},
                                                 {15, Mounts(60)}};
  std::vector<platform::GpuProcess> procs{{10, 100 * kMiB}, {11, 200 * kMiB}, {12, 300 * kMiB}, {13, 400 * kMiB},
                                          {14, 500 * kMiB}, {15, 600 * kMiB}, {16, 700 * kMiB}};
  auto uses = Attribute("GPU-0", procs, mounts, containers, RegionMountPoints());
  ASSERT_EQ(uses.size(), 2u);
  EXPECT_EQ(uses[0].allocation, "a");
  EXPECT_EQ(uses[0].limit, 2048 * kMiB);
  ASSERT_EQ(uses[0].processes.size(), 2u);
  EXPECT_EQ(uses[0].processes[0].pid, 10u);
  EXPECT_EQ(uses[0].processes[0].start_time, 158u);
  EXPECT_EQ(uses[0].processes[1].pid, 11u);
  EXPECT_EQ(uses[0].used(), 300 * kMiB);
  EXPECT_EQ(uses[1].allocation, "b");
  ASSERT_EQ(uses[1].processes.size(), 1u);
  EXPECT_EQ(uses[1].processes[0].pid, 12u);
  // On GPU-1 only b has a limit: a's process there is not judged against anything.
  uses = Attribute("GPU-1", procs, mounts, containers, RegionMountPoints());
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_EQ(uses[0].allocation, "b");
}

TEST(Attribute, UnknownProcessesAreNobodysAndNeverKilled) {
  std::vector<WatchedContainer> containers{{"a", 0, 58, {{"GPU-0", 100 * kMiB}}}};
  host::ProcessMounts both = Mounts(58);  // two containers' tmpfs: ambiguous
  auto more = host::ParseMountinfo("3 1 0:61 / /var/run/gpuslice rw - tmpfs t rw\n");
  both.entries.insert(both.entries.end(), more.begin(), more.end());
  containers.push_back({"b", 0, 61, {{"GPU-0", 100 * kMiB}}});
  std::map<uint32_t, host::ProcessMounts> mounts{{10, both}, {11, Mounts(58, "/var/run/gpuslice", true)}};
  // 12: /proc unreadable (absent); 11: the agent's own namespace; 10: two containers.
  std::vector<platform::GpuProcess> procs{{10, 900 * kMiB}, {11, 900 * kMiB}, {12, 900 * kMiB}};
  OverLimitRule rule;
  for (int i = 0; i < 3; ++i) {
    auto uses = Attribute("GPU-0", procs, mounts, containers, RegionMountPoints());
    EXPECT_TRUE(uses.empty());
    EXPECT_TRUE(rule.Observe(uses).empty());
  }
}

TEST(RegionMountPoints, TheAgentsPathAndItsRunForm) {
  EXPECT_EQ(RegionMountPoints(), (std::vector<std::string>{"/var/run/gpuslice", "/run/gpuslice"}));
}

}  // namespace
}  // namespace gs::node
