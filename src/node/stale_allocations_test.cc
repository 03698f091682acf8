#include "src/node/stale_allocations.h"

#include <gtest/gtest.h>

namespace gs::node {
namespace {

const std::vector<AllocationRecord> kRecords = {{"old", {"GPU-a::0"}, 100}, {"new", {"GPU-a::1"}, 1000}};

std::vector<ContainerDevices> Holding(std::vector<std::string> ids) {
  return {{"pod", "ns", "main", "nvidia.com/gpu", std::move(ids)}};
}

// A kubelet answering one List with nothing (restarting, say) must not release the
// allocations of containers it listed a moment ago, however old they are.
TEST(StaleAllocations, OneEmptyListReleasesNothingListedWithinTheGrace) {
  StaleAllocations stale(60, 0);
  EXPECT_TRUE(stale.Observe(kRecords, Holding({"GPU-a::0", "GPU-a::1"}), 5000).empty());
  EXPECT_TRUE(stale.Observe(kRecords, {}, 5001).empty());
  EXPECT_TRUE(stale.Observe(kRecords, {}, 5059).empty());
  // Unlisted for the whole grace: now they go.
  EXPECT_EQ(stale.Observe(kRecords, {}, 5060), (std::vector<std::string>{"old", "new"}));
}

TEST(StaleAllocations, GraceCountsFromCreationOrAgentStartUntilFirstListed) {
  StaleAllocations stale(60, 2000);  // agent started at 2000: "old" (created 100) counts from then
  EXPECT_TRUE(stale.Observe(kRecords, {}, 2059).empty());
  EXPECT_EQ(stale.Observe(kRecords, {}, 2060), (std::vector<std::string>{"old", "new"}));
  StaleAllocations fresh(60, 0);
  EXPECT_EQ(fresh.Observe(kRecords, {}, 1030), std::vector<std::string>{"old"});  // "new" is 30 s old
}

TEST(StaleAllocations, AContainerStillListedIsNeverStale) {
  StaleAllocations stale(60, 0);
  for (int64_t t = 5000; t < 5300; t += 30) {
    auto gone = stale.Observe(kRecords, Holding({"GPU-a::1"}), t);
    EXPECT_EQ(gone, std::vector<std::string>{"old"}) << t;
  }
}

}  // namespace
}  // namespace gs::node
