#include "src/enforcer/starvation_guard.h"

#include <algorithm>

namespace gs::enforcer {

void StarvationGuard::AddOwed(int64_t delta) {
  int64_t cur = owed_.load();
  while (!owed_.compare_exchange_weak(cur, std::max(kOwedFloorNs, cur + delta))) {
  }
}

void StarvationGuard::AccrueWaiting(int64_t now, unsigned share, bool overrun) {
  int64_t at = owed_at_.load();
  if (grant_until_.load() != 0) return;  // a grant is got, not waited for (counted at its end)
  if (at >= now || !owed_at_.compare_exchange_strong(at, now)) return;
  int64_t accrued = std::min(now - at, kWaitTickMaxNs) * share / 100;
  AddOwed(accrued);
  if (overrun) {
    int64_t most = (region::kLongKernelNs + region::kStuckGraceNs) * share / 100;
    int64_t cur = excused_.load();
    while (cur < most && !excused_.compare_exchange_weak(cur, std::min(most, cur + accrued))) {
    }
  }
}

void StarvationGuard::CountHeld(int64_t held, int64_t now, unsigned share) {
  if (held > 0) {
    int64_t back = held * (100 - share) / 100;
    AddOwed(-back);
    int64_t cur = excused_.load();
    while (cur > 0 && !excused_.compare_exchange_weak(cur, std::max<int64_t>(0, cur - back))) {
    }
  }
  owed_at_.store(now);
}

bool StarvationGuard::StartGrant(int64_t now, int64_t launch_cost) {
  if (owed_.load() <= kOwedBoundNs + excused_.load()) return false;
  int64_t cost = grant_cost_.load();
  if (cost == 0) cost = std::max<int64_t>(1, launch_cost);
  grant_start_.store(now);
  grant_launches_.store(1);  // the launch that asked
  grant_budget_.store(std::max<int64_t>(1, kOwedBoundNs / cost));
  int64_t none = 0;
  return grant_until_.compare_exchange_strong(none, now + kOwedBoundNs);
}

StarvationGuard::GrantLaunch StarvationGuard::TakeGrantLaunch(int64_t now) {
  int64_t until = grant_until_.load();
  if (until == 0) return GrantLaunch::kNone;
  if (now < until && grant_launches_.fetch_add(1) < grant_budget_.load()) return GrantLaunch::kGo;
  // One thread ends the part; the others ask for the card as usual.
  return grant_until_.compare_exchange_strong(until, 0) ? GrantLaunch::kEnded : GrantLaunch::kNone;
}

void StarvationGuard::EndGrant(int64_t end, unsigned share) {
  int64_t start = grant_start_.load();
  int64_t n = std::max<int64_t>(1, std::min(grant_launches_.load(), grant_budget_.load()));
  grant_cost_.store(std::max<int64_t>(1, (end - start) / n));
  CountHeld(end - start, end, share);
}

void StarvationGuard::Reset() {
  owed_.store(0);
  owed_at_.store(0);
  excused_.store(0);
  grant_until_.store(0);
}

}  // namespace gs::enforcer
