#include "src/kube/informer.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_set>

namespace gs::kube {
namespace {

using nlohmann::json;

std::string Field(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  auto v = m->find(key);
  return v != m->end() && v->is_string() ? v->get<std::string>() : "";
}

std::string Key(const json& object) {
  std::string ns = Field(object, "namespace");
  return ns.empty() ? Field(object, "name") : ns + "/" + Field(object, "name");
}

}  // namespace

Informer::Informer(Client* client, InformerOptions options, InformerHandler handler)
    : client_(client), options_(std::move(options)), handler_(std::move(handler)) {}

bool Informer::Sleep(std::stop_token stop, std::chrono::milliseconds d) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock<std::mutex> lock(mu);
  return !cv.wait_for(lock, stop, d, [] { return false; }) && !stop.stop_requested();
}

Status Informer::ListAll(std::stop_token stop, std::vector<json>* items, std::string* resource_version) {
  ListOptions o;
  o.label_selector = options_.label_selector;
  o.field_selector = options_.field_selector;
  o.limit = options_.page_size;
  items->clear();
  resource_version->clear();
  do {
    if (stop.stop_requested()) return Unavailable("stopped");
    auto page = client_->List(options_.path, o);
    if (!page.ok()) return page.status();
    json& p = *page;
    if (!p.is_object() || !p.contains("items") || !(p["items"].is_array() || p["items"].is_null()))
      return Internal("LIST " + options_.path + ": the reply has no items");
    if (p["items"].is_array())
      for (json& item : p["items"]) items->push_back(std::move(item));
    std::string rv = Field(p, "resourceVersion");
    if (resource_version->empty()) *resource_version = rv;
    o.continue_token = Field(p, "continue");
  } while (!o.continue_token.empty());
  return Status::Ok();
}

void Informer::Replace(const std::vector<json>& items) {
  std::unordered_set<std::string> present;
  for (const json& item : items) {
    std::string key = Key(item);
    present.insert(key);
    Known now{Field(item, "uid"), Field(item, "resourceVersion")};
    auto it = known_.find(key);
    if (it == known_.end()) {
      known_.emplace(key, now);
      if (handler_.on_add) handler_.on_add(item);
    } else if (it->second.uid != now.uid) {  // deleted and created again while we were away
      Known old = it->second;
      it->second = now;
      json gone = {
          {"metadata", {{"name", Field(item, "name")}, {"uid", old.uid}, {"resourceVersion", old.resource_version}}}};
      if (!Field(item, "namespace").empty()) gone["metadata"]["namespace"] = Field(item, "namespace");
      if (handler_.on_delete) handler_.on_delete(gone);
      if (handler_.on_add) handler_.on_add(item);
    } else if (it->second.resource_version != now.resource_version) {
      it->second = now;
      if (handler_.on_update) handler_.on_update(item);
    }
  }
  for (auto it = known_.begin(); it != known_.end();) {
    if (present.count(it->first)) {
      ++it;
      continue;
    }
    json gone = {{"metadata", {{"uid", it->second.uid}, {"resourceVersion", it->second.resource_version}}}};
    size_t slash = it->first.find('/');
    if (slash == std::string::npos) {
      gone["metadata"]["name"] = it->first;
    } else {
      gone["metadata"]["namespace"] = it->first.substr(0, slash);
      gone["metadata"]["name"] = it->first.substr(slash + 1);
    }
    it = known_.erase(it);
    if (handler_.on_delete) handler_.on_delete(gone);
  }
}

Status Informer::OnEvent(std::string_view type, const json& object) {
  std::string rv = Field(object, "resourceVersion");
  if (type == "BOOKMARK") {
    if (!rv.empty()) resource_version_ = rv;
    return Status::Ok();
  }
  std::string key = Key(object);
  if (key.empty()) return Internal("WATCH " + options_.path + ": a " + std::string(type) + " event without a name");
  if (type == "ADDED" || type == "MODIFIED") {
    auto [it, added] = known_.insert_or_assign(key, Known{Field(object, "uid"), rv});
    (void)it;
    if (added) {
      if (handler_.on_add) handler_.on_add(object);
    } else if (handler_.on_update) {
      handler_.on_update(object);
    }
  } else if (type == "DELETED") {
    known_.erase(key);
    if (handler_.on_delete) handler_.on_delete(object);
  } else {
    return Internal("WATCH " + options_.path + ": unknown event type " + std::string(type));
  }
  if (!rv.empty()) resource_version_ = rv;
  return Status::Ok();
}

void Informer::Run(std::stop_token stop) {
  bool need_list = true;
  std::chrono::milliseconds backoff = options_.backoff_initial;
  auto fail = [&](const Status& s) {
    if (handler_.on_error) handler_.on_error(s);
    Sleep(stop, backoff);
    backoff = std::min(backoff * 2, options_.backoff_max);
  };
  while (!stop.stop_requested()) {
    if (need_list) {
      std::vector<json> items;
      std::string rv;
      if (handler_.on_list_started) handler_.on_list_started();
      Status s = ListAll(stop, &items, &rv);
      if (stop.stop_requested()) break;
      if (!s.ok()) {
        fail(s);
        continue;
      }
      Replace(items);
      resource_version_ = rv;
      need_list = false;
      ++lists_;
      if (!synced_.exchange(true) && handler_.on_synced) handler_.on_synced();
      if (handler_.on_listed) handler_.on_listed(items);
    }
    WatchOptions w;
    w.resource_version = resource_version_;
    w.timeout_seconds = options_.watch_timeout_seconds;
    w.label_selector = options_.label_selector;
    w.field_selector = options_.field_selector;
    ++watches_;
    auto started = std::chrono::steady_clock::now();
    Status s = client_->Watch(
        options_.path, w, [this](std::string_view type, const json& object) { return OnEvent(type, object); }, stop);
    if (stop.stop_requested()) break;
    if (s.ok()) {
      // The server ended the watch: resume from the last version seen. One that ends as
      // soon as it starts (a proxy's idle timeout of 0) must not turn into a busy loop.
      if (std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) Sleep(stop, options_.backoff_initial);
      backoff = options_.backoff_initial;
      continue;
    }
    if (s.code() == StatusCode::kOutOfRange) {  // our version is too old: list again
      need_list = true;
      if (handler_.on_error) handler_.on_error(s);
      continue;
    }
    fail(s);
  }
}

}  // namespace gs::kube
