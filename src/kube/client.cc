#include "src/kube/client.h"

#include <httplib.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "src/common/file.h"
#include "src/kube/tls.h"

namespace gs::kube {
namespace {

using nlohmann::json;

constexpr size_t kMaxIdleConnections = 8;
constexpr size_t kMaxBody = 256u << 20;  // a list of every pod in a large cluster fits

std::string ReasonPhrase(long code) {
  switch (code) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

StatusOr<std::string> ReadToken(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return FailedPrecondition("token file " + text.status().message());
  std::string t = std::move(*text);
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return FailedPrecondition("token file " + path + ": empty");
  return t;
}

std::string AddQuery(std::string query, const char* key, const std::string& value) {
  if (value.empty()) return query;
  query += query.empty() ? "?" : "&";
  query += key;
  query += '=';
  query += QueryEscape(value);
  return query;
}

}  // namespace

// One HTTP exchange. The body goes either to `response` or, for a watch, line by line
// to `on_line` once the status is known to be 200.
struct Client::Request {
  std::string method, target, what;  // target: the path and query on the server
  const std::string* body = nullptr;
  const char* content_type = nullptr;
  std::chrono::milliseconds timeout{};
  std::stop_token stop;
  std::function<Status(std::string_view line)> on_line;  // streaming when set

  // Results.
  int http_code = 0;
  std::string response;  // non-streaming body, or the error body of a stream
  std::string pending;   // a stream's partial line
  Status stream_error;   // set when on_line failed
  bool stopped = false;  // the stop token ended it
  bool too_large = false;
};

// A connection to the server: an HTTP(S) client that keeps its socket (and TLS session)
// between requests, and, when the config names a CA, the only roots it trusts.
struct Client::Connection {
  std::unique_ptr<httplib::ClientImpl> http;
  std::unique_ptr<X509_STORE, StoreFree> roots;
  httplib::SSLClient* tls = nullptr;  // http, when it speaks TLS
};

namespace {

// Takes one piece of a body; false aborts the transfer.
bool Receive(Client::Request* r, const char* data, size_t n) {
  if (!r->on_line || r->http_code != 200) {  // a whole body, or a stream's error Status
    if (r->response.size() + n > kMaxBody) {
      r->too_large = true;
      return false;
    }
    r->response.append(data, n);
    return true;
  }
  r->pending.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = r->pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(r->pending.data() + start, nl - start);
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
    Status s = r->on_line(line);
    if (!s.ok()) {
      r->stream_error = s;
      return false;
    }
  }
  r->pending.erase(0, start);
  if (r->pending.size() > kMaxBody) {
    r->stream_error = Internal(r->what + ": a watch event larger than " + std::to_string(kMaxBody) + " bytes");
    return false;
  }
  return true;
}

// Verifies the server's chain against `arg`, the cluster's CA store, alone. Replaces
// OpenSSL's own verification, which would also trust the system's roots once the HTTP
// library adds their default locations to the context's store.
int VerifyAgainstClusterCa(X509_STORE_CTX* ctx, void* arg) {
  X509_STORE_CTX* own = X509_STORE_CTX_new();
  if (own == nullptr) return 0;
  int ok = 0;
  if (X509_STORE_CTX_init(own, static_cast<X509_STORE*>(arg), X509_STORE_CTX_get0_cert(ctx),
                          X509_STORE_CTX_get0_untrusted(ctx)) == 1) {
    X509_VERIFY_PARAM_set1(X509_STORE_CTX_get0_param(own), X509_STORE_CTX_get0_param(ctx));
    ok = X509_verify_cert(own) == 1 ? 1 : 0;
    X509_STORE_CTX_set_error(ctx, ok ? X509_V_OK : X509_STORE_CTX_get_error(own));
  }
  X509_STORE_CTX_free(own);
  return ok;
}

}  // namespace

const char* PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
  }
  return "application/merge-patch+json";
}

std::string QueryEscape(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Status StatusFromApi(long http_code, const json& body, const std::string& what) {
  long code = http_code;
  std::string message, reason;
  if (body.is_object()) {
    if (body.contains("code") && body["code"].is_number_integer() && code == 0) code = body["code"].get<long>();
    if (body.contains("message") && body["message"].is_string()) message = body["message"].get<std::string>();
    if (body.contains("reason") && body["reason"].is_string()) reason = body["reason"].get<std::string>();
  }
  std::string phrase = ReasonPhrase(code);
  std::string text = what + ": HTTP " + std::to_string(code) + (phrase.empty() ? "" : " " + phrase);
  if (!reason.empty() && reason != phrase) text += " (" + reason + ")";
  if (!message.empty()) text += ": " + message;
  if (code == 400 || code == 422) return InvalidArgument(text);
  if (code == 401 || code == 403) return FailedPrecondition(text);
  if (code == 404) return NotFound(text);
  if (code == 409) return Aborted(text);
  if (code == 410) return OutOfRange(text);
  if (code == 429 || code >= 500) return Unavailable(text);
  return Internal(text);
}

StatusOr<std::unique_ptr<Client>> Client::Create(ClientConfig config, ClientOptions options) {
  if (config.server.empty()) return InvalidArgument(config.source + ": no API server URL");
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  Endpoint at;
  std::string rest;
  if (config.server.rfind("https://", 0) == 0) {
    at.tls = true;
    rest = config.server.substr(8);
  } else if (config.server.rfind("http://", 0) == 0) {
    rest = config.server.substr(7);
  } else {
    return InvalidArgument(config.source + ": server '" + config.server + "' is not an http(s) URL");
  }
  size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    at.prefix = rest.substr(slash);  // a server behind a path, e.g. a proxy's /k8s/clusters/c1
    rest.resize(slash);
  }
  std::string port;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string::npos) return InvalidArgument(config.source + ": server '" + config.server + "': no ']'");
    at.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    at.host = rest.substr(0, colon);
    if (colon != std::string::npos) port = rest.substr(colon + 1);
  }
  at.port = at.tls ? 443 : 80;
  if (!port.empty()) {
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (*end != '\0' || p < 1 || p > 65535)
      return InvalidArgument(config.source + ": server '" + config.server + "': bad port '" + port + "'");
    at.port = static_cast<int>(p);
  }
  if (at.host.empty()) return InvalidArgument(config.source + ": server '" + config.server + "' names no host");
  std::error_code ec;
  for (const std::string* f : {&config.ca_file, &config.cert_file, &config.key_file, &config.token_file})
    if (!f->empty() && !std::filesystem::exists(*f, ec)) return NotFound(config.source + ": " + *f + ": no such file");
  if (at.tls) GS_RETURN_IF_ERROR(LoadTlsMaterial(config).status());  // refuse bad PEM now, not per call
  return std::unique_ptr<Client>(new Client(std::move(config), std::move(options), std::move(at)));
}

Client::Client(ClientConfig config, ClientOptions options, Endpoint endpoint)
    : config_(std::move(config)), options_(std::move(options)), endpoint_(std::move(endpoint)) {}

Client::~Client() = default;

StatusOr<std::unique_ptr<Client::Connection>> Client::Acquire() {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!pool_.empty()) {
      std::unique_ptr<Connection> c = std::move(pool_.back());
      pool_.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<Connection>();
  if (!endpoint_.tls) {
    c->http = std::make_unique<httplib::ClientImpl>(endpoint_.host, endpoint_.port);
  } else {
    auto tls = LoadTlsMaterial(config_);  // files again: a rotated certificate counts from here
    if (!tls.ok()) return tls.status();
    auto ssl = tls->cert ? std::make_unique<httplib::SSLClient>(endpoint_.host, endpoint_.port, tls->cert.get(),
                                                                tls->key.get())
                         : std::make_unique<httplib::SSLClient>(endpoint_.host, endpoint_.port);
    if (!ssl->is_valid()) return Internal("cannot set up TLS: " + LastOpenSslError());
    if (tls->cert) GS_RETURN_IF_ERROR(AddChain(ssl->ssl_context(), *tls));
    ssl->enable_server_certificate_verification(!config_.insecure_skip_tls_verify);
    if (tls->ca) {
      c->roots = std::move(tls->ca);
      SSL_CTX_set_cert_verify_callback(ssl->ssl_context(), VerifyAgainstClusterCa, c->roots.get());
    }
    c->tls = ssl.get();
    c->http = std::move(ssl);
  }
  c->http->set_keep_alive(true);
  c->http->set_url_encode(false);  // targets are escaped already (QueryEscape)
  c->http->set_connection_timeout(options_.connect_timeout);
  return c;
}

void Client::Release(std::unique_ptr<Connection> connection) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (pool_.size() < kMaxIdleConnections) pool_.push_back(std::move(connection));
}

Status Client::Perform(Request* r) {
  std::string auth;
  if (!config_.token_file.empty()) {
    auto t = ReadToken(config_.token_file);
    if (!t.ok()) return FailedPrecondition(r->what + ": " + t.status().message());
    auth = "Bearer " + *t;
  } else if (!config_.token.empty()) {
    auth = "Bearer " + config_.token;
  }
  if (r->stop.stop_requested()) {
    r->stopped = true;
    return Status::Ok();
  }
  auto connection = Acquire();
  if (!connection.ok()) return Unavailable(r->what + ": " + connection.status().message());
  httplib::ClientImpl& http = *(*connection)->http;
  http.set_read_timeout(r->timeout);
  http.set_write_timeout(r->timeout);
  // Compressed lists are much smaller; a watch stays uncompressed so that every event
  // arrives when it is sent.
  http.set_decompress(!r->on_line);

  httplib::Request req;
  req.method = r->method;
  req.path = endpoint_.prefix + r->target;
  if (!auth.empty()) req.headers.emplace("Authorization", auth);
  req.headers.emplace("Accept", "application/json");
  req.headers.emplace("Accept-Encoding", r->on_line ? "identity" : "gzip");
  req.headers.emplace("User-Agent", options_.user_agent);
  if (r->body != nullptr) req.body = *r->body;
  if (r->content_type != nullptr) req.headers.emplace("Content-Type", r->content_type);
  const auto deadline = std::chrono::steady_clock::now() + r->timeout;
  bool expired = false;
  auto go_on = [&] {
    if (r->stop.stop_requested()) r->stopped = true;
    if (std::chrono::steady_clock::now() >= deadline) expired = true;
    return !r->stopped && !expired;
  };
  req.response_handler = [&](const httplib::Response& res) {
    r->http_code = res.status;
    return go_on();
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) { return go_on() && Receive(r, data, n); };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  bool sent;
  {
    // A stop request shuts the socket, which ends a watch waiting for its next event.
    std::stop_callback on_stop(r->stop, [&] { http.stop(); });
    sent = http.send(req, res, error);
  }
  if (r->http_code == 0 && sent) r->http_code = res.status;
  // Anything in a finished stream's last line that came without a newline.
  if (sent && r->on_line && r->http_code == 200 && r->pending.find_first_not_of(" \r\t\n") != std::string::npos) {
    Status s = r->on_line(r->pending);
    if (!s.ok()) r->stream_error = s;
  }
  std::string tls_detail;
  if (error == httplib::Error::SSLServerVerification && (*connection)->tls != nullptr) {
    long v = (*connection)->tls->get_openssl_verify_result();
    tls_detail = v == X509_V_OK ? "the server certificate does not name " + endpoint_.host
                                : std::string("server certificate: ") + X509_verify_cert_error_string(v);
  } else if (error == httplib::Error::SSLConnection) {
    tls_detail = LastOpenSslError();
  }
  Release(std::move(*connection));
  if (!r->stream_error.ok()) return r->stream_error;
  if (r->stopped || (r->stop.stop_requested() && !sent)) {
    r->stopped = true;
    return Status::Ok();
  }
  if (r->too_large) return Unavailable(r->what + ": a reply larger than " + std::to_string(kMaxBody) + " bytes");
  bool late = std::chrono::steady_clock::now() + std::chrono::milliseconds(10) >= deadline;
  if (expired || (!sent && late && (error == httplib::Error::Read || error == httplib::Error::Write)))
    return Unavailable(r->what + ": no complete answer within " + std::to_string(r->timeout.count()) + " ms");
  if (error == httplib::Error::ConnectionTimeout)
    return Unavailable(r->what + ": cannot connect to " + config_.server + " within " +
                       std::to_string(options_.connect_timeout.count()) + " ms");
  if (!sent)
    return Unavailable(r->what + ": " + config_.server + ": " + httplib::to_string(error) +
                       (tls_detail.empty() ? "" : " (" + tls_detail + ")"));
  return Status::Ok();
}

StatusOr<json> Client::Call(const std::string& method, const std::string& path, const std::string& query,
                            const std::string* body, const char* content_type, std::chrono::milliseconds timeout) {
  Request r;
  r.method = method;
  r.target = path + query;
  r.what = method + " " + path;
  r.body = body;
  r.content_type = content_type;
  r.timeout = timeout.count() > 0 ? timeout : options_.request_timeout;
  GS_RETURN_IF_ERROR(Perform(&r));
  json reply = json::parse(r.response, nullptr, /*allow_exceptions=*/false);
  if (r.http_code < 200 || r.http_code >= 300) return StatusFromApi(r.http_code, reply, r.what);
  if (reply.is_discarded()) return Internal(r.what + ": the reply is not JSON");
  return reply;
}

StatusOr<json> Client::Get(const std::string& path, std::chrono::milliseconds timeout) {
  return Call("GET", path, "", nullptr, nullptr, timeout);
}

StatusOr<json> Client::List(const std::string& path, const ListOptions& o, std::chrono::milliseconds timeout) {
  std::string q;
  q = AddQuery(q, "labelSelector", o.label_selector);
  q = AddQuery(q, "fieldSelector", o.field_selector);
  q = AddQuery(q, "resourceVersion", o.resource_version);
  if (o.limit > 0) q = AddQuery(q, "limit", std::to_string(o.limit));
  q = AddQuery(q, "continue", o.continue_token);
  return Call("GET", path, q, nullptr, nullptr, timeout);
}

StatusOr<json> Client::Patch(const std::string& path, const std::string& body, PatchType type,
                             std::chrono::milliseconds timeout) {
  return Call("PATCH", path, "", &body, PatchContentType(type), timeout);
}

StatusOr<json> Client::Post(const std::string& path, const std::string& body, std::chrono::milliseconds timeout) {
  return Call("POST", path, "", &body, "application/json", timeout);
}

Status Client::Watch(const std::string& path, const WatchOptions& o, const WatchHandler& handler,
                     std::stop_token stop) {
  std::string q = "?watch=true";
  q = AddQuery(q, "resourceVersion", o.resource_version);
  q = AddQuery(q, "labelSelector", o.label_selector);
  q = AddQuery(q, "fieldSelector", o.field_selector);
  if (o.allow_bookmarks) q += "&allowWatchBookmarks=true";
  if (o.timeout_seconds > 0) q = AddQuery(q, "timeoutSeconds", std::to_string(o.timeout_seconds));
  Request r;
  r.method = "GET";
  r.target = path + q;
  r.what = "WATCH " + path;
  r.timeout = std::chrono::seconds(o.timeout_seconds > 0 ? o.timeout_seconds : 3600) + options_.watch_grace;
  r.stop = stop;
  r.on_line = [&](std::string_view line) -> Status {
    json event = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded() || !event.is_object() || !event.contains("type") || !event["type"].is_string())
      return Internal(r.what + ": an event that is not {\"type\", \"object\"} JSON");
    const std::string& type = event["type"].get_ref<const std::string&>();
    static const json kNull;
    const json& object = event.contains("object") ? event["object"] : kNull;
    if (type == "ERROR") return StatusFromApi(0, object, r.what);
    return handler(type, object);
  };
  GS_RETURN_IF_ERROR(Perform(&r));
  if (r.stopped) return Status::Ok();
  if (r.http_code != 200) {
    json reply = json::parse(r.response, nullptr, /*allow_exceptions=*/false);
    return StatusFromApi(r.http_code, reply, r.what);
  }
  return Status::Ok();
}

}  // namespace gs::kube
