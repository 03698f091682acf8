// Start-up of a container of many processes: N processes (default 200) start at once,
// each initialises CUDA and creates its context, all sharing one container region, with
// and without the enforcer preloaded. There is no serialised probe on start-up: each
// process claims its slot under the region mutex for microseconds. Reported as the wall
// time until all N are done, and the ratio; never asserted.
// Run with `make bench` (GS_STARTUP_PROCESSES=N to change N).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/harness.h"

using namespace gs::testing;

namespace {

double StartAll(int n, const Env& env) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::vector<std::unique_ptr<Process>> ps;
  for (int i = 0; i < n; ++i)
    ps.push_back(std::make_unique<Process>(std::vector<std::string>{ProbeBin(), "init", "meminfo"}, env));
  for (auto& p : ps) {
    Result r = p->Wait();
    if (r.code != 0 || r.out.find("init ok") == std::string::npos) {
      fprintf(stderr, "a process failed: %s%s\n", r.out.c_str(), r.err.c_str());
      exit(1);
    }
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

int main() {
  int n = getenv("GS_STARTUP_PROCESSES") ? atoi(getenv("GS_STARTUP_PROCESSES")) : 200;
  SimNode node("context_memory: 0\ngpus: [H100-80GB]\n");
  Env plain = node.env();
  // No context estimate: hundreds of contexts would not fit a real slice, and start-up is measured.
  Env enforced = node.enforced(
      {{"CUDA_DEVICE_MEMORY_LIMIT", "40g"}, {"CUDA_DEVICE_SM_LIMIT", "50"}, {"GPUSLICE_CONTEXT_OVERHEAD", "0"}});
  StartAll(8, enforced);  // warm the page cache
  // Alternate to spread the machine's noise over both; keep each side's best round.
  double best_plain = 1e18, best_enforced = 1e18;
  for (int round = 0; round < 3; ++round) {
    best_plain = std::min(best_plain, StartAll(n, plain));
    best_enforced = std::min(best_enforced, StartAll(n, enforced));
  }
  printf("\n%d processes starting at once, one container region (best of 3 rounds):\n", n);
  printf("%-34s %12s %12s %8s\n", "", "simulator", "+ enforcer", "ratio");
  auto row = [](const char* what, double a, double b) { printf("%-34s %9.1f ms %9.1f ms %8.2f\n", what, a, b, b / a); };
  row("all started and done (wall)", best_plain, best_enforced);
  row("per process (wall / N)", best_plain / n, best_enforced / n);
  return 0;
}
