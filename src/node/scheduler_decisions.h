// The node agent's side of fractional scheduling (docs/scheduler.md, "The hand-off"):
// with `--scheduler-decisions`, Allocate gives a container what `gpuslice scheduler`
// decided for it (cards, memory, cores) instead of fixed slices, and the agent publishes
// its cards for the scheduler.
//
//  - DecisionSource::Claim: kubelet's Allocate names no pod, only how many devices; the
//    source watches (or lists) the pods bound to this node, chooses the container entry
//    (src/scheduler/handoff.h: the pod kubelet is in the middle of, else the oldest bind
//    with that many cards) and claims it with a merge patch carrying the pod's
//    resourceVersion, so two Allocates never take one entry (a conflict re-lists and
//    chooses again). No node lock, no expiry.
//  - The pods it chooses among: src/node/pending_pods.h; what a claim gives:
//    src/node/claimed_allocation.h; the node's cards for the scheduler:
//    src/node/node_registrar.h.
//
// Thread-safe: Claim may run on several gRPC threads.
// Never prints: problems come back as Status or go to the `log` callback.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <thread>
#include <vector>

#include "src/common/status.h"
#include "src/kube/client.h"
#include "src/kube/informer.h"
#include "src/model/slices.h"
#include "src/node/pending_pods.h"
#include "src/scheduler/handoff.h"
#include "src/scheduler/request.h"

namespace gs::node {

struct ClaimedCards {
  std::string pod;  // "namespace/name", for logs and records
  size_t container = 0;
  std::vector<scheduler::DeviceShare> cards;
};

class DecisionSource {
 public:
  virtual ~DecisionSource() = default;
  // The decided cards of the next container on this node that asks for `cards` devices,
  // claimed. NotFound (naming what is pending) when no pod waits for that many.
  virtual StatusOr<ClaimedCards> Claim(int cards) = 0;
};

class ApiDecisionSource : public DecisionSource {
 public:
  ApiDecisionSource(kube::Client* client, std::string node_name);
  ~ApiDecisionSource() override;
  ApiDecisionSource(const ApiDecisionSource&) = delete;
  ApiDecisionSource& operator=(const ApiDecisionSource&) = delete;

  // Watches the pods bound to this node (a kube::Informer on a thread of its own; needs
  // `watch` on pods), so that a Claim usually costs one API call, the claim, instead of
  // a list and the claim: kubelet admits pods one at a time with Allocate inside, so
  // every pod behind waits for it. Without the watch (not started, not synced yet,
  // refused) Claim lists as before. Watch errors go to `log`.
  void StartWatching(const std::function<void(const std::string&)>& log);
  bool watching() const;  // the watch has synced: Claim tries its copies first

  StatusOr<ClaimedCards> Claim(int cards) override;

 private:
  // Claims `claim` on `p` with a patch guarded by p's resourceVersion. Aborted or
  // NotFound: the pod changed or went meanwhile, look again.
  StatusOr<ClaimedCards> Take(const scheduler::PendingPod& p, const scheduler::Claim& claim);

  kube::Client* client_;
  std::string node_;
  PendingPodCopies copies_;
  std::unique_ptr<kube::Informer> informer_;
  std::jthread watcher_;  // declared last: stopped and joined before the rest goes
};

}  // namespace gs::node
