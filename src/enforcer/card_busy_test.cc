#include "src/enforcer/card_busy.h"

#include <gtest/gtest.h>

namespace gs::enforcer {
namespace {

constexpr int64_t kMs = 1'000'000;

// Feeds `seconds` of samples every 100 ms: the card `util` % busy while this process holds
// turns `held` of the time. Returns the time reached.
int64_t Feed(CardBusy& b, int64_t at, double seconds, unsigned util, double held, int64_t* held_total) {
  for (int64_t end = at + static_cast<int64_t>(seconds * 1000) * kMs; at < end;) {
    at += CardBusy::kSampleNs;
    *held_total += static_cast<int64_t>(held * CardBusy::kSampleNs);
    b.Sample(at, util, *held_total);
  }
  return at;
}

TEST(CardBusy, UnmeasuredTheWholeTurnIsCharged) {
  CardBusy b;
  EXPECT_EQ(b.Permille(), CardBusy::kAll);
  int64_t held = 0;
  Feed(b, 0, 1.1, 10, 1.0, &held);  // the first look starts the count, the window is not full
  EXPECT_EQ(b.Permille(), CardBusy::kAll);
  Feed(b, 1'100 * kMs, 0.2, 10, 1.0, &held);
  EXPECT_NEAR(b.Permille(), 100, 2);
}

// Alone, a host-bound program keeps the card 21 % busy through its turns: held all the
// time it is charged 21 % of them; held 60 % of the time, the card is busy 12.6 % of it,
// still 21 % of the turns.
TEST(CardBusy, TheTurnsAreChargedWhatTheCardWasBusyInThem) {
  int64_t held = 0;
  CardBusy all;
  Feed(all, 0, 2, 21, 1.0, &held);
  EXPECT_NEAR(all.Permille(), 210, 5);
  CardBusy part;
  held = 0;
  Feed(part, 0, 2, 13, 0.6, &held);
  EXPECT_NEAR(part.Permille(), 217, 5);
  // Saturating: busy through every turn.
  CardBusy full;
  held = 0;
  Feed(full, 0, 2, 60, 0.6, &held);
  EXPECT_EQ(full.Permille(), CardBusy::kAll);
}

// The figure follows the workload within about a second, never above a whole turn or below
// the floor, and is not believed while the process hardly holds the card.
TEST(CardBusy, FollowsTheWorkloadWithinBounds) {
  int64_t held = 0;
  CardBusy b;
  int64_t at = Feed(b, 0, 2, 20, 1.0, &held);
  at = Feed(b, at, 1.5, 100, 1.0, &held);  // turned saturating
  EXPECT_GT(b.Permille(), 950u);
  at = Feed(b, at, 2, 0, 1.0, &held);  // launches nothing the card runs
  EXPECT_EQ(b.Permille(), CardBusy::kFloor);
  at = Feed(b, at, 2, 100, 0.5, &held);  // busy beyond its turns: another program on the card
  EXPECT_EQ(b.Permille(), CardBusy::kAll);
  at = Feed(b, at, 3, 1, 0.01, &held);  // hardly held
  EXPECT_EQ(b.Permille(), CardBusy::kAll);
  b.Unknown(at);  // NVML stopped answering
  EXPECT_EQ(b.Permille(), CardBusy::kAll);
}

// Samples that go back in time (a clock or a counter that was reset) start the count again.
TEST(CardBusy, TimeGoingBackStartsAgain) {
  int64_t held = 0;
  CardBusy b;
  int64_t at = Feed(b, 0, 2, 20, 1.0, &held);
  EXPECT_NEAR(b.Permille(), 200, 5);
  b.Sample(at - kMs, 20, held);
  EXPECT_EQ(b.Permille(), CardBusy::kAll);
  Feed(b, at, 1.3, 20, 1.0, &held);
  EXPECT_NEAR(b.Permille(), 200, 5);
}

// NVML's figure is for a period that ended a while ago: a process that starts computing
// holds turns at once while the utilisation still reads the idle card for up to kMostLag
// samples. At no sample is it charged less than the 60 % the card is busy in its turns.
TEST(CardBusy, ALaggingUtilisationNeverLowersTheCharge) {
  for (int lag = 0; lag <= CardBusy::kMostLag; ++lag) {
    int64_t held = 0;
    CardBusy b;
    int64_t at = Feed(b, 0, 2, 0, 0.0, &held);  // idle
    for (int k = 0; k < 3 * CardBusy::kWindow; ++k) {
      at = Feed(b, at, 0.1, k < lag ? 0 : 60, 1.0, &held);
      EXPECT_GE(b.Permille(), 595u) << "lag " << lag << ", sample " << k;
    }
    EXPECT_NEAR(b.Permille(), 600, 5) << "lag " << lag;
  }
}

}  // namespace
}  // namespace gs::enforcer
