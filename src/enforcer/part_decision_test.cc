// The controller's decision at each look at this process's part of a turn, on made-up time:
// every outcome of DecidePart and how the launch count it keeps moves.
#include "src/enforcer/part_decision.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace gs::enforcer {
namespace {

constexpr int64_t kT0 = 1'000'000'000'000;
constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;

// A part opened at kT0 with 10 launches counted, a deadline 20 ms on and 100 launches
// admitted, looked at `after` later with `launches` counted.
PartLook Look(int64_t after, uint64_t launches) {
  PartLook l;
  l.now = kT0 + after;
  l.launches = launches;
  l.deadline = kT0 + 20 * kMs;
  l.in_turn = static_cast<int64_t>(launches) - 10;
  l.budget = 100;
  return l;
}

struct Case {
  const char* what;
  PartLook look;
  PartAction action;
  EndReason reason;  // checked for kEnd and kExtendAlone
};

PartLook With(PartLook l, void (*change)(PartLook&)) {
  change(l);
  return l;
}

const Case kCases[] = {
    {"launching, in time, launches left", Look(5 * kMs, 50), PartAction::kGoOn, EndReason::kDeadline},
    {"the turn was taken from us", With(Look(5 * kMs, 50), [](PartLook& l) { l.holds_turn = false; }),
     PartAction::kTakenFromUs, EndReason::kDeadline},
    {"taken even while idle and past the deadline", With(Look(30 * kMs, 10), [](PartLook& l) { l.holds_turn = false; }),
     PartAction::kTakenFromUs, EndReason::kDeadline},
    {"nothing launched for kIdleNs", Look(kIdleNs, 10), PartAction::kEnd, EndReason::kIdle},
    {"nothing launched for just under kIdleNs", Look(kIdleNs - kUs, 10), PartAction::kGoOn, EndReason::kDeadline},
    {"the launches admitted are spent", With(Look(5 * kMs, 50), [](PartLook& l) { l.in_turn = 101; }), PartAction::kEnd,
     EndReason::kSpent},
    {"all launches admitted taken, none refused yet", With(Look(5 * kMs, 50), [](PartLook& l) { l.in_turn = 100; }),
     PartAction::kGoOn, EndReason::kDeadline},
    {"past the deadline, busy, alone: extend", Look(20 * kMs, 50), PartAction::kExtendAlone, EndReason::kDeadline},
    {"past the deadline, busy, others wait", With(Look(20 * kMs, 50), [](PartLook& l) { l.others_wait = true; }),
     PartAction::kEnd, EndReason::kDeadline},
    {"past the deadline and idle: the deadline ends it, alone or not",
     With(Look(22 * kMs, 10), [](PartLook& l) { l.deadline = kT0 + 21 * kMs; }), PartAction::kEnd,
     EndReason::kDeadline},
    {"past the deadline with launches spent, alone: extend first",
     With(Look(20 * kMs, 50), [](PartLook& l) { l.in_turn = 200; }), PartAction::kExtendAlone, EndReason::kDeadline},
    {"an unknown deadline never passes", With(Look(500 * kMs, 50), [](PartLook& l) { l.deadline = INT64_MAX; }),
     PartAction::kGoOn, EndReason::kDeadline},
};

TEST(ControllerLook, EachLookEndsGoesOnExtendsOrChargesATakenTurn) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.what);
    PartProgress progress;
    progress.Saw(10, kT0);
    PartDecision d = DecidePart(k.look, &progress);
    EXPECT_EQ(d.action, k.action);
    if (d.action == PartAction::kEnd || d.action == PartAction::kExtendAlone) {
      EXPECT_EQ(d.reason, k.reason);
    }
  }
}

// Idle is measured from the last look that saw the count move, not from the part's start.
TEST(ControllerLook, IdleCountsFromTheLastLaunchSeen) {
  PartProgress progress;
  progress.Saw(10, kT0);
  EXPECT_EQ(DecidePart(Look(900 * kUs, 11), &progress).action, PartAction::kGoOn);
  EXPECT_EQ(progress.seen_launches, 11u);
  EXPECT_EQ(progress.last_change_ns, kT0 + 900 * kUs);
  // 1.8 ms after the part opened, 0.9 ms after the last launch seen: not idle.
  EXPECT_EQ(DecidePart(Look(1800 * kUs, 11), &progress).action, PartAction::kGoOn);
  EXPECT_EQ(progress.last_change_ns, kT0 + 900 * kUs) << "an unchanged count moves nothing";
  PartDecision d = DecidePart(Look(1900 * kUs, 11), &progress);
  EXPECT_EQ(d.action, PartAction::kEnd);
  EXPECT_EQ(d.reason, EndReason::kIdle);
  EXPECT_STREQ(EndReasonName(d.reason), "idle");
}

}  // namespace
}  // namespace gs::enforcer
