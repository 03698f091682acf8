#include "src/scheduler/serve.h"

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "src/common/file.h"
#include "src/scheduler/cluster_sync.h"
#include "src/scheduler/extender_http.h"
#include "src/scheduler/hami_format.h"
#include "src/scheduler/kube_binder.h"
#include "src/scheduler/request.h"
#include "src/scheduler/webhook_http.h"

namespace gs::scheduler {
namespace {

using nlohmann::json;

// {"node-name": <hami.io/node-nvidia-register value, as a string or as the JSON array>}
Status LoadInventory(const std::string& path, Extender* extender, int* nodes) {
  auto text = ReadFile(path);
  if (!text.ok()) return NotFound("inventory file " + text.status().message());
  json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return InvalidArgument("inventory file " + path + ": want {\"node\": <hami.io/node-nvidia-register>, ...}");
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    std::string reg = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
    auto node = hami::DecodeNodeRegister(it.key(), reg);
    if (!node.ok())
      return InvalidArgument("inventory file " + path + " node " + it.key() + ": " + node.status().message());
    GS_RETURN_IF_ERROR(extender->UpsertNode(std::move(*node)));
    ++*nodes;
  }
  return Status::Ok();
}

std::string PolicyLine(const Policies& p, const PodSpecOptions& r) {
  return std::string("policies node=") + PolicyName(p.node) + " gpu=" + PolicyName(p.gpu) + "; resources " +
         r.count_name + ", " + r.memory_name + " (x" + std::to_string(r.memory_factor) + " MiB), " +
         r.memory_percent_name + ", " + r.cores_name + "; defaults: " + std::to_string(r.default_gpu_num) +
         " card(s), " + (r.default_memory_mib == 0 ? "the whole card" : std::to_string(r.default_memory_mib) + " MiB") +
         ", " + std::to_string(r.default_cores) + "% cores";
}

}  // namespace

Status Serve(const ServeOptions& o, const std::atomic<bool>& stop) {
  auto log = [&](const std::string& line) {
    if (o.log) o.log(line);
  };
  std::unique_ptr<ApiBinder> api_binder;
  std::unique_ptr<SyncedBinder> synced_binder;
  KubeBinder* binder = o.offline_binder;
  if (o.client) {
    api_binder = std::make_unique<ApiBinder>(o.client);
    synced_binder = std::make_unique<SyncedBinder>(api_binder.get());
    binder = synced_binder.get();
  }
  ExtenderOptions options;
  options.defaults = o.defaults;
  options.pod_spec = o.pod_spec;
  options.quota_keys = QuotaKeysFor(o.pod_spec);
  options.now_unix_seconds = [] {
    return static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  };
  Extender extender(options, binder);
  std::unique_ptr<ClusterSync> sync;
  if (o.client) {
    ClusterSyncOptions so;
    so.log = log;
    sync = std::make_unique<ClusterSync>(o.client, &extender, so);
    synced_binder->set_sync(sync.get());
  }
  int nodes = 0;
  if (!o.inventory.empty()) GS_RETURN_IF_ERROR(LoadInventory(o.inventory, &extender, &nodes));
  ExtenderHttpServer server(&extender);
  GS_ASSIGN_OR_RETURN(int bound, server.Bind(o.address, o.port));
  const std::string where = "listening on " + o.address + ":" + std::to_string(bound);
  if (o.client) {
    log(where + "; API server " + o.client->config().server + " (" + o.client->config().source + "); " +
        PolicyLine(o.defaults, o.pod_spec));
    sync->Start();
  } else {
    log(where + " with " + std::to_string(nodes) + " node(s) from " +
        (o.inventory.empty() ? "nowhere (no --inventory, no API)" : o.inventory) + "; " +
        PolicyLine(o.defaults, o.pod_spec));
  }
  std::unique_ptr<WebhookHttpsServer> webhook;
  std::thread webhook_thread;
  std::atomic<bool> webhook_done{false};
  if (o.webhook.port > 0) {
    WebhookOptions wo;
    wo.scheduler_name = o.webhook.scheduler_name;
    wo.trusted_users = o.webhook.trusted_users;
    wo.resources = o.pod_spec;
    webhook = std::make_unique<WebhookHttpsServer>(wo);
    auto wport = webhook->Bind(o.webhook.address, o.webhook.port, o.webhook.tls_cert, o.webhook.tls_key);
    if (!wport.ok()) {
      if (sync) sync->Stop();
      return wport.status();
    }
    log("webhook on https://" + o.webhook.address + ":" + std::to_string(*wport) +
        "/mutate; GPU pods go to scheduler " + o.webhook.scheduler_name);
    webhook_thread = std::thread([&] {
      webhook->Serve();
      webhook_done = true;
    });
  }
  std::atomic<bool> served{false};
  std::thread watcher([&] {
    while (!stop && !served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server.Stop();
    if (webhook) webhook->Stop();
  });
  bool ok = server.Serve();
  served = true;
  // A stop that came before the webhook's Serve started is lost: ask until it ends.
  while (webhook && !webhook_done) {
    webhook->Stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (webhook_thread.joinable()) webhook_thread.join();
  watcher.join();
  if (sync) sync->Stop();
  return ok ? Status::Ok() : Internal("the extender's HTTP server failed");
}

}  // namespace gs::scheduler
