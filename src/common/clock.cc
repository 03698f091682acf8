#include "src/common/clock.h"

#include <cerrno>
#include <ctime>

namespace gs {

int64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepUntilNs(int64_t deadline_ns) {
  if (deadline_ns <= MonotonicNowNs()) return;
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000), static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

RealClock* RealClock::Get() {
  static RealClock clock;
  return &clock;
}

}  // namespace gs
