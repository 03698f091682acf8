#include "src/enforcer/launch_cost.h"

#include <gtest/gtest.h>

namespace gs::enforcer {
namespace {

constexpr int64_t kUs = 1'000, kMs = 1'000'000;

// One part of a turn: n launches joined at `at`, the gate closed `busy_for` later, the
// queue drained `drain` after that.
struct Part {
  uint64_t n;
  int64_t busy_for;
  int64_t drain;
};

void Measure(LaunchCost& c, int64_t at, const Part& p) {
  c.Learn(p.n, at, at + p.busy_for, at + p.busy_for + p.drain);
}

TEST(LaunchCost, BeforeAnyMeasurementALaunchCountsForAWholeTurn) {
  LaunchCost c;
  EXPECT_EQ(c.Learned(), LaunchCost::kInitialNs);
  EXPECT_EQ(c.Admit(0), LaunchCost::kInitialNs);
  EXPECT_EQ(c.High(0), 0);
  c.Learn(0, 0, 5 * kMs, 10 * kMs);  // no launches: nothing learned
  EXPECT_EQ(c.Learned(), LaunchCost::kInitialNs);
}

// How the learned cost moves: exact samples (the drain waited) are taken up at once and
// down by halves; a drain that found nothing queued only bounds the cost from above.
TEST(LaunchCost, ExactSamplesGoUpAtOnceAndDownByHalvesBoundsOnlyLower) {
  struct Step {
    const char* what;
    Part part;
    int64_t learned;  // after the step
  };
  const Step steps[] = {
      {"first exact sample: 10 launches busy 5 ms, drained 5 ms later", {10, 5 * kMs, 5 * kMs}, 1 * kMs},
      {"a costlier exact sample is taken at once", {2, 4 * kMs, 4 * kMs}, 4 * kMs},
      {"a cheaper exact sample halves the way", {10, 10 * kMs, 10 * kMs}, 3 * kMs},
      {"a bound above the estimate changes nothing", {1, 10 * kMs, 10 * kUs}, 3 * kMs},
      {"a bound below it halves the way", {10, 10 * kMs, 0}, 2 * kMs},
      {"a drain of 20 us is not a wait", {100, 10 * kMs, LaunchCost::kBusyDrainNs}, 1 * kMs + 50 * kUs},
  };
  LaunchCost c;
  int64_t at = 0;
  for (const Step& s : steps) {
    Measure(c, at, s.part);
    EXPECT_EQ(c.Learned(), s.learned) << s.what;
    at += 100 * kMs;
  }
}

TEST(LaunchCost, AFirstBoundIsTakenAsItIs) {
  LaunchCost c;
  Measure(c, 0, {4, 2 * kMs, 0});
  EXPECT_EQ(c.Learned(), 500 * kUs);
}

// Which exact samples are remembered as a kernel's cost: not the first (it holds one-time
// costs), not under 1 ms, not when the drain waited less than half of one launch.
TEST(LaunchCost, OnlyAKernelsCostIsRememberedAsTheHighOne) {
  struct Case {
    const char* what;
    Part second;
    int64_t high;
  };
  const Case cases[] = {
      {"a 50 ms kernel the drain waited for", {1, 1 * kMs, 49 * kMs}, 50 * kMs},
      {"under 1 ms a launch", {10, 5 * kMs, 4 * kMs}, 0},
      {"the drain waited less than half a launch", {2, 10 * kMs, 3 * kMs}, 0},
  };
  for (const Case& k : cases) {
    LaunchCost c;
    Measure(c, 0, {1, 1 * kMs, 99 * kMs});  // the first sample: 100 ms, not remembered
    EXPECT_EQ(c.High(100 * kMs), 0) << k.what;
    Measure(c, 200 * kMs, k.second);
    EXPECT_EQ(c.High(300 * kMs), k.high) << k.what;
  }
}

// The hostile tenant's lesson (docs/enforcer.md, "What a turn admits"): 64 launches of
// 5 us teach a small learned cost, then long kernels are queued. The turn still admits
// them at the long kernels' cost while it is remembered, halved for each 250 ms of age.
TEST(LaunchCost, ShortKernelsDoNotTeachATurnToAdmitLongOnes) {
  LaunchCost c;
  Measure(c, 0, {1, 1 * kMs, 1 * kMs});          // the first sample
  Measure(c, 10 * kMs, {1, 1 * kMs, 49 * kMs});  // a 50 ms kernel
  const int64_t at = 60 * kMs;
  for (int i = 0; i < 8; ++i) Measure(c, at + i * kMs, {64, 320 * kUs, 0});  // 5 us each
  EXPECT_LT(c.Learned(), 1 * kMs);
  struct Look {
    int64_t age;
    int64_t admit;
  };
  const Look looks[] = {{0, 50 * kMs}, {250 * kMs, 50 * kMs}, {251 * kMs, 25 * kMs}, {501 * kMs, 12'500 * kUs}};
  for (const Look& l : looks) EXPECT_EQ(c.Admit(at + l.age), l.admit) << "age " << l.age / kMs << " ms";
  EXPECT_EQ(c.Admit(at + 60'000 * kMs), c.Learned());  // long forgotten
}

TEST(LaunchCost, AHigherKernelReplacesTheRememberedOneALowerOneDoesNot) {
  LaunchCost c;
  Measure(c, 0, {1, 1 * kMs, 1 * kMs});
  Measure(c, 10 * kMs, {1, 1 * kMs, 29 * kMs});  // 30 ms
  Measure(c, 50 * kMs, {1, 1 * kMs, 9 * kMs});   // 10 ms: lower, ignored
  EXPECT_EQ(c.High(60 * kMs), 30 * kMs);
  Measure(c, 100 * kMs, {1, 1 * kMs, 79 * kMs});  // 80 ms
  EXPECT_EQ(c.High(200 * kMs), 80 * kMs);
}

}  // namespace
}  // namespace gs::enforcer
