// The node agent's HTTP endpoint (/metrics, /healthz): GET and HEAD only, one request per
// connection (Connection: close), a request line and headers of at most 8 KiB. That is all
// Prometheus and the kubelet need; a general HTTP library cost the agent 2 MiB of resident
// memory.
//
// Built for a node where any pod may connect (issue 13): each connection has one deadline
// for everything (reading the request, writing the answer, draining what the client sends
// after it), so a client trickling a byte at a time is cut when it passes; one peer
// address may hold only a few connections at once, so a single pod cannot take every slot
// and starve the kubelet's probes; the listen address is configurable (--metrics-addr).
// Each connection runs on its own thread, at most Options::max_connections at a time.
//
// Thread-safe; handlers run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "src/common/status.h"

namespace gs::node {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;
  struct Options {
    int deadline_ms = 5000;    // a connection's whole life: request, answer, lingering close
    int max_connections = 32;  // connections served at once
    int max_per_peer = 4;      // of those, from one peer address
  };
  HttpServer() = default;
  explicit HttpServer(Options o) : options_(o) {}
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers a handler for an exact path (the query string is ignored). Before Bind.
  void Handle(const std::string& path, Handler h);
  // Listens on "host:port" (":9396" = every address; "[::1]:0" = any free port on ::1).
  // Returns the bound port.
  StatusOr<int> Bind(const std::string& address);
  // Accepts connections until Stop(); returns once every connection is closed (each
  // within the deadline). Connections over a limit are closed at once, unanswered.
  void Serve();
  // Makes Serve() return (from any thread).
  void Stop();

 private:
  void Answer(int fd, int64_t deadline_ns);

  Options options_;
  std::map<std::string, Handler> handlers_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
};

}  // namespace gs::node
