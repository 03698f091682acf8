#include "src/scheduler/extender_http.h"

#include <httplib.h>

#include <cstdio>
#include <string>

namespace gs::scheduler {

struct ExtenderHttpServer::Impl {
  httplib::Server server;
};

ExtenderHttpServer::ExtenderHttpServer(Extender* extender) : impl_(std::make_unique<Impl>()) {
  auto json_reply = [](httplib::Response& res, const std::string& body) { res.set_content(body, "application/json"); };
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
  impl_->server.Get("/metrics", [extender](const httplib::Request&, httplib::Response& res) {
    Extender::Stats st = extender->stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double value) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " ";
      char num[32];
      snprintf(num, sizeof(num), "%.9g", value);
      out += num;
      out += "\n";
    };
    metric("gpuslice_scheduler_binds_total", "counter", "Binds that succeeded.", static_cast<double>(st.binds));
    metric("gpuslice_scheduler_bind_failures_total", "counter", "Binds answered with an error.",
           static_cast<double>(st.bind_failures));
    metric("gpuslice_scheduler_pods", "gauge", "Pods with a GPU decision in the ledger.", static_cast<double>(st.pods));
    metric("gpuslice_scheduler_pending_pods", "gauge",
           "Pods bound whose node agent has not claimed every decision yet.", static_cast<double>(st.handoff.pending));
    metric("gpuslice_scheduler_handoff_waiting_binds", "gauge",
           "Binds waiting now for a pending pod on the node they could be mistaken for.",
           static_cast<double>(st.handoff.waiting));
    metric("gpuslice_scheduler_handoff_waits_total", "counter",
           "Binds that waited for a pending pod on the node they could be mistaken for.",
           static_cast<double>(st.handoff.waited));
    metric("gpuslice_scheduler_handoff_refusals_total", "counter", "Binds whose wait for such a pod ran out.",
           static_cast<double>(st.handoff.refused));
    metric("gpuslice_scheduler_handoff_wait_seconds_total", "counter", "Time binds spent waiting so.",
           st.handoff.wait_seconds_total);
    metric("gpuslice_scheduler_handoff_wait_seconds_max", "gauge", "The longest such wait.",
           st.handoff.wait_seconds_max);
    metric("gpuslice_scheduler_handoff_wait_after_release_seconds_max", "gauge",
           "Of such a wait, the longest part after the pod it waited for was allocated (as the pod watch reported) "
           "or gone.",
           st.handoff.after_release_seconds_max);
    res.set_content(out, "text/plain; version=0.0.4; charset=utf-8");
  });
  impl_->server.Get("/healthz",
                    [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  impl_->server.set_payload_max_length(64u << 20);  // 5000 node names and a pod fit easily
  // cpp-httplib writes a reply's headers and body in separate sends. With Nagle on, the
  // body waits for the ACK of the headers, which kube-scheduler's end delays by 40 ms on
  // a kept-alive connection: every filter and prioritize took 44 ms on loopback, and
  // kube-scheduler, which calls them one pod at a time, placed 21 pods/s at 5000 nodes
  // (bench/cluster/throughput.sh).
  impl_->server.set_tcp_nodelay(true);
  // The default (5 requests, then close) makes kube-scheduler reconnect every few pods.
  impl_->server.set_keep_alive_max_count(10000);
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
