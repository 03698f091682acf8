// A Pod as kube-scheduler hands it to the extender (src/scheduler/pod_spec.h): JSON to a
// PodRequest (resources, HAMi request annotations, defaults). Must never throw.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "src/scheduler/pod_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto pod = nlohmann::json::parse(gs::fuzz::AsText(data, size), nullptr, /*allow_exceptions=*/false);
  if (pod.is_discarded()) return 0;
  (void)gs::scheduler::PodAnnotations(pod);
  auto r = gs::scheduler::PodRequestFromJson(pod);
  if (!r.ok()) return 0;
  for (const auto& c : r->containers) {
    GS_FUZZ_CHECK(c.gpus >= 0 && c.memory_mib >= 0);
    GS_FUZZ_CHECK(c.memory_percent >= 0 && c.memory_percent <= 100);
    GS_FUZZ_CHECK(c.cores >= 0 && c.cores <= 100);
  }
  // Card indexes: ascending, each once, never negative (placement searches them).
  for (const auto* list : {&r->use_indexes, &r->nouse_indexes}) {
    GS_FUZZ_CHECK(std::is_sorted(list->begin(), list->end()));
    GS_FUZZ_CHECK(std::adjacent_find(list->begin(), list->end()) == list->end());
    GS_FUZZ_CHECK(list->empty() || list->front() >= 0);
  }
  return 0;
}
