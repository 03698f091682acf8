#include "src/node/progress.h"

#include <gtest/gtest.h>

namespace gs::node {
namespace {

constexpr int64_t kS = 1'000'000'000;

TEST(Progress, ALoopThatStopsBeatingIsNamedOnceItsAllowancePasses) {
  Progress p;
  int main_loop = p.Register("main loop", 30 * kS, 0);
  int health = p.Register("health watcher", 10 * kS, 0);
  EXPECT_EQ(p.Stalled(5 * kS), "");
  p.Beat(main_loop, 20 * kS);
  EXPECT_EQ(p.Stalled(10 * kS), "");  // exactly at the allowance: still fine
  EXPECT_EQ(p.Stalled(12 * kS), "health watcher: no progress for 12 s");
  p.Beat(health, 12 * kS);
  EXPECT_EQ(p.Stalled(12 * kS), "");
  EXPECT_EQ(p.Stalled(60 * kS), "main loop: no progress for 40 s; health watcher: no progress for 48 s");
}

}  // namespace
}  // namespace gs::node
