#include "src/region/turn.h"

namespace gs::region {
namespace {

// Turn seq has just gone to `next` (kNoHolder: nobody): idle capacity is lent to it when
// it has no credit, and the turn's start and deadline are set.
void BeginTurn(Card* c, uint32_t seq, uint32_t next, int64_t now, int best_priority) {
  LendIdle(c, next, now, best_priority);
  c->turn_start_ns.store(now);
  c->deadline_ns.store(now + (next == kNoHolder ? 0 : TurnLength(c, static_cast<int>(next), now, best_priority)));
  c->deadline_seq.store(seq);
}

}  // namespace

BelievedTurn ReadTurn(const Card* c, uint64_t w, uint32_t me, int64_t first_seen_at, int64_t now) {
  BelievedTurn t;
  t.word = w;
  t.seq = TurnSeq(w);
  t.holder = TurnHolder(w);
  t.active = TurnActive(w);
  t.deadline_known = c->deadline_seq.load() == t.seq;
  t.deadline = c->deadline_ns.load();
  if (t.holder != me && (!t.deadline_known || t.deadline > now + kTurnMaxNs)) {
    t.deadline = first_seen_at + kTurnMaxNs;
    t.deadline_known = true;
  }
  return t;
}

bool GiveFreeCard(Card* c, uint32_t waiter, uint64_t w, int64_t now, int best_priority) {
  if (TurnHolder(w) != kNoHolder || waiter >= static_cast<uint32_t>(kCardTenants)) return false;
  c->tenants[waiter].wants_ns.store(now);
  uint32_t next = PickNext(c, waiter, now, best_priority);
  uint32_t seq = TurnSeq(w) + 1;
  if (next == kNoHolder || !c->turn.compare_exchange_strong(w, PackTurn(seq, next, 0))) return false;
  BeginTurn(c, seq, next, now, best_priority);
  return true;
}

bool JoinTurn(Card* c, uint32_t tenant, uint64_t w, int64_t now, int best_priority, int64_t* deadline) {
  if (TurnHolder(w) != tenant || tenant >= static_cast<uint32_t>(kCardTenants)) return false;
  uint32_t seq = TurnSeq(w);
  if (!c->turn.compare_exchange_strong(w, PackTurn(seq, tenant, TurnActive(w) + 1))) return false;
  *deadline = TurnDeadline(c, seq, now + TurnLength(c, static_cast<int>(tenant), now, best_priority));
  c->tenants[tenant].wants_ns.store(0);
  return true;
}

bool LeaveTurn(Card* c, uint32_t tenant, uint32_t seq, int64_t now, int best_priority, unsigned busy_permille) {
  for (;;) {
    uint64_t w = c->turn.load();
    if (TurnSeq(w) != seq || TurnHolder(w) != tenant || TurnActive(w) == 0)
      return false;  // the turn was taken from us (stuck) or is over
    if (TurnActive(w) > 1) {
      if (c->turn.compare_exchange_strong(w, w - 1)) return false;
      continue;
    }
    if (HandOverTurn(c, tenant, w, now, best_priority, busy_permille)) return true;
  }
}

bool HandOverTurn(Card* c, uint32_t tenant, uint64_t w, int64_t now, int best_priority, unsigned busy_permille) {
  if (tenant >= static_cast<uint32_t>(kCardTenants)) return false;
  CardTenant& me = c->tenants[tenant];
  uint32_t seq = TurnSeq(w);
  int64_t start = c->turn_start_ns.load();
  bool started = c->deadline_seq.load() == seq;
  // The turn is charged before choosing whom the card goes to (the holder's credit must be
  // current to compare), and the charge taken back if the turn word changed meanwhile.
  int64_t credit = me.credit_ns.load(), credit_at = me.credit_at_ns.load();
  uint64_t used = me.used_ns.load();
  if (started) Charge(c, static_cast<int>(tenant), now - start, now, best_priority, busy_permille);
  uint32_t next = PickNext(c, tenant, now, best_priority);
  if (!c->turn.compare_exchange_strong(w, PackTurn(seq + 1, next, 0))) {
    me.credit_ns.store(credit);
    me.credit_at_ns.store(credit_at);
    me.used_ns.store(used);
    return false;
  }
  if (started) KeepRefillOfWaiters(c, tenant, c->deadline_ns.load(), now, best_priority);
  BeginTurn(c, seq + 1, next, now, best_priority);
  return true;
}

bool TurnIsStuck(const Card* c, const BelievedTurn& t, bool ours_inside, int64_t now) {
  return t.holder != kNoHolder && !ours_inside && t.deadline_known && now > t.deadline + StuckGrace(c, t.holder, now);
}

bool TakeStuckTurn(Card* c, uint64_t w) {
  return c->turn.compare_exchange_strong(w, PackTurn(TurnSeq(w) + 1, kNoHolder, 0));
}

Extension ExtendTurnAlone(Card* c, uint32_t tenant, int64_t start_seen, bool force, int64_t now, int best_priority,
                          int64_t* length, unsigned busy_permille) {
  const int t = static_cast<int>(tenant);
  int64_t start = start_seen;
  if (force) {
    unsigned share = EffectiveShare(c, t, now, best_priority);
    if (CreditAt(c->tenants[t], share, now) - Charged(c, t, now - start, now, busy_permille) <= 0)
      return Extension::kNotAllowed;
  }
  // One process of the tenant wins the extension, and charges what the turn took so far.
  if (!c->turn_start_ns.compare_exchange_strong(start, now)) return Extension::kByAnother;
  Charge(c, t, now - start, now, best_priority, busy_permille);
  *length = TurnLength(c, t, now, best_priority);
  c->deadline_ns.store(now + *length);
  return Extension::kExtended;
}

bool HoldsTurn(const Card* c, uint32_t tenant, uint32_t seq) {
  uint64_t w = c->turn.load();
  return TurnSeq(w) == seq && TurnHolder(w) == tenant;
}

int64_t TurnDeadline(const Card* c, uint32_t seq, int64_t unknown) {
  return c->deadline_seq.load() == seq ? c->deadline_ns.load() : unknown;
}

}  // namespace gs::region
