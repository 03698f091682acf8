#include "tests/racing_slice.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <iostream>

namespace gs::testing {

RaceOnCard SixRacingProcesses(const Env& node_env, const std::string& what, const std::function<Result()>& run) {
  RaceOnCard w;
  Process observer({ProbeBin(), "cardwatch", "600000"}, node_env);
  if (!observer.WaitForOutput("watching")) {
    ADD_FAILURE() << "the observer did not start";
    return w;
  }
  w.result = run();
  observer.Signal(SIGTERM);
  auto f = Fields(observer.Wait().out, "cardwatch");
  if (w.result.code != 0 || f.size() != 4) {
    ADD_FAILURE() << "exit " << w.result.code << ", cardwatch fields " << f.size() << "\n"
                  << w.result.out << w.result.err;
    return w;
  }
  w.contexts = Lines(w.result.out, "init ok").size();
  w.allocations = Lines(w.result.out, "alloc ok").size();
  w.card_most = U(f[1]) - U(f[3]);  // "cardwatch MAX SAMPLES FIRST"
  w.samples = U(f[2]);
  std::cout << what << ", six processes under 2g: " << w.contexts << " contexts and " << w.allocations
            << " allocations of 512 MiB succeeded, the card held at most " << w.card_most / kMiB << " MiB ("
            << w.samples << " samples)\n";
  if (w.samples <= 100) {
    ADD_FAILURE() << "the observer did not watch the card";
    return w;
  }
  const uint64_t charged = w.contexts * 518 * kMiB + w.allocations * 512 * kMiB;
  EXPECT_LE(charged, 2 * kGiB) << w.result.out << w.result.err;
  EXPECT_GT(charged, 2 * kGiB - 518 * kMiB) << "a process was refused while its slice had room\n"
                                            << w.result.out << w.result.err;
  w.watched = true;
  return w;
}

}  // namespace gs::testing
