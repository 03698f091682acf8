#include "src/scheduler/kube_binder.h"

#include <nlohmann/json.hpp>

namespace gs::scheduler {
namespace {

using nlohmann::json;

bool SafeSegment(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find_first_of("/?#% ") == std::string::npos;
}

}  // namespace

StatusOr<std::string> PodPath(const std::string& ns, const std::string& name) {
  if (!SafeSegment(ns) || !SafeSegment(name)) return InvalidArgument("not a pod name: '" + ns + "/" + name + "'");
  return "/api/v1/namespaces/" + ns + "/pods/" + name;
}

ApiBinder::ApiBinder(kube::Client* client, std::chrono::milliseconds call_timeout)
    : client_(client), timeout_(call_timeout) {}

Status ApiBinder::BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                          const std::string& node, const hami::Annotations& annotations) {
  auto path = PodPath(ns, name);
  if (!path.ok()) return path.status();
  json meta = {{"name", name}, {"namespace", ns}, {"uid", uid}};
  if (!annotations.empty()) meta["annotations"] = annotations;
  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", meta},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  auto r = client_->Post(*path + "/binding", binding.dump(), timeout_);
  return r.ok() ? Status::Ok() : r.status();
}

StatusOr<std::string> ApiBinder::GetPod(const std::string& ns, const std::string& name) {
  auto path = PodPath(ns, name);
  if (!path.ok()) return path.status();
  auto r = client_->Get(*path, timeout_);
  if (!r.ok()) return r.status();
  return r->dump();
}

}  // namespace gs::scheduler
