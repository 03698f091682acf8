// A Kubernetes API server double for tests, over real HTTP(S) on 127.0.0.1 (port 0):
// nodes (cluster-scoped), pods and resourcequotas (namespaced) kept in memory with a
// resourceVersion counter and an event log, served as the API server does: GET object,
// list with limit/continue and labelSelector (k=v), watch (?watch=true, chunked, one JSON
// event per line, from a resourceVersion; an Expired ERROR event once the log was
// compacted past it), PATCH (merge, strategic-merge, JSON patch), POST pods and
// pods/<name>/binding (UID precondition, already-assigned conflict), Status bodies on
// errors.
//
// Test knobs: a required bearer token, TLS with an optional client CA, answers that fail
// (FailNext), requests that hang, watch events written in pieces, ending open watches.
// Every request is recorded. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gs::kube::testing {

struct FakeApiOptions {
  std::string cert_file, key_file;  // TLS when set
  std::string client_ca_file;       // require a client certificate signed by this CA
};

struct SeenRequest {
  std::string method, path, content_type, authorization, accept_encoding, body;
  std::map<std::string, std::string> params;
};

class FakeApiServer {
 public:
  explicit FakeApiServer(const FakeApiOptions& options = {});
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  std::string url() const;
  int port() const { return port_; }

  // kind "nodes", "pods" or "resourcequotas". Adds or replaces (ADDED / MODIFIED), filling in uid (if
  // missing), namespace and resourceVersion; returns the stored object.
  nlohmann::json Put(const std::string& kind, nlohmann::json object);
  bool Delete(const std::string& kind, const std::string& ns, const std::string& name);
  std::optional<nlohmann::json> Find(const std::string& kind, const std::string& ns, const std::string& name);
  std::vector<nlohmann::json> All(const std::string& kind);
  int64_t resource_version();

  // Forgets the event log: a watch or continue token from an older version gets 410.
  void Compact();
  // The next `times` requests that are not watches get `code` with a Status body.
  void FailNext(int code, const std::string& message, int times = 1);
  // While set, requests (watches too) are held without an answer.
  void SetHang(bool hang);
  // While set, watch requests alone are held (lists, writes and binds are answered).
  void SetHangWatches(bool hang);
  // Each watch event is written as several chunks, a few milliseconds apart.
  void SetSplitWatchEvents(bool split);
  // Requests must carry "Authorization: Bearer <token>" (empty = no check).
  void SetRequiredToken(const std::string& token);
  // Ends every open watch (as the server's timeoutSeconds would).
  void EndWatches();

  std::vector<SeenRequest> requests();
  int CountRequests(const std::string& method, const std::string& path_prefix, bool watches_only = false);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  bool tls_ = false;
};

// A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate,
// made with the openssl command line in `dir`.
struct TestCerts {
  std::string ca_cert, ca_key, server_cert, server_key, client_cert, client_key;
};
bool MakeTestCerts(const std::string& dir, TestCerts* out);

std::string ReadFileForTest(const std::string& path);

}  // namespace gs::kube::testing
