#include "src/scheduler/extender.h"

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>

#include "src/scheduler/extender_args.h"
#include "src/scheduler/pod_spec.h"

namespace gs::scheduler {
namespace {

using nlohmann::json;

thread_local FitScratch t_scratch;
thread_local ExtenderArgs t_args;
thread_local FilterResult t_filter;  // reused: Filter over thousands of names allocates nothing

std::string FilterError(const std::string& message) {
  return json{{"NodeNames", nullptr}, {"FailedNodes", json::object()}, {"Error", message}}.dump();
}

// `raw` is valid JSON string content already (extender_args.h).
void AppendRawString(std::string_view raw, std::string* out) {
  out->push_back('"');
  out->append(raw);
  out->push_back('"');
}

}  // namespace

Extender::Extender(ExtenderOptions options, KubeBinder* binder)
    : options_(std::move(options)), binder_(binder), quotas_(options_.quota_keys), gate_(options_.pod_spec) {
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

StatusOr<std::shared_ptr<const PodRequest>> Extender::RequestFor(std::string_view pod_json) {
  {
    std::lock_guard<std::mutex> lock(memo_mu_);
    if (auto known = memo_.FindRequest(pod_json)) return known;
  }
  json pod = json::parse(pod_json.begin(), pod_json.end(), nullptr, /*allow_exceptions=*/false);
  if (pod.is_discarded()) return InvalidArgument("ExtenderArgs: \"Pod\" is not JSON");
  auto request = PodRequestFromJson(pod, options_.pod_spec);
  if (!request.ok()) return request.status();
  auto shared = std::make_shared<const PodRequest>(std::move(*request));
  std::lock_guard<std::mutex> lock(memo_mu_);
  memo_.PutRequest(pod_json, shared);
  return shared;
}

std::string Extender::Filter(std::string_view body) {
  ExtenderArgs& args = t_args;
  Status s = ParseExtenderArgs(body, &args);
  if (!s.ok()) return FilterError(s.message());
  auto found = RequestFor(args.pod);
  if (!found.ok()) return FilterError(found.status().message());
  const PodRequest& request = **found;
  std::string reply = "{\"NodeNames\":[";
  if (!request.wants_gpus()) {
    reply.reserve(args.raw.size() * 24 + 64);
    for (size_t i = 0; i < args.raw.size(); ++i) {
      if (i) reply += ',';
      AppendRawString(args.raw[i], &reply);
    }
    reply += "],\"FailedNodes\":{},\"Error\":\"\"}";
    return reply;
  }
  Remember(request);
  auto scores = std::make_shared<ScoreMemo>();
  FilterResult& r = t_filter;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    scheduler::Filter(ledger_, request, args.names, options_.defaults, &t_scratch, scores.get(), &r);
    if (!r.feasible.empty() && quotas_.Limited(request.namespace_name))
      ApplyQuota(request, args.names, scores.get(), &r);
  }
  {
    std::lock_guard<std::mutex> lock(memo_mu_);
    memo_.PutScores(request, std::move(scores));
  }
  std::vector<std::string> reasons(r.reasons.size());
  size_t reasons_size = 0;
  for (size_t k = 0; k < r.reasons.size(); ++k) {
    AppendJsonString(r.reasons[k], &reasons[k]);
    reasons_size = std::max(reasons_size, reasons[k].size());
  }
  reply.reserve(body.size() + r.failed.size() * (reasons_size + 2) + 64);
  for (size_t k = 0; k < r.feasible.size(); ++k) {
    if (k) reply += ',';
    AppendRawString(args.raw[static_cast<size_t>(r.feasible[k])], &reply);
  }
  reply += "],\"FailedNodes\":{";
  for (size_t k = 0; k < r.failed.size(); ++k) {
    if (k) reply += ',';
    AppendRawString(args.raw[static_cast<size_t>(r.failed[k].first)], &reply);
    reply += ':';
    reply += reasons[static_cast<size_t>(r.failed[k].second)];
  }
  reply += "},\"Error\":\"\"}";
  return reply;
}

void Extender::ApplyQuota(const PodRequest& request, const std::vector<std::string_view>& names, ScoreMemo* scores,
                          FilterResult* r) {
  // Memory asked in MiB, and cores, are the same wherever the pod goes; a percentage or
  // a whole card is the MiB of the cards chosen on each node.
  QuotaUsage fixed;
  bool same_everywhere = true;
  for (const ContainerRequest& c : request.containers) {
    if (c.gpus <= 0) continue;
    if (c.memory_mib <= 0) same_everywhere = false;
    fixed.memory_mib += int64_t{c.gpus} * c.memory_mib;
    fixed.cores += int64_t{c.gpus} * c.cores;
  }
  std::vector<int> feasible;
  feasible.reserve(r->feasible.size());
  for (int i : r->feasible) {
    QuotaUsage wanted = fixed;
    if (!same_everywhere) {
      auto d = Decide(ledger_, request, names[static_cast<size_t>(i)], options_.defaults, &t_scratch);
      if (d.ok()) wanted = UsageOf(*d);
    }
    std::string why = quotas_.Check(request.namespace_name, wanted);
    if (why.empty()) {
      feasible.push_back(i);
      continue;
    }
    auto known = std::find(r->reasons.begin(), r->reasons.end(), why);
    int k = static_cast<int>(known - r->reasons.begin());
    if (known == r->reasons.end()) r->reasons.push_back(std::move(why));
    r->failed.emplace_back(i, k);
    NodeView view = ledger_.Lookup(names[static_cast<size_t>(i)]);
    if (scores != nullptr && view.node != nullptr) scores->Put(view.slot, view.version, 0);
  }
  r->feasible.swap(feasible);
}

std::string Extender::Prioritize(std::string_view body) {
  ExtenderArgs& args = t_args;
  if (!ParseExtenderArgs(body, &args).ok()) return "[]";
  auto found = RequestFor(args.pod);
  if (!found.ok()) return "[]";
  const PodRequest& request = **found;
  std::vector<int> scores;
  if (request.wants_gpus()) {
    std::shared_ptr<const ScoreMemo> memo;
    {
      std::lock_guard<std::mutex> lock(memo_mu_);
      memo = memo_.FindScores(request);
    }
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      scores = scheduler::Prioritize(ledger_, request, args.names, options_.defaults, &t_scratch, memo.get());
    }
    // Not cached with the memo: who is pending changes with every bind and Allocate. A
    // node where bind would wait scores 0 and every other at least 1 (binpack scores an
    // empty node 0), so kube-scheduler prefers any node where bind goes through at once.
    std::vector<bool> wait = gate_.WouldWait(request, args.names);
    if (std::find(wait.begin(), wait.end(), true) != wait.end())
      for (size_t i = 0; i < scores.size(); ++i) scores[i] = wait[i] ? 0 : std::max(scores[i], 1);
  } else {
    scores.assign(args.names.size(), 0);
  }
  std::string reply = "[";
  reply.reserve(body.size() + args.raw.size() * 24 + 8);
  for (size_t i = 0; i < args.raw.size(); ++i) {
    reply += i ? ",{\"Host\":" : "{\"Host\":";
    AppendRawString(args.raw[i], &reply);
    reply += ",\"Score\":";
    int v = scores[i];  // 0..10
    if (v >= 10) reply += '1';
    reply += static_cast<char>('0' + v % 10);
    reply += '}';
  }
  reply += ']';
  return reply;
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
  auto r = PodRequestFromJson(pod, options_.pod_spec);
  if (!r.ok()) return r.status();
  if (r->uid != uid) return FailedPrecondition("pod " + ns + "/" + name + " has UID " + r->uid + ", bind asked " + uid);
  return r;
}

std::string Extender::Bind(std::string_view body) {
  auto result = [this](const std::string& error) {
    ++(error.empty() ? binds_ : bind_failures_);
    return json{{"Error", error}}.dump();
  };
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

  if (request->wants_gpus()) {
    Status clear = gate_.Enter(*request, node, options_.handoff_wait);
    if (!clear.ok()) return result("bind " + ns + "/" + name + " to " + node + ": " + clear.message());
  }
  PodDecision decision;
  decision.node = node;
  if (request->wants_gpus()) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    const LedgerEntry* held = ledger_.FindPod(uid);
    if (held != nullptr && held->decision.node == node) {
      decision = held->decision;  // a retried bind: keep what was reserved
    } else {
      if (held != nullptr) {  // a new node for the same pod: start over
        ledger_.Release(uid);
        quotas_.RemovePod(uid);
      }
      auto d = Decide(ledger_, *request, node, options_.defaults, &t_scratch);
      Status s = d.status();
      QuotaUsage usage;
      if (s.ok()) {
        usage = UsageOf(*d);
        std::string over = quotas_.Check(ns, usage);
        if (!over.empty()) s = FailedPrecondition(over);
      }
      if (s.ok()) s = ledger_.Reserve(uid, *d);
      if (!s.ok()) {
        gate_.Abandon(uid);
        return result("bind " + ns + "/" + name + ": " + s.message());
      }
      quotas_.AddPod(uid, ns, usage);
      decision = std::move(*d);
    }
  }
  auto undo = [&](const Status& why) {
    gate_.Abandon(uid);
    std::unique_lock<std::shared_mutex> lock(mu_);
    ledger_.Release(uid);
    quotas_.RemovePod(uid);
    return result("bind " + ns + "/" + name + " to " + node + ": " + why.message());
  };
  if (binder_ == nullptr) return undo(Unavailable("no Kubernetes API client"));
  hami::Annotations annotations;
  if (request->wants_gpus()) {
    int64_t now = options_.now_unix_seconds();
    gate_.Settle(uid, decision, now);
    annotations = hami::DecisionAnnotations(decision, now);
  }
  Status s = binder_->BindPod(ns, name, uid, node, annotations);
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
  gate_.Forget(uid);
  {
    std::lock_guard<std::mutex> lock(seen_mu_);
    seen_.erase(uid);
  }
  {
    std::lock_guard<std::mutex> lock(memo_mu_);
    memo_.Forget(uid);
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  quotas_.RemovePod(uid);
  return ledger_.Release(uid);
}

void Extender::SetQuota(const std::string& ns, const std::string& name, const QuotaLimits& limits) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  quotas_.SetQuota(ns, name, limits);
}

void Extender::RemoveQuota(const std::string& ns, const std::string& name) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  quotas_.RemoveQuota(ns, name);
}

QuotaUsage Extender::QuotaUsed(const std::string& ns) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return quotas_.Used(ns);
}

uint64_t Extender::ReservationMark() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return ledger_.entries_made();
}

std::vector<std::string> Extender::ReleaseAbsent(const std::unordered_set<std::string>& present, uint64_t mark) {
  std::vector<std::string> candidates;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    candidates = ledger_.PodsMadeBefore(mark);
  }
  std::vector<std::string> released;
  for (const auto& uid : candidates)
    if (!present.count(uid) && ReleasePod(uid)) released.push_back(uid);
  return released;
}

RebuildReport Extender::RebuildFromPods(const std::vector<std::string>& pods_json) {
  std::vector<LedgerRecord> records;
  std::unordered_map<std::string, std::string> namespaces;  // by UID
  RebuildReport bad;
  for (const std::string& text : pods_json) {
    json pod = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (pod.is_discarded() || !pod.is_object()) {
      bad.refused.push_back("a pod that is not JSON");
      continue;
    }
    std::string uid = pod.contains("metadata") ? StringField(pod["metadata"], "uid") : "";
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
    std::string bound = pod.contains("spec") ? StringField(pod["spec"], "nodeName") : "";
    if (bound != (*r)->decision.node) {
      bad.refused.push_back("pod " + uid + ": hami.io/vgpu-node '" + (*r)->decision.node + "' but bound to '" + bound +
                            "'");
      continue;
    }
    namespaces[uid] = StringField(pod["metadata"], "namespace");
    records.push_back(std::move(**r));
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  RebuildReport report = ledger_.Rebuild(records);
  quotas_.ClearPods();
  for (const LedgerRecord& rec : records)
    if (const LedgerEntry* held = ledger_.FindPod(rec.pod_uid))
      quotas_.AddPod(rec.pod_uid, namespaces[rec.pod_uid], UsageOf(held->decision));
  report.refused.insert(report.refused.begin(), bad.refused.begin(), bad.refused.end());
  return report;
}

Status Extender::CheckConsistency() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return ledger_.CheckConsistency();
}

Extender::Stats Extender::stats() const {
  Stats s;
  s.binds = binds_.load();
  s.bind_failures = bind_failures_.load();
  s.pods = pod_count();
  s.handoff = gate_.stats();
  return s;
}

size_t Extender::pod_count() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return ledger_.pod_count();
}

}  // namespace gs::scheduler
