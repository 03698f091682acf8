// Progress of the agent's loops, for /healthz: each loop beats once per iteration; a loop
// that has not beaten within its allowance is stalled, and /healthz says which and since
// when. So a loop blocked for good (a hung driver call, a lock a container holds) makes
// the probe fail and the kubelet restart the agent, instead of a healthy-looking agent
// that no longer re-registers, cleans up or watches health.
//
// Thread-safe: Beat is one relaxed store; Stalled reads. Times are CLOCK_MONOTONIC ns
// passed in by the caller, so the rule is testable without sleeping.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>

namespace gs::node {

class Progress {
 public:
  // A loop named `name` that must beat at least every `allowance_ns`; returns its handle.
  // Register every loop before any thread beats (the list is not resized afterwards).
  int Register(std::string name, int64_t allowance_ns, int64_t now_ns);
  void Beat(int loop, int64_t now_ns);
  // "" when every loop beat within its allowance, else e.g. "main loop: no progress for 42 s".
  std::string Stalled(int64_t now_ns) const;

 private:
  struct Loop {
    std::string name;
    int64_t allowance_ns = 0;
    std::atomic<int64_t> last_ns{0};
  };
  std::deque<Loop> loops_;  // deque: entries never move (they hold atomics)
};

}  // namespace gs::node
