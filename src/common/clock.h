// Time for everything that paces or measures: a monotonic nanosecond clock, and behind an
// interface for the simulator's node, which runs on virtual time in its unit tests. The
// card protocol (src/region) and the limiter's policy parts (src/enforcer/launch_cost.h,
// starvation_guard.h) take `now` as a parameter instead, and are tested on made-up time.
//
// RealClock reads CLOCK_MONOTONIC (vDSO, no syscall). ManualClock only moves when a test
// or a SleepUntil moves it. Implementations are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace gs {

int64_t MonotonicNowNs();
void SleepUntilNs(int64_t deadline_ns);  // on CLOCK_MONOTONIC; returns at once if past

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowNs() = 0;
  virtual void SleepUntil(int64_t deadline_ns) = 0;
};

class RealClock final : public Clock {
 public:
  int64_t NowNs() override { return MonotonicNowNs(); }
  void SleepUntil(int64_t deadline_ns) override { SleepUntilNs(deadline_ns); }
  static RealClock* Get();
};

// Virtual time: SleepUntil jumps the clock forward instead of waiting.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  int64_t NowNs() override { return now_.load(); }
  void SleepUntil(int64_t deadline_ns) override {
    int64_t cur = now_.load();
    while (cur < deadline_ns && !now_.compare_exchange_weak(cur, deadline_ns)) {
    }
  }
  void Advance(int64_t ns) { now_.fetch_add(ns); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace gs
