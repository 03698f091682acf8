#include "src/node/unlisted_memory.h"

#include <gtest/gtest.h>

namespace gs::node {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

platform::GpuInfo Card(const std::string& uuid, std::optional<uint64_t> unlisted, size_t processes = 1) {
  platform::GpuInfo g;
  g.uuid = uuid;
  g.memory_unlisted = unlisted;
  g.processes.resize(processes);
  return g;
}

using Kind = UnlistedReport::Kind;

TEST(UnlistedMemoryWatch, ReportsACardOnceItsUnlistedMemoryStaysAboveTheSlack) {
  UnlistedMemoryWatch w;
  // One process listed: slack 64 + 16 MiB. 80 MiB is within it, 81 is not.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(w.Observe({Card("GPU-0", 80 * kMiB)}).empty());
  EXPECT_TRUE(w.Observe({Card("GPU-0", 81 * kMiB)}).empty());
  EXPECT_TRUE(w.Observe({Card("GPU-0", 256 * kMiB)}).empty());
  auto r = w.Observe({Card("GPU-0", 256 * kMiB)});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, Kind::kAppeared);
  EXPECT_EQ(r[0].uuid, "GPU-0");
  EXPECT_EQ(r[0].bytes, 256 * kMiB);
  EXPECT_EQ(r[0].processes, 1u);
  // Reported once, not every second.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(w.Observe({Card("GPU-0", 400 * kMiB)}).empty());
}

TEST(UnlistedMemoryWatch, AMomentAboveTheSlackIsNotReported) {
  UnlistedMemoryWatch w;
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(w.Observe({Card("GPU-0", (i % 3 == 2 ? 30 : 300) * kMiB)}).empty()) << "observation " << i;
}

TEST(UnlistedMemoryWatch, TheSlackGrowsWithTheProcessesListed) {
  UnlistedMemoryWatch w;
  // Eight processes: 64 + 8 x 16 = 192 MiB.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(w.Observe({Card("GPU-0", 192 * kMiB, 8)}).empty());
  w.Observe({Card("GPU-0", 193 * kMiB, 8)});
  w.Observe({Card("GPU-0", 193 * kMiB, 8)});
  EXPECT_EQ(w.Observe({Card("GPU-0", 193 * kMiB, 8)}).size(), 1u);
}

TEST(UnlistedMemoryWatch, GrowthToTwiceTheLastReportIsReportedAgainAndTheEndOnce) {
  UnlistedMemoryWatch w;
  for (int i = 0; i < 3; ++i) w.Observe({Card("GPU-0", 256 * kMiB)});
  EXPECT_TRUE(w.Observe({Card("GPU-0", 511 * kMiB)}).empty());
  auto grew = w.Observe({Card("GPU-0", 512 * kMiB)});
  ASSERT_EQ(grew.size(), 1u);
  EXPECT_EQ(grew[0].kind, Kind::kGrew);
  EXPECT_EQ(grew[0].bytes, 512 * kMiB);
  EXPECT_TRUE(w.Observe({Card("GPU-0", 0)}).empty());
  EXPECT_TRUE(w.Observe({Card("GPU-0", 0)}).empty());
  auto gone = w.Observe({Card("GPU-0", 0)});
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].kind, Kind::kGone);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(w.Observe({Card("GPU-0", 0)}).empty());
  // A new episode is reported as new.
  for (int i = 0; i < 2; ++i) w.Observe({Card("GPU-0", 300 * kMiB)});
  auto again = w.Observe({Card("GPU-0", 300 * kMiB)});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind, Kind::kAppeared);
}

TEST(UnlistedMemoryWatch, AnUnknownFigureNeitherCountsNorBreaksARun) {
  UnlistedMemoryWatch w;
  w.Observe({Card("GPU-0", 300 * kMiB)});
  w.Observe({Card("GPU-0", std::nullopt)});
  w.Observe({Card("GPU-0", 300 * kMiB)});
  EXPECT_EQ(w.Observe({Card("GPU-0", 300 * kMiB)}).size(), 1u);
}

TEST(UnlistedMemoryWatch, CardsAreWatchedEachOnItsOwn) {
  UnlistedMemoryWatch w;
  std::vector<UnlistedReport> r;
  for (int i = 0; i < 3; ++i) r = w.Observe({Card("GPU-0", 300 * kMiB), Card("GPU-1", 10 * kMiB)});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].uuid, "GPU-0");
}

}  // namespace
}  // namespace gs::node
