// The card protocol on made-up time: every transition of the turn word (turn.h), what a
// reader believes of a forged card, and the shares the protocol gives two tenants over a
// window of virtual time for kernels from 5 us to 1 s. No clock, no sleep: the whole
// file runs in milliseconds.
//
// The turn word's transitions and the TurnTest tests of each:
// - nobody -> a tenant (GiveFreeCard): AFreeCardGoesToTheWaiterWithMostCredit,
//   AFreeCardStaysFreeWhileNobodyMayRun.
// - a process joins the holder's turn (JoinTurn): ProcessesOfTheHolderJoinItsTurn.
// - a process leaves, others stay (LeaveTurn): TheLastProcessToLeaveHandsTheCardOver.
// - the last one leaves, the card goes on (LeaveTurn, HandOverTurn): the same,
//   AHandOverRacedByAJoinUndoesItsCharge, AHandOverAfterAnOverrunLetsWaitersKeepWhatTheyEarned.
// - the holder loses a stuck turn (TurnIsStuck, TakeStuckTurn): kStuckCases,
//   AStuckTurnIsTakenOnlyFromTheWordSeen.
// - a holder alone moves its deadline (ExtendTurnAlone):
//   AnAloneHolderExtendsItsTurnUnlessForceLeavesItNoCredit; not when another process of
//   it did since (kByAnother): EveryTransitionFromAStaleWordChangesNothing.
// - each of them from a stale word: EveryTransitionFromAStaleWordChangesNothing.
// - all of them at once: RacingProcessesOfTwoTenantsAreNeverInATurnTogether.
// The policy the transitions use (card.h): who goes next (PickNext:
// TheNextIsTheWaiterWithMostCreditElseTheOneOutOfDebtFirst), priorities (EffectiveShare:
// AWorsePriorityYieldsWhileABetterOneWaitsOrHoldsTheCard; over time:
// TurnShares.ABetterPriorityTakesTheCardFromAWorseOne), idle capacity (LendIdle:
// IdleCapacityGoesToTheNextInDebtAndItsPeersNotToThoseYieldingToIt).
#include "src/region/turn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace gs::region {
namespace {

constexpr int64_t kT0 = 1'000'000'000'000;
constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;
constexpr int kBest = 1;  // the best priority any tenant of these cards may hold

class TurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char msg[256];
    c_ = OpenCard(nullptr, msg, sizeof(msg));
    ASSERT_NE(c_, nullptr) << msg;
  }
  void TearDown() override { CloseCard(c_); }

  uint32_t Join(uint64_t id, unsigned share, bool force = false, int priority = kBest) {
    int t = JoinCard(c_, id, share, force, priority, kT0);
    EXPECT_GE(t, 0);
    return static_cast<uint32_t>(t);
  }
  void Want(uint32_t t, int64_t now) { c_->tenants[t].wants_ns.store(now); }
  uint64_t Word() const { return c_->turn.load(); }
  // Gives the card to `t` as a hand-over at `now` would, with its deadline.
  void Hold(uint32_t t, int64_t now, int64_t length = kTurnGoodNs) {
    uint32_t seq = TurnSeq(Word()) + 1;
    c_->turn.store(PackTurn(seq, t, 0));
    c_->turn_start_ns.store(now);
    c_->deadline_ns.store(now + length);
    c_->deadline_seq.store(seq);
  }

  Card* c_ = nullptr;
};

TEST_F(TurnTest, AFreeCardGoesToTheWaiterWithMostCredit) {
  uint32_t a = Join(1, 30), b = Join(2, 70);
  const int64_t now = kT0 + 50 * kMs;  // a has 15 ms of credit, b 35 ms
  Want(b, now);
  uint64_t w = Word();
  ASSERT_TRUE(GiveFreeCard(c_, a, w, now, kBest));
  EXPECT_EQ(TurnHolder(Word()), b);
  EXPECT_EQ(TurnSeq(Word()), TurnSeq(w) + 1);
  EXPECT_EQ(TurnActive(Word()), 0u);
  EXPECT_EQ(c_->tenants[a].wants_ns.load(), now);  // the giver's wish is announced
  EXPECT_EQ(c_->turn_start_ns.load(), now);
  // b's 35 ms of credit, cut to the longest turn while a waits.
  EXPECT_EQ(TurnDeadline(c_, TurnSeq(Word()), -1), now + kTurnMaxNs);
}

TEST_F(TurnTest, AFreeCardStaysFreeWhileNobodyMayRun) {
  // Two tenants held to their shares, both in debt: nobody may take the card yet.
  uint32_t a = Join(1, 30, /*force=*/true), b = Join(2, 70, /*force=*/true);
  c_->tenants[a].credit_ns.store(-50 * kMs);
  c_->tenants[b].credit_ns.store(-50 * kMs);
  Want(a, kT0);
  Want(b, kT0);
  uint64_t w = Word();
  EXPECT_FALSE(GiveFreeCard(c_, a, w, kT0, kBest));
  EXPECT_EQ(Word(), w);
  // b is out of debt and has a good turn's credit first (50 ms + 10 ms at 70 %).
  const int64_t later = kT0 + 86 * kMs;
  Want(a, later);
  Want(b, later);
  ASSERT_TRUE(GiveFreeCard(c_, a, w, later, kBest));
  EXPECT_EQ(TurnHolder(Word()), b);
}

TEST_F(TurnTest, ProcessesOfTheHolderJoinItsTurn) {
  uint32_t a = Join(1, 30), b = Join(2, 70);
  Want(a, kT0);
  Hold(a, kT0, 15 * kMs);
  int64_t deadline = 0;
  EXPECT_FALSE(JoinTurn(c_, b, Word(), kT0, kBest, &deadline));  // not b's turn
  ASSERT_TRUE(JoinTurn(c_, a, Word(), kT0 + kMs, kBest, &deadline));
  EXPECT_EQ(deadline, kT0 + 15 * kMs);
  EXPECT_EQ(c_->tenants[a].wants_ns.load(), 0);  // no longer waiting
  ASSERT_TRUE(JoinTurn(c_, a, Word(), kT0 + 2 * kMs, kBest, &deadline));
  EXPECT_EQ(TurnActive(Word()), 2u);
  // A turn the card gives no deadline (its holder just took it): a turn's length from now.
  c_->deadline_seq.store(TurnSeq(Word()) - 1);
  ASSERT_TRUE(JoinTurn(c_, a, Word(), kT0 + 3 * kMs, kBest, &deadline));
  EXPECT_EQ(deadline, kT0 + 3 * kMs + TurnLength(c_, static_cast<int>(a), kT0 + 3 * kMs, kBest));
}

TEST_F(TurnTest, TheLastProcessToLeaveHandsTheCardOver) {
  uint32_t a = Join(1, 30), b = Join(2, 70);
  Hold(a, kT0 + 100 * kMs);
  int64_t deadline = 0;
  ASSERT_TRUE(JoinTurn(c_, a, Word(), kT0 + 100 * kMs, kBest, &deadline));
  ASSERT_TRUE(JoinTurn(c_, a, Word(), kT0 + 100 * kMs, kBest, &deadline));
  const uint32_t seq = TurnSeq(Word());
  const int64_t end = kT0 + 110 * kMs;
  Want(b, end);
  EXPECT_FALSE(LeaveTurn(c_, a, seq, end, kBest));  // one process of a is still in it
  EXPECT_EQ(TurnActive(Word()), 1u);
  EXPECT_EQ(TurnHolder(Word()), a);
  EXPECT_EQ(c_->tenants[a].used_ns.load(), 0u);
  ASSERT_TRUE(LeaveTurn(c_, a, seq, end, kBest));
  EXPECT_EQ(TurnHolder(Word()), b);
  EXPECT_EQ(TurnSeq(Word()), seq + 1);
  EXPECT_EQ(c_->tenants[a].used_ns.load(), static_cast<uint64_t>(10 * kMs));  // charged its turn
  // Leaving a turn that is over changes nothing.
  uint64_t w = Word();
  EXPECT_FALSE(LeaveTurn(c_, a, seq, end + kMs, kBest));
  EXPECT_EQ(Word(), w);
}

TEST_F(TurnTest, AHandOverRacedByAJoinUndoesItsCharge) {
  uint32_t a = Join(1, 30), b = Join(2, 70);
  Hold(a, kT0 + 100 * kMs);
  Want(b, kT0 + 110 * kMs);
  uint64_t seen = Word();
  int64_t credit = c_->tenants[a].credit_ns.load(), at = c_->tenants[a].credit_at_ns.load();
  // A process of a joins between the holder reading the word and handing over.
  int64_t deadline = 0;
  ASSERT_TRUE(JoinTurn(c_, a, seen, kT0 + 105 * kMs, kBest, &deadline));
  EXPECT_FALSE(HandOverTurn(c_, a, seen, kT0 + 110 * kMs, kBest));
  EXPECT_EQ(TurnHolder(Word()), a);
  EXPECT_EQ(c_->tenants[a].credit_ns.load(), credit);
  EXPECT_EQ(c_->tenants[a].credit_at_ns.load(), at);
  EXPECT_EQ(c_->tenants[a].used_ns.load(), 0u);
}

TEST_F(TurnTest, AHandOverAfterAnOverrunLetsWaitersKeepWhatTheyEarned) {
  uint32_t a = Join(1, 30), b = Join(2, 70);
  Hold(a, kT0 + 100 * kMs, 10 * kMs);
  const int64_t end = kT0 + 410 * kMs;  // a 300 ms overrun of a 10 ms turn
  Want(b, end);
  ASSERT_TRUE(HandOverTurn(c_, a, Word(), end, kBest));
  // b kept its 70 ms cap plus 70 % of the overrun, and has the card; a repays 70 % of 310 ms.
  EXPECT_EQ(TurnHolder(Word()), b);
  EXPECT_EQ(CreditAt(c_->tenants[b], 70, end), 70 * kMs + 210 * kMs);
  EXPECT_EQ(CreditAt(c_->tenants[a], 30, end), 30 * kMs - 310 * kMs * 70 / 100);
}

TEST_F(TurnTest, AnAloneHolderExtendsItsTurnUnlessForceLeavesItNoCredit) {
  uint32_t a = Join(1, 30);
  Hold(a, kT0 + 100 * kMs, kTurnMaxNs);
  int64_t length = 0;
  const int64_t now = kT0 + 120 * kMs;
  ASSERT_EQ(ExtendTurnAlone(c_, a, c_->turn_start_ns.load(), /*force=*/false, now, kBest, &length),
            Extension::kExtended);
  EXPECT_EQ(length, kTurnMaxNs);  // alone under policy default: the longest turn
  EXPECT_EQ(c_->deadline_ns.load(), now + kTurnMaxNs);
  EXPECT_EQ(c_->turn_start_ns.load(), now);
  EXPECT_EQ(c_->tenants[a].used_ns.load(), static_cast<uint64_t>(20 * kMs));
  // Under policy force, a holder whose turn took its credit ends it.
  uint32_t f = Join(2, 30, /*force=*/true);
  Hold(f, kT0 + 100 * kMs, kTurnGoodNs);
  EXPECT_EQ(ExtendTurnAlone(c_, f, c_->turn_start_ns.load(), /*force=*/true, kT0 + 130 * kMs, kBest, &length),
            Extension::kNotAllowed);
  EXPECT_EQ(c_->deadline_ns.load(), kT0 + 100 * kMs + kTurnGoodNs);
}

// A tenant under policy force that says the card was busy 20 % of its turn is charged that
// part while nobody else waits (a share caps the card's time it uses), never gaining
// credit above its cap that way; its whole turn when another tenant waited at any moment
// of it, and always under policy default. An extension under force is allowed while the charge fits.
TEST_F(TurnTest, ALoneTenantHeldToItsShareIsChargedWhatTheCardWasBusy) {
  uint32_t f = Join(1, 30, /*force=*/true);
  const int64_t start = kT0 + 100 * kMs, now = start + 20 * kMs;
  Hold(f, start, kTurnMaxNs);
  c_->tenants[f].credit_ns.store(0);
  c_->tenants[f].credit_at_ns.store(start);
  Charge(c_, static_cast<int>(f), now - start, now, kBest, 200);
  EXPECT_EQ(c_->tenants[f].used_ns.load(), static_cast<uint64_t>(4 * kMs));
  EXPECT_EQ(c_->tenants[f].credit_ns.load(), 6 * kMs - 4 * kMs);  // refilled 30 % of 20 ms, charged 4
  // At its cap it stays there.
  c_->tenants[f].credit_ns.store(kBurstNs * 30 / 100);
  c_->tenants[f].credit_at_ns.store(start);
  Charge(c_, static_cast<int>(f), now - start, now, kBest, 200);
  EXPECT_EQ(c_->tenants[f].credit_ns.load(), kBurstNs * 30 / 100);
  // Out of credit for a whole turn, it extends for what the card was busy.
  c_->tenants[f].credit_ns.store(-2 * kMs);
  c_->tenants[f].credit_at_ns.store(start);
  Hold(f, start, kTurnGoodNs);
  int64_t length = 0;
  EXPECT_EQ(ExtendTurnAlone(c_, f, start, /*force=*/true, now, kBest, &length), Extension::kNotAllowed);
  EXPECT_EQ(ExtendTurnAlone(c_, f, start, /*force=*/true, now, kBest, &length, 100), Extension::kExtended);
  // Another tenant waits: the whole turn.
  uint32_t other = Join(2, 70);
  Want(other, now);
  c_->tenants[f].credit_ns.store(0);
  c_->tenants[f].credit_at_ns.store(start);
  const uint64_t used = c_->tenants[f].used_ns.load();
  Charge(c_, static_cast<int>(f), now - start, now, kBest, 200);
  EXPECT_EQ(c_->tenants[f].used_ns.load() - used, static_cast<uint64_t>(20 * kMs));
  EXPECT_EQ(c_->tenants[f].credit_ns.load(), 6 * kMs - 20 * kMs);
  // Another tenant that waited during the turn, no longer (it gave up, or its process is
  // stalled): the whole turn.
  Want(other, start + 5 * kMs);
  c_->tenants[f].credit_ns.store(0);
  c_->tenants[f].credit_at_ns.store(start);
  Charge(c_, static_cast<int>(f), now - start, now, kBest, 200);
  EXPECT_EQ(c_->tenants[f].credit_ns.load(), 6 * kMs - 20 * kMs);
  // One that last waited before the turn began: the busy part.
  Want(other, start - 6 * kMs);
  c_->tenants[f].credit_ns.store(0);
  c_->tenants[f].credit_at_ns.store(start);
  Charge(c_, static_cast<int>(f), now - start, now, kBest, 200);
  EXPECT_EQ(c_->tenants[f].credit_ns.load(), 6 * kMs - 4 * kMs);
  // Under policy default, alone: the whole turn.
  uint32_t d = Join(3, 30);
  c_->tenants[other].wants_ns.store(0);
  Charge(c_, static_cast<int>(d), 20 * kMs, now, kBest, 200);
  EXPECT_EQ(c_->tenants[d].used_ns.load(), static_cast<uint64_t>(20 * kMs));
}

TEST_F(TurnTest, AStuckTurnIsTakenOnlyFromTheWordSeen) {
  uint32_t a = Join(1, 30);
  Hold(a, kT0);
  uint64_t seen = Word();
  Hold(a, kT0 + kMs);  // handed over since
  EXPECT_FALSE(TakeStuckTurn(c_, seen));
  uint64_t now_word = Word();
  ASSERT_TRUE(TakeStuckTurn(c_, now_word));
  EXPECT_EQ(TurnHolder(Word()), kNoHolder);
  EXPECT_EQ(TurnSeq(Word()), TurnSeq(now_word) + 1);
}

TEST_F(TurnTest, EveryTransitionFromAStaleWordChangesNothing) {
  uint32_t a = Join(1, 30), b = Join(2, 70);
  Want(b, kT0);
  uint64_t stale = Word();
  Hold(a, kT0);
  uint64_t held = Word();
  int64_t deadline = 0;
  EXPECT_FALSE(GiveFreeCard(c_, b, stale, kT0, kBest));
  EXPECT_EQ(Word(), held);
  uint64_t stale_held = held;
  ASSERT_TRUE(JoinTurn(c_, a, held, kT0, kBest, &deadline));
  uint64_t joined = Word();
  EXPECT_FALSE(JoinTurn(c_, a, stale_held, kT0, kBest, &deadline));
  EXPECT_FALSE(HandOverTurn(c_, a, stale_held, kT0 + kMs, kBest));
  EXPECT_FALSE(TakeStuckTurn(c_, stale_held));
  EXPECT_EQ(Word(), joined);
  // Another process of the holder extended the turn since this one read its start.
  const int64_t start = c_->turn_start_ns.load(), deadline_before = c_->deadline_ns.load();
  int64_t length = -1;
  EXPECT_EQ(ExtendTurnAlone(c_, a, start - kMs, /*force=*/false, start + kTurnGoodNs, kBest, &length),
            Extension::kByAnother);
  EXPECT_EQ(c_->turn_start_ns.load(), start);
  EXPECT_EQ(c_->deadline_ns.load(), deadline_before);
  EXPECT_EQ(c_->tenants[a].used_ns.load(), 0u);
  EXPECT_EQ(length, -1);
}

// Processes of two tenants racing through the transitions on one card (threads standing in
// for processes; `now` moves 100 us each time a process leaves, so no turn is ever stuck): a process
// is only ever in a turn of its own tenant's, and never beside a process of the other.
// Under TSan in CI (make test-tsan).
TEST_F(TurnTest, RacingProcessesOfTwoTenantsAreNeverInATurnTogether) {
  const uint32_t tenant[2] = {Join(1, 30), Join(2, 70)};
  std::atomic<int64_t> clock{kT0};
  std::atomic<int> inside[2] = {0, 0};
  std::atomic<int> overlaps{0};
  auto process = [&](int t) {
    const uint32_t me = tenant[t];
    for (int round = 0; round < 2000;) {
      int64_t now = clock.load();
      Want(me, now);
      uint64_t w = c_->turn.load();
      if (TurnHolder(w) == kNoHolder) {
        GiveFreeCard(c_, me, w, now, kBest);
        continue;
      }
      int64_t deadline = 0;
      if (TurnHolder(w) != me || !JoinTurn(c_, me, w, now, kBest, &deadline)) {
        std::this_thread::yield();
        continue;
      }
      ++round;
      inside[t].fetch_add(1);
      std::this_thread::yield();
      if (inside[1 - t].load() != 0) overlaps.fetch_add(1);
      inside[t].fetch_sub(1);
      LeaveTurn(c_, me, TurnSeq(w), clock.fetch_add(100 * kUs) + 100 * kUs, kBest);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(process, i % 2);
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(TurnActive(Word()), 0u);  // every process that joined left
  EXPECT_GT(c_->tenants[tenant[0]].used_ns.load(), 0u);
  EXPECT_GT(c_->tenants[tenant[1]].used_ns.load(), 0u);
}

// Who may take the card from the holder: past its believed deadline by more than the grace
// (200 ms; 1.2 s while the holder drains a kernel), never from under oneself.
struct StuckCase {
  const char* name;
  bool holder_is_tenant;  // false: a garbage holder index that is no tenant
  bool deadline_on_card;  // the card gives a deadline for this turn
  int64_t deadline_from_now;
  bool draining;
  bool ours_inside;
  bool stuck;
};
const StuckCase kStuckCases[] = {
    {"within the grace", true, true, -150 * kMs, false, false, false},
    {"past the grace", true, true, -250 * kMs, false, false, true},
    {"draining, within the long-kernel grace", true, true, -1100 * kMs, true, false, false},
    {"draining, past the long-kernel grace", true, true, -1300 * kMs, true, false, true},
    {"our own process is in it", true, true, -5 * kS, false, true, false},
    {"before its deadline", true, true, 5 * kMs, false, false, false},
    {"a forged far deadline: 20 ms after first seen", true, true, 3600 * kS, false, false, true},
    {"no deadline: 20 ms after first seen", true, false, 0, false, false, true},
    {"a holder that is no tenant", false, false, 0, false, false, true},
};

TEST_F(TurnTest, StuckTurnsAreTakenAfterTheirGraceAndNoSooner) {
  uint32_t a = Join(1, 30), b = Join(2, 70);
  const int64_t first_seen = kT0, now = kT0 + 300 * kMs;
  for (const StuckCase& k : kStuckCases) {
    SCOPED_TRACE(k.name);
    uint32_t holder = k.holder_is_tenant ? a : 0x1234;
    uint32_t seq = TurnSeq(Word()) + 1;
    c_->turn.store(PackTurn(seq, holder, k.ours_inside ? 1 : 0));
    c_->deadline_ns.store(now + k.deadline_from_now);
    c_->deadline_seq.store(k.deadline_on_card ? seq : seq - 1);
    c_->tenants[a].drain_ns.store(k.draining ? now - kMs : 0);
    uint32_t reader = k.ours_inside ? a : b;
    BelievedTurn t = ReadTurn(c_, Word(), reader, first_seen, now);
    EXPECT_EQ(TurnIsStuck(c_, t, k.ours_inside, now), k.stuck);
  }
}

// What a reader believes of another's deadline, and of its own.
TEST_F(TurnTest, AForgedOrMissingDeadlineOfAnotherEndsTheTurnATurnAfterItWasFirstSeen) {
  uint32_t a = Join(1, 30), b = Join(2, 70);
  const int64_t seen = kT0, now = kT0 + 5 * kMs;
  Hold(a, now, 12 * kMs);
  BelievedTurn t = ReadTurn(c_, Word(), b, seen, now);
  EXPECT_TRUE(t.deadline_known);
  EXPECT_EQ(t.deadline, now + 12 * kMs);  // believable: kept
  c_->deadline_ns.store(now + kTurnMaxNs + 1);
  EXPECT_EQ(ReadTurn(c_, Word(), b, seen, now).deadline, seen + kTurnMaxNs);
  c_->deadline_seq.store(TurnSeq(Word()) + 7);
  t = ReadTurn(c_, Word(), b, seen, now);
  EXPECT_TRUE(t.deadline_known);
  EXPECT_EQ(t.deadline, seen + kTurnMaxNs);
  // Its own turn with no deadline stays unknown: its processes set one as they join.
  t = ReadTurn(c_, Word(), a, seen, now);
  EXPECT_FALSE(t.deadline_known);
}

// A filled card file: every entry claimed by a tenant that looks alive. JoinCard finds no
// room, but an entry the host handed a container is taken whatever it holds, and that
// tenant gets turns.
TEST_F(TurnTest, AFilledCardFileLeavesTheEntryTheHostHandedOut) {
  for (int i = 0; i < kCardTenants; ++i) ASSERT_GE(JoinCard(c_, 1000 + i, 100, false, kBest, kT0), 0);
  EXPECT_EQ(JoinCard(c_, 7, 30, false, kBest, kT0), -1);
  c_->tenants[5].credit_ns.store(kCreditMostNs);  // the squatter's credit
  ASSERT_EQ(TakeCardEntry(c_, 5, 7, 30, false, kBest, kT0), 5);
  EXPECT_EQ(c_->tenants[5].id.load(), 7u);
  EXPECT_EQ(c_->tenants[5].credit_ns.load(), 0);  // nothing of the squatter's kept
  Want(5, kT0 + 50 * kMs);
  ASSERT_TRUE(GiveFreeCard(c_, 5, Word(), kT0 + 50 * kMs, kBest));
  EXPECT_EQ(TurnHolder(Word()), 5u);
  EXPECT_EQ(TakeCardEntry(c_, kCardTenants, 7, 30, false, kBest, kT0), -1);
}

// What is believed of an entry a forger wrote: a share of 1..100, a priority no better than
// the card's best, a credit within bounds.
TEST_F(TurnTest, AForgedEntryIsBelievedOnlyWithinBounds) {
  uint32_t f = Join(1, 30), h = Join(2, 70);
  c_->tenants[f].share.store(1000);
  c_->tenants[f].priority.store(-5);
  c_->tenants[f].credit_ns.store(INT64_MAX);
  c_->tenants[f].credit_at_ns.store(INT64_MIN);
  EXPECT_EQ(BelievedShare(c_->tenants[f]), 100u);
  EXPECT_EQ(BelievedPriority(c_->tenants[f], kBest), kBest);
  EXPECT_EQ(CreditAt(c_->tenants[f], 100, kT0), kCreditMostNs);
  Want(f, kT0);
  EXPECT_EQ(EffectiveShare(c_, static_cast<int>(h), kT0, kBest), 70u);  // no better priority to yield to
}

// A tenant of worse priority keeps kYieldShare while one of better priority waits for the
// card or holds it, and its own share otherwise; the better one never yields to it.
TEST_F(TurnTest, AWorsePriorityYieldsWhileABetterOneWaitsOrHoldsTheCard) {
  const int good = static_cast<int>(Join(1, 30, false, kBest));
  const int worse = static_cast<int>(Join(2, 70, false, kBest + 1));
  EXPECT_EQ(EffectiveShare(c_, worse, kT0, kBest), 70u) << "the better one is idle";
  Want(static_cast<uint32_t>(worse), kT0);
  EXPECT_EQ(EffectiveShare(c_, good, kT0, kBest), 30u) << "nobody better than it waits";
  Want(static_cast<uint32_t>(good), kT0);
  EXPECT_EQ(EffectiveShare(c_, worse, kT0, kBest), kYieldShare) << "the better one waits";
  EXPECT_EQ(EffectiveShare(c_, good, kT0, kBest), 30u);
  const int64_t later = kT0 + kWantFreshNs + kMs;  // the better one's wish has gone stale
  EXPECT_EQ(EffectiveShare(c_, worse, later, kBest), 70u);
  Hold(static_cast<uint32_t>(good), later);
  EXPECT_EQ(EffectiveShare(c_, worse, later, kBest), kYieldShare) << "the better one holds the card";
  // The same priorities with the card's best at the worse one's: both are believed equal.
  EXPECT_EQ(EffectiveShare(c_, worse, later, kBest + 1), 70u);
}

// Who goes next: among waiters, the one with the most credit, if it has enough to start (a
// force tenant a good turn's worth); else, in debt, the default tenant that would be out of
// it first at its own share. A force tenant never takes idle capacity.
TEST_F(TurnTest, TheNextIsTheWaiterWithMostCreditElseTheOneOutOfDebtFirst) {
  uint32_t a = Join(1, 30), b = Join(2, 70), f = Join(3, 50, /*force=*/true);
  auto credit = [&](uint32_t t, int64_t ns) {
    c_->tenants[t].credit_ns.store(ns);
    c_->tenants[t].credit_at_ns.store(kT0);
    Want(t, kT0);
  };
  // All in debt: a is out of it in 10 ms at 30 %, b in 8.6 ms at 70 %, f (force) waits.
  credit(a, -3 * kMs);
  credit(b, -6 * kMs);
  credit(f, -1 * kMs);
  EXPECT_EQ(PickNext(c_, kNoHolder, kT0, kBest), b);
  // f has credit, but less than a good turn: still not f.
  credit(f, kTurnGoodNs - kUs);
  EXPECT_EQ(PickNext(c_, kNoHolder, kT0, kBest), b);
  credit(f, kTurnGoodNs);
  EXPECT_EQ(PickNext(c_, kNoHolder, kT0, kBest), f);
  credit(a, 25 * kMs);  // the most credit
  EXPECT_EQ(PickNext(c_, kNoHolder, kT0, kBest), a);
  // Whoever does not wait is not picked, whatever its credit.
  c_->tenants[a].wants_ns.store(kT0 - kWantFreshNs);
  EXPECT_EQ(PickNext(c_, kNoHolder, kT0, kBest), f);
}

// Lent idle capacity: the next tenant in debt gets just enough to run (kTurnMinNs), the other
// default waiters the same time's worth at their shares, so none falls behind; a force
// tenant, and one yielding to a better priority, get nothing.
TEST_F(TurnTest, IdleCapacityGoesToTheNextInDebtAndItsPeersNotToThoseYieldingToIt) {
  uint32_t next = Join(1, 30), peer = Join(2, 20), worse = Join(3, 40, false, kBest + 1), f = Join(4, 10, true);
  for (uint32_t t : {next, peer, worse, f}) {
    c_->tenants[t].credit_ns.store(-10 * kMs);
    c_->tenants[t].credit_at_ns.store(kT0);
    Want(t, kT0);
  }
  LendIdle(c_, next, kT0, kBest);
  // 11 ms at 30 % takes 36.7 ms: next gets 11 ms, its peer 20 % of 36.7 ms.
  EXPECT_NEAR(static_cast<double>(c_->tenants[next].credit_ns.load()), kTurnMinNs, kUs);
  EXPECT_NEAR(static_cast<double>(c_->tenants[peer].credit_ns.load()), -10.0 * kMs + 11.0 * kMs * 20 / 30, kUs);
  EXPECT_EQ(c_->tenants[worse].credit_ns.load(), -10 * kMs) << "it yields to next";
  EXPECT_EQ(c_->tenants[f].credit_ns.load(), -10 * kMs) << "force takes no idle capacity";
  // Nothing is lent to a next that has credit already.
  const int64_t before = c_->tenants[peer].credit_ns.load();
  LendIdle(c_, next, kT0, kBest);
  EXPECT_EQ(c_->tenants[peer].credit_ns.load(), before);
}

// The protocol alone, two tenants always wanting the card, each launching kernels of one
// length and admitting what fits in its turn at that cost (at least one), as the limiter
// does once it has measured them. Waiters take a stuck turn as the limiter's would (a
// draining holder keeps its heartbeat fresh). Returns the GPU time each got, in percent.
struct Tenant {
  unsigned share;
  bool force;
  int64_t kernel_ns;
  int priority = kBest;
};
std::vector<double> RunOnVirtualTime(const std::vector<Tenant>& tenants, int64_t window) {
  char msg[256];
  Card* c = OpenCard(nullptr, msg, sizeof(msg));
  std::vector<uint32_t> entry;
  std::vector<int64_t> gpu(tenants.size(), 0);
  for (size_t i = 0; i < tenants.size(); ++i)
    entry.push_back(
        static_cast<uint32_t>(JoinCard(c, i + 1, tenants[i].share, tenants[i].force, tenants[i].priority, kT0)));
  auto want_all = [&](int64_t now) {
    for (uint32_t e : entry) {
      c->tenants[e].wants_ns.store(now);
      c->tenants[e].seen_ns.store(now);
    }
  };
  int64_t now = kT0;
  while (now < kT0 + window) {
    want_all(now);
    uint64_t w = c->turn.load();
    if (TurnHolder(w) == kNoHolder) {
      if (!GiveFreeCard(c, entry[0], w, now, kBest)) now += kMs;  // nobody may run: waiters look again
      continue;
    }
    size_t i = std::find(entry.begin(), entry.end(), TurnHolder(w)) - entry.begin();
    int64_t deadline = 0;
    if (!JoinTurn(c, entry[i], w, now, kBest, &deadline)) continue;
    const int64_t start = now;
    // Launches admitted until the deadline, then (the part reopened) at least one more while
    // time is left.
    do {
      int64_t n = std::max<int64_t>(1, (deadline - now) / tenants[i].kernel_ns);
      now += n * tenants[i].kernel_ns;
    } while (now < deadline);
    gpu[i] += now - start;
    want_all(now);
    c->tenants[entry[i]].drain_ns.store(now);
    size_t reader = (i + 1) % entry.size();
    BelievedTurn t = ReadTurn(c, c->turn.load(), entry[reader], start, now);
    if (entry.size() > 1 && TurnIsStuck(c, t, false, now) && TakeStuckTurn(c, t.word)) {
      Charge(c, static_cast<int>(entry[i]), now - start, now, kBest);  // the holder charges itself
      continue;
    }
    LeaveTurn(c, entry[i], TurnSeq(w), now, kBest);
  }
  CloseCard(c);
  std::vector<double> pct;
  for (int64_t g : gpu) pct.push_back(100.0 * static_cast<double>(g) / static_cast<double>(now - kT0));
  return pct;
}

struct ShareCase {
  int64_t kernel_ns;
  bool force;
};
const ShareCase kShareCases[] = {
    {5 * kUs, false},   {100 * kUs, false}, {1 * kMs, false}, {10 * kMs, false}, {50 * kMs, false},
    {150 * kMs, false}, {300 * kMs, false}, {1 * kS, false},  {5 * kUs, true},   {1 * kMs, true},
    {50 * kMs, true},   {300 * kMs, true},  {1 * kS, true},
};

TEST(TurnShares, ThirtySeventyHoldForKernelsFrom5UsTo1S) {
  for (const ShareCase& k : kShareCases) {
    SCOPED_TRACE("kernel " + std::to_string(k.kernel_ns / kUs) + " us, policy " + (k.force ? "force" : "default"));
    const int64_t window = std::max<int64_t>(30 * kS, 60 * k.kernel_ns);
    std::vector<double> got = RunOnVirtualTime({{30, k.force, k.kernel_ns}, {70, k.force, k.kernel_ns}}, window);
    EXPECT_NEAR(got[0], 30, 5);
    EXPECT_NEAR(got[1], 70, 5);
  }
}

// A tenant with long kernels beside one with short ones: neither takes the other's share.
TEST(TurnShares, LongKernelsBesideShortOnesKeepBothShares) {
  for (int64_t long_ns : {150 * kMs, 300 * kMs, 1 * kS}) {
    SCOPED_TRACE("long kernel " + std::to_string(long_ns / kMs) + " ms");
    std::vector<double> got = RunOnVirtualTime({{30, false, long_ns}, {70, false, 50 * kUs}}, 60 * kS);
    EXPECT_NEAR(got[0], 30, 5);
    EXPECT_NEAR(got[1], 70, 5);
    got = RunOnVirtualTime({{30, false, 50 * kUs}, {70, false, long_ns}}, 60 * kS);
    EXPECT_NEAR(got[0], 30, 5);
    EXPECT_NEAR(got[1], 70, 5);
  }
}

// Priorities: while both want the card, the better one takes it whatever the shares, the
// worse one keeping about kYieldShare; as on an H100 (94 / 6, docs/measurements).
TEST(TurnShares, ABetterPriorityTakesTheCardFromAWorseOne) {
  for (bool force : {false, true}) {
    SCOPED_TRACE(force ? "force" : "default");
    std::vector<double> got = RunOnVirtualTime({{30, force, 1 * kMs, kBest}, {60, force, 1 * kMs, kBest + 1}}, 30 * kS);
    EXPECT_LE(got[1], kYieldShare + 2.0);
    EXPECT_GE(got[0], force ? 30 - 3 : 90);
  }
}

// Alone: policy force holds a tenant to its share, policy default lets it have the card.
TEST(TurnShares, AloneForceKeepsTheShareAndDefaultTakesTheIdleCard) {
  EXPECT_NEAR(RunOnVirtualTime({{30, true, 1 * kMs}}, 30 * kS)[0], 30, 3);
  EXPECT_NEAR(RunOnVirtualTime({{30, false, 1 * kMs}}, 30 * kS)[0], 100, 1);
}

}  // namespace
}  // namespace gs::region
