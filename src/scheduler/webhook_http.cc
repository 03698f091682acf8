#include "src/scheduler/webhook_http.h"

#include <httplib.h>

#include <filesystem>

namespace gs::scheduler {

struct WebhookHttpsServer::Impl {
  WebhookOptions options;
  std::unique_ptr<httplib::SSLServer> server;
};

WebhookHttpsServer::WebhookHttpsServer(WebhookOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

WebhookHttpsServer::~WebhookHttpsServer() {
  Stop();
}

StatusOr<int> WebhookHttpsServer::Bind(const std::string& host, int port, const std::string& cert_file,
                                       const std::string& key_file) {
  std::error_code ec;
  for (const std::string& f : {cert_file, key_file})
    if (f.empty() || !std::filesystem::is_regular_file(f, ec))
      return NotFound("webhook TLS: '" + f + "': no such file");
  impl_->server = std::make_unique<httplib::SSLServer>(cert_file.c_str(), key_file.c_str());
  if (!impl_->server->is_valid())
    return InvalidArgument("webhook TLS: cannot load certificate " + cert_file + " with key " + key_file);
  Impl* im = impl_.get();
  im->server->Post(R"((.*/)?mutate)", [im](const httplib::Request& req, httplib::Response& res) {
    res.set_content(MutatePodReview(req.body, im->options), "application/json");
  });
  im->server->Get("/healthz",
                  [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  im->server->set_payload_max_length(16u << 20);
  int bound = port == 0 ? im->server->bind_to_any_port(host.c_str())
                        : (im->server->bind_to_port(host.c_str(), port) ? port : -1);
  if (bound < 0) return Unavailable("webhook: cannot listen on " + host + ":" + std::to_string(port));
  return bound;
}

bool WebhookHttpsServer::Serve() {
  return impl_->server && impl_->server->listen_after_bind();
}

void WebhookHttpsServer::Stop() {
  if (impl_->server) impl_->server->stop();
}

}  // namespace gs::scheduler
