#include "src/scheduler/webhook.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "src/kube/base64.h"
#include "src/scheduler/hami_format.h"
#include "src/scheduler/pod_spec.h"

namespace gs::scheduler {
namespace {

using nlohmann::json;

constexpr const char* kDecisionAnnotations[] = {hami::kAssignedNode,     hami::kAssignedTime, hami::kDevicesToAllocate,
                                                hami::kDevicesAllocated, hami::kBindTime,     hami::kBindPhase};

// RFC 6901: '~' and '/' in a reference token escaped.
std::string PointerToken(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

bool AsksForGpus(const json& pod, const PodSpecOptions& o) {
  if (!pod.contains("spec") || !pod["spec"].is_object()) return false;
  for (const char* list : {"initContainers", "containers"}) {
    auto it = pod["spec"].find(list);
    if (it == pod["spec"].end() || !it->is_array()) continue;
    for (const json& c : *it) {
      if (!c.is_object() || !c.contains("resources") || !c["resources"].is_object()) continue;
      for (const char* kind : {"limits", "requests"}) {
        auto r = c["resources"].find(kind);
        if (r == c["resources"].end() || !r->is_object()) continue;
        for (const std::string* name : {&o.count_name, &o.memory_name, &o.memory_percent_name, &o.cores_name})
          if (r->contains(*name)) return true;
      }
    }
  }
  return false;
}

// HAMi's admission default: a container asking for gpumem, gpumem-percentage or
// gpucores without a card count gets default_gpu_num cards. Without that resource
// kubelet would not call the device plugin's Allocate for it at all, and the container
// would get no card and no limits. Added to limits and to requests (extended resources
// must have both equal, and kube-scheduler counts requests).
void DefaultCardCount(const json& pod, const PodSpecOptions& o, json* patch) {
  if (o.default_gpu_num <= 0) return;
  const std::string count = std::to_string(o.default_gpu_num);
  for (const char* list : {"initContainers", "containers"}) {
    auto it = pod["spec"].find(list);
    if (it == pod["spec"].end() || !it->is_array()) continue;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& c = (*it)[i];
      if (!c.is_object() || !c.contains("resources") || !c["resources"].is_object()) continue;
      const json& res = c["resources"];
      bool fraction = false, card = false;
      for (const char* kind : {"limits", "requests"}) {
        auto r = res.find(kind);
        if (r == res.end() || !r->is_object()) continue;
        card |= r->contains(o.count_name);
        for (const std::string* name : {&o.memory_name, &o.memory_percent_name, &o.cores_name})
          fraction |= r->contains(*name);
      }
      if (!fraction || card) continue;
      std::string base = std::string("/spec/") + list + "/" + std::to_string(i) + "/resources/";
      for (const char* kind : {"limits", "requests"}) {
        auto r = res.find(kind);
        if (r != res.end() && r->is_object())
          patch->push_back({{"op", "add"}, {"path", base + kind + "/" + PointerToken(o.count_name)}, {"value", count}});
        else
          patch->push_back({{"op", "add"}, {"path", base + kind}, {"value", {{o.count_name, count}}}});
      }
    }
  }
}

const json* Annotations(const json& pod) {
  if (!pod.is_object() || !pod.contains("metadata") || !pod["metadata"].is_object()) return nullptr;
  auto it = pod["metadata"].find("annotations");
  return it != pod["metadata"].end() && it->is_object() ? &*it : nullptr;
}

std::string Reply(const json& request_review, const std::string& uid, const json& patch, const std::string& warning) {
  json response = {{"uid", uid}, {"allowed", true}};
  if (!patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = kube::Base64Encode(patch.dump());
  }
  if (!warning.empty()) response["warnings"] = json::array({"gpuslice webhook: " + warning});
  std::string api_version = "admission.k8s.io/v1";
  if (request_review.is_object() && request_review.contains("apiVersion") && request_review["apiVersion"].is_string())
    api_version = request_review["apiVersion"].get<std::string>();
  return json{{"apiVersion", api_version}, {"kind", "AdmissionReview"}, {"response", response}}.dump();
}

}  // namespace

std::string AnnotationPointer(std::string_view key) {
  return "/metadata/annotations/" + PointerToken(key);
}

std::string MutatePodReview(std::string_view text, const WebhookOptions& options) {
  json review = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (review.is_discarded() || !review.is_object()) return Reply(nullptr, "", json::array(), "the review is not JSON");
  if (!review.contains("request") || !review["request"].is_object())
    return Reply(review, "", json::array(), "the review has no request");
  const json& request = review["request"];
  std::string uid = StringField(request, "uid");
  if (uid.empty()) return Reply(review, "", json::array(), "the review's request has no uid");
  std::string kind = request.contains("kind") ? StringField(request["kind"], "kind") : "";
  std::string sub = StringField(request, "subResource");
  std::string operation = StringField(request, "operation");
  if (kind != "Pod" || !sub.empty() || (operation != "CREATE" && operation != "UPDATE"))
    return Reply(review, uid, json::array(), "");  // not ours to change
  if (!request.contains("object") || !request["object"].is_object())
    return Reply(review, uid, json::array(), "the review has no pod object; left unchanged");
  const json& pod = request["object"];

  json patch = json::array();
  if (operation == "CREATE" && AsksForGpus(pod, options.resources)) {
    std::string current;
    if (pod.contains("spec") && pod["spec"].is_object() && pod["spec"].contains("schedulerName") &&
        pod["spec"]["schedulerName"].is_string())
      current = pod["spec"]["schedulerName"].get<std::string>();
    // HAMi's pod specs name its scheduler, `hami-scheduler`: they mean the GPU scheduler,
    // which here is gpuslice's (a cluster moving from HAMi has no other by that name).
    bool ours_to_name = current.empty() || current == "default-scheduler" || current == "hami-scheduler";
    if (pod.contains("spec") && pod["spec"].is_object() && ours_to_name)
      patch.push_back({{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", options.scheduler_name}});
    if (pod.contains("spec") && pod["spec"].is_object()) DefaultCardCount(pod, options.resources, &patch);
  }

  bool trusted = false;
  if (operation == "UPDATE" && request.contains("userInfo") && request["userInfo"].is_object()) {
    std::string user = StringField(request["userInfo"], "username");
    trusted =
        std::find(options.trusted_users.begin(), options.trusted_users.end(), user) != options.trusted_users.end();
  }
  if (!trusted) {
    const json* now = Annotations(pod);
    const json* before = nullptr;
    if (operation == "UPDATE" && request.contains("oldObject")) before = Annotations(request["oldObject"]);
    bool map_added = false;
    for (const char* key : kDecisionAnnotations) {
      bool has_now = now != nullptr && now->contains(key);
      bool had = before != nullptr && before->contains(key);
      if (had && (!has_now || (*now)[key] != (*before)[key])) {
        if (now == nullptr && !map_added) {  // the update dropped every annotation
          patch.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", json::object()}});
          map_added = true;
        }
        patch.push_back({{"op", "add"}, {"path", AnnotationPointer(key)}, {"value", (*before)[key]}});
      } else if (!had && has_now) {
        patch.push_back({{"op", "remove"}, {"path", AnnotationPointer(key)}});
      }
    }
  }
  return Reply(review, uid, patch, "");
}

}  // namespace gs::scheduler
