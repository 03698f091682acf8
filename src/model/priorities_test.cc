#include "src/model/priorities.h"

#include <gtest/gtest.h>

namespace gs::model {
namespace {

TEST(Priorities, LowerPriorityYieldsWhileHigherIsActive) {
  auto d = ArbitrateCard({{1, 60}, {0, 30}});
  EXPECT_TRUE(d[0].yield);
  EXPECT_FALSE(d[0].boost);
  EXPECT_FALSE(d[1].yield);
  EXPECT_TRUE(d[1].boost);  // the only other active one has lower priority
}

TEST(Priorities, IdleHigherPriorityTakesNothing) {
  auto d = ArbitrateCard({{1, 60}, {0, 0}});
  EXPECT_FALSE(d[0].yield);
  EXPECT_FALSE(d[1].yield);
  EXPECT_FALSE(d[1].boost);
}

TEST(Priorities, EqualPrioritiesShareAsTheirSharesSay) {
  auto d = ArbitrateCard({{1, 50}, {1, 40}, {2, 5}});
  EXPECT_FALSE(d[0].yield);
  EXPECT_FALSE(d[1].yield);
  EXPECT_TRUE(d[2].yield);
  EXPECT_FALSE(d[0].boost);  // another active container has the same priority
  EXPECT_FALSE(d[1].boost);
}

TEST(Priorities, AloneOnTheCardIsNeitherYieldingNorBoosted) {
  auto d = ArbitrateCard({{3, 90}});
  EXPECT_FALSE(d[0].yield);
  EXPECT_FALSE(d[0].boost);
  EXPECT_TRUE(ArbitrateCard({}).empty());
}

}  // namespace
}  // namespace gs::model
