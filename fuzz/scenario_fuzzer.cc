// A simulated node's scenario YAML (src/sim/scenario.h ParseScenario), as `gpuslice sim
// up` reads it. Whatever the text, the answer is a Status (yaml-cpp throws on bad input
// and on conversions; the number parsing must not throw either), and an accepted scenario
// is one the simulator can run: 1..kMaxDevices GPUs, each named, with memory and SMs,
// UUIDs and minor numbers distinct; faults on an existing GPU at a finite, non-negative
// time; the sample period and time slice within their ranges.
#include <cmath>
#include <set>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/sim/scenario.h"
#include "src/sim/state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto sc = gs::sim::ParseScenario(std::string(gs::fuzz::AsText(data, size)));
  if (!sc.ok()) {
    GS_FUZZ_CHECK(sc.status().code() == gs::StatusCode::kInvalidArgument && !sc.status().message().empty());
    return 0;
  }
  GS_FUZZ_CHECK(!sc->gpus.empty() && sc->gpus.size() <= static_cast<size_t>(gs::sim::kMaxDevices));
  std::set<std::string> uuids;
  std::set<uint32_t> minors;
  for (const auto& g : sc->gpus) {
    GS_FUZZ_CHECK(!g.name.empty() && !g.uuid.empty() && !g.pci_bus_id.empty());
    GS_FUZZ_CHECK(g.memory_bytes > 0 && g.sm_count > 0);
    GS_FUZZ_CHECK(uuids.insert(g.uuid).second && minors.insert(g.minor).second);
  }
  for (const auto& f : sc->faults) {
    GS_FUZZ_CHECK(f.gpu >= 0 && f.gpu < static_cast<int>(sc->gpus.size()));
    GS_FUZZ_CHECK(std::isfinite(f.at_seconds) && f.at_seconds >= 0);
  }
  GS_FUZZ_CHECK(sc->sample_period_ms >= 10 && sc->sample_period_ms <= 10000);
  GS_FUZZ_CHECK(sc->timeslice_ms >= 0.05 && sc->timeslice_ms <= 1000);
  return 0;
}
