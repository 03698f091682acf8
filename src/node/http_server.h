// The node agent's HTTP endpoint (/metrics, /healthz): GET and HEAD only, one request per
// connection (Connection: close), a request line and headers of at most 8 KiB. That is all
// Prometheus and the kubelet need; a general HTTP library cost the agent 2 MiB of resident
// memory.
//
// Built for a node where any pod may connect (docs/enforcer.md, "Threat model"): each connection has one deadline
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
#include <string_view>

#include "src/common/status.h"

namespace gs::node {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// The parsing of a request, separate from the connection (pure functions: fuzzed by
// fuzz/http_request_fuzzer.cc). A connection reads until FrameHttpRequest says the headers
// are complete (or too large: 431), then answers what ParseHttpRequest makes of them.
enum class HttpFraming {
  kMore,      // no end of headers yet: read more
  kComplete,  // "\r\n\r\n" received
  kTooLarge,  // more than 8 KiB without an end of headers: answer 431
};
HttpFraming FrameHttpRequest(std::string_view received);

struct HttpRequest {
  int status = 0;     // 0: a GET or HEAD to answer; else the error to answer with (400, 405)
  std::string error;  // that error's body
  bool head = false;  // HEAD: the answer without its body
  std::string path;   // the request target up to its query string
};
// The request line of `request` (the bytes read, up to the end of the headers):
// "METHOD SP target SP HTTP/1.x". Headers are not looked at.
HttpRequest ParseHttpRequest(std::string_view request);

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
