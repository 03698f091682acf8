#include "src/node/scheduler_decisions.h"

#include <nlohmann/json.hpp>

#include "src/scheduler/hami_format.h"
#include "src/scheduler/handoff.h"
#include "src/scheduler/inventory.h"

namespace gs::node {
namespace {

using nlohmann::json;

constexpr int kClaimAttempts = 8;  // conflicts with another Allocate or a pod update
constexpr std::chrono::milliseconds kCallTimeout{5000};

}  // namespace

ApiDecisionSource::ApiDecisionSource(kube::Client* client, std::string node_name)
    : client_(client), node_(node_name), copies_(std::move(node_name)) {}

ApiDecisionSource::~ApiDecisionSource() {
  if (watcher_.joinable()) {
    watcher_.request_stop();
    watcher_.join();
  }
}

void ApiDecisionSource::StartWatching(const std::function<void(const std::string&)>& log) {
  kube::InformerOptions o;
  o.path = "/api/v1/pods";
  o.field_selector = "spec.nodeName=" + node_;
  kube::InformerHandler h;
  h.on_add = h.on_update = [this](const json& pod) { copies_.FromWatch(pod); };
  h.on_delete = [this](const json& pod) { copies_.Deleted(pod); };
  h.on_list_started = [this] { copies_.ListStarted(); };
  h.on_listed = [this](const std::vector<json>& pods) { copies_.Listed(pods); };
  h.on_error = [log](const Status& s) {
    if (log) log("watching the pods bound to this node: " + s.message() + " (Allocate lists them instead)");
  };
  informer_ = std::make_unique<kube::Informer>(client_, o, h);
  watcher_ = std::jthread([this](std::stop_token stop) { informer_->Run(stop); });
}

bool ApiDecisionSource::watching() const {
  return informer_ != nullptr && informer_->synced();
}

StatusOr<ClaimedCards> ApiDecisionSource::Take(const scheduler::PendingPod& p, const scheduler::Claim& claim) {
  json patch = {{"metadata", {{"resourceVersion", p.resource_version}, {"annotations", claim.patch}}}};
  auto done = client_->Patch("/api/v1/namespaces/" + p.namespace_name + "/pods/" + p.name, patch.dump(),
                             kube::PatchType::kMerge, kCallTimeout);
  if (!done.ok()) {
    // Aborted: the pod changed since it was read (another Allocate claimed it, or its
    // status moved on); NotFound: deleted meanwhile. Either way the caller looks again.
    if (done.status().code() == StatusCode::kAborted || done.status().code() == StatusCode::kNotFound)
      return done.status();
    return Unavailable("claiming " + p.namespace_name + "/" + p.name + ": " + done.status().message());
  }
  // A mutating webhook that does not trust this agent puts decision annotations back as
  // they were: the claim would not hold, and the entry could be taken again.
  const json* annos = nullptr;
  if (done->contains("metadata") && (*done)["metadata"].contains("annotations"))
    annos = &(*done)["metadata"]["annotations"];
  std::string left = annos && annos->contains(scheduler::hami::kDevicesToAllocate) &&
                             (*annos)[scheduler::hami::kDevicesToAllocate].is_string()
                         ? (*annos)[scheduler::hami::kDevicesToAllocate].get<std::string>()
                         : "";
  if (left != claim.patch.at(scheduler::hami::kDevicesToAllocate))
    return FailedPrecondition("the claim on pod " + p.namespace_name + "/" + p.name +
                              " did not hold (the API returned " + scheduler::hami::kDevicesToAllocate + " '" + left +
                              "'): is this agent's identity among gpuslice scheduler's --webhook-trusted-users?");
  if (informer_ != nullptr) copies_.FromClaim(*done);  // the next container of this pod sees its claim
  return ClaimedCards{p.namespace_name + "/" + p.name, claim.container, claim.cards};
}

StatusOr<ClaimedCards> ApiDecisionSource::Claim(int cards) {
  // First from the pod watch's copies: one API call, the claim. They are only a hint: a
  // copy that is behind claims with an old resourceVersion and conflicts, and one that
  // has not seen the pod yet finds nothing; both then go the way below.
  if (watching()) {
    std::vector<scheduler::PendingPod> pending = copies_.Pending();
    auto claim = scheduler::ChooseClaim(pending, cards);
    if (claim.ok()) {
      auto taken = Take(pending[claim->pod], *claim);
      if (taken.ok() ||
          (taken.status().code() != StatusCode::kAborted && taken.status().code() != StatusCode::kNotFound))
        return taken;
    }
  }
  kube::ListOptions list;
  list.field_selector = "spec.nodeName=" + node_;
  Status last = Status::Ok();
  for (int attempt = 0; attempt < kClaimAttempts; ++attempt) {
    // The first look is at the API server's cache (resourceVersion 0: indexed by node, no
    // etcd read over every pod of the cluster); a cache that is behind shows no decision
    // yet, or an older version of the pod (its claim then conflicts): look again at etcd.
    list.resource_version = attempt == 0 ? "0" : "";
    auto pods = client_->List("/api/v1/pods", list, kCallTimeout);
    if (!pods.ok()) return Unavailable("listing the pods bound to node " + node_ + ": " + pods.status().message());
    std::vector<scheduler::PendingPod> pending;
    if (pods->contains("items") && (*pods)["items"].is_array())
      for (const json& pod : (*pods)["items"]) {
        auto p = scheduler::PendingPodFromJson(pod, node_);
        if (p.ok() && p->has_value()) pending.push_back(std::move(**p));
        // A pod with malformed decision annotations is nobody's to claim: skipped.
      }
    auto claim = scheduler::ChooseClaim(pending, cards);
    if (!claim.ok() && attempt == 0) continue;
    if (!claim.ok()) return claim.status();
    auto taken = Take(pending[claim->pod], *claim);
    if (taken.ok() || (taken.status().code() != StatusCode::kAborted && taken.status().code() != StatusCode::kNotFound))
      return taken;
    last = taken.status();
  }
  return Unavailable("no claim after " + std::to_string(kClaimAttempts) + " tries, the last: " + last.message());
}

}  // namespace gs::node
