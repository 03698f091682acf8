#include "src/enforcer/starvation_guard.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace gs::enforcer {
namespace {

using G = StarvationGuard;
constexpr int64_t kMs = 1'000'000;

// What a waiter's looks add to the ledger: the time since the last look at the share,
// one claim per stretch, at most kWaitTickMaxNs a look.
TEST(StarvationGuard, WaitingAccruesAtTheTrustedShare) {
  struct Look {
    const char* what;
    int64_t at;
    unsigned share;
    int64_t owed;  // after the look
  };
  const Look looks[] = {
      {"10 ms waited at 30 %", 10 * kMs, 30, 3 * kMs},
      {"the same moment again: already claimed", 10 * kMs, 30, 3 * kMs},
      {"an earlier look (another thread's clock read): nothing", 5 * kMs, 30, 3 * kMs},
      {"20 ms more at 5 % (a better priority is active)", 30 * kMs, 5, 4 * kMs},
      {"a 1 s gap counts as 100 ms (a stopped process)", 1030 * kMs, 50, 54 * kMs},
  };
  G g;
  g.StartWaiting(0);
  for (const Look& l : looks) {
    g.AccrueWaiting(l.at, l.share, false);
    EXPECT_EQ(g.owed(), l.owed) << l.what;
    EXPECT_EQ(g.excused(), 0) << l.what;
  }
}

// What holding the card takes off: what went beyond the share, excused first; the ledger
// never goes below the debt the card forgives.
TEST(StarvationGuard, HoldingTheCardPaysBackBeyondTheShare) {
  G g;
  g.StartWaiting(0);
  g.AccrueWaiting(100 * kMs, 30, false);  // owed 30 ms
  g.CountHeld(10 * kMs, 110 * kMs, 30);   // 7 ms beyond the share
  EXPECT_EQ(g.owed(), 23 * kMs);
  g.AccrueWaiting(110 * kMs, 30, false);  // CountHeld moved the waited-to mark: nothing
  EXPECT_EQ(g.owed(), 23 * kMs);
  g.CountHeld(10'000 * kMs, 10'110 * kMs, 30);  // a long kernel of its own
  EXPECT_EQ(g.owed(), G::kOwedFloorNs);
}

// Waiting out a competitor's kernel past its turn is excused (up to a kLongKernelNs kernel
// at the share), so the guard does not take the card while the holder drains honestly;
// what it later gets pays the excused part back first.
TEST(StarvationGuard, AHoldersOverrunIsExcusedUpToALongKernel) {
  G g;
  g.StartWaiting(0);
  for (int64_t t = 100 * kMs; t <= 2000 * kMs; t += 100 * kMs) g.AccrueWaiting(t, 30, true);
  EXPECT_EQ(g.owed(), 600 * kMs);
  const int64_t most = (region::kLongKernelNs + region::kStuckGraceNs) * 30 / 100;  // 360 ms
  EXPECT_EQ(g.excused(), most);
  EXPECT_TRUE(g.StartGrant(2000 * kMs, 1 * kMs));  // 600 > 140 + 360
  G h;
  h.StartWaiting(0);
  for (int64_t t = 100 * kMs; t <= 1000 * kMs; t += 100 * kMs) h.AccrueWaiting(t, 30, true);
  EXPECT_EQ(h.owed(), 300 * kMs);
  EXPECT_FALSE(h.StartGrant(1000 * kMs, 1 * kMs)) << "300 ms owed, all excused: no grant";
  h.CountHeld(100 * kMs, 1100 * kMs, 30);  // 70 ms beyond the share, from the excused part
  EXPECT_EQ(h.owed(), 230 * kMs);
  EXPECT_EQ(h.excused(), 230 * kMs);
}

// A self-granted part: due past the bound, as many launches as fit at the cost of one,
// ended by the first launch past its budget or its time, counted as got at its end.
TEST(StarvationGuard, AGrantIsDueOnlyPastTheBoundAndAdmitsItsBudget) {
  G g;
  g.StartWaiting(0);
  g.AccrueWaiting(100 * kMs, 100, false);
  g.AccrueWaiting(140 * kMs, 100, false);
  EXPECT_EQ(g.owed(), G::kOwedBoundNs);
  EXPECT_FALSE(g.StartGrant(140 * kMs, 1 * kMs)) << "at the bound, not past it";
  EXPECT_EQ(g.TakeGrantLaunch(140 * kMs), G::GrantLaunch::kNone);
  g.AccrueWaiting(150 * kMs, 100, false);  // 150 ms owed
  ASSERT_TRUE(g.StartGrant(150 * kMs, 10 * kMs));
  // 140 ms at 10 ms a launch: 14 launches, the one that started it included.
  int go = 1;
  G::GrantLaunch last;
  while ((last = g.TakeGrantLaunch(151 * kMs)) == G::GrantLaunch::kGo) ++go;
  EXPECT_EQ(go, 14);
  EXPECT_EQ(last, G::GrantLaunch::kEnded) << "the first launch past the budget ends the part";
  EXPECT_EQ(g.TakeGrantLaunch(152 * kMs), G::GrantLaunch::kNone) << "only one thread ends it";
  g.AccrueWaiting(200 * kMs, 100, false);  // no part runs any more: waiting accrues again
  g.EndGrant(290 * kMs, 50);               // 140 ms got at 50 %: 70 ms paid back
  EXPECT_EQ(g.owed(), 150 * kMs + 50 * kMs - 70 * kMs);
}

TEST(StarvationGuard, AGrantEndsAtItsTimeAndItsMeasuredCostSizesTheNext) {
  G g;
  g.StartWaiting(0);
  g.AccrueWaiting(100 * kMs, 100, false);
  g.AccrueWaiting(200 * kMs, 100, false);         // 200 ms owed
  ASSERT_TRUE(g.StartGrant(200 * kMs, 1 * kMs));  // budget 140 launches
  EXPECT_EQ(g.TakeGrantLaunch(250 * kMs), G::GrantLaunch::kGo);
  g.AccrueWaiting(300 * kMs, 100, false);  // a part running is got, not waited for
  EXPECT_EQ(g.owed(), 200 * kMs);
  EXPECT_EQ(g.TakeGrantLaunch(340 * kMs), G::GrantLaunch::kEnded) << "its 140 ms are up";
  g.EndGrant(340 * kMs, 100);  // 2 launches in 140 ms: 70 ms each
  g.AccrueWaiting(2000 * kMs, 100, false);
  EXPECT_GT(g.owed(), G::kOwedBoundNs);
  ASSERT_TRUE(g.StartGrant(2000 * kMs, 1 * kMs));
  int go = 1;
  while (g.TakeGrantLaunch(2001 * kMs) == G::GrantLaunch::kGo) ++go;
  EXPECT_EQ(go, 2) << "140 ms at the 70 ms a launch the last part measured";
  EXPECT_EQ(g.TakeGrantLaunch(2001 * kMs), G::GrantLaunch::kNone);
}

// Launching threads race for a part's launches: together they get its budget, and
// exactly one of them ends it.
TEST(StarvationGuard, ThreadsRacingForAGrantShareItsBudgetAndOneEndsIt) {
  G g;
  g.StartWaiting(0);
  g.AccrueWaiting(100 * kMs, 100, false);
  g.AccrueWaiting(200 * kMs, 100, false);
  ASSERT_TRUE(g.StartGrant(200 * kMs, 1 * kMs));  // 140 launches, one taken
  std::atomic<int> go{0}, ended{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        G::GrantLaunch r = g.TakeGrantLaunch(201 * kMs);
        if (r == G::GrantLaunch::kGo) go.fetch_add(1);
        if (r == G::GrantLaunch::kEnded) ended.fetch_add(1);
        g.AccrueWaiting(201 * kMs + i, 100, false);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(go.load(), 139);
  EXPECT_EQ(ended.load(), 1);
}

TEST(StarvationGuard, AForkedChildStartsWithNothingOwed) {
  G g;
  g.StartWaiting(0);
  for (int64_t t = 100 * kMs; t <= 1000 * kMs; t += 100 * kMs) g.AccrueWaiting(t, 100, t > 500 * kMs);
  ASSERT_GT(g.excused(), 0);
  ASSERT_TRUE(g.StartGrant(1000 * kMs, 1 * kMs));
  g.Reset();
  EXPECT_EQ(g.owed(), 0);
  EXPECT_EQ(g.excused(), 0);
  EXPECT_EQ(g.TakeGrantLaunch(1001 * kMs), G::GrantLaunch::kNone);
}

}  // namespace
}  // namespace gs::enforcer
