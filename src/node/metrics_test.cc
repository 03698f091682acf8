#include "src/node/metrics.h"

#include <gtest/gtest.h>

namespace gs::node {
namespace {

TEST(Metrics, GpuAndSliceSeriesWithLabels) {
  GpuUsage g;
  g.info.index = 1;
  g.info.name = "NVIDIA H100 80GB HBM3";
  g.info.memory_total = 85520809984;
  g.info.memory_used = 1 << 30;
  g.info.utilization = 42;
  g.uuid = "GPU-1";
  g.slices_total = 4;
  g.slices_allocated = 2;
  SliceUsage s{"train-0",   "ml",       "main",  "abc123", "GPU-1", "NVIDIA H100 80GB HBM3",
               20ull << 30, 5ull << 30, 1 << 20, 24,       25};
  std::string text = RenderMetrics({g}, {s}, {});
  EXPECT_NE(text.find("# TYPE gpuslice_gpu_memory_total_bytes gauge"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_gpu_utilization_ratio{gpu=\"1\",uuid=\"GPU-1\",model=\"NVIDIA H100 80GB HBM3\"} 0.42"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpuslice_gpu_slices_allocated{gpu=\"1\",uuid=\"GPU-1\",model=\"NVIDIA H100 80GB HBM3\"} 2"),
            std::string::npos);
  EXPECT_NE(text.find("gpuslice_slice_memory_limit_bytes{namespace=\"ml\",pod=\"train-0\",container=\"main\",uuid="
                      "\"GPU-1\",allocation=\"abc123\"} 21474836480"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpuslice_slice_sm_share_ratio{namespace=\"ml\",pod=\"train-0\",container=\"main\",uuid=\"GPU-"
                      "1\",allocation=\"abc123\"} 0.25"),
            std::string::npos);
  EXPECT_NE(text.find("container_accelerator_duty_cycle{namespace=\"ml\",pod=\"train-0\",container=\"main\",make="
                      "\"nvidia\",model=\"NVIDIA H100 80GB HBM3\",acc_id=\"GPU-1\"} 24"),
            std::string::npos)
      << text;
}

// Unlisted memory is a sample only where NVML answered it: a card without the figure has
// no sample rather than a 0 that would read as "nothing unlisted".
TEST(Metrics, UnlistedMemoryIsSampledWhereTheDriverAnsweredIt) {
  GpuUsage known, unknown;
  known.uuid = "GPU-0";
  known.info.memory_unlisted = 256ull << 20;
  unknown.uuid = "GPU-1";
  unknown.info.index = 1;
  std::string text = RenderMetrics({known, unknown}, {}, {});
  EXPECT_NE(text.find("# TYPE gpuslice_gpu_memory_unlisted_bytes gauge"), std::string::npos) << text;
  EXPECT_NE(text.find("gpuslice_gpu_memory_unlisted_bytes{gpu=\"0\",uuid=\"GPU-0\",model=\"\"} 268435456"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("gpuslice_gpu_memory_unlisted_bytes{gpu=\"1\""), std::string::npos) << text;
}

TEST(Metrics, LabelValuesAreEscaped) {
  SliceUsage s;
  s.pod = "we\"ird\\pod\nname";
  std::string text = RenderMetrics({}, {s}, {});
  EXPECT_NE(text.find("pod=\"we\\\"ird\\\\pod\\nname\""), std::string::npos) << text;
}

TEST(Metrics, AllocateLatencyIsACumulativeHistogramWithFailures) {
  LatencyHistogram h;
  h.Observe(std::chrono::microseconds(80), true);    // <= 0.0001
  h.Observe(std::chrono::microseconds(300), true);   // <= 0.0005
  h.Observe(std::chrono::microseconds(300), false);  // <= 0.0005, failed
  h.Observe(std::chrono::seconds(3), true);          // beyond every bound
  std::string text = RenderMetrics({}, {}, h.Read());
  EXPECT_NE(text.find("# TYPE gpuslice_allocate_duration_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gpuslice_allocate_duration_seconds_bucket{le=\"0.0001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gpuslice_allocate_duration_seconds_bucket{le=\"0.00025\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_allocate_duration_seconds_bucket{le=\"0.0005\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_allocate_duration_seconds_bucket{le=\"1\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_allocate_duration_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_allocate_duration_seconds_count 4\n"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_allocate_duration_seconds_sum 3.00068\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE gpuslice_allocate_failures_total counter\ngpuslice_allocate_failures_total 1\n"),
            std::string::npos);
}

// GPU time a tenant's turns took, over wall time between scrapes at least a second apart.
TEST(Metrics, EachWatchdogRulesKillsAreCountedInTheirOwnFamily) {
  std::vector<KillCount> kills{{KillReason::kOverLimit, "ml", "a", "main", "GPU-1", "x1", 2},
                               {KillReason::kNoEnforcer, "ml", "b", "main", "GPU-1", "x2", 3}};
  std::string text = RenderMetrics({}, {}, {}, kills, 41);
  EXPECT_NE(text.find("# TYPE gpuslice_memory_watchdog_samples_total counter\n"
                      "gpuslice_memory_watchdog_samples_total 41\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE gpuslice_memory_limit_kills_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE gpuslice_unenforced_process_kills_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("gpuslice_memory_limit_kills_total{namespace=\"ml\",pod=\"a\",container=\"main\",uuid=\"GPU-"
                      "1\",allocation=\"x1\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpuslice_unenforced_process_kills_total{namespace=\"ml\",pod=\"b\",container=\"main\",uuid="
                      "\"GPU-1\",allocation=\"x2\"} 3"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("gpuslice_memory_limit_kills_total{namespace=\"ml\",pod=\"b\""), std::string::npos);
  EXPECT_EQ(text.find("gpuslice_unenforced_process_kills_total{namespace=\"ml\",pod=\"a\""), std::string::npos);
}

TEST(SmUseMeter, UtilisationIsGpuTimeOverWallTimeBetweenScrapes) {
  SmUseMeter m;
  constexpr int64_t kS = 1'000'000'000;
  EXPECT_EQ(m.Percent("a/GPU-1", 5 * kS, 10 * kS), 0u);                          // first sight: no baseline yet
  EXPECT_EQ(m.Percent("a/GPU-1", 5 * kS + kS / 10, 10 * kS + kS / 2), 0u);       // under a second: unchanged
  EXPECT_EQ(m.Percent("a/GPU-1", 5 * kS + 3 * kS / 10, 11 * kS), 30u);           // 0.3 s of 1 s
  EXPECT_EQ(m.Percent("a/GPU-1", 5 * kS + 4 * kS / 10, 11 * kS + kS / 2), 30u);  // close scrape: same figure
  EXPECT_EQ(m.Percent("a/GPU-1", 9 * kS, 12 * kS), 100u);  // more than the wall time (forged): capped
  EXPECT_EQ(m.Percent("a/GPU-1", 1 * kS, 13 * kS), 0u);    // went backwards: a new tenant, new baseline
  EXPECT_EQ(m.Percent("b/GPU-1", 0, 13 * kS), 0u);
  EXPECT_EQ(m.Percent("b/GPU-1", kS, 15 * kS), 50u);
}

}  // namespace
}  // namespace gs::node
