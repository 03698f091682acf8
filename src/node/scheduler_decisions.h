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
//  - NodeRegistrar: writes hami.io/node-nvidia-register (the cards, HAMi's JSON form)
//    and hami.io/node-handshake ("Reported <time>") on the Node at start, whenever the
//    cards' health changes and every `period`.
//
// Thread-safe: Claim may run on several gRPC threads; the registrar runs its own thread.
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

// The node agent's copies of the pods pending on its node (bound, bind-phase
// "allocating"), kept from the pod watch and from the answers to its own claims. The watch
// delivers in order but lags: until it brings a claim's own version, what it brings about
// that pod is older than the claim's answer and is ignored, so a pod in the middle of
// kubelet's Allocates never looks untouched again. A relist shows every claim made before
// it began. Thread-safe (one mutex).
class PendingPodCopies {
 public:
  explicit PendingPodCopies(std::string node) : node_(std::move(node)) {}
  void FromWatch(const nlohmann::json& pod);
  void FromClaim(const nlohmann::json& pod);  // the API's answer to this agent's claim
  void Deleted(const nlohmann::json& pod);
  void ListStarted();
  void Listed(const std::vector<nlohmann::json>& pods);  // a complete list, begun at ListStarted
  std::vector<scheduler::PendingPod> Pending() const;

 private:
  struct Claimed {
    std::string resource_version;
    uint64_t made = 0;  // claims_made_ when it was taken
  };
  void KeepLocked(const std::string& uid, const nlohmann::json& pod);

  const std::string node_;
  mutable std::mutex mu_;
  std::map<std::string, scheduler::PendingPod> pending_;  // by UID
  std::map<std::string, Claimed> claimed_;                // by UID: answers the watch has not brought yet
  uint64_t claims_made_ = 0, list_mark_ = 0;
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
  void StartWatching(std::function<void(const std::string&)> log);
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

// The grants a container gets for claimed cards: each card by UUID among `gpus`, its
// memory (MiB) and compute share (percent; 0 or 100 = no compute limit). Fails, naming
// the card, for a UUID this node does not have or an unhealthy card.
StatusOr<model::Allocation> AllocationForClaim(const std::vector<model::Gpu>& gpus, const ClaimedCards& claim,
                                               bool oversubscribe);

// The node's cards as hami.io/node-nvidia-register: memory after --device-memory-scaling,
// cores 100 x --device-cores-scaling, `split_count` containers per card.
std::string NodeRegisterValue(const std::vector<model::Gpu>& gpus, const model::SplitPolicy& policy);

class NodeRegistrar {
 public:
  // `gpus` is called on each publish (health may change).
  NodeRegistrar(kube::Client* client, std::string node_name, std::function<std::vector<model::Gpu>()> gpus,
                model::SplitPolicy policy, std::chrono::seconds period, std::function<void(const std::string&)> log);
  ~NodeRegistrar();
  NodeRegistrar(const NodeRegistrar&) = delete;
  NodeRegistrar& operator=(const NodeRegistrar&) = delete;

  // Publishes once now (the error, if any), then keeps publishing on its thread.
  Status Start();
  // Publish soon (health changed).
  void Poke();
  void Stop();

 private:
  Status Publish();
  void Loop(std::stop_token stop);

  kube::Client* client_;
  std::string node_;
  std::function<std::vector<model::Gpu>()> gpus_;
  model::SplitPolicy policy_;
  std::chrono::seconds period_;
  std::function<void(const std::string&)> log_;
  std::mutex mu_;
  std::condition_variable_any wake_;
  bool poked_ = false;
  std::jthread thread_;
};

}  // namespace gs::node
