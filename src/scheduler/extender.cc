#include "src/scheduler/extender.h"

#include <mutex>
#include <nlohmann/json.hpp>

#include "src/scheduler/pod_spec.h"

namespace gs::scheduler {
namespace {

using nlohmann::json;

thread_local FitScratch t_scratch;

// Appends `s` as a JSON string (quotes, backslashes and control characters escaped).
void AppendJsonString(const std::string& s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (c < 0x20) {
      *out += "\\u00";
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

std::string FilterError(const std::string& message) {
  return json{{"NodeNames", nullptr}, {"FailedNodes", json::object()}, {"Error", message}}.dump();
}

// ExtenderArgs -> the pod and the node names.
Status ParseArgs(std::string_view body, json* pod, std::vector<std::string>* names) {
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("ExtenderArgs: not a JSON object");
  auto p = doc.find("Pod");
  if (p == doc.end() || !p->is_object()) return InvalidArgument("ExtenderArgs: no \"Pod\" object");
  *pod = std::move(*p);
  auto n = doc.find("NodeNames");
  if (n == doc.end() || n->is_null())
    return InvalidArgument("ExtenderArgs: no \"NodeNames\" (configure the extender with nodeCacheCapable: true)");
  if (!n->is_array()) return InvalidArgument("ExtenderArgs: \"NodeNames\" is not an array");
  names->clear();
  names->reserve(n->size());
  for (const json& v : *n) {
    if (!v.is_string()) return InvalidArgument("ExtenderArgs: a \"NodeNames\" entry is not a string");
    names->push_back(v.get<std::string>());
  }
  return Status::Ok();
}

}  // namespace

Extender::Extender(ExtenderOptions options, KubeBinder* binder) : options_(std::move(options)), binder_(binder) {
  if (!options_.now_unix_seconds) options_.now_unix_seconds = [] { return int64_t{0}; };
}

void Extender::Remember(const PodRequest& r) {
  if (r.uid.empty()) return;
  std::lock_guard<std::mutex> lock(seen_mu_);
  if (seen_.insert_or_assign(r.uid, r).second) seen_order_.push_back(r.uid);
  while (seen_order_.size() > options_.pod_cache_size) {
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
}

std::string Extender::Filter(std::string_view body) {
  json pod;
  std::vector<std::string> names;
  Status s = ParseArgs(body, &pod, &names);
  if (!s.ok()) return FilterError(s.message());
  auto request = PodRequestFromJson(pod);
  if (!request.ok()) return FilterError(request.status().message());
  json out = json::object();
  if (!request->wants_gpus()) {
    out["NodeNames"] = names;
    out["FailedNodes"] = json::object();
    out["Error"] = "";
    return out.dump();
  }
  Remember(*request);
  FilterResult r;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    r = scheduler::Filter(ledger_, *request, names, options_.defaults, &t_scratch);
  }
  // Written directly: a json object of 5000 entries costs more than the placement.
  std::string reply = "{\"NodeNames\":[";
  reply.reserve(names.size() * 24 + r.failed.size() * 160);
  for (size_t k = 0; k < r.feasible.size(); ++k) {
    if (k) reply += ',';
    AppendJsonString(names[r.feasible[k]], &reply);
  }
  reply += "],\"FailedNodes\":{";
  for (size_t k = 0; k < r.failed.size(); ++k) {
    if (k) reply += ',';
    AppendJsonString(names[r.failed[k].first], &reply);
    reply += ':';
    AppendJsonString(r.failed[k].second, &reply);
  }
  reply += "},\"Error\":\"\"}";
  return reply;
}

std::string Extender::Prioritize(std::string_view body) {
  json pod;
  std::vector<std::string> names;
  if (!ParseArgs(body, &pod, &names).ok()) return "[]";
  auto request = PodRequestFromJson(pod);
  if (!request.ok()) return "[]";
  std::vector<int> scores(names.size(), 0);
  if (request->wants_gpus()) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    scores = scheduler::Prioritize(ledger_, *request, names, options_.defaults, &t_scratch);
  }
  std::string reply = "[";
  reply.reserve(names.size() * 40);
  for (size_t i = 0; i < names.size(); ++i) {
    reply += i ? ",{\"Host\":" : "{\"Host\":";
    AppendJsonString(names[i], &reply);
    reply += ",\"Score\":" + std::to_string(scores[i]) + "}";
  }
  return reply + "]";
}

StatusOr<PodRequest> Extender::RequestForBind(const std::string& uid, const std::string& ns, const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(seen_mu_);
    auto it = seen_.find(uid);
    if (it != seen_.end()) return it->second;
  }
  if (binder_ == nullptr) return NotFound("pod " + ns + "/" + name + " was not seen by filter");
  auto text = binder_->GetPod(ns, name);
  if (!text.ok()) return text.status();
  json pod = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (pod.is_discarded()) return InvalidArgument("pod " + ns + "/" + name + " from the API: not JSON");
  auto r = PodRequestFromJson(pod);
  if (!r.ok()) return r.status();
  if (r->uid != uid) return FailedPrecondition("pod " + ns + "/" + name + " has UID " + r->uid + ", bind asked " + uid);
  return r;
}

std::string Extender::Bind(std::string_view body) {
  auto result = [](const std::string& error) { return json{{"Error", error}}.dump(); };
  json args = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded() || !args.is_object()) return result("ExtenderBindingArgs: not a JSON object");
  std::string fields[4];
  const char* keys[4] = {"PodName", "PodNamespace", "PodUID", "Node"};
  for (int i = 0; i < 4; ++i) {
    auto it = args.find(keys[i]);
    if (it == args.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
      return result(std::string("ExtenderBindingArgs: missing \"") + keys[i] + "\"");
    fields[i] = it->get<std::string>();
  }
  const std::string &name = fields[0], &ns = fields[1], &uid = fields[2], &node = fields[3];
  auto request = RequestForBind(uid, ns, name);
  if (!request.ok()) return result("bind " + ns + "/" + name + ": " + request.status().message());

  PodDecision decision;
  decision.node = node;
  if (request->wants_gpus()) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    const LedgerEntry* held = ledger_.FindPod(uid);
    if (held != nullptr && held->decision.node == node) {
      decision = held->decision;  // a retried bind: keep what was reserved
    } else {
      if (held != nullptr) ledger_.Release(uid);  // a new node for the same pod: start over
      auto d = Decide(ledger_, *request, node, options_.defaults, &t_scratch);
      if (!d.ok()) return result("bind " + ns + "/" + name + ": " + d.status().message());
      Status s = ledger_.Reserve(uid, *d);
      if (!s.ok()) return result("bind " + ns + "/" + name + ": " + s.message());
      decision = std::move(*d);
    }
  }
  auto undo = [&](const Status& why) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    ledger_.Release(uid);
    return result("bind " + ns + "/" + name + " to " + node + ": " + why.message());
  };
  if (binder_ == nullptr) return undo(Unavailable("no Kubernetes API client"));
  if (request->wants_gpus()) {
    Status s = binder_->AnnotatePod(ns, name, hami::DecisionAnnotations(decision, options_.now_unix_seconds()));
    if (!s.ok()) return undo(s);
  }
  Status s = binder_->BindPod(ns, name, uid, node);
  if (!s.ok()) return undo(s);
  if (request->wants_gpus()) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    (void)ledger_.Commit(uid);
  }
  return result("");
}

Status Extender::UpsertNode(NodeInventory node) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  return ledger_.UpsertNode(std::move(node));
}

void Extender::RemoveNode(const std::string& name) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  ledger_.RemoveNode(name);
}

bool Extender::ReleasePod(const std::string& uid) {
  {
    std::lock_guard<std::mutex> lock(seen_mu_);
    seen_.erase(uid);
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  return ledger_.Release(uid);
}

RebuildReport Extender::RebuildFromPods(const std::vector<std::string>& pods_json) {
  std::vector<LedgerRecord> records;
  RebuildReport bad;
  for (const std::string& text : pods_json) {
    json pod = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (pod.is_discarded() || !pod.is_object()) {
      bad.refused.push_back("a pod that is not JSON");
      continue;
    }
    std::string uid = pod.contains("metadata") ? pod["metadata"].value("uid", "") : "";
    auto annos = PodAnnotations(pod);
    if (!annos.ok()) {
      bad.refused.push_back("pod " + uid + ": " + annos.status().message());
      continue;
    }
    auto r = hami::RecordFromAnnotations(uid, *annos);
    if (!r.ok()) {
      bad.refused.push_back(r.status().message());
      continue;
    }
    if (!r->has_value()) continue;
    // Only a pod actually bound where its annotation says counts: annotations alone can
    // be written by anyone who can edit the pod (HAMi's #3041).
    std::string bound = pod.contains("spec") && pod["spec"].is_object() ? pod["spec"].value("nodeName", "") : "";
    if (bound != (*r)->decision.node) {
      bad.refused.push_back("pod " + uid + ": hami.io/vgpu-node '" + (*r)->decision.node + "' but bound to '" + bound + "'");
      continue;
    }
    records.push_back(std::move(**r));
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  RebuildReport report = ledger_.Rebuild(records);
  report.refused.insert(report.refused.begin(), bad.refused.begin(), bad.refused.end());
  return report;
}

Status Extender::CheckConsistency() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return ledger_.CheckConsistency();
}

size_t Extender::pod_count() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return ledger_.pod_count();
}

}  // namespace gs::scheduler
