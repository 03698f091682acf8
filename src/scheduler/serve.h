// `gpuslice scheduler`'s service: the kube-scheduler extender over HTTP, kept in step with
// the cluster through the API server (or fed a fixed inventory offline), and the mutating
// admission webhook over HTTPS. The command (src/cli/scheduler_command.cc) parses flags,
// makes the API client and calls Serve, as `gpuslice node` calls node::ServeNode.
//
// Threading: Serve blocks the calling thread and runs its own threads (the HTTP server,
// the webhook, the cluster sync, a stop watcher); it returns after they are joined.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/kube/client.h"
#include "src/scheduler/extender.h"
#include "src/scheduler/placement.h"
#include "src/scheduler/pod_spec.h"

namespace gs::scheduler {

struct ServeOptions {
  std::string address = "127.0.0.1";
  int port = 9395;  // 0: any free port (logged)
  Policies defaults;
  // Resource names and HAMi's admission defaults, for the extender and the webhook alike.
  PodSpecOptions pod_spec;
  // The API server; null: offline, the nodes from `inventory` and binds through
  // `offline_binder`.
  kube::Client* client = nullptr;
  KubeBinder* offline_binder = nullptr;
  // Offline: a JSON file {"node": <hami.io/node-nvidia-register value>, ...}; "" = none.
  std::string inventory;
  struct Webhook {
    int port = 0;  // 0: no webhook
    std::string address = "0.0.0.0", tls_cert, tls_key, scheduler_name;
    std::vector<std::string> trusted_users;  // may change hami.io decisions on updates
  } webhook;
  std::function<void(const std::string&)> log;  // one line, thread-safe
};

// Serves until `stop` is set, then returns OK. Returns an error before serving when the
// inventory cannot be loaded or an address cannot be bound, and an error after serving
// when the HTTP server failed.
Status Serve(const ServeOptions& o, const std::atomic<bool>& stop);

}  // namespace gs::scheduler
