#include "src/kube/testing/fake_api_server.h"

#include <httplib.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "src/common/file.h"

namespace gs::kube::testing {
namespace {

// A query parameter as a whole number; `otherwise` when it is not one.
int64_t Number(const std::string& text, int64_t otherwise) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  return (errno != 0 || end == text.c_str() || *end != 0) ? otherwise : v;
}

using nlohmann::json;

json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

std::string Meta(const json& o, const char* key) {
  if (!o.contains("metadata") || !o["metadata"].is_object()) return "";
  return o["metadata"].value(key, "");
}

bool MatchesLabels(const json& o, const std::string& selector) {
  if (selector.empty()) return true;
  json labels = o.contains("metadata") ? o["metadata"].value("labels", json::object()) : json::object();
  std::stringstream parts(selector);
  std::string term;
  while (std::getline(parts, term, ',')) {
    size_t eq = term.find('=');
    if (eq == std::string::npos) return false;
    std::string k = term.substr(0, eq), v = term.substr(eq + 1);
    if (!v.empty() && v[0] == '=') v = v.substr(1);  // k==v
    if (!labels.contains(k) || labels[k] != v) return false;
  }
  return true;
}

}  // namespace

struct FakeApiServer::Impl {
  struct Event {
    int64_t rv;
    std::string kind, type;
    json object;
  };
  std::unique_ptr<httplib::Server> server;
  std::thread thread;

  std::mutex mu;
  std::condition_variable cv;
  int64_t rv = 100;
  int64_t compacted = 0;                                       // events at or before this version are gone
  std::map<std::string, std::map<std::string, json>> objects;  // kind -> "ns/name" -> object
  std::vector<Event> log;
  std::vector<SeenRequest> seen;
  int fail_code = 0, fail_times = 0;
  std::string fail_message;
  bool hang = false, hang_watches = false, split = false, stopping = false;
  std::string token;
  int64_t watch_generation = 0;

  static std::string Key(const std::string& ns, const std::string& name) { return ns.empty() ? name : ns + "/" + name; }

  json Store(const std::string& kind, json object) {  // mu held
    std::string ns = Meta(object, "namespace");
    bool namespaced = kind != "nodes";
    if (namespaced && ns.empty()) ns = object["metadata"]["namespace"] = "default";
    std::string name = Meta(object, "name");
    if (Meta(object, "uid").empty()) object["metadata"]["uid"] = "uid-" + name;
    object["metadata"]["resourceVersion"] = std::to_string(++rv);
    auto& bucket = objects[kind];
    std::string key = Key(namespaced ? ns : "", name);
    std::string type = bucket.count(key) ? "MODIFIED" : "ADDED";
    bucket[key] = object;
    log.push_back({rv, kind, type, object});
    cv.notify_all();
    return object;
  }

  // Records the request; answers it here (and returns true) if it must fail or hang. A
  // watch belongs to the EndWatches generation in force when it was recorded, so a test
  // that saw a watch arrive and then ends the watches ends that one too, however late its
  // handler runs.
  bool Intercept(const httplib::Request& req, httplib::Response& res, bool watch, int64_t* generation = nullptr) {
    std::unique_lock<std::mutex> lock(mu);
    SeenRequest s{req.method,
                  req.path,
                  req.get_header_value("Content-Type"),
                  req.get_header_value("Authorization"),
                  req.get_header_value("Accept-Encoding"),
                  req.body,
                  {}};
    for (auto& [k, v] : req.params) s.params[k] = v;
    seen.push_back(std::move(s));
    if (generation) *generation = watch_generation;
    while ((hang || (watch && hang_watches)) && !stopping) cv.wait_for(lock, std::chrono::milliseconds(20));
    if (!token.empty() && req.get_header_value("Authorization") != "Bearer " + token) {
      Reply(res, 401, StatusBody(401, "Unauthorized", "Unauthorized"));
      return true;
    }
    if (!watch && fail_times > 0) {
      --fail_times;
      Reply(res, fail_code, StatusBody(fail_code, fail_code == 409 ? "Conflict" : "InternalError", fail_message));
      return true;
    }
    return false;
  }

  static void Reply(httplib::Response& res, int code, const json& body) {
    res.status = code;
    res.set_content(body.dump(), "application/json");
  }

  void List(const httplib::Request& req, httplib::Response& res, const std::string& kind, const std::string& ns) {
    std::lock_guard<std::mutex> lock(mu);
    int64_t limit = req.has_param("limit") ? Number(req.get_param_value("limit"), 0) : 0;
    std::string after;
    int64_t list_rv = rv;
    if (req.has_param("continue")) {
      std::string token = req.get_param_value("continue");
      size_t colon = token.find(':');
      list_rv = Number(token.substr(0, colon), 0);
      after = colon == std::string::npos ? "" : token.substr(colon + 1);
      if (list_rv < compacted) {
        Reply(res, 410, StatusBody(410, "Expired", "The provided continue parameter is too old"));
        return;
      }
    }
    json items = json::array();
    std::string last;
    bool more = false;
    for (auto& [key, o] : objects[kind]) {
      if (!after.empty() && key <= after) continue;
      if (!ns.empty() && Meta(o, "namespace") != ns) continue;
      if (!MatchesLabels(o, req.get_param_value("labelSelector"))) continue;
      if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
        more = true;
        break;
      }
      items.push_back(o);
      last = key;
    }
    json meta = {{"resourceVersion", std::to_string(list_rv)}};
    if (more) meta["continue"] = std::to_string(list_rv) + ":" + last;
    Reply(res, 200,
          {{"kind", kind == "pods"    ? "PodList"
                    : kind == "nodes" ? "NodeList"
                                      : "ResourceQuotaList"},
           {"apiVersion", "v1"},
           {"metadata", meta},
           {"items", items}});
  }

  void Watch(const httplib::Request& req, httplib::Response& res, const std::string& kind, const std::string& ns,
             int64_t generation) {
    struct State {
      int64_t cursor = 0;
      bool expired = false;
      std::vector<json> initial;
      int64_t generation = 0;
      std::chrono::steady_clock::time_point deadline;
      std::string selector;
    };
    auto st = std::make_shared<State>();
    {
      std::lock_guard<std::mutex> lock(mu);
      st->generation = generation;
      st->selector = req.get_param_value("labelSelector");
      int timeout = req.has_param("timeoutSeconds")
                        ? static_cast<int>(Number(req.get_param_value("timeoutSeconds"), 1800))
                        : 1800;
      st->deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
      std::string from = req.get_param_value("resourceVersion");
      if (from.empty() || from == "0") {
        st->cursor = rv;
        for (auto& [key, o] : objects[kind])
          if ((ns.empty() || Meta(o, "namespace") == ns) && MatchesLabels(o, st->selector))
            st->initial.push_back({{"type", "ADDED"}, {"object", o}});
      } else {
        st->cursor = Number(from, 0);
        st->expired = st->cursor < compacted;
      }
    }
    res.set_chunked_content_provider("application/json", [this, st, kind, ns](size_t, httplib::DataSink& sink) {
      auto send = [&](const json& event) {
        std::string line = event.dump() + "\n";
        bool split_now;
        {
          std::lock_guard<std::mutex> lock(mu);
          split_now = split;
        }
        if (!split_now) return sink.write(line.data(), line.size());
        size_t third = line.size() / 3 + 1;
        for (size_t at = 0; at < line.size(); at += third) {
          if (!sink.write(line.data() + at, std::min(third, line.size() - at))) return false;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return true;
      };
      if (st->expired) {
        send({{"type", "ERROR"},
              {"object", StatusBody(410, "Expired", "too old resource version: " + std::to_string(st->cursor))}});
        sink.done();
        return true;
      }
      for (const json& e : st->initial)
        if (!send(e)) return false;
      st->initial.clear();
      std::vector<json> out;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(50));
        if (stopping || watch_generation != st->generation || std::chrono::steady_clock::now() >= st->deadline) {
          lock.unlock();
          sink.done();
          return true;
        }
        if (st->cursor < compacted) {
          // Compact() dropped events this watch had not sent yet: a real API server cancels
          // a watcher that fell behind the compaction with 410, it never skips events.
          lock.unlock();
          send({{"type", "ERROR"},
                {"object", StatusBody(410, "Expired", "too old resource version: " + std::to_string(st->cursor))}});
          sink.done();
          return true;
        }
        for (const Event& e : log) {
          if (e.rv <= st->cursor || e.kind != kind) continue;
          st->cursor = e.rv;
          if (!ns.empty() && Meta(e.object, "namespace") != ns) continue;
          if (!MatchesLabels(e.object, st->selector)) continue;
          out.push_back({{"type", e.type}, {"object", e.object}});
        }
      }
      for (const json& e : out)
        if (!send(e)) return false;
      return true;
    });
  }

  void Patch(const httplib::Request& req, httplib::Response& res, const std::string& kind, const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = objects[kind].find(key);
    if (it == objects[kind].end())
      return Reply(res, 404, StatusBody(404, "NotFound", kind + " \"" + key + "\" not found"));
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return Reply(res, 400, StatusBody(400, "BadRequest", "body is not JSON"));
    std::string type = req.get_header_value("Content-Type");
    // As the API server: a resourceVersion in a merge patch is a precondition.
    if (body.is_object() && body.contains("metadata") && body["metadata"].is_object() &&
        body["metadata"].contains("resourceVersion") &&
        body["metadata"]["resourceVersion"] != it->second["metadata"]["resourceVersion"])
      return Reply(res, 409,
                   StatusBody(409, "Conflict",
                              "Operation cannot be fulfilled on " + kind + " \"" + key +
                                  "\": the object has been modified; please apply your changes to the latest version "
                                  "and try again"));
    json updated = it->second;
    try {
      if (type == "application/merge-patch+json" || type == "application/strategic-merge-patch+json") {
        updated.merge_patch(body);
      } else if (type == "application/json-patch+json") {
        updated = updated.patch(body);
      } else {
        return Reply(res, 415, StatusBody(415, "UnsupportedMediaType", "the media type " + type + " is not supported"));
      }
    } catch (const std::exception& e) {
      return Reply(res, 422, StatusBody(422, "Invalid", e.what()));
    }
    Reply(res, 200, Store(kind, updated));
  }

  void Bind(const httplib::Request& req, httplib::Response& res, const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = objects["pods"].find(Key(ns, name));
    if (it == objects["pods"].end())
      return Reply(res, 404, StatusBody(404, "NotFound", "pods \"" + name + "\" not found"));
    json b = json::parse(req.body, nullptr, false);
    if (b.is_discarded() || b.value("kind", "") != "Binding" || !b.contains("target") ||
        b["target"].value("name", "").empty())
      return Reply(res, 400, StatusBody(400, "BadRequest", "not a Binding with a target"));
    std::string uid = b.contains("metadata") ? b["metadata"].value("uid", "") : "";
    std::string pod_uid = Meta(it->second, "uid");
    if (!uid.empty() && uid != pod_uid)
      return Reply(res, 409,
                   StatusBody(409, "Conflict",
                              "Precondition failed: UID in precondition: " + uid + ", UID in object meta: " + pod_uid));
    json& pod = it->second;
    std::string bound = pod.contains("spec") ? pod["spec"].value("nodeName", "") : "";
    if (!bound.empty())
      return Reply(res, 409,
                   StatusBody(409, "Conflict", "pod " + name + " is already assigned to node \"" + bound + "\""));
    json updated = pod;
    updated["spec"]["nodeName"] = b["target"]["name"];
    // As the API server's BindingREST: the Binding's annotations go onto the pod with it.
    if (b.contains("metadata") && b["metadata"].contains("annotations") && b["metadata"]["annotations"].is_object())
      for (const auto& [k, v] : b["metadata"]["annotations"].items()) updated["metadata"]["annotations"][k] = v;
    Store("pods", updated);
    Reply(res, 201, {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Success"}, {"code", 201}});
  }
};

FakeApiServer::FakeApiServer(const FakeApiOptions& options) : impl_(std::make_unique<Impl>()) {
  tls_ = !options.cert_file.empty();
  if (tls_) {
    impl_->server =
        std::make_unique<httplib::SSLServer>(options.cert_file.c_str(), options.key_file.c_str(),
                                             options.client_ca_file.empty() ? nullptr : options.client_ca_file.c_str());
  } else {
    impl_->server = std::make_unique<httplib::Server>();
  }
  Impl* im = impl_.get();
  auto list_or_watch = [im](const std::string& kind, bool namespaced) {
    return [im, kind, namespaced](const httplib::Request& req, httplib::Response& res) {
      bool watch = req.get_param_value("watch") == "true" || req.get_param_value("watch") == "1";
      int64_t generation = 0;
      if (im->Intercept(req, res, watch, &generation)) return;
      std::string ns = namespaced ? std::string(req.matches[1]) : "";
      if (watch) {
        im->Watch(req, res, kind, ns, generation);
      } else {
        im->List(req, res, kind, ns);
      }
    };
  };
  auto get = [im](const std::string& kind, bool namespaced) {
    return [im, kind, namespaced](const httplib::Request& req, httplib::Response& res) {
      if (im->Intercept(req, res, false)) return;
      std::string key = namespaced ? Impl::Key(req.matches[1], req.matches[2]) : std::string(req.matches[1]);
      std::lock_guard<std::mutex> lock(im->mu);
      auto it = im->objects[kind].find(key);
      if (it == im->objects[kind].end())
        return Impl::Reply(res, 404, StatusBody(404, "NotFound", kind + " \"" + key + "\" not found"));
      Impl::Reply(res, 200, it->second);
    };
  };
  auto& s = *impl_->server;
  s.Get("/api/v1/nodes", list_or_watch("nodes", false));
  s.Get("/api/v1/pods", list_or_watch("pods", false));
  s.Get(R"(/api/v1/namespaces/([^/]+)/pods)", list_or_watch("pods", true));
  s.Get("/api/v1/resourcequotas", list_or_watch("resourcequotas", false));
  s.Get(R"(/api/v1/nodes/([^/]+))", get("nodes", false));
  s.Get(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))", get("pods", true));
  s.Patch(R"(/api/v1/nodes/([^/]+))", [im](const httplib::Request& req, httplib::Response& res) {
    if (!im->Intercept(req, res, false)) im->Patch(req, res, "nodes", req.matches[1]);
  });
  s.Patch(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))", [im](const httplib::Request& req, httplib::Response& res) {
    if (!im->Intercept(req, res, false)) im->Patch(req, res, "pods", Impl::Key(req.matches[1], req.matches[2]));
  });
  s.Post(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding)",
         [im](const httplib::Request& req, httplib::Response& res) {
           if (!im->Intercept(req, res, false)) im->Bind(req, res, req.matches[1], req.matches[2]);
         });
  s.Post(R"(/api/v1/namespaces/([^/]+)/pods)", [im](const httplib::Request& req, httplib::Response& res) {
    if (im->Intercept(req, res, false)) return;
    json pod = json::parse(req.body, nullptr, false);
    if (pod.is_discarded() || !pod.is_object() || Meta(pod, "name").empty())
      return Impl::Reply(res, 400, StatusBody(400, "BadRequest", "not a pod with a name"));
    pod["metadata"]["namespace"] = std::string(req.matches[1]);
    std::lock_guard<std::mutex> lock(im->mu);
    if (im->objects["pods"].count(Impl::Key(req.matches[1], Meta(pod, "name"))))
      return Impl::Reply(res, 409,
                         StatusBody(409, "AlreadyExists", "pods \"" + Meta(pod, "name") + "\" already exists"));
    Impl::Reply(res, 201, im->Store("pods", pod));
  });
  port_ = s.bind_to_any_port("127.0.0.1");
  impl_->thread = std::thread([im] { im->server->listen_after_bind(); });
}

FakeApiServer::~FakeApiServer() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->cv.notify_all();
  }
  impl_->server->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string FakeApiServer::url() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

json FakeApiServer::Put(const std::string& kind, json object) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Store(kind, std::move(object));
}

bool FakeApiServer::Delete(const std::string& kind, const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& bucket = impl_->objects[kind];
  auto it = bucket.find(Impl::Key(ns, name));
  if (it == bucket.end()) return false;
  json o = it->second;
  bucket.erase(it);
  o["metadata"]["resourceVersion"] = std::to_string(++impl_->rv);
  impl_->log.push_back({impl_->rv, kind, "DELETED", o});
  impl_->cv.notify_all();
  return true;
}

std::optional<json> FakeApiServer::Find(const std::string& kind, const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& bucket = impl_->objects[kind];
  auto it = bucket.find(Impl::Key(ns, name));
  if (it == bucket.end()) return std::nullopt;
  return it->second;
}

std::vector<json> FakeApiServer::All(const std::string& kind) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<json> out;
  for (auto& [k, o] : impl_->objects[kind]) out.push_back(o);
  return out;
}

int64_t FakeApiServer::resource_version() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->rv;
}

void FakeApiServer::Compact() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->compacted = impl_->rv;
  impl_->log.clear();
}

void FakeApiServer::FailNext(int code, const std::string& message, int times) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->fail_code = code;
  impl_->fail_message = message;
  impl_->fail_times = times;
}

void FakeApiServer::SetHang(bool hang) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->hang = hang;
  impl_->cv.notify_all();
}

void FakeApiServer::SetHangWatches(bool hang) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->hang_watches = hang;
  impl_->cv.notify_all();
}

void FakeApiServer::SetSplitWatchEvents(bool split) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->split = split;
}

void FakeApiServer::SetRequiredToken(const std::string& token) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->token = token;
}

void FakeApiServer::EndWatches() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ++impl_->watch_generation;
  impl_->cv.notify_all();
}

std::vector<SeenRequest> FakeApiServer::requests() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->seen;
}

int FakeApiServer::CountRequests(const std::string& method, const std::string& path_prefix, bool watches_only) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  int n = 0;
  for (const SeenRequest& r : impl_->seen) {
    if (r.method != method || r.path.rfind(path_prefix, 0) != 0) continue;
    auto w = r.params.find("watch");
    bool is_watch = w != r.params.end() && w->second == "true";
    if (!watches_only || is_watch) ++n;
  }
  return n;
}

bool MakeTestCerts(const std::string& dir, TestCerts* c) {
  c->ca_cert = dir + "/ca.crt";
  c->ca_key = dir + "/ca.key";
  c->server_cert = dir + "/server.crt";
  c->server_key = dir + "/server.key";
  c->client_cert = dir + "/client.crt";
  c->client_key = dir + "/client.key";
  std::string ext = dir + "/san.ext";
  { std::ofstream(ext) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"; }
  std::string q = " >/dev/null 2>&1";
  std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::vector<std::string> steps = {
      "openssl req -x509" + key + " -keyout " + c->ca_key + " -out " + c->ca_cert + " -days 2 -subj /CN=test-ca",
      "openssl req" + key + " -keyout " + c->server_key + " -out " + dir + "/server.csr -subj /CN=127.0.0.1",
      "openssl x509 -req -in " + dir + "/server.csr -CA " + c->ca_cert + " -CAkey " + c->ca_key +
          " -CAcreateserial -days 2 -extfile " + ext + " -out " + c->server_cert,
      "openssl req" + key + " -keyout " + c->client_key + " -out " + dir + "/client.csr -subj /CN=gpuslice-test/O=test",
      "openssl x509 -req -in " + dir + "/client.csr -CA " + c->ca_cert + " -CAkey " + c->ca_key +
          " -CAcreateserial -days 2 -out " + c->client_cert,
  };
  for (const std::string& step : steps)
    if (std::system((step + q).c_str()) != 0) return false;
  return true;
}

std::string ReadFileForTest(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? *text : "";
}

}  // namespace gs::kube::testing
