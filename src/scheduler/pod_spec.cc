#include "src/scheduler/pod_spec.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace gs::scheduler {
namespace {

using nlohmann::json;

// Multiplies v by 10^exp10 * 2^exp2, failing on overflow or a fraction.
StatusOr<int64_t> Scale(__int128 mantissa, int decimals, int exp10, int exp2, std::string_view text) {
  auto bad = [&](const char* why) { return InvalidArgument("quantity '" + std::string(text) + "': " + why); };
  const __int128 kMax = INT64_MAX;
  int e = exp10 - decimals;
  for (; e > 0; --e) {
    mantissa *= 10;
    if (mantissa > kMax) return bad("too large");
  }
  for (int i = 0; i < exp2; ++i) {
    mantissa *= 2;
    if (mantissa > kMax) return bad("too large");
  }
  for (; e < 0; ++e) {
    if (mantissa % 10 != 0) return bad("not a whole number");
    mantissa /= 10;
  }
  // Unscaled digits are checked here too: 9223372036854775808 (negated by the caller)
  // would otherwise wrap to INT64_MIN (found by fuzz/quantity_fuzzer.cc).
  if (mantissa > kMax) return bad("too large");
  return static_cast<int64_t>(mantissa);
}

// One resource of a container: limits first, then requests; nullopt when absent.
StatusOr<std::optional<int64_t>> Resource(const json& container, const char* name, size_t index) {
  auto res = container.find("resources");
  if (res == container.end() || !res->is_object()) return std::optional<int64_t>();
  for (const char* kind : {"limits", "requests"}) {
    auto list = res->find(kind);
    if (list == res->end() || !list->is_object()) continue;
    auto q = list->find(name);
    if (q == list->end()) continue;
    std::string where = "container #" + std::to_string(index) + " " + kind + "[" + name + "]";
    if (q->is_number_integer()) {
      if (q->get<int64_t>() < 0) return InvalidArgument(where + ": negative");
      return std::optional<int64_t>(q->get<int64_t>());
    }
    if (!q->is_string()) return InvalidArgument(where + ": want a quantity string");
    auto v = ParseKubeQuantity(q->get_ref<const std::string&>());
    if (!v.ok()) return InvalidArgument(where + ": " + v.status().message());
    if (*v < 0) return InvalidArgument(where + ": negative");
    return std::optional<int64_t>(*v);
  }
  return std::optional<int64_t>();
}

StatusOr<ContainerRequest> ContainerFromJson(const json& c, size_t index, const PodSpecOptions& o) {
  if (!c.is_object()) return InvalidArgument("container #" + std::to_string(index) + ": not an object");
  const std::string where = "container #" + std::to_string(index) + " ";
  auto gpus = Resource(c, o.count_name.c_str(), index);
  auto mem = Resource(c, o.memory_name.c_str(), index);
  auto pct = Resource(c, o.memory_percent_name.c_str(), index);
  auto cores = Resource(c, o.cores_name.c_str(), index);
  for (const auto* r : {&gpus, &mem, &pct, &cores})
    if (!r->ok()) return r->status();
  ContainerRequest out;
  bool any_share = mem->has_value() || pct->has_value() || cores->has_value();
  if (gpus->has_value()) {
    if (**gpus > kMaxDefaultGpuNum)
      return InvalidArgument(where + o.count_name + " = " + std::to_string(**gpus) + ": more than " +
                             std::to_string(kMaxDefaultGpuNum));
    out.gpus = static_cast<int>(**gpus);
  } else if (any_share) {
    // HAMi's webhook adds defaultGPUNum cards; with 0 it adds none, and the container's
    // memory or cores would be ignored: refused rather than placed without them.
    if (o.default_gpu_num == 0)
      return InvalidArgument(where + "asks " +
                             (mem->has_value()   ? o.memory_name
                              : pct->has_value() ? o.memory_percent_name
                                                 : o.cores_name) +
                             " without " + o.count_name +
                             ", and the scheduler adds no card count (default GPU number 0)");
    out.gpus = o.default_gpu_num;
  }
  if (out.gpus == 0) return out;
  if (mem->has_value()) {
    if (**mem > INT64_MAX / o.memory_factor)
      return InvalidArgument(where + o.memory_name + " = " + std::to_string(**mem) + " units of " +
                             std::to_string(o.memory_factor) + " MiB: too large");
    out.memory_mib = **mem * o.memory_factor;
  }
  if (pct->has_value()) {
    if (**pct > 100)
      return InvalidArgument(where + o.memory_percent_name + " = " + std::to_string(**pct) + ": must be 0..100");
    out.memory_percent = static_cast<int>(**pct);  // 0 = unset, as in HAMi
  }
  if (out.memory_mib == 0 && out.memory_percent == 0) out.memory_mib = o.default_memory_mib;  // 0: the whole card
  if (cores->has_value()) {
    if (**cores > 100)
      return InvalidArgument(where + o.cores_name + " = " + std::to_string(**cores) + ": must be 0..100");
    out.cores = static_cast<int>(**cores);
  } else if (pct->has_value() ? **pct == 100 : !mem->has_value()) {
    out.cores = 100;  // a whole card asked: exclusive, as HAMi's webhook makes it
  } else {
    out.cores = o.default_cores;
  }
  return out;
}

// CUDA_TASK_PRIORITY values the node agent's grant allows a container to ask for itself:
// 1 (what it grants) or lower priorities, 2..999.
bool AllowedPriority(const std::string& v) {
  if (v.empty() || v.size() > 3 || !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return false;
  return std::stoi(v) >= 1;
}

// What a GPU container states in HAMi's terms that gpuslice does not implement. In HAMi
// a container's own env wins over its device plugin's (kubelet puts the pod's env last),
// so these take effect there; here the read-only limits file wins, and they would be
// dropped without a word:
//  - the priority resource (HAMi's webhook turns it into CUDA_TASK_PRIORITY);
//  - CUDA_DISABLE_CONTROL true (HAMi then runs the container without limits);
//  - GPU_CORE_UTILIZATION_POLICY disable (HAMi-core then ignores the compute share);
//  - CUDA_TASK_PRIORITY better than the 1 the node agent grants (0 is HAMi's high
//    priority; HAMi-core reads anything not a number as 0).
// Only literal values count: HAMi reads `value` alone, so valueFrom changes nothing there
// either. Lower priorities (2, 3, ...) and policy force are honoured: the limits file lets
// a container tighten.
void RefuseContainerExtras(const json& c, size_t index, PodRequest* r) {
  std::string of = " (container #" + std::to_string(index) + ")";
  auto res = c.find("resources");
  if (res != c.end() && res->is_object())
    for (const char* kind : {"limits", "requests"}) {
      auto list = res->find(kind);
      if (list != res->end() && list->is_object() && list->contains(hami::kResourcePriority)) {
        hami::Refuse(r, std::string(hami::kResourcePriority) + of);
        break;
      }
    }
  auto env = c.find("env");
  if (env == c.end() || !env->is_array()) return;
  for (const json& e : *env) {
    if (!e.is_object() || !e.contains("value")) continue;
    std::string name = StringField(e, "name"), value = StringField(e, "value");
    if (name == "CUDA_DISABLE_CONTROL" && hami::ParseGoBool(value).value_or(false))
      hami::Refuse(r, "CUDA_DISABLE_CONTROL=" + value + of);
    if (name == "GPU_CORE_UTILIZATION_POLICY" && (value == "disable" || value == "DISABLE"))
      hami::Refuse(r, "GPU_CORE_UTILIZATION_POLICY=" + value + of);
    if (name == "CUDA_TASK_PRIORITY" && !AllowedPriority(value)) hami::Refuse(r, "CUDA_TASK_PRIORITY=" + value + of);
  }
}

bool AlphaNumeric(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

// A DNS-1123 subdomain: dot-separated labels of [a-z0-9-], each starting and ending with
// [a-z0-9], 253 characters at most. "" when it is one, else why not.
std::string NotASubdomain(std::string_view domain) {
  if (domain.empty()) return "the domain before '/' is empty";
  if (domain.size() > 253) return "the domain is longer than 253 characters";
  size_t start = 0;
  while (start <= domain.size()) {
    size_t dot = domain.find('.', start);
    std::string_view label = domain.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty()) return "the domain has an empty label";
    for (char ch : label)
      if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-'))
        return std::string("the domain may hold only a-z, 0-9, '-' and '.', not '") + ch + "'";
    if (label.front() == '-' || label.back() == '-') return "a label of the domain starts or ends with '-'";
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return "";
}

}  // namespace

Status CheckExtendedResourceName(std::string_view name) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("'" + std::string(name) + "' is not a Kubernetes extended resource name (" + why +
                           "; want <domain>/<name>, e.g. example.com/vgpu)");
  };
  size_t slash = name.find('/');
  if (slash == std::string_view::npos) return bad("no domain");
  std::string_view domain = name.substr(0, slash), rest = name.substr(slash + 1);
  if (std::string why = NotASubdomain(domain); !why.empty()) return bad(why);
  if (name.find("kubernetes.io/") != std::string_view::npos)
    return bad("names in the kubernetes.io domain are Kubernetes' own");
  if (name.rfind("requests.", 0) == 0) return bad("'requests.' is the prefix of quota names");
  // Kubernetes checks "requests.<name>" as a qualified name for quotas.
  if (domain.size() + 9 > 253) return bad("the domain is longer than 244 characters");
  if (rest.empty()) return bad("the name after '/' is empty");
  if (rest.size() > 63) return bad("the name after '/' is longer than 63 characters");
  if (!AlphaNumeric(rest.front()) || !AlphaNumeric(rest.back()))
    return bad("the name after '/' must start and end with a letter or digit");
  for (char ch : rest)
    if (!AlphaNumeric(ch) && ch != '-' && ch != '_' && ch != '.')
      return bad(std::string("the name after '/' may hold only letters, digits, '-', '_' and '.', not '") + ch + "'");
  return Status::Ok();
}

StatusOr<int64_t> ParseKubeQuantity(std::string_view text) {
  auto bad = [&](const char* why) { return InvalidArgument("quantity '" + std::string(text) + "': " + why); };
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  __int128 mantissa = 0;
  int digits = 0, decimals = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    char ch = text[i];
    if (ch == '.' && !point) {
      point = true;
      continue;
    }
    if (ch < '0' || ch > '9') break;
    if (++digits > 30) return bad("too many digits");
    mantissa = mantissa * 10 + (ch - '0');
    if (point) ++decimals;
  }
  if (digits == 0) return bad("no number");
  std::string_view suffix = text.substr(i);
  int exp10 = 0, exp2 = 0;
  if (suffix.empty()) {
  } else if (suffix == "Ki")
    exp2 = 10;
  else if (suffix == "Mi")
    exp2 = 20;
  else if (suffix == "Gi")
    exp2 = 30;
  else if (suffix == "Ti")
    exp2 = 40;
  else if (suffix == "Pi")
    exp2 = 50;
  else if (suffix == "Ei")
    exp2 = 60;
  else if (suffix == "n")
    exp10 = -9;
  else if (suffix == "u")
    exp10 = -6;
  else if (suffix == "m")
    exp10 = -3;
  else if (suffix == "k")
    exp10 = 3;
  else if (suffix == "M")
    exp10 = 6;
  else if (suffix == "G")
    exp10 = 9;
  else if (suffix == "T")
    exp10 = 12;
  else if (suffix == "P")
    exp10 = 15;
  else if (suffix == "E")
    exp10 = 18;
  else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view e = suffix.substr(1);
    bool eneg = !e.empty() && e[0] == '-';
    if (!e.empty() && (e[0] == '-' || e[0] == '+')) e.remove_prefix(1);
    if (e.empty() || e.size() > 3) return bad("bad exponent");
    for (char ch : e) {
      if (ch < '0' || ch > '9') return bad("bad exponent");
      exp10 = exp10 * 10 + (ch - '0');
    }
    if (exp10 > 40) return bad("too large");
    if (eneg) exp10 = -exp10;
  } else {
    return bad("unknown suffix");
  }
  auto v = Scale(mantissa, decimals, exp10, exp2, text);
  if (!v.ok()) return v;
  return negative ? -*v : *v;
}

StatusOr<hami::Annotations> PodAnnotations(const json& pod) {
  hami::Annotations out;
  auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) return out;
  auto annos = meta->find("annotations");
  if (annos == meta->end() || annos->is_null()) return out;
  if (!annos->is_object()) return InvalidArgument("metadata.annotations: want an object");
  for (auto it = annos->begin(); it != annos->end(); ++it) {
    if (!it.value().is_string()) return InvalidArgument("metadata.annotations[" + it.key() + "]: want a string");
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

std::string StringField(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

StatusOr<PodRequest> PodRequestFromJson(const json& pod, const PodSpecOptions& options) {
  if (!pod.is_object()) return InvalidArgument("Pod: want a JSON object");
  PodRequest r;
  auto meta = pod.find("metadata");
  if (meta != pod.end() && meta->is_object()) {
    r.uid = StringField(*meta, "uid");
    r.name = StringField(*meta, "name");
    r.namespace_name = StringField(*meta, "namespace");
  }
  auto annos = PodAnnotations(pod);
  if (!annos.ok()) return annos.status();
  GS_RETURN_IF_ERROR(hami::ApplyRequestAnnotations(*annos, &r));
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return InvalidArgument("Pod " + r.name + ": no spec");
  size_t index = 0;
  for (const char* list : {"initContainers", "containers"}) {
    auto cs = spec->find(list);
    if (cs == spec->end() || cs->is_null()) continue;
    if (!cs->is_array()) return InvalidArgument(std::string("spec.") + list + ": want an array");
    for (const json& c : *cs) {
      auto cr = ContainerFromJson(c, index++, options);
      if (!cr.ok()) return InvalidArgument("Pod " + r.namespace_name + "/" + r.name + ": " + cr.status().message());
      if (std::string_view(list) == "initContainers" && cr->gpus > 0)
        return InvalidArgument("Pod " + r.namespace_name + "/" + r.name +
                               ": init containers asking for GPUs are not supported yet");
      if (cr->gpus > 0) RefuseContainerExtras(c, index - 1, &r);
      r.containers.push_back(*cr);
    }
  }
  GS_RETURN_IF_ERROR(ValidateRequest(r));
  return r;
}

}  // namespace gs::scheduler
