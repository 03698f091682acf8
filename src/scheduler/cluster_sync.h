// Keeps the extender's view of the cluster in step with the API server (three informers,
// src/kube/informer.h):
//  - Nodes: hami.io/node-nvidia-register -> Extender::UpsertNode; a node deleted, without
//    the annotation, with an unreadable one, or whose hami.io/node-handshake says
//    "Deleted_..." -> Extender::RemoveNode. Unchanged annotations are not re-applied
//    (node status updates are frequent).
//  - Pods, once the nodes are listed: the first list rebuilds the ledger from the
//    decisions written on pods (Extender::RebuildFromPods; finished pods skipped), then
//    a pod deleted or finished (phase Succeeded or Failed) gives its cards back
//    (Extender::ReleasePod). Decisions on pods that appear later are the extender's own
//    binds, already in its ledger.
//  - ResourceQuotas: the limits of each (quota.h) -> Extender::SetQuota; deleted ->
//    Extender::RemoveQuota. A value that cannot be read is logged, naming the quota.
// Pods are listed once nodes and quotas are. synced() becomes true after the rebuild;
// until then SyncedBinder refuses bind, so no capacity is handed out before the capacity
// already in use, and the quotas on it, are known.
//
// Created by `gpuslice scheduler` with an API client. Start() runs three threads (nodes,
// quotas, pods) that call the Extender (thread-safe) and `log` (must be thread-safe); Stop()
// (or the destructor) ends them. Never prints.
#pragma once

#include <atomic>
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

#include "src/kube/client.h"
#include "src/kube/informer.h"
#include "src/scheduler/extender.h"

namespace gs::scheduler {

struct ClusterSyncOptions {
  int64_t page_size = 500;
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds backoff_initial{500};
  std::chrono::milliseconds backoff_max{30000};
  // Milestones and problems, one line each (no trailing newline); may be empty.
  std::function<void(const std::string& line)> log;
};

class ClusterSync {
 public:
  ClusterSync(kube::Client* client, Extender* extender, ClusterSyncOptions options);
  ~ClusterSync();
  ClusterSync(const ClusterSync&) = delete;
  ClusterSync& operator=(const ClusterSync&) = delete;

  void Start();
  void Stop();
  bool synced() const { return synced_.load(); }
  // True once synced, false if `timeout` passed first.
  bool WaitSynced(std::chrono::milliseconds timeout);

 private:
  void Log(const std::string& line);
  void OnNode(const nlohmann::json& node);
  void ForgetNode(const std::string& name, const std::string& why);
  void OnQuota(const nlohmann::json& quota);
  void OnPod(const nlohmann::json& pod);
  void OnPodDeleted(const nlohmann::json& pod);
  void OnPodsListed();
  // After a relist: the ledger's pods reserved before it began that it does not show.
  void ReleaseUnlisted(const std::vector<nlohmann::json>& pods);

  kube::Client* client_;
  Extender* extender_;
  ClusterSyncOptions options_;
  std::unique_ptr<kube::Informer> nodes_, quotas_, pods_;
  std::jthread node_thread_, quota_thread_, pod_thread_;

  std::mutex mu_;
  std::condition_variable_any cv_;  // nodes_synced_, quotas_synced_ and synced_ changes, under mu_
  bool nodes_synced_ = false;
  bool quotas_synced_ = false;
  std::atomic<bool> synced_{false};

  std::map<std::string, std::string> applied_;       // node -> annotations applied; node thread
  std::map<std::string, std::string> quota_errors_;  // "ns/name" -> the problem logged; quota thread
  std::vector<std::string> listed_pods_;             // decisions in the first pod list; pod thread
  uint64_t list_mark_ = 0;                           // Extender::ReservationMark at a list's start; pod thread
};

// Bind's API calls, refused until `sync` has synced (GetPod is always allowed). The
// sync is named after construction (it needs the Extender, which needs this binder),
// before the extender serves; without one everything but GetPod is refused.
class SyncedBinder : public KubeBinder {
 public:
  explicit SyncedBinder(KubeBinder* inner) : inner_(inner) {}
  void set_sync(const ClusterSync* sync) { sync_ = sync; }

  Status BindPod(const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
                 const hami::Annotations& annotations) override;
  StatusOr<std::string> GetPod(const std::string& ns, const std::string& name) override;

 private:
  bool Synced() const { return sync_ != nullptr && sync_->synced(); }

  KubeBinder* inner_;
  const ClusterSync* sync_ = nullptr;
};

}  // namespace gs::scheduler
