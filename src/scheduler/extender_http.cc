#include "src/scheduler/extender_http.h"

#include <httplib.h>

namespace gs::scheduler {

struct ExtenderHttpServer::Impl {
  httplib::Server server;
};

ExtenderHttpServer::ExtenderHttpServer(Extender* extender) : impl_(std::make_unique<Impl>()) {
  auto json_reply = [](httplib::Response& res, std::string body) {
    res.set_content(std::move(body), "application/json");
  };
  impl_->server.Post(R"((.*/)?filter)", [extender, json_reply](const httplib::Request& req, httplib::Response& res) {
    json_reply(res, extender->Filter(req.body));
  });
  impl_->server.Post(R"((.*/)?prioritize)",
                     [extender, json_reply](const httplib::Request& req, httplib::Response& res) {
                       json_reply(res, extender->Prioritize(req.body));
                     });
  impl_->server.Post(R"((.*/)?bind)", [extender, json_reply](const httplib::Request& req, httplib::Response& res) {
    json_reply(res, extender->Bind(req.body));
  });
  impl_->server.Get("/healthz",
                    [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  impl_->server.set_payload_max_length(64u << 20);  // 5000 node names and a pod fit easily
}

ExtenderHttpServer::~ExtenderHttpServer() {
  Stop();
}

StatusOr<int> ExtenderHttpServer::Bind(const std::string& host, int port) {
  int bound = port == 0 ? impl_->server.bind_to_any_port(host.c_str())
                        : (impl_->server.bind_to_port(host.c_str(), port) ? port : -1);
  if (bound < 0) return Unavailable("cannot listen on " + host + ":" + std::to_string(port));
  return bound;
}

bool ExtenderHttpServer::Serve() {
  return impl_->server.listen_after_bind();
}

void ExtenderHttpServer::Stop() {
  impl_->server.stop();
}

}  // namespace gs::scheduler
