// Waiting in a test for something another process or thread does: one helper instead of
// hand-written polling loops, and instead of fixed sleeps standing in for an event. For
// unit and integration tests alike (header-only).
#pragma once

#include <chrono>
#include <thread>

namespace gs::testing {

// Asks `done` until it answers true or `within` has passed, looking every `every`; returns
// its last answer, so a test writes ASSERT_TRUE(WaitUntil(...)) << "what never happened".
// `done` is asked once more at the end, so a slow machine never fails a test on a wait
// that ended between two looks.
template <typename Done>
bool WaitUntil(Done&& done, std::chrono::milliseconds within = std::chrono::seconds(10),
               std::chrono::milliseconds every = std::chrono::milliseconds(10)) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(every);
  }
  return done();
}

}  // namespace gs::testing
