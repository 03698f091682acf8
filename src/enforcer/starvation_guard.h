// The compute limiter's starvation guard: what the card owes this process, kept in the
// process's own memory (docs/enforcer.md, "Starvation guard").
//
// Every tenant can write the card: a hostile one can keep the turn for itself, claim to
// wait and never take the turns it is handed, or zero the others' credit, and honest
// tenants would then wait for ever. So while a thread of this process waits for the card,
// entitlement accrues at the share it trusts (its limits file's, or less while a tenant of
// better priority is active: the caller passes it); while it is part of a turn it gets the
// card, and owes back what it took beyond that share. When it is owed more than kOwedBoundNs
// beyond what is excused, it goes ahead without the card's turn for a self-granted part of
// kOwedBoundNs (at most as many launches as fit at the cost of a launch), then asks again.
// So a tenant that wants the card gets at least its trusted share whatever the card says,
// and a forger takes from it no more than a program that ignores the enforcer.
//
// The bound: an honest card owes a waiting tenant at most the credit it keeps (its share of
// kBurstNs) plus what accrues while it waits out the turns of others picked before it (each
// at most kTurnMaxNs; two turns are a generous margin). A competitor's single kernel
// longer than a turn is covered by what is excused while its holder drains past its
// deadline, up to kLongKernelNs. Not covered: longer kernels, and shares on one card that
// add up to more than 100 % (docs/enforcer.md, "Limits of this version").
//
// Every function takes the time it is asked at, so the ledger runs on synthetic time in its
// tests. Thread-safe: any thread of the process may call any function (compare-and-swap).
#pragma once

#include <atomic>
#include <cstdint>

#include "src/region/card.h"

namespace gs::enforcer {

class StarvationGuard {
 public:
  static constexpr int64_t kOwedBoundNs = region::kBurstNs + 2 * region::kTurnMaxNs;  // 140 ms
  // What a process may get ahead of its share (idle capacity, a long kernel of its own): as
  // much as the card forgives, so that paying back a legitimate debt never looks like
  // starvation.
  static constexpr int64_t kOwedFloorNs = -region::kMaxDebtNs;
  // A waiter looks at the card every 1 ms (later on a loaded machine). Longer than this
  // between looks is not believed (a stopped process).
  static constexpr int64_t kWaitTickMaxNs = 100'000'000;

  // The first thread of the process to ask for the card starts the stretch counted as waited.
  void StartWaiting(int64_t now) { owed_at_.store(now); }
  // A waiter's look while no part of a turn is ours: the time since the last look was
  // wanted and not got, and accrues at `share` percent. One waiter claims each stretch.
  // `overrun`: the holder drains a kernel past its deadline; what accrues then is also
  // excused, up to what a kernel of kLongKernelNs would leave owed.
  void AccrueWaiting(int64_t now, unsigned share, bool overrun);
  // This process had the card for `held` (part of a turn, or a self-granted part), which
  // it also wanted: it owes back what went beyond `share`, the excused part first.
  void CountHeld(int64_t held, int64_t now, unsigned share);

  // Starts a self-granted part at `now` when the card owes more than the bound beyond what
  // is excused; a launch then counts as this part's first. `launch_cost` is the learned cost
  // of a launch, used until a grant has measured its own. False when none is due (or another
  // thread started one: that thread's part is then taken with TakeGrantLaunch).
  bool StartGrant(int64_t now, int64_t launch_cost);

  enum class GrantLaunch {
    kNone,   // no self-granted part runs
    kGo,     // the launch goes ahead within the part
    kEnded,  // the part is over: the caller drains the queue, then calls EndGrant
  };
  GrantLaunch TakeGrantLaunch(int64_t now);
  // The part that kEnded ended at `end`, the queue drained: counted as got, and the cost of
  // one of its launches measured for the next.
  void EndGrant(int64_t end, unsigned share);

  int64_t owed() const { return owed_.load(); }
  int64_t excused() const { return excused_.load(); }
  // A forked child starts with an empty ledger and no part running.
  void Reset();

 private:
  void AddOwed(int64_t delta);

  std::atomic<int64_t> owed_{0};         // entitlement not received, ns of GPU time
  std::atomic<int64_t> owed_at_{0};      // waiting up to here is accounted
  std::atomic<int64_t> excused_{0};      // of owed, what accrued while a holder drained past its turn
  std::atomic<int64_t> grant_until_{0};  // a self-granted part runs until then; 0 none
  std::atomic<int64_t> grant_start_{0};
  std::atomic<int64_t> grant_launches_{0};
  std::atomic<int64_t> grant_budget_{0};
  std::atomic<int64_t> grant_cost_{0};  // measured GPU time of a launch in a grant
};

}  // namespace gs::enforcer
