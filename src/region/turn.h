// The turn word's transitions: who holds a card, how many processes of the holder are in
// its turn, when the turn ends and who gets the card next (the policy of whom, and what a
// turn costs, is in card.h).
//
// Every function here is a pure function of the card, the tenant and `now`: no clock, no
// syscall, no process state. The compute limiter (src/enforcer/limiter.cc) drives them
// with the monotonic clock and wakes the card's sleepers (Card::turn_futex) whenever one
// reports that the card changed hands; unit tests drive them on made-up time.
//
// A transition is one compare-and-swap of the turn word from the word the caller read;
// it fails, changing nothing, when the word changed meanwhile (the caller reads it again).
// Everything a tenant reads of the card may be forged by another tenant; what each
// function believes is stated beside it.
#pragma once

#include <cstdint>

#include "src/region/card.h"

namespace gs::region {

// The turn as a reader believes it.
struct BelievedTurn {
  uint64_t word = 0;
  uint32_t seq = 0;
  uint32_t holder = kNoHolder;
  uint32_t active = 0;  // processes of the holder in the turn
  bool deadline_known = false;
  int64_t deadline = 0;  // when deadline_known
};

// Reads turn word w as tenant `me` believes it. An honest holder sets its deadline as it
// takes the turn and never more than kTurnMaxNs ahead; another tenant's turn with no
// deadline or a later one is forged or garbage, and is taken to end kTurnMaxNs after
// `first_seen_at`, when this reader first saw this very word.
BelievedTurn ReadTurn(const Card* c, uint64_t w, uint32_t me, int64_t first_seen_at, int64_t now);

// Tenant `waiter` finds nobody holding the card (turn w) and gives it to the tenant
// PickNext chooses, starting that tenant's turn. True when the card changed hands.
bool GiveFreeCard(Card* c, uint32_t waiter, uint64_t w, int64_t now, int best_priority);

// A process of `tenant`, which holds turn w, joins it. On success, *deadline is when its
// part ends: the turn's deadline, or a turn's length from now when the card has none for
// this turn (its holder just took it). The tenant's wish is withdrawn.
bool JoinTurn(Card* c, uint32_t tenant, uint64_t w, int64_t now, int best_priority, int64_t* deadline);

// A process of `tenant` leaves its part of turn `seq`; the last one to leave hands the card
// over (HandOverTurn). Nothing happens when that turn is no longer the tenant's. True when
// the card changed hands. `busy_permille` as for Charge (card.h).
bool LeaveTurn(Card* c, uint32_t tenant, uint32_t seq, int64_t now, int best_priority,
               unsigned busy_permille = kWholeTurn);

// `tenant`, the holder of turn w with nobody in it any more, ends it: the turn is charged,
// waiters keep what they earned past its deadline, and the card goes to PickNext's choice
// (possibly `tenant` again, or nobody). False, with the charge undone, when the turn word
// changed meanwhile. `busy_permille` as for Charge (card.h).
bool HandOverTurn(Card* c, uint32_t tenant, uint64_t w, int64_t now, int best_priority,
                  unsigned busy_permille = kWholeTurn);

// Whether a reader should take the card from the holder of turn t: it is past its
// believed deadline by more than StuckGrace (a stuck, dead or hostile holder, or a holder
// that is no tenant at all). `ours_inside`: a process of the reader's own tenant is in
// the turn (a turn is never taken from under oneself).
bool TurnIsStuck(const Card* c, const BelievedTurn& t, bool ours_inside, int64_t now);
// Takes turn w from its holder: nobody holds the card after it. True when taken.
bool TakeStuckTurn(Card* c, uint64_t w);

// `tenant`, alone wanting the card, extends its turn past the deadline instead of handing
// it over: what the turn took since `start_seen` (the turn's start as the caller read it)
// is charged (`busy_permille` as for Charge, card.h) and a new deadline set. Under policy
// force only while it has credit left for what the turn is charged.
enum class Extension {
  kExtended,    // *length: the new turn's length from now
  kByAnother,   // another process of the tenant extended it since start_seen
  kNotAllowed,  // out of credit under policy force: the turn ends
};
Extension ExtendTurnAlone(Card* c, uint32_t tenant, int64_t start_seen, bool force, int64_t now, int best_priority,
                          int64_t* length, unsigned busy_permille = kWholeTurn);

// Whether turn `seq` is still `tenant`'s.
bool HoldsTurn(const Card* c, uint32_t tenant, uint32_t seq);
// The deadline the card gives turn `seq`, or `unknown` when it gives none for that turn.
int64_t TurnDeadline(const Card* c, uint32_t seq, int64_t unknown);

}  // namespace gs::region
