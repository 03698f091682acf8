#include "src/region/card.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gs::region {
namespace {

// Written so that no stamp a tenant forges can overflow it.
bool Fresh(int64_t stamp, int64_t now, int64_t within) {
  return stamp != 0 && stamp > now - within && stamp < now + within;
}

bool Waiting(const CardTenant& t, int64_t now) {
  return t.id.load() != 0 && Fresh(t.wants_ns.load(), now, kWantFreshNs);
}

}  // namespace

void InitCard(Card* c) {
  memset(static_cast<void*>(c), 0, sizeof(Card));
  c->abi_major = kCardAbiMajor;
  c->size = sizeof(Card);
  c->turn.store(PackTurn(0, kNoHolder, 0));
  c->magic = kCardMagic;  // last: a reader that sees it sees the rest
}

Card* OpenCard(const char* path, char* msg, size_t msg_size) {
  if (path == nullptr) {
    void* p = mmap(nullptr, sizeof(Card), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    InitCard(static_cast<Card*>(p));
    return static_cast<Card*>(p);
  }
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) {
    snprintf(msg, msg_size, "cannot open card region %s: %s", path, strerror(errno));
    return nullptr;
  }
  fchmod(fd, 0666);  // containers running as other users share the card (best effort)
  // Allocated, not sparse: a full disk must not fault a tenant on a page it touches later.
  if (posix_fallocate(fd, 0, sizeof(Card)) != 0) {
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Card)) {
      snprintf(msg, msg_size, "cannot size card region %s", path);
      close(fd);
      return nullptr;
    }
  }
  void* p = mmap(nullptr, sizeof(Card), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    snprintf(msg, msg_size, "cannot map card region %s: %s", path, strerror(errno));
    close(fd);
    return nullptr;
  }
  auto* c = static_cast<Card*>(p);
  // The first process initialises a new (all-zero) file, under an exclusive file lock so
  // two first processes do not both do it.
  if (c->magic != kCardMagic) {
    flock(fd, LOCK_EX);
    if (c->magic == 0 && c->size == 0) InitCard(c);
    flock(fd, LOCK_UN);
  }
  close(fd);
  if (c->magic != kCardMagic || c->abi_major != kCardAbiMajor || c->size != sizeof(Card)) {
    snprintf(msg, msg_size, "%s is not a gpuslice card region of this version", path);
    munmap(p, sizeof(Card));
    return nullptr;
  }
  return c;
}

void CloseCard(Card* c) {
  if (c) munmap(c, sizeof(Card));
}

namespace {

void ResetEntry(CardTenant& t, int64_t now) {
  t.credit_ns.store(0);
  t.credit_at_ns.store(now);
  t.wants_ns.store(0);
  t.used_ns.store(0);
}

void Publish(CardTenant& t, unsigned share, bool force, int priority, int64_t now) {
  t.share.store(std::clamp(share, 1u, 100u));
  t.force.store(force ? 1 : 0);
  t.priority.store(priority);
  t.seen_ns.store(now);
}

}  // namespace

int JoinCard(Card* c, uint64_t id, unsigned share, bool force, int priority, int64_t now) {
  int found = -1;
  for (int i = 0; i < kCardTenants && found < 0; ++i)
    if (c->tenants[i].id.load() == id) found = i;
  for (int i = kCardTenants - 1; i >= 0 && found < 0; --i) {
    CardTenant& t = c->tenants[i];
    uint64_t cur = t.id.load();
    if (cur != 0 && Fresh(t.seen_ns.load(), now, kTenantFreshNs)) continue;
    if (!t.id.compare_exchange_strong(cur, id)) continue;
    ResetEntry(t, now);
    found = i;
  }
  if (found < 0) return -1;
  Publish(c->tenants[found], share, force, priority, now);
  return found;
}

int TakeCardEntry(Card* c, int entry, uint64_t id, unsigned share, bool force, int priority, int64_t now) {
  if (entry < 0 || entry >= kCardTenants) return -1;
  CardTenant& t = c->tenants[entry];
  if (t.id.exchange(id) != id) ResetEntry(t, now);
  Publish(t, share, force, priority, now);
  return entry;
}

unsigned BelievedShare(const CardTenant& t) {
  return std::clamp(t.share.load(), 1u, 100u);
}

int BelievedPriority(const CardTenant& t, int best_priority) {
  return std::clamp(t.priority.load(), std::max(0, best_priority), kWorstPriority);
}

bool BetterPriorityActive(const Card* c, int tenant, int priority, int best_priority, int64_t now) {
  uint32_t holder = TurnHolder(c->turn.load());
  // A tenant of better priority is active while it waits for the card or holds it.
  for (int i = 0; i < kCardTenants; ++i)
    if (i != tenant && BelievedPriority(c->tenants[i], best_priority) < priority &&
        (Waiting(c->tenants[i], now) || (holder == static_cast<uint32_t>(i) && c->tenants[i].id.load() != 0)))
      return true;
  return false;
}

unsigned EffectiveShare(const Card* c, int tenant, int64_t now, int best_priority) {
  const CardTenant& me = c->tenants[tenant];
  unsigned share = BelievedShare(me);
  if (BetterPriorityActive(c, tenant, BelievedPriority(me, best_priority), best_priority, now))
    return std::min(share, kYieldShare);
  return share;
}

int64_t CreditAt(const CardTenant& t, unsigned effective_share, int64_t now) {
  effective_share = std::min(effective_share, 100u);
  // Believed within bounds, so that nothing below overflows whatever the card holds.
  int64_t credit = std::clamp<int64_t>(t.credit_ns.load(), -kMaxDebtNs, kCreditMostNs);
  int64_t at = t.credit_at_ns.load();
  int64_t cap = kBurstNs * effective_share / 100;
  if (credit >= cap) return credit;  // a cap lowered by a yield keeps what was earned
  // Refilling from -kMaxDebtNs to the cap takes at most this long even at 1 %.
  constexpr int64_t kLongest = (kCreditMostNs + kMaxDebtNs) * 100;
  int64_t elapsed = at >= now ? 0 : (at < now - kLongest ? kLongest : now - at);
  int64_t refill = elapsed * effective_share / 100;
  return std::min(cap, credit + refill);
}

int64_t Charged(const Card* c, int tenant, int64_t length_ns, int64_t now, unsigned busy_permille) {
  length_ns = std::clamp<int64_t>(length_ns, 0, kMaxDebtNs + kBurstNs);  // a turn start from the card may be garbage
  // Another tenant that waited at any moment of the turn (its wish is refreshed every
  // kWantFreshNs while it waits) was kept from the card for all of it.
  if (busy_permille >= kWholeTurn || c->tenants[tenant].force.load() == 0 ||
      OthersWaitedSince(c, tenant, now - length_ns, now))
    return length_ns;
  return length_ns * static_cast<int64_t>(busy_permille) / kWholeTurn;
}

void Charge(Card* c, int tenant, int64_t length_ns, int64_t now, int best_priority, unsigned busy_permille) {
  CardTenant& t = c->tenants[tenant];
  length_ns = std::clamp<int64_t>(length_ns, 0, kMaxDebtNs + kBurstNs);  // a turn start from the card may be garbage
  const int64_t used_ns = Charged(c, tenant, length_ns, now, busy_permille);
  unsigned share = std::min(EffectiveShare(c, tenant, now, best_priority), 100u);
  // The credit as the turn began, then the turn: refilled at the share while it ran (not
  // cut at the cap, which only bounds what is kept while waiting, so a long turn is not
  // charged more than its length beyond the share) and what the turn used taken.
  const int64_t before = CreditAt(t, share, now - length_ns);
  int64_t credit = before - length_ns * (100 - share) / 100 + (length_ns - used_ns);
  // A turn charged less than the refill during it raises credit no higher than the cap.
  if (used_ns < length_ns) credit = std::min(credit, std::max(before, kBurstNs * share / 100));
  // Debt beyond kMaxDebtNs is forgiven: a stuck or huge kernel must not lock a tenant out
  // for long afterwards.
  credit = std::max(credit, -kMaxDebtNs);
  t.credit_ns.store(credit);
  t.credit_at_ns.store(now);
  t.used_ns.fetch_add(static_cast<uint64_t>(used_ns));
}

void KeepRefillOfWaiters(Card* c, uint32_t holder, int64_t deadline, int64_t now, int best_priority) {
  int64_t overrun = std::min(now - deadline, kStuckGraceNs + kLongKernelNs);
  if (overrun <= 0) return;
  for (int i = 0; i < kCardTenants; ++i) {
    CardTenant& t = c->tenants[i];
    if (static_cast<uint32_t>(i) == holder || !Waiting(t, now)) continue;
    unsigned share = std::min(EffectiveShare(c, i, now, best_priority), 100u);
    int64_t kept = CreditAt(t, share, now - overrun) + overrun * share / 100;
    if (kept > CreditAt(t, share, now)) {
      t.credit_ns.store(kept);
      t.credit_at_ns.store(now);
    }
  }
}

uint32_t PickNext(const Card* c, uint32_t after, int64_t now, int best_priority) {
  uint32_t best = kNoHolder, fallback = kNoHolder;
  int64_t best_credit = 0, fallback_credit = 0;
  for (int k = 1; k <= kCardTenants; ++k) {
    uint32_t i =
        (after == kNoHolder ? static_cast<uint32_t>(k - 1) : (after + static_cast<uint32_t>(k))) % kCardTenants;
    const CardTenant& t = c->tenants[i];
    if (!Waiting(t, now)) continue;
    unsigned share = std::max(1u, EffectiveShare(c, static_cast<int>(i), now, best_priority));
    int64_t credit = CreditAt(t, share, now);
    // A turn's worth of credit (kTurnGoodNs); below it, only idle capacity (fallback).
    int64_t enough = t.force.load() != 0 ? std::min(kTurnGoodNs, kBurstNs * share / 100) : 1;
    if (credit >= enough && (best == kNoHolder || credit > best_credit)) {
      best = i;
      best_credit = credit;
    }
    // In debt, the one that would be out of it first at its own share.
    int64_t lag = credit * 100 / static_cast<int64_t>(share);
    if (t.force.load() == 0 && (fallback == kNoHolder || lag > fallback_credit)) {
      fallback = i;
      fallback_credit = lag;
    }
  }
  return best != kNoHolder ? best : fallback;
}

void LendIdle(Card* c, uint32_t next, int64_t now, int best_priority) {
  if (next >= static_cast<uint32_t>(kCardTenants)) return;
  unsigned next_share = EffectiveShare(c, static_cast<int>(next), now, best_priority);
  int64_t credit = CreditAt(c->tenants[next], next_share, now);
  if (credit > 0 || next_share == 0) return;
  // Lent: what brings `next` just out of debt, to the others in proportion to their
  // shares. (Lending a whole turn's worth at once would favour small shares whenever
  // kernels are longer than a turn: the larger credit then hits its cap.)
  int64_t lag = (kTurnMinNs - credit) * 100 / next_share;
  for (int i = 0; i < kCardTenants; ++i) {
    CardTenant& t = c->tenants[i];
    if (t.force.load() != 0 || (static_cast<uint32_t>(i) != next && !Waiting(t, now))) continue;
    unsigned share = EffectiveShare(c, i, now, best_priority);
    // A tenant yielding to a better priority gets no idle capacity beside `next`: it keeps
    // its small share, the better one takes the rest.
    if (static_cast<uint32_t>(i) != next && share < BelievedShare(t)) continue;
    int64_t cap = kBurstNs * share / 100;
    t.credit_ns.store(std::min(cap, CreditAt(t, share, now) + lag * share / 100));
    t.credit_at_ns.store(now);
  }
}

bool OthersWait(const Card* c, int tenant, int64_t now) {
  return OthersWaitedSince(c, tenant, now, now);
}

bool OthersWaitedSince(const Card* c, int tenant, int64_t since, int64_t now) {
  // A waiter refreshes its wish every kWantFreshNs: one that waited at `since` or later has
  // a wish stamped after since - kWantFreshNs (Waiting, for since = now).
  for (int i = 0; i < kCardTenants; ++i) {
    const CardTenant& t = c->tenants[i];
    if (i == tenant || t.id.load() == 0) continue;
    const int64_t wished = t.wants_ns.load();
    if (wished != 0 && wished > since - kWantFreshNs && wished < now + kWantFreshNs) return true;
  }
  return false;
}

bool Draining(const Card* c, uint32_t holder, int64_t now) {
  return holder < static_cast<uint32_t>(kCardTenants) && c->tenants[holder].id.load() != 0 &&
         Fresh(c->tenants[holder].drain_ns.load(), now, kDrainFreshNs);
}

int64_t StuckGrace(const Card* c, uint32_t holder, int64_t now) {
  return Draining(c, holder, now) ? kStuckGraceNs + kLongKernelNs : kStuckGraceNs;
}

int64_t TurnLength(const Card* c, int tenant, int64_t now, int best_priority) {
  const CardTenant& t = c->tenants[tenant];
  if (t.force.load() == 0 && !OthersWait(c, tenant, now)) return kTurnMaxNs;
  int64_t credit = CreditAt(t, EffectiveShare(c, tenant, now, best_priority), now);
  // At least a good turn even with less credit: the debt is paid back before the next one,
  // so the share holds, and short kernels do not spend the card on hand-overs.
  return std::clamp(credit, kTurnGoodNs, kTurnMaxNs);
}

}  // namespace gs::region
