// The extender's HTTP endpoint: POST <prefix>/filter, <prefix>/prioritize, <prefix>/bind
// (any prefix, so urlPrefix in the scheduler's config may carry a path) with JSON bodies
// handed to Extender, GET /healthz and GET /metrics (binds, hand-off waits). Plain HTTP: kube-scheduler reaches it over
// loopback or a cluster network (the scheduler's config sets enableHTTPS: false).
//
// Thread-safe; requests are served on a pool of threads (cpp-httplib's).
#pragma once

#include <memory>
#include <string>

#include "src/common/status.h"
#include "src/scheduler/extender.h"

namespace gs::scheduler {

class ExtenderHttpServer {
 public:
  explicit ExtenderHttpServer(Extender* extender);
  ~ExtenderHttpServer();
  ExtenderHttpServer(const ExtenderHttpServer&) = delete;
  ExtenderHttpServer& operator=(const ExtenderHttpServer&) = delete;

  // Listens on host:port (port 0 = any free port); returns the bound port.
  StatusOr<int> Bind(const std::string& host, int port);
  // Serves until Stop(); returns false if the server failed.
  bool Serve();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gs::scheduler
