// The card region: one file per physical GPU, shared by the enforcers of every container
// that computes on that card, through which they take turns on it (src/enforcer/limiter.h).
//
// Why turns: on a GPU without MPS the contexts of different processes time-slice, and no
// signal a single process can read tells it what share it got while others compete
// (NVML counts each time-sliced process ~99 % busy; its own event timings are stretched by
// the others' turns). So the tenants of a card coordinate: one tenant (a container) holds
// the card at a time; while it holds it, the card runs only its work, so the wall time of
// its turn is the GPU time it took. Each tenant has a credit of GPU time refilled at its
// share; turns go to the tenant with the most credit among those waiting, and idle turns
// are handed on so the card stays busy.
//
// Layout rules as for the container region: fixed, pinned by static_assert, only
// lock-free atomics (no mutex: a tenant must not be able to block another by holding a
// lock; a stuck holder loses the card when its deadline has long passed).
//
// The turn word packs (sequence, holder, active processes) so that joining a turn,
// leaving it and handing it over are single compare-and-swaps.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "src/common/contract.h"

namespace gs::region {

inline constexpr uint64_t kCardMagic = 0x314452414353472EULL;  // ".GSCARD1"
inline constexpr uint32_t kCardAbiMajor = 1;
inline constexpr int kCardTenants = 64;
inline constexpr uint32_t kNoHolder = 0xFFFF;

// Scheduling constants (docs/enforcer.md, "Compute share").
inline constexpr int64_t kTurnMaxNs = 20'000'000;  // longest turn while others wait
inline constexpr int64_t kTurnMinNs = 1'000'000;   // idle capacity lent to a tenant in debt: enough to run
// A turn lasts at least this long, and a tenant held to its share waits until it has this
// much credit (or its whole cap): each turn costs a drain and a hand-over, so short turns
// of short kernels would spend a good part of the card on turn changes. Measured on the
// simulator: 100 us kernels at 30/70 got 22/41 % with 1 ms turns.
inline constexpr int64_t kTurnGoodNs = 10'000'000;
inline constexpr int64_t kBurstNs = 100'000'000;          // credit kept at most: share x this
inline constexpr int64_t kWantFreshNs = 5'000'000;        // a waiter refreshes its wish this often
inline constexpr int64_t kTenantFreshNs = 5'000'000'000;  // a tenant unseen this long is gone
inline constexpr int64_t kStuckGraceNs = 200'000'000;     // past its deadline, a holder loses the card
inline constexpr unsigned kYieldShare = 5;                // share kept while a higher-priority tenant waits
// The longest single kernel the shares are kept for. A turn cannot preempt a running
// kernel: a holder that drains one past its deadline (its drain heartbeat fresh) keeps
// the card up to this much longer than kStuckGraceNs, is charged the whole overrun and
// repays it before its next turn.
inline constexpr int64_t kLongKernelNs = 1'000'000'000;
inline constexpr int64_t kDrainFreshNs = 50'000'000;  // a drain heartbeat older than this is stale
// Credit is believed up to this: the cap, plus what KeepRefillOfWaiters keeps beyond it.
inline constexpr int64_t kCreditMostNs = kBurstNs + kStuckGraceNs + kLongKernelNs;
// Debt beyond this is forgiven (a stuck kernel must not lock a tenant out for long); more
// than a turn plus the longest believed overrun, so no honest overrun is forgiven.
inline constexpr int64_t kMaxDebtNs = 2'000'000'000;
inline constexpr int kWorstPriority = contract::kWorstPriority;  // priorities: 0 (best) .. this

struct CardTenant {
  std::atomic<uint64_t> id;       // the container's tenant id; 0 = free
  std::atomic<uint32_t> share;    // percent, 1..100
  std::atomic<uint32_t> force;    // 1: never beyond the share (policy force)
  std::atomic<int32_t> priority;  // CUDA_TASK_PRIORITY of the container (lower = higher)
  uint32_t reserved0;
  std::atomic<int64_t> credit_ns;  // GPU time it may still take, as of credit_at_ns
  std::atomic<int64_t> credit_at_ns;
  std::atomic<int64_t> wants_ns;  // CLOCK_MONOTONIC when a process of it last waited; 0 none
  std::atomic<int64_t> seen_ns;   // heartbeat of its processes
  std::atomic<uint64_t> used_ns;  // GPU time charged in all (tests, metrics)
  // CLOCK_MONOTONIC heartbeat of a process of it waiting for its turn's work to finish
  // (every 10 ms while it drains); 0 none.
  std::atomic<int64_t> drain_ns;
};

struct Card {
  uint64_t magic;
  uint32_t abi_major;
  uint32_t reserved0;
  uint64_t size;
  std::atomic<uint64_t> turn;        // PackTurn(seq, holder, active)
  std::atomic<uint32_t> turn_futex;  // bumped on every hand-over (waiters sleep on it)
  uint32_t reserved1;
  std::atomic<int64_t> turn_start_ns;  // of the current turn
  std::atomic<int64_t> deadline_ns;    // of the current turn
  std::atomic<uint32_t> deadline_seq;  // the turn sequence deadline_ns belongs to
  uint32_t reserved2;
  uint8_t reserved[64];
  CardTenant tenants[kCardTenants];
};

static_assert(sizeof(CardTenant) == 72);
static_assert(offsetof(Card, turn) == 24);
static_assert(offsetof(Card, tenants) == 128);

constexpr uint64_t PackTurn(uint32_t seq, uint32_t holder, uint32_t active) {
  return (static_cast<uint64_t>(seq) << 32) | (static_cast<uint64_t>(holder & 0xFFFF) << 16) | (active & 0xFFFF);
}
constexpr uint32_t TurnSeq(uint64_t t) {
  return static_cast<uint32_t>(t >> 32);
}
constexpr uint32_t TurnHolder(uint64_t t) {
  return static_cast<uint32_t>(t >> 16) & 0xFFFF;
}
constexpr uint32_t TurnActive(uint64_t t) {
  return static_cast<uint32_t>(t) & 0xFFFF;
}

// Maps the card file at path (created and initialised when new or empty); nullptr with
// a message when it cannot be used. An anonymous card for one process when path is null.
Card* OpenCard(const char* path, char* msg, size_t msg_size);
void CloseCard(Card* c);
// Writes an empty card (no tenant, nobody holding it) over c. Async-signal-safe.
void InitCard(Card* c);

// Finds the tenant with this id or claims a free (or long unseen) entry, searching from the
// last entry down (the host hands entries out from the first up: TakeCardEntry); -1 when
// full. Publishes share, policy and priority for it.
int JoinCard(Card* c, uint64_t id, unsigned share, bool force, int priority, int64_t now);
// Takes entry `entry` for tenant `id` whatever it holds: the host handed it to this
// container (src/node/card_entries.h), so whoever else wrote there lost it. What another
// id left in it (credit, wish, GPU time used) is reset; our own is kept. Publishes share,
// policy and priority. Returns entry, or -1 when it is out of range.
int TakeCardEntry(Card* c, int entry, uint64_t id, unsigned share, bool force, int priority, int64_t now);

// Every tenant can write the whole card, so what the functions below read of a tenant's
// entry is a claim, believed only within bounds: a share is taken as 1..100, a credit as
// -kMaxDebtNs..kCreditMostNs, and a priority never better than `best_priority`, the best any
// tenant of this card may hold (GPUSLICE_CARD_BEST_PRIORITY from the caller's read-only
// limits file, src/common/contract.h). What they cannot bound (a holder that keeps the
// turn, a waiter that never takes it, another's credit zeroed) the caller's own
// starvation guard answers (src/enforcer/limiter.cc).

// The share a tenant claims, as believed: 1..100.
unsigned BelievedShare(const CardTenant& t);
// The priority a tenant claims, as believed: best_priority..kWorstPriority.
int BelievedPriority(const CardTenant& t, int best_priority);
// True while a tenant other than `tenant` with a better believed priority than `priority`
// waits for the card or holds it.
bool BetterPriorityActive(const Card* c, int tenant, int priority, int best_priority, int64_t now);

// A tenant's credit at `now`: what it had, refilled at its effective share, capped.
int64_t CreditAt(const CardTenant& t, unsigned effective_share, int64_t now);
// Its share after priorities: kYieldShare while a tenant of better priority waits.
unsigned EffectiveShare(const Card* c, int tenant, int64_t now, int best_priority);
// Per mille of a turn's length that is charged when the turn's tenant says how busy the card
// was in it: all of it unless said otherwise.
inline constexpr unsigned kWholeTurn = 1000;
// Takes a turn of `length_ns` ending at `now` from the tenant's credit (only the one
// process ending a turn calls it, so the read-modify-write of credit is not contended).
// `busy_permille`: how much of the turn the card was busy with the tenant's work, as the
// tenant measured it (src/enforcer/card_busy.h). Believed only for a tenant held to its
// share (policy force) when no other tenant waited during the turn: the turn then kept
// nobody from the card, and a share caps the card's time a tenant uses, so only that time
// is charged, and credit is never raised above the cap that way. Otherwise the turn's
// whole length is charged: another tenant's wait is time the card was kept from it.
void Charge(Card* c, int tenant, int64_t length_ns, int64_t now, int best_priority,
            unsigned busy_permille = kWholeTurn);
// What Charge takes for a turn of `length_ns`: all of it, or busy_permille of it where
// Charge would believe that.
int64_t Charged(const Card* c, int tenant, int64_t length_ns, int64_t now, unsigned busy_permille);

// Called by whoever ends a turn that ran past its deadline (a kernel cannot be preempted):
// the waiting tenants other than `holder` keep the credit they earned during the overrun,
// beyond their cap, so a competitor's long kernel costs them nothing of their share.
void KeepRefillOfWaiters(Card* c, uint32_t holder, int64_t deadline, int64_t now, int best_priority);
// Whom the card goes to next among the tenants waiting at `now` (kNoHolder: nobody may
// run now): the most credit among those with credit left; when none has credit, a tenant
// not held to its share (policy default) may take the idle card. Ties go round robin
// after `after`. Pure apart from reading the card.
uint32_t PickNext(const Card* c, uint32_t after, int64_t now, int best_priority);
// Called by whoever granted `next` the card: when it had no credit left (it takes idle
// capacity under policy default), every waiting tenant not held to its share is credited
// as if time had run on until `next` had some, each at its own share. So idle capacity is
// split in proportion to the shares, and nobody sinks into debt for using it.
void LendIdle(Card* c, uint32_t next, int64_t now, int best_priority);
// How long a turn granted to `tenant` at `now` lasts: its credit, between the minimum and
// the maximum turn; the maximum when it is alone and may use idle capacity.
int64_t TurnLength(const Card* c, int tenant, int64_t now, int best_priority);
// True while another tenant than `tenant` waits for the card.
bool OthersWait(const Card* c, int tenant, int64_t now);
// True when another tenant than `tenant` waited for the card at any moment from `since` to
// `now` (or says so: a wish stamped ahead of `now` by less than kWantFreshNs counts).
bool OthersWaitedSince(const Card* c, int tenant, int64_t since, int64_t now);
// True while a process of tenant `holder` says it waits for its turn's work to finish
// (a fresh drain heartbeat).
bool Draining(const Card* c, uint32_t holder, int64_t now);
// How long past its deadline the holder of a turn keeps the card before a waiter takes it
// (a stuck or dead holder): kStuckGraceNs, plus kLongKernelNs while it drains.
int64_t StuckGrace(const Card* c, uint32_t holder, int64_t now);

}  // namespace gs::region
