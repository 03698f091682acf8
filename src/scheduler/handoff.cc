#include "src/scheduler/handoff.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "src/scheduler/pod_spec.h"

namespace gs::scheduler {
namespace {

using nlohmann::json;

std::string SortedList(std::vector<std::string> items) {
  std::sort(items.begin(), items.end());
  std::string out;
  for (const auto& s : items) out += s + ",";
  return out;
}

// Index lists are kept ascending and distinct already (request.h).
std::string IndexList(const std::vector<int>& indexes) {
  std::string out;
  for (int i : indexes) out += std::to_string(i) + ",";
  return out;
}

const std::string* StringAt(const json& j, const char* a, const char* b) {
  auto x = j.find(a);
  if (x == j.end() || !x->is_object()) return nullptr;
  auto y = x->find(b);
  return y != x->end() && y->is_string() ? &y->get_ref<const std::string&>() : nullptr;
}

int CardsOf(const std::vector<DeviceShare>& entry) {
  return static_cast<int>(entry.size());
}

}  // namespace

std::string RequestSignature(const PodRequest& r) {
  std::string s;
  for (const auto& c : r.containers)
    s += std::to_string(c.gpus) + "/" + std::to_string(c.memory_mib) + "/" + std::to_string(c.memory_percent) + "/" +
         std::to_string(c.cores) + ";";
  s += "|t+" + SortedList(r.use_types) + "|t-" + SortedList(r.nouse_types) + "|u+" + SortedList(r.use_uuids) + "|u-" +
       SortedList(r.nouse_uuids) + "|i+" + IndexList(r.use_indexes) + "|i-" + IndexList(r.nouse_indexes) +
       (r.numa_bind ? "|numa" : "");
  return s;
}

int PendingPod::next_container() const {
  for (size_t i = 0; i < to_allocate.size(); ++i)
    if (!to_allocate[i].empty()) return static_cast<int>(i);
  return -1;
}

StatusOr<std::optional<PendingPod>> PendingPodFromJson(const json& pod, const std::string& node,
                                                       const PodSpecOptions& options) {
  using Result = std::optional<PendingPod>;
  if (!pod.is_object()) return InvalidArgument("pod: not a JSON object");
  auto annos = PodAnnotations(pod);
  if (!annos.ok()) return annos.status();
  auto at = [&](const char* key) -> const std::string* {
    auto it = annos->find(key);
    return it == annos->end() ? nullptr : &it->second;
  };
  const std::string* assigned = at(hami::kAssignedNode);
  const std::string* phase = at(hami::kBindPhase);
  const std::string* bound = StringAt(pod, "spec", "nodeName");
  // Decision annotations count only on a pod bound where they say (HAMi #3041: a user
  // may write them on a pod of their own).
  if (assigned == nullptr || *assigned != node || bound == nullptr || *bound != node) return Result();
  if (phase == nullptr || *phase != "allocating") return Result();
  if (pod.contains("metadata") && pod["metadata"].contains("deletionTimestamp")) return Result();
  const std::string* pod_phase = StringAt(pod, "status", "phase");
  if (pod_phase != nullptr && (*pod_phase == "Succeeded" || *pod_phase == "Failed")) return Result();

  PendingPod p;
  const std::string* uid = StringAt(pod, "metadata", "uid");
  const std::string* name = StringAt(pod, "metadata", "name");
  const std::string* ns = StringAt(pod, "metadata", "namespace");
  const std::string* rv = StringAt(pod, "metadata", "resourceVersion");
  if (uid == nullptr || name == nullptr || rv == nullptr)
    return InvalidArgument("pod: metadata.uid, name or resourceVersion missing");
  p.uid = *uid;
  p.name = *name;
  p.namespace_name = ns != nullptr ? *ns : "default";
  p.resource_version = *rv;
  std::string who = "pod " + p.namespace_name + "/" + p.name;
  if (const std::string* t = at(hami::kBindTime)) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(t->data(), t->data() + t->size(), v);
    if (ec == std::errc() && end == t->data() + t->size()) p.bind_time = v;
  }
  auto request = PodRequestFromJson(pod, options);
  if (!request.ok()) return InvalidArgument(who + ": " + request.status().message());
  p.signature = RequestSignature(*request);

  const std::string* to = at(hami::kDevicesToAllocate);
  const std::string* all = at(hami::kDevicesAllocated);
  if (to == nullptr) return Result();
  auto left = hami::DecodePodDevices(*to);
  if (!left.ok())
    return InvalidArgument(who + " annotation " + hami::kDevicesToAllocate + ": " + left.status().message());
  p.to_allocate = std::move(*left);
  if (p.next_container() < 0) return Result();
  if (all != nullptr) {
    auto decided = hami::DecodePodDevices(*all);
    if (!decided.ok())
      return InvalidArgument(who + " annotation " + hami::kDevicesAllocated + ": " + decided.status().message());
    for (size_t i = 0; i < decided->size() && i < p.to_allocate.size(); ++i)
      p.started |= !(*decided)[i].empty() && p.to_allocate[i].empty();
  }
  return Result(std::move(p));
}

StatusOr<Claim> ChooseClaim(const std::vector<PendingPod>& pods, int cards) {
  // Rule 1: the pod kubelet is in the middle of; rule 2: the oldest bind, then the name.
  auto better = [&](size_t a, size_t b) {
    const PendingPod &x = pods[a], &y = pods[b];
    if (x.started != y.started) return x.started;
    if (x.bind_time != y.bind_time) return x.bind_time < y.bind_time;
    return std::tie(x.namespace_name, x.name) < std::tie(y.namespace_name, y.name);
  };
  std::optional<size_t> best;
  for (size_t i = 0; i < pods.size(); ++i) {
    int next = pods[i].next_container();
    if (next < 0 || CardsOf(pods[i].to_allocate[static_cast<size_t>(next)]) != cards) continue;
    if (!best || better(i, *best)) best = i;
  }
  if (!best) {
    std::string waiting;
    for (const auto& p : pods) {
      int next = p.next_container();
      if (next < 0) continue;
      waiting += (waiting.empty() ? "" : ", ") + p.namespace_name + "/" + p.name + " (" +
                 std::to_string(CardsOf(p.to_allocate[static_cast<size_t>(next)])) + ")";
    }
    return NotFound("no pod bound to this node waits for " + std::to_string(cards) +
                    " card(s); waiting: " + (waiting.empty() ? "none" : waiting));
  }
  const PendingPod& p = pods[*best];
  Claim c;
  c.pod = *best;
  c.container = static_cast<size_t>(p.next_container());
  c.cards = p.to_allocate[c.container];
  PodDecision rest;
  rest.containers = p.to_allocate;
  rest.containers[c.container].clear();
  c.patch[hami::kDevicesToAllocate] = hami::EncodePodDevices(rest);
  bool last = std::all_of(rest.containers.begin(), rest.containers.end(), [](const auto& e) { return e.empty(); });
  if (last) c.patch[hami::kBindPhase] = "success";
  return c;
}

std::optional<std::string> Confusable(const std::vector<PendingPod>& pending, const PodRequest& request) {
  // Every container's card count, not only the first's: a pod's later containers are
  // claimed while kubelet is in the middle of it (rule 1), and a node agent whose copy of
  // that pod is a moment behind its own claim would see no pod in the middle, and could
  // give the container another pod's entry with the same count.
  std::vector<int> counts;
  for (const auto& c : request.containers)
    if (c.gpus > 0) counts.push_back(c.gpus);
  if (counts.empty()) return std::nullopt;
  std::string signature = RequestSignature(request);
  for (const auto& p : pending) {
    if (p.uid == request.uid || p.signature == signature) continue;
    for (const auto& entry : p.to_allocate)
      if (!entry.empty() && std::find(counts.begin(), counts.end(), CardsOf(entry)) != counts.end())
        return p.namespace_name + "/" + p.name;
  }
  return std::nullopt;
}

}  // namespace gs::scheduler
