// The node agent's HTTP endpoint (/metrics, /healthz): GET and HEAD only, one request per
// connection (Connection: close), a request line and headers of at most 8 KiB that must
// arrive within 5 seconds, at most 16 connections at a time, each on its own thread (a
// slow client never holds up the kubelet's probes). That is all Prometheus and the
// kubelet need; a general HTTP library cost the agent 2 MiB of resident memory.
//
// Thread-safe; handlers run concurrently.
#pragma once

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
  HttpServer() = default;
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers a handler for an exact path (the query string is ignored). Before Bind.
  void Handle(const std::string& path, Handler h);
  // Listens on "host:port" (":9396" = every address; "[::1]:0" = any free port on ::1).
  // Returns the bound port.
  StatusOr<int> Bind(const std::string& address);
  // Accepts connections until Stop(); returns once every connection is answered.
  void Serve();
  // Makes Serve() return (from any thread).
  void Stop();

 private:
  void Answer(int fd);

  std::map<std::string, Handler> handlers_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
};

}  // namespace gs::node
