// A small Kubernetes API client over cpp-httplib and OpenSSL: GET, list (one page), watch (a stream of
// events), PATCH and POST on API paths such as "/api/v1/namespaces/ns/pods/name", with
// the authentication of a ClientConfig (config.h). Bodies are JSON.
//
// Errors: the API's HTTP status becomes the Status code, the message carries the
// method, path and the API's own Status message:
//   400, 422 -> InvalidArgument   401, 403 -> FailedPrecondition   404 -> NotFound
//   409 Conflict -> Aborted (re-read and retry)   410 Gone -> OutOfRange (relist)
//   429, 5xx, connection errors, timeouts -> Unavailable   others -> Internal.
// A watch's ERROR event is mapped the same way from its Status object's code.
//
// Used by the informer (informer.h) and the scheduler's binder and cluster sync.
// TLS: the cluster's CA alone when the config names one (else the system's roots), a
// client certificate with its chain, the server's name checked against its certificate.
// No HTTP proxy: the client talks to the API server directly, as in-cluster clients do.
//
// Thread-safe: calls may run concurrently; each takes a connection from a small pool (so
// sockets and TLS sessions are reused) and gives it back. Never prints.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "src/common/status.h"
#include "src/kube/config.h"

namespace gs::kube {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{30000};  // default deadline of one call
  // A watch may last its timeoutSeconds plus this before the client gives up on it.
  std::chrono::milliseconds watch_grace{30000};
  std::string user_agent = "gpuslice";
};

enum class PatchType { kMerge, kStrategicMerge, kJson };

// The Content-Type of a PATCH body.
const char* PatchContentType(PatchType type);

struct ListOptions {
  std::string label_selector, field_selector;
  std::string resource_version;  // "" = the newest (a quorum read)
  int64_t limit = 0;             // page size; 0 = everything at once
  std::string continue_token;    // from the previous page's metadata.continue
};

struct WatchOptions {
  std::string resource_version;  // resume after this version
  int timeout_seconds = 300;     // the server ends the stream after this long
  std::string label_selector, field_selector;
  bool allow_bookmarks = true;
};

// One event of a watch: type ADDED, MODIFIED, DELETED or BOOKMARK, and the object.
// Returning an error ends the watch with that error.
using WatchHandler = std::function<Status(std::string_view type, const nlohmann::json& object)>;

// Maps an API Status object (a response body or a watch's ERROR event) and the HTTP code
// to a Status as listed above; `what` prefixes the message (e.g. "PATCH /api/v1/...").
Status StatusFromApi(long http_code, const nlohmann::json& body, const std::string& what);

class Client {
 public:
  // Checks the config: an http(s) URL, files named must exist, PEM that parses.
  static StatusOr<std::unique_ptr<Client>> Create(ClientConfig config, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // `timeout` 0 = options.request_timeout. The reply's JSON on 2xx.
  StatusOr<nlohmann::json> Get(const std::string& path, std::chrono::milliseconds timeout = {});
  // One page of a list (a *List object with metadata.resourceVersion and .continue).
  StatusOr<nlohmann::json> List(const std::string& path, const ListOptions& options,
                                std::chrono::milliseconds timeout = {});
  StatusOr<nlohmann::json> Patch(const std::string& path, const std::string& body, PatchType type,
                                 std::chrono::milliseconds timeout = {});
  StatusOr<nlohmann::json> Post(const std::string& path, const std::string& body,
                                std::chrono::milliseconds timeout = {});

  // Streams the events of `path`?watch=true to `handler` as each line arrives, until the
  // server ends the stream (Ok), `stop` is requested (Ok, within about a second), the
  // handler fails (its error) or the server sends an ERROR event (mapped as above, 410
  // -> OutOfRange). Events are handled on the calling thread.
  Status Watch(const std::string& path, const WatchOptions& options, const WatchHandler& handler,
               std::stop_token stop = {});

  const ClientConfig& config() const { return config_; }

  struct Request;     // internal
  struct Connection;  // internal

 private:
  struct Endpoint {
    bool tls = false;
    std::string host;
    int port = 0;
    std::string prefix;  // the server URL's path, put before every API path
  };
  Client(ClientConfig config, ClientOptions options, Endpoint endpoint);
  StatusOr<nlohmann::json> Call(const std::string& method, const std::string& path, const std::string& query,
                                const std::string* body, const char* content_type, std::chrono::milliseconds timeout);
  Status Perform(Request* request);
  StatusOr<std::unique_ptr<Connection>> Acquire();
  void Release(std::unique_ptr<Connection> connection);

  ClientConfig config_;
  ClientOptions options_;
  Endpoint endpoint_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Connection>> pool_;  // idle connections
};

// Percent-encodes a query value (RFC 3986 unreserved characters kept).
std::string QueryEscape(std::string_view value);

}  // namespace gs::kube
