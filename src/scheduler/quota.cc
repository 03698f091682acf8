#include "src/scheduler/quota.h"

#include <nlohmann/json.hpp>

#include "src/scheduler/pod_spec.h"

namespace gs::scheduler {
namespace {

using nlohmann::json;

std::string QuotaName(const std::string& ns, const std::string& name) {
  return ns + "/" + name;
}

}  // namespace

Status QuotaLimitsFromJson(const json& quota, const QuotaKeys& keys, QuotaLimits* limits) {
  *limits = QuotaLimits{};
  if (!quota.is_object()) return InvalidArgument("ResourceQuota: not a JSON object");
  std::string who = "ResourceQuota";
  if (quota.contains("metadata"))
    who += " " + StringField(quota["metadata"], "namespace") + "/" + StringField(quota["metadata"], "name");
  auto spec = quota.find("spec");
  if (spec == quota.end() || !spec->is_object()) return Status::Ok();
  auto hard = spec->find("hard");
  if (hard == spec->end() || !hard->is_object()) return Status::Ok();
  Status first = Status::Ok();
  auto read = [&](const std::string& key, std::optional<int64_t>* out) {
    auto it = hard->find(key);
    if (it == hard->end()) return;
    std::string text = it->is_string() ? it->get<std::string>() : it->is_number() ? it->dump() : "";
    auto v = ParseKubeQuantity(text);
    if (!v.ok() || *v < 0) {
      if (first.ok())
        first = InvalidArgument(who + ": spec.hard " + key + " '" + text +
                                "' is not a whole non-negative number (the key is not counted)");
      return;
    }
    *out = *v;
  };
  read(keys.memory, &limits->memory_mib);
  read(keys.cores, &limits->cores);
  if (limits->memory_mib && keys.memory_factor > 1) {
    int64_t factor = keys.memory_factor;
    limits->memory_mib = *limits->memory_mib > INT64_MAX / factor ? INT64_MAX : *limits->memory_mib * factor;
  }
  return first;
}

QuotaKeys QuotaKeysFor(const PodSpecOptions& options) {
  QuotaKeys keys;
  keys.memory = "limits." + options.memory_name;
  keys.cores = "limits." + options.cores_name;
  keys.memory_factor = std::max<int64_t>(1, options.memory_factor);
  return keys;
}

QuotaUsage UsageOf(const PodDecision& decision) {
  QuotaUsage u;
  for (const auto& shares : decision.containers)
    for (const DeviceShare& s : shares) {
      u.memory_mib += s.memory_mib;
      u.cores += s.cores;
    }
  return u;
}

void QuotaBook::SetQuota(const std::string& ns, const std::string& name, const QuotaLimits& limits) {
  if (limits.empty()) return RemoveQuota(ns, name);
  quotas_[ns][name] = limits;
}

void QuotaBook::RemoveQuota(const std::string& ns, const std::string& name) {
  auto it = quotas_.find(ns);
  if (it == quotas_.end()) return;
  it->second.erase(name);
  if (it->second.empty()) quotas_.erase(it);
}

bool QuotaBook::Limited(const std::string& ns) const {
  return quotas_.count(ns) != 0;
}

void QuotaBook::AddPod(const std::string& uid, const std::string& ns, const QuotaUsage& usage) {
  RemovePod(uid);
  pods_[uid] = Counted{ns, usage};
  QuotaUsage& u = used_[ns];
  u.memory_mib += usage.memory_mib;
  u.cores += usage.cores;
}

bool QuotaBook::RemovePod(const std::string& uid) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) return false;
  auto used = used_.find(it->second.ns);
  if (used != used_.end()) {
    used->second.memory_mib -= it->second.usage.memory_mib;
    used->second.cores -= it->second.usage.cores;
    if (used->second == QuotaUsage{}) used_.erase(used);
  }
  pods_.erase(it);
  return true;
}

void QuotaBook::ClearPods() {
  pods_.clear();
  used_.clear();
}

QuotaUsage QuotaBook::Used(const std::string& ns) const {
  auto it = used_.find(ns);
  return it == used_.end() ? QuotaUsage{} : it->second;
}

std::string QuotaBook::Check(const std::string& ns, const QuotaUsage& requested) const {
  auto quotas = quotas_.find(ns);
  if (quotas == quotas_.end()) return "";
  QuotaUsage used = Used(ns);
  struct Key {
    const std::string& name;
    std::optional<int64_t> QuotaLimits::*hard;
    int64_t used, requested;
  };
  const Key checks[] = {{keys_.memory, &QuotaLimits::memory_mib, used.memory_mib, requested.memory_mib},
                        {keys_.cores, &QuotaLimits::cores, used.cores, requested.cores}};
  for (const Key& k : checks) {
    if (k.requested <= 0) continue;  // a pod that adds nothing to a key is not held by it
    // The tightest quota setting this key decides; ties go to the first name.
    const std::string* tightest = nullptr;
    int64_t hard = 0;
    for (const auto& [name, limits] : quotas->second) {
      const std::optional<int64_t>& h = limits.*k.hard;
      if (h && (tightest == nullptr || *h < hard)) {
        tightest = &name;
        hard = *h;
      }
    }
    if (tightest != nullptr && k.used + k.requested > hard)
      return "ResourceQuota " + QuotaName(ns, *tightest) + ": " + k.name + " used " + std::to_string(k.used) +
             " + requested " + std::to_string(k.requested) + " > hard " + std::to_string(hard);
  }
  return "";
}

}  // namespace gs::scheduler
