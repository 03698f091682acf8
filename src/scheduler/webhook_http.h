// The admission webhook (webhook.h) over HTTPS: POST <any path ending in /mutate> with
// an AdmissionReview, answered with the mutated review; GET /healthz. The API server
// only calls webhooks over TLS; the certificate (with its chain) and key are PEM files,
// checked at Bind() and read again when they change (rotation needs no restart).
//
// Created by `gpuslice scheduler --webhook-port`; thread-safe, served on cpp-httplib's
// pool of threads.
#pragma once

#include <memory>
#include <string>

#include "src/common/status.h"
#include "src/scheduler/webhook.h"

namespace gs::scheduler {

class WebhookHttpsServer {
 public:
  explicit WebhookHttpsServer(WebhookOptions options);
  ~WebhookHttpsServer();
  WebhookHttpsServer(const WebhookHttpsServer&) = delete;
  WebhookHttpsServer& operator=(const WebhookHttpsServer&) = delete;

  // Loads the certificate and key and listens on host:port (0 = any); the bound port.
  StatusOr<int> Bind(const std::string& host, int port, const std::string& cert_file, const std::string& key_file);
  bool Serve();  // until Stop()
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gs::scheduler
