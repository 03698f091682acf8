// The hand-off from bind to the node agent's Allocate (src/scheduler/handoff.h): a Pod as
// the API server lists it on the node, with annotations a user may have written, read as
// a pending pod; then which container entry an Allocate would claim.
#include <nlohmann/json.hpp>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "src/scheduler/handoff.h"
#include "src/scheduler/pod_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto pod = nlohmann::json::parse(gs::fuzz::AsText(data, size), nullptr, /*allow_exceptions=*/false);
  if (pod.is_discarded()) return 0;
  auto pending = gs::scheduler::PendingPodFromJson(pod, "node-a");
  if (!pending.ok() || !pending->has_value()) return 0;
  const gs::scheduler::PendingPod& p = **pending;
  int next = p.next_container();
  GS_FUZZ_CHECK(next >= -1 && next < static_cast<int>(p.to_allocate.size()));
  std::vector<gs::scheduler::PendingPod> pods = {p};
  for (int cards = 0; cards <= 4; ++cards) {
    auto claim = gs::scheduler::ChooseClaim(pods, cards);
    if (!claim.ok()) continue;
    GS_FUZZ_CHECK(claim->pod == 0 && claim->container < p.to_allocate.size());
    GS_FUZZ_CHECK(static_cast<int>(claim->cards.size()) == cards);
  }
  auto request = gs::scheduler::PodRequestFromJson(pod);
  if (request.ok()) (void)gs::scheduler::Confusable(pods, *request);
  return 0;
}
