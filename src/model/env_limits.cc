#include "src/model/env_limits.h"

#include <map>

#include "src/common/contract.h"
#include "src/common/quantity.h"

namespace gs::model {
namespace {

// Shown in messages: a value as the user wrote it, cut short and without control bytes.
std::string Shown(const std::string& v) {
  std::string out;
  for (char ch : v.substr(0, 64)) out += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
  return "\"" + out + (v.size() > 64 ? "...\"" : "\"");
}

Status Bad(const std::string& key, const std::string& value, const std::string& why) {
  return InvalidArgument(key + "=" + Shown(value) + " " + why);
}

// -2 for the unsuffixed name, i for "<name>_<i>", -1 for anything else.
int IndexOf(const std::string& key, const std::string& name) {
  if (key == name) return -2;
  if (key.size() <= name.size() + 1 || key.size() > name.size() + 4 || key.compare(0, name.size(), name) != 0 ||
      key[name.size()] != '_')
    return -1;
  int i = 0;
  for (size_t k = name.size() + 1; k < key.size(); ++k) {
    if (key[k] < '0' || key[k] > '9') return -1;
    i = i * 10 + (key[k] - '0');
  }
  return i;
}

}  // namespace

StatusOr<Allocation> AllocationFromEnvironment(const std::vector<std::string>& env,
                                               const std::vector<DeviceGrant>& cards, int best_priority) {
  std::map<std::string, std::string> vars;
  for (const auto& kv : env) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  Allocation a;
  a.devices = cards;
  for (auto& d : a.devices) d.memory_limit = 0, d.sm_share = 0;
  a.priority = best_priority;
  a.card_best_priority = best_priority;
  const std::string memory = contract::kMemoryLimit, sm = contract::kSmLimit;
  // Unsuffixed first, so that a card's own limit overrides it whatever the order.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [key, value] : vars) {
      int m = IndexOf(key, memory), s = IndexOf(key, sm);
      if (m == -1 && s == -1) continue;
      int index = m != -1 ? m : s;
      if ((index == -2) != (pass == 0)) continue;
      if (m != -1) {
        uint64_t bytes = 0;
        if (!ParseByteQuantity(value.c_str(), &bytes))
          return Bad(key, value, "is not a size (e.g. 4g, 4096m, 4294967296)");
        for (size_t i = 0; i < a.devices.size(); ++i)
          if (index == -2 || static_cast<size_t>(index) == i) a.devices[i].memory_limit = bytes;
      } else {
        uint64_t share = 0;
        if (!ParseUnsigned(value.c_str(), &share) || share > 100)
          return Bad(key, value, "is not a percentage of the card's SMs (0 to 100)");
        for (size_t i = 0; i < a.devices.size(); ++i)
          if (index == -2 || static_cast<size_t>(index) == i) a.devices[i].sm_share = static_cast<unsigned>(share);
      }
    }
  }
  if (auto it = vars.find(contract::kCorePolicy);
      it != vars.end() && !contract::ParseCorePolicy(it->second.c_str(), &a.core_policy))
    return Bad(it->first, it->second, "is not default, force or disable");
  if (auto it = vars.find(contract::kPriority); it != vars.end()) {
    uint64_t p = 0;
    if (!ParseUnsigned(it->second.c_str(), &p) || p > static_cast<uint64_t>(contract::kWorstPriority))
      return Bad(it->first, it->second,
                 "is not a priority (" + std::to_string(best_priority) + " = highest here, up to " +
                     std::to_string(contract::kWorstPriority) + ")");
    if (p < static_cast<uint64_t>(best_priority))
      return Bad(it->first, it->second,
                 "asks for more than the best priority granted here, " + std::to_string(best_priority) +
                     " (other tenants of the card would not believe it)");
    a.priority = static_cast<int>(p);
  }
  if (auto it = vars.find(contract::kOversubscribe); it != vars.end()) {
    const std::string& v = it->second;
    if (v == "true" || v == "1")
      a.oversubscribe = true;
    else if (v == "false" || v == "0" || v.empty())
      a.oversubscribe = false;
    else
      return Bad(it->first, v, "is not true, false, 1 or 0");
  }
  return a;
}

}  // namespace gs::model
