#include "src/node/scheduler_decisions.h"

#include <time.h>

#include <nlohmann/json.hpp>

#include "src/scheduler/hami_format.h"
#include "src/scheduler/handoff.h"
#include "src/scheduler/inventory.h"

namespace gs::node {
namespace {

using nlohmann::json;

constexpr int kClaimAttempts = 8;  // conflicts with another Allocate or a pod update
constexpr std::chrono::milliseconds kCallTimeout{5000};

std::string NodePath(const std::string& node) {
  return "/api/v1/nodes/" + node;
}

// Go's time.DateTime in local time, as HAMi writes its handshake.
std::string DateTimeNow() {
  time_t now = time(nullptr);
  tm local;
  localtime_r(&now, &local);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

std::string UidOf(const json& pod) {
  const json* meta = pod.is_object() && pod.contains("metadata") ? &pod["metadata"] : nullptr;
  if (meta == nullptr || !meta->is_object() || !meta->contains("uid") || !(*meta)["uid"].is_string()) return "";
  return (*meta)["uid"].get<std::string>();
}

}  // namespace

void PendingPodCopies::KeepLocked(const std::string& uid, const json& pod) {
  auto p = scheduler::PendingPodFromJson(pod, node_);
  if (p.ok() && p->has_value())
    pending_[uid] = std::move(**p);
  else
    pending_.erase(uid);  // past pending, not on this node, or malformed: nobody's to claim
}

void PendingPodCopies::FromWatch(const json& pod) {
  const std::string uid = UidOf(pod);
  if (uid.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = claimed_.find(uid); it != claimed_.end()) {
    if (it->second.resource_version != pod["metadata"].value("resourceVersion", "")) return;  // older
    claimed_.erase(it);
  }
  KeepLocked(uid, pod);
}

void PendingPodCopies::FromClaim(const json& pod) {
  const std::string uid = UidOf(pod);
  if (uid.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  claimed_[uid] = Claimed{pod["metadata"].value("resourceVersion", ""), claims_made_++};
  KeepLocked(uid, pod);
}

void PendingPodCopies::Deleted(const json& pod) {
  const std::string uid = UidOf(pod);
  std::lock_guard<std::mutex> l(mu_);
  pending_.erase(uid);
  claimed_.erase(uid);
}

void PendingPodCopies::ListStarted() {
  std::lock_guard<std::mutex> l(mu_);
  list_mark_ = claims_made_;
}

void PendingPodCopies::Listed(const std::vector<json>& pods) {
  std::lock_guard<std::mutex> l(mu_);
  for (const json& pod : pods) {
    const std::string uid = UidOf(pod);
    if (auto it = claimed_.find(uid); it != claimed_.end() && it->second.made < list_mark_) {
      claimed_.erase(it);
      KeepLocked(uid, pod);  // the list began after the claim: its copy is at least as new
    }
  }
}

std::vector<scheduler::PendingPod> PendingPodCopies::Pending() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<scheduler::PendingPod> out;
  for (const auto& [uid, p] : pending_) out.push_back(p);
  return out;
}

ApiDecisionSource::ApiDecisionSource(kube::Client* client, std::string node_name)
    : client_(client), node_(node_name), copies_(std::move(node_name)) {}

ApiDecisionSource::~ApiDecisionSource() {
  if (watcher_.joinable()) {
    watcher_.request_stop();
    watcher_.join();
  }
}

void ApiDecisionSource::StartWatching(std::function<void(const std::string&)> log) {
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

StatusOr<model::Allocation> AllocationForClaim(const std::vector<model::Gpu>& gpus, const ClaimedCards& claim,
                                               bool oversubscribe) {
  model::Allocation a;
  a.oversubscribe = oversubscribe;
  for (const auto& card : claim.cards) {
    const model::Gpu* gpu = nullptr;
    for (const auto& g : gpus)
      if (g.uuid == card.uuid) gpu = &g;
    std::string where = "pod " + claim.pod + " container #" + std::to_string(claim.container) + ": card " + card.uuid;
    if (gpu == nullptr) return FailedPrecondition(where + " is not on this node");
    if (!gpu->healthy) return FailedPrecondition(where + " is unhealthy");
    uint64_t bytes = static_cast<uint64_t>(card.memory_mib) << 20;
    if (card.memory_mib <= 0 || (!oversubscribe && bytes > gpu->memory))
      return FailedPrecondition(where + ": " + std::to_string(card.memory_mib) + " MiB does not fit the card");
    a.devices.push_back({gpu->uuid, gpu->minor, bytes, card.cores >= 100 ? 0u : static_cast<unsigned>(card.cores)});
  }
  return a;
}

std::string NodeRegisterValue(const std::vector<model::Gpu>& gpus, const model::SplitPolicy& policy) {
  std::vector<scheduler::GpuDevice> devices;
  for (const auto& g : gpus) {
    scheduler::GpuDevice d;
    d.uuid = g.uuid;
    d.index = g.index;
    d.model = "NVIDIA-" + g.name;  // HAMi's "type": vendor, dash, NVML's name
    d.memory_mib = static_cast<int64_t>(static_cast<double>(g.memory >> 20) * policy.memory_scaling);
    d.cores = static_cast<int>(100 * policy.cores_scaling);
    d.slots = policy.split_count;
    d.numa = g.numa_node < 0 ? 0 : g.numa_node;
    d.healthy = g.healthy;
    devices.push_back(std::move(d));
  }
  return scheduler::hami::EncodeNodeRegister(devices);
}

NodeRegistrar::NodeRegistrar(kube::Client* client, std::string node_name, std::function<std::vector<model::Gpu>()> gpus,
                             model::SplitPolicy policy, std::chrono::seconds period,
                             std::function<void(const std::string&)> log)
    : client_(client),
      node_(std::move(node_name)),
      gpus_(std::move(gpus)),
      policy_(policy),
      period_(period),
      log_(std::move(log)) {}

NodeRegistrar::~NodeRegistrar() {
  Stop();
}

Status NodeRegistrar::Publish() {
  json patch = {{"metadata",
                 {{"annotations",
                   {{scheduler::hami::kNodeRegister, NodeRegisterValue(gpus_(), policy_)},
                    {scheduler::hami::kNodeHandshake, "Reported " + DateTimeNow()}}}}}};
  auto r = client_->Patch(NodePath(node_), patch.dump(), kube::PatchType::kMerge, kCallTimeout);
  if (!r.ok()) return Unavailable("publishing the cards on node " + node_ + ": " + r.status().message());
  return Status::Ok();
}

Status NodeRegistrar::Start() {
  Status s = Publish();
  thread_ = std::jthread([this](std::stop_token stop) { Loop(stop); });
  return s;
}

void NodeRegistrar::Poke() {
  std::lock_guard<std::mutex> lock(mu_);
  poked_ = true;
  wake_.notify_all();
}

void NodeRegistrar::Stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

void NodeRegistrar::Loop(std::stop_token stop) {
  bool failing = false;
  while (!stop.stop_requested()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // After a failure, try again sooner than the period.
      auto wait = failing ? std::min<std::chrono::seconds>(period_, std::chrono::seconds(5)) : period_;
      wake_.wait_for(lock, stop, wait, [this] { return poked_; });
      poked_ = false;
    }
    if (stop.stop_requested()) break;
    Status s = Publish();
    if (!s.ok() && log_) log_(s.message());
    if (s.ok() && failing && log_) log_("published the cards on node " + node_ + " again");
    failing = !s.ok();
  }
}

}  // namespace gs::node
