// Keeps a process's view of one kind of Kubernetes object current: lists it (in pages),
// then watches from the list's resourceVersion, resuming each watch where the last one
// ended. When the server no longer has that version (410 Gone / an Expired ERROR event)
// it lists again and reports the difference: objects that appeared (on_add), changed
// (on_update) and vanished meanwhile (on_delete, with only metadata name, namespace, uid
// and resourceVersion, as the object itself is gone). Other errors back off
// exponentially (initial .. max) and retry.
//
// Used by the scheduler's cluster sync (nodes and pods). Run() blocks on the caller's
// thread and calls the handler there, in order; synced() and the counters may be read
// from any thread. It remembers only name, uid and resourceVersion per object.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/common/status.h"
#include "src/kube/client.h"

namespace gs::kube {

struct InformerHandler {
  std::function<void(const nlohmann::json&object)> on_add, on_update, on_delete;
  // Once, after the objects of the first complete list went to on_add.
  std::function<void()> on_synced;
  // Each failed list or watch (before the backoff), for the caller's log.
  std::function<void(const Status& error)> on_error;
  // Around every complete list (the first and each relist): before its first page is
  // asked for, and after its differences went to on_add, on_update and on_delete, with every object
  // listed. A caller that holds objects this informer may never have seen (written by the
  // caller itself) can tell from them which are gone.
  std::function<void()> on_list_started;
  std::function<void(const std::vector<nlohmann::json>& items)> on_listed;
};

struct InformerOptions {
  std::string path;  // a collection, e.g. "/api/v1/nodes" or "/api/v1/pods"
  std::string label_selector, field_selector;
  int64_t page_size = 500;
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds backoff_initial{500};
  std::chrono::milliseconds backoff_max{30000};
};

class Informer {
 public:
  Informer(Client* client, InformerOptions options, InformerHandler handler);

  // Lists and watches until `stop` is requested.
  void Run(std::stop_token stop);

  bool synced() const { return synced_.load(); }
  int64_t lists() const { return lists_.load(); }      // complete lists so far
  int64_t watches() const { return watches_.load(); }  // watches started so far

 private:
  struct Known {
    std::string uid, resource_version;
  };
  // Every page of the list: the items and the list's resourceVersion.
  Status ListAll(std::stop_token stop, std::vector<nlohmann::json>* items, std::string* resource_version);
  void Replace(const std::vector<nlohmann::json>& items);
  Status OnEvent(std::string_view type, const nlohmann::json& object);
  bool Sleep(std::stop_token stop, std::chrono::milliseconds d);

  Client* client_;
  InformerOptions options_;
  InformerHandler handler_;
  std::unordered_map<std::string, Known> known_;  // by namespace/name; Run's thread only
  std::string resource_version_;                  // Run's thread only
  std::atomic<bool> synced_{false};
  std::atomic<int64_t> lists_{0}, watches_{0};
};

}  // namespace gs::kube
