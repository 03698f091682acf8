#include "src/kube/client.h"

#include <curl/curl.h>

#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "src/common/file.h"

namespace gs::kube {
namespace {

using nlohmann::json;

constexpr size_t kMaxIdleHandles = 8;
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
  std::string method, url, what;
  const std::string* body = nullptr;
  const char* content_type = nullptr;
  std::chrono::milliseconds timeout{};
  std::stop_token stop;
  std::function<Status(std::string_view line)> on_line;  // streaming when set

  // Results.
  long http_code = 0;
  std::string response;  // non-streaming body, or the error body of a stream
  std::string pending;   // a stream's partial line
  Status stream_error;   // set when on_line failed
  bool stopped = false;  // the stop token ended it
  CURL* curl = nullptr;
};

namespace {

size_t OnWrite(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<Client::Request*>(user);
  size_t n = size * count;
  if (!r->on_line) {
    if (r->response.size() + n > kMaxBody) return 0;
    r->response.append(data, n);
    return n;
  }
  if (r->http_code == 0) curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &r->http_code);
  if (r->http_code != 200) {  // an error: the body is a Status, read whole
    if (r->response.size() + n > kMaxBody) return 0;
    r->response.append(data, n);
    return n;
  }
  r->pending.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = r->pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(r->pending.data() + start, nl - start);
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
    Status s = r->on_line(line);
    if (!s.ok()) {
      r->stream_error = s;
      return 0;  // aborts the transfer
    }
  }
  r->pending.erase(0, start);
  if (r->pending.size() > kMaxBody) {
    r->stream_error = Internal(r->what + ": a watch event larger than " + std::to_string(kMaxBody) + " bytes");
    return 0;
  }
  return n;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* r = static_cast<Client::Request*>(user);
  if (r->stop.stop_requested()) {
    r->stopped = true;
    return 1;  // aborts the transfer
  }
  return 0;
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
  static std::once_flag once;
  static CURLcode init = CURLE_OK;
  std::call_once(once, [] { init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (init != CURLE_OK) return Internal(std::string("libcurl: ") + curl_easy_strerror(init));
  if (config.server.empty()) return InvalidArgument(config.source + ": no API server URL");
  if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0)
    return InvalidArgument(config.source + ": server '" + config.server + "' is not an http(s) URL");
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  std::error_code ec;
  for (const std::string* f : {&config.ca_file, &config.cert_file, &config.key_file, &config.token_file})
    if (!f->empty() && !std::filesystem::exists(*f, ec)) return NotFound(config.source + ": " + *f + ": no such file");
  return std::unique_ptr<Client>(new Client(std::move(config), std::move(options)));
}

Client::Client(ClientConfig config, ClientOptions options) : config_(std::move(config)), options_(std::move(options)) {}

Client::~Client() {
  for (void* h : pool_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* Client::Acquire() {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!pool_.empty()) {
      void* h = pool_.back();
      pool_.pop_back();
      curl_easy_reset(static_cast<CURL*>(h));  // keeps its connections and TLS sessions
      return h;
    }
  }
  return curl_easy_init();
}

void Client::Release(void* handle) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (pool_.size() < kMaxIdleHandles) {
    pool_.push_back(handle);
    return;
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

Status Client::Perform(Request* r) {
  CURL* curl = static_cast<CURL*>(Acquire());
  if (curl == nullptr) return Internal(r->what + ": libcurl: cannot create a handle");
  r->curl = curl;
  struct curl_slist* headers = nullptr;
  auto cleanup = [&] {
    curl_slist_free_all(headers);
    Release(curl);
  };
  std::string auth;
  if (!config_.token_file.empty()) {
    auto t = ReadToken(config_.token_file);
    if (!t.ok()) {
      cleanup();
      return FailedPrecondition(r->what + ": " + t.status().message());
    }
    auth = "Authorization: Bearer " + *t;
  } else if (!config_.token.empty()) {
    auth = "Authorization: Bearer " + config_.token;
  }
  if (!auth.empty()) headers = curl_slist_append(headers, auth.c_str());
  headers = curl_slist_append(headers, "Accept: application/json");
  std::string content_type;
  if (r->content_type != nullptr) {
    content_type = std::string("Content-Type: ") + r->content_type;
    headers = curl_slist_append(headers, content_type.c_str());
  }
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, r->url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  // Compressed lists are much smaller; a watch stays uncompressed so that every event
  // arrives when it is sent.
  if (!r->on_line) curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(r->timeout.count()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnWrite);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, r);
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, r->method.c_str());
  if (r->method == "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, nullptr);
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  }
  if (r->body != nullptr) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, r->body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r->body->size()));
  }
  // TLS: the cluster's CA (file or PEM in memory), a client certificate and key.
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, config_.insecure_skip_tls_verify ? 0L : 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, config_.insecure_skip_tls_verify ? 0L : 2L);
  struct curl_blob ca {
    const_cast<char*>(config_.ca_data.data()), config_.ca_data.size(), CURL_BLOB_NOCOPY
  };
  struct curl_blob cert {
    const_cast<char*>(config_.cert_data.data()), config_.cert_data.size(), CURL_BLOB_NOCOPY
  };
  struct curl_blob key {
    const_cast<char*>(config_.key_data.data()), config_.key_data.size(), CURL_BLOB_NOCOPY
  };
  if (!config_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, config_.ca_file.c_str());
  if (!config_.ca_data.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &ca);
  if (!config_.cert_file.empty()) curl_easy_setopt(curl, CURLOPT_SSLCERT, config_.cert_file.c_str());
  if (!config_.cert_data.empty()) curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &cert);
  if (!config_.key_file.empty()) curl_easy_setopt(curl, CURLOPT_SSLKEY, config_.key_file.c_str());
  if (!config_.key_data.empty()) curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &key);
  if (!config_.cert_file.empty() || !config_.cert_data.empty()) curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
  if (!config_.key_file.empty() || !config_.key_data.empty()) curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");

  CURLcode rc = curl_easy_perform(curl);
  if (r->http_code == 0) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r->http_code);
  // Anything in a finished stream's last line that came without a newline.
  if (rc == CURLE_OK && r->on_line && r->http_code == 200 &&
      r->pending.find_first_not_of(" \r\t\n") != std::string::npos) {
    Status s = r->on_line(r->pending);
    if (!s.ok()) r->stream_error = s;
  }
  cleanup();
  if (!r->stream_error.ok()) return r->stream_error;
  if (r->stopped) return Status::Ok();
  if (rc == CURLE_OPERATION_TIMEDOUT)
    return Unavailable(r->what + ": no complete answer within " + std::to_string(r->timeout.count()) + " ms (" +
                       (error[0] ? error : curl_easy_strerror(rc)) + ")");
  if (rc != CURLE_OK)
    return Unavailable(r->what + ": " + curl_easy_strerror(rc) + (error[0] ? std::string(": ") + error : ""));
  return Status::Ok();
}

StatusOr<json> Client::Call(const std::string& method, const std::string& path, const std::string& query,
                            const std::string* body, const char* content_type, std::chrono::milliseconds timeout) {
  Request r;
  r.method = method;
  r.url = config_.server + path + query;
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
  r.url = config_.server + path + q;
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
