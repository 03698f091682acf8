// What one kernel launch of this process costs in GPU time, as the compute limiter learns
// it (docs/enforcer.md, "Learning the cost of a launch" and "What a turn admits"). A turn
// admits as many launches as its time over Admit(now), so a deep asynchronous queue cannot
// run far past it.
//
// Every function takes the time it is asked at: the model runs on real time in the limiter
// and on synthetic time in its tests. Learn() is called by the limiter's controller thread
// only; the readers may run on any thread (relaxed atomics: a stale value admits one turn
// more or fewer launches, never breaks anything).
#pragma once

#include <atomic>
#include <cstdint>

#include "src/region/card.h"

namespace gs::enforcer {

class LaunchCost {
 public:
  // What a launch is taken to cost before one is measured: one launch per turn.
  static constexpr int64_t kInitialNs = region::kTurnMaxNs;
  // The highest cost measured is remembered this long at full value, then halved for each
  // further such stretch.
  static constexpr int64_t kMemoryNs = 250'000'000;
  // A cost counts as a kernel's (and may become the remembered high) from this much up.
  static constexpr int64_t kHighFromNs = 1'000'000;
  // A drain that waited longer than this found the card still busy with the turn's work.
  static constexpr int64_t kBusyDrainNs = 20'000;

  // The learned cost (an average that follows the latest turns), kInitialNs before any.
  int64_t Learned() const;
  // The highest cost measured recently, decayed with its age at `now`; 0 when none.
  int64_t High(int64_t now) const;
  // What a launch counts for when a turn's launches are counted: the higher of the two.
  int64_t Admit(int64_t now) const;

  // One part of a turn measured: `launches` launched from `joined`, the gate closed at
  // `closed`, the queued work done at `drained`. A drain that had to wait gives an exact
  // sample (taken up at once, down by halves); one that found nothing queued only bounds
  // the cost from above (it may lower the estimate, never raise it).
  void Learn(uint64_t launches, int64_t joined, int64_t closed, int64_t drained);

 private:
  std::atomic<int64_t> learned_ns_{0};  // 0 until measured
  std::atomic<int64_t> high_ns_{0};
  std::atomic<int64_t> high_at_{0};
  int64_t exact_samples_ = 0;  // Learn() only
};

}  // namespace gs::enforcer
