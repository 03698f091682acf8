#include "src/scheduler/cluster_sync.h"

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "src/scheduler/hami_format.h"
#include "src/scheduler/pod_spec.h"
#include "src/scheduler/quota.h"

namespace gs::scheduler {
namespace {

using nlohmann::json;

std::string Meta(const json& o, const char* key) {
  if (!o.is_object() || !o.contains("metadata") || !o["metadata"].is_object()) return "";
  const json& m = o["metadata"];
  auto it = m.find(key);
  return it != m.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string Annotation(const json& o, const char* key) {
  if (!o.is_object() || !o.contains("metadata") || !o["metadata"].is_object()) return "";
  const json& m = o["metadata"];
  auto a = m.find("annotations");
  if (a == m.end() || !a->is_object()) return "";
  auto it = a->find(key);
  return it != a->end() && it->is_string() ? it->get<std::string>() : "";
}

bool Finished(const json& pod) {
  if (!pod.contains("status") || !pod["status"].is_object()) return false;
  std::string phase = StringField(pod["status"], "phase");
  return phase == "Succeeded" || phase == "Failed";
}

Status NotSynced() {
  return Unavailable(
      "the scheduler has not synced with the API server yet (nodes and pods are still being listed, so the GPU "
      "capacity already in use is unknown); bind is refused until then");
}

}  // namespace

ClusterSync::ClusterSync(kube::Client* client, Extender* extender, ClusterSyncOptions options)
    : client_(client), extender_(extender), options_(std::move(options)) {
  auto informer_options = [&](const std::string& path) {
    kube::InformerOptions o;
    o.path = path;
    o.page_size = options_.page_size;
    o.watch_timeout_seconds = options_.watch_timeout_seconds;
    o.backoff_initial = options_.backoff_initial;
    o.backoff_max = options_.backoff_max;
    return o;
  };
  kube::InformerHandler nodes;
  nodes.on_add = [this](const json& n) { OnNode(n); };
  nodes.on_update = [this](const json& n) { OnNode(n); };
  nodes.on_delete = [this](const json& n) { ForgetNode(Meta(n, "name"), "deleted"); };
  nodes.on_synced = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_synced_ = true;
    cv_.notify_all();
  };
  nodes.on_error = [this](const Status& s) { Log("nodes: " + s.message()); };
  nodes_ = std::make_unique<kube::Informer>(client_, informer_options("/api/v1/nodes"), std::move(nodes));

  kube::InformerHandler quotas;
  quotas.on_add = [this](const json& q) { OnQuota(q); };
  quotas.on_update = [this](const json& q) { OnQuota(q); };
  quotas.on_delete = [this](const json& q) {
    quota_errors_.erase(Meta(q, "namespace") + "/" + Meta(q, "name"));
    extender_->RemoveQuota(Meta(q, "namespace"), Meta(q, "name"));
  };
  quotas.on_synced = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    quotas_synced_ = true;
    cv_.notify_all();
  };
  quotas.on_error = [this](const Status& s) { Log("resourcequotas: " + s.message()); };
  quotas_ = std::make_unique<kube::Informer>(client_, informer_options("/api/v1/resourcequotas"), std::move(quotas));

  kube::InformerHandler pods;
  pods.on_add = [this](const json& p) { OnPod(p); };
  pods.on_update = [this](const json& p) { OnPod(p); };
  pods.on_delete = [this](const json& p) { OnPodDeleted(p); };
  pods.on_synced = [this] { OnPodsListed(); };
  pods.on_list_started = [this] { list_mark_ = extender_->ReservationMark(); };
  pods.on_listed = [this](const std::vector<json>& items) { ReleaseUnlisted(items); };
  pods.on_error = [this](const Status& s) { Log("pods: " + s.message()); };
  pods_ = std::make_unique<kube::Informer>(client_, informer_options("/api/v1/pods"), std::move(pods));
}

ClusterSync::~ClusterSync() {
  Stop();
}

void ClusterSync::Start() {
  node_thread_ = std::jthread([this](std::stop_token stop) { nodes_->Run(stop); });
  quota_thread_ = std::jthread([this](std::stop_token stop) { quotas_->Run(stop); });
  pod_thread_ = std::jthread([this](std::stop_token stop) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait(lock, stop, [this] { return nodes_synced_ && quotas_synced_; })) return;
    }
    pods_->Run(stop);
  });
}

void ClusterSync::Stop() {
  node_thread_.request_stop();
  quota_thread_.request_stop();
  pod_thread_.request_stop();
  if (node_thread_.joinable()) node_thread_.join();
  if (quota_thread_.joinable()) quota_thread_.join();
  if (pod_thread_.joinable()) pod_thread_.join();
}

bool ClusterSync::WaitSynced(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return synced_.load(); });
}

void ClusterSync::Log(const std::string& line) {
  if (options_.log) options_.log(line);
}

void ClusterSync::ForgetNode(const std::string& name, const std::string& why) {
  if (applied_.erase(name) == 0) return;
  extender_->RemoveNode(name);
  Log("node " + name + ": removed (" + why + ")");
}

void ClusterSync::OnNode(const json& node) {
  std::string name = Meta(node, "name");
  if (name.empty()) return;
  std::string reg = Annotation(node, hami::kNodeRegister);
  std::string handshake = Annotation(node, hami::kNodeHandshake);
  if (reg.empty()) return ForgetNode(name, std::string("no ") + hami::kNodeRegister + " annotation");
  if (!handshake.empty()) {
    auto h = hami::DecodeHandshake(handshake);
    if (h.ok() && h->state == hami::HandshakeState::kDeleted)
      return ForgetNode(name, std::string(hami::kNodeHandshake) + " is " + handshake);
  }
  std::string cordon = Annotation(node, hami::kDeviceCordon);
  std::string applied = reg + '\n' + cordon;
  auto it = applied_.find(name);
  if (it != applied_.end() && it->second == applied) return;  // only the node's status moved
  auto inventory = hami::DecodeNodeRegister(name, reg);
  if (!inventory.ok()) {
    Log("node " + name + ": " + inventory.status().message());
    return ForgetNode(name, "unreadable inventory");
  }
  hami::ApplyDeviceCordon(cordon, &*inventory);
  size_t cards = inventory->gpus.size();
  Status s = extender_->UpsertNode(std::move(*inventory));
  if (!s.ok()) {
    Log("node " + name + ": " + s.message());
    return ForgetNode(name, "invalid inventory");
  }
  bool known = it != applied_.end();
  applied_[name] = applied;
  Log("node " + name + ": " + std::to_string(cards) + " GPU(s)" + (known ? " (updated)" : ""));
}

void ClusterSync::OnQuota(const json& quota) {
  std::string ns = Meta(quota, "namespace"), name = Meta(quota, "name");
  if (name.empty()) return;
  QuotaLimits limits;
  Status s = QuotaLimitsFromJson(quota, extender_->quota_keys(), &limits);
  // The quota controller rewrites status on every pod change: a problem is logged once.
  std::string key = ns + "/" + name;
  if (!s.ok() && quota_errors_[key] != s.message()) Log(s.message());
  if (s.ok())
    quota_errors_.erase(key);
  else
    quota_errors_[key] = s.message();
  extender_->SetQuota(ns, name, limits);
}

void ClusterSync::OnPod(const json& pod) {
  extender_->ObservePod(pod);
  if (!synced_.load()) {  // the first list: remember decisions for the rebuild
    if (!Finished(pod) && !Annotation(pod, hami::kAssignedNode).empty()) listed_pods_.push_back(pod.dump());
    return;
  }
  if (Finished(pod)) {
    std::string uid = Meta(pod, "uid");
    if (!uid.empty() && extender_->ReleasePod(uid))
      Log("pod " + Meta(pod, "namespace") + "/" + Meta(pod, "name") + ": finished, its GPUs are free again");
  }
}

void ClusterSync::OnPodDeleted(const json& pod) {
  std::string uid = Meta(pod, "uid");
  if (!uid.empty() && extender_->ReleasePod(uid))
    Log("pod " + Meta(pod, "namespace") + "/" + Meta(pod, "name") + ": deleted, its GPUs are free again");
}

void ClusterSync::OnPodsListed() {
  size_t listed = listed_pods_.size();
  RebuildReport report = extender_->RebuildFromPods(listed_pods_);
  listed_pods_.clear();
  listed_pods_.shrink_to_fit();
  for (const std::string& why : report.refused) Log("rebuild: refused " + why);
  Log("synced: " + std::to_string(report.applied) + " of " + std::to_string(listed) +
      " pod(s) with GPU decisions counted; bind is open");
  {
    std::lock_guard<std::mutex> lock(mu_);
    synced_ = true;
    cv_.notify_all();
  }
}

void ClusterSync::ReleaseUnlisted(const std::vector<json>& pods) {
  // The first list rebuilt the ledger from itself (OnPodsListed): nothing to compare.
  if (!synced_.load()) return;
  std::unordered_set<std::string> present;
  for (const json& p : pods) present.insert(Meta(p, "uid"));
  for (const std::string& uid : extender_->ReleaseAbsent(present, list_mark_))
    Log("pod " + uid + ": not in the pod list since the watch was down (deleted), its GPUs are free again");
}

Status SyncedBinder::BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                             const std::string& node, const hami::Annotations& annotations) {
  if (!Synced()) return NotSynced();
  return inner_->BindPod(ns, name, uid, node, annotations);
}

StatusOr<std::string> SyncedBinder::GetPod(const std::string& ns, const std::string& name) {
  return inner_->GetPod(ns, name);
}

}  // namespace gs::scheduler
