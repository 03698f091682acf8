#include "src/scheduler/hami_format.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <type_traits>

namespace gs::scheduler::hami {
namespace {

using nlohmann::json;

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  int64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string> CommaList(const Annotations& a, const char* key) {
  std::vector<std::string> out;
  auto it = a.find(key);
  if (it == a.end()) return out;
  for (std::string_view part : Split(it->second, ','))
    if (!Trim(part).empty()) out.emplace_back(Trim(part));
  return out;
}

// A comma list of card indexes: decimal numbers as the register writes them (0, 1, ...;
// no sign, no leading zero), blanks around them and empty elements ignored. Returned
// ascending, each once.
StatusOr<std::vector<int>> IndexList(const Annotations& a, const char* key) {
  std::vector<int> out;
  auto it = a.find(key);
  if (it == a.end()) return out;
  for (std::string_view part : Split(it->second, ',')) {
    std::string_view t = Trim(part);
    if (t.empty()) continue;
    bool number = t.size() <= 9 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                  (t.size() == 1 || t[0] != '0');
    if (!number)
      return InvalidArgument(std::string("annotation ") + key + " '" + it->second + "': '" + std::string(t) +
                             "' is not a card index (0, 1, 2, ... as the node's " + kNodeRegister +
                             " numbers its cards)");
    out.push_back(static_cast<int>(*ParseInt(t)));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// One field of a register entry: absent means Go's zero value.
template <typename T>
Status Field(const json& dev, size_t i, const char* name, T* out) {
  auto it = dev.find(name);
  if (it == dev.end() || it->is_null()) return Status::Ok();
  std::string where = std::string(kNodeRegister) + ": device #" + std::to_string(i) + " field \"" + name + "\"";
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return InvalidArgument(where + ": want a string");
    *out = it->template get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return InvalidArgument(where + ": want true or false");
    *out = it->template get<bool>();
  } else {
    if (!it->is_number_integer()) return InvalidArgument(where + ": want an integer");
    *out = it->template get<T>();
  }
  return Status::Ok();
}

StatusOr<NodeInventory> DecodeLegacyRegister(const std::string& node_name, std::string_view text) {
  NodeInventory node;
  node.name = node_name;
  size_t i = 0;
  for (std::string_view entry : Split(text, ':')) {
    if (entry.empty()) continue;
    std::vector<std::string_view> f = Split(entry, ',');
    std::string where = std::string(kNodeRegister) + ": device #" + std::to_string(i);
    if (f.size() != 7 && f.size() != 9)
      return InvalidArgument(where + ": " + std::to_string(f.size()) + " fields, want 7 or 9");
    GpuDevice g;
    g.uuid = std::string(f[0]);
    auto count = ParseInt(f[1]), mem = ParseInt(f[2]), core = ParseInt(f[3]), numa = ParseInt(f[5]);
    if (!count) return InvalidArgument(where + " field count: not an integer");
    if (!mem) return InvalidArgument(where + " field devmem: not an integer");
    if (!core) return InvalidArgument(where + " field devcore: not an integer");
    if (!numa) return InvalidArgument(where + " field numa: not an integer");
    auto health = ParseGoBool(f[6]);
    if (!health) return InvalidArgument(where + " field health: want true or false");
    g.slots = static_cast<int>(*count);
    g.memory_mib = *mem;
    g.cores = static_cast<int>(*core);
    g.model = std::string(f[4]);
    g.numa = static_cast<int>(*numa);
    g.healthy = *health;
    if (f.size() == 9) {
      auto index = ParseInt(f[7]);
      if (!index) return InvalidArgument(where + " field index: not an integer");
      g.index = static_cast<int>(*index);
      if (f[8] != "hami-core" && !f[8].empty()) continue;  // MIG / MPS cards are not offered
    }
    node.gpus.push_back(std::move(g));
    ++i;
  }
  if (i == 0) return InvalidArgument(std::string(kNodeRegister) + ": no devices");
  GS_RETURN_IF_ERROR(ValidateNode(node));
  return node;
}

}  // namespace

std::optional<bool> ParseGoBool(std::string_view t) {
  if (t == "1" || t == "t" || t == "T" || t == "TRUE" || t == "true" || t == "True") return true;
  if (t == "0" || t == "f" || t == "F" || t == "FALSE" || t == "false" || t == "False") return false;
  return std::nullopt;
}

std::string EncodeNodeRegister(const std::vector<GpuDevice>& gpus) {
  // Go's encoding/json with omitempty, fields in DeviceInfo's order.
  std::string out = "[";
  for (size_t i = 0; i < gpus.size(); ++i) {
    const GpuDevice& g = gpus[i];
    std::string obj;
    auto add = [&](const char* key, const std::string& value_json) {
      obj += obj.empty() ? "{" : ",";
      obj += "\"";
      obj += key;
      obj += "\":" + value_json;
    };
    if (!g.uuid.empty()) add("id", json(g.uuid).dump());
    if (g.index != 0) add("index", std::to_string(g.index));
    if (g.slots != 0) add("count", std::to_string(g.slots));
    if (g.memory_mib != 0) add("devmem", std::to_string(g.memory_mib));
    if (g.cores != 0) add("devcore", std::to_string(g.cores));
    if (!g.model.empty()) add("type", json(g.model).dump());
    if (g.numa != 0) add("numa", std::to_string(g.numa));
    add("mode", "\"hami-core\"");
    if (g.healthy) add("health", "true");
    out += (i ? "," : "") + obj + "}";
  }
  return out + "]";
}

void ApplyDeviceCordon(std::string_view text, NodeInventory* node) {
  for (std::string_view part : Split(text, ',')) {
    std::string_view uuid = Trim(part);
    if (uuid.empty()) continue;
    for (GpuDevice& g : node->gpus)
      if (g.uuid == uuid) g.cordoned = true;
  }
}

StatusOr<NodeInventory> DecodeNodeRegister(const std::string& node_name, std::string_view text) {
  std::string_view t = Trim(text);
  if (t.empty()) return InvalidArgument(std::string(kNodeRegister) + " on node " + node_name + ": empty");
  if (t.front() != '[') return DecodeLegacyRegister(node_name, t);
  json doc = json::parse(t.begin(), t.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_array())
    return InvalidArgument(std::string(kNodeRegister) + " on node " + node_name + ": not a JSON array");
  NodeInventory node;
  node.name = node_name;
  for (size_t i = 0; i < doc.size(); ++i) {
    const json& d = doc[i];
    if (!d.is_object())
      return InvalidArgument(std::string(kNodeRegister) + ": device #" + std::to_string(i) + " is not an object");
    GpuDevice g;
    g.cores = 0;
    g.slots = 0;
    g.healthy = false;
    int64_t count = 0, mem = 0, core = 0, numa = 0, index = 0;
    std::string mode;
    GS_RETURN_IF_ERROR(Field(d, i, "id", &g.uuid));
    GS_RETURN_IF_ERROR(Field(d, i, "index", &index));
    GS_RETURN_IF_ERROR(Field(d, i, "count", &count));
    GS_RETURN_IF_ERROR(Field(d, i, "devmem", &mem));
    GS_RETURN_IF_ERROR(Field(d, i, "devcore", &core));
    GS_RETURN_IF_ERROR(Field(d, i, "type", &g.model));
    GS_RETURN_IF_ERROR(Field(d, i, "numa", &numa));
    GS_RETURN_IF_ERROR(Field(d, i, "mode", &mode));
    GS_RETURN_IF_ERROR(Field(d, i, "health", &g.healthy));
    if (!mode.empty() && mode != "hami-core") continue;  // MIG / MPS cards are not offered
    g.index = static_cast<int>(index);
    g.slots = static_cast<int>(count);
    g.memory_mib = mem;
    g.cores = static_cast<int>(core);
    g.numa = static_cast<int>(numa);
    node.gpus.push_back(std::move(g));
  }
  Status v = ValidateNode(node);
  if (!v.ok()) return InvalidArgument(std::string(kNodeRegister) + ": " + v.message());
  return node;
}

std::string EncodeRequestingHandshake(const std::string& date_time) {
  return "Requesting_" + date_time;
}

StatusOr<Handshake> DecodeHandshake(std::string_view text) {
  auto starts = [&](std::string_view p) { return text.substr(0, p.size()) == p; };
  Handshake h;
  if (starts("Requesting_")) {
    h.state = HandshakeState::kRequesting;
    h.time = std::string(text.substr(11));
  } else if (starts("Deleted_")) {
    h.state = HandshakeState::kDeleted;
    h.time = std::string(text.substr(8));
  } else if (starts("Reported")) {
    h.state = HandshakeState::kReported;
    h.time = std::string(Trim(text.substr(8)));
  } else {
    return InvalidArgument(std::string(kNodeHandshake) + " '" + std::string(text) +
                           "': want Requesting_<time>, Reported <time> or Deleted_<time>");
  }
  return h;
}

std::string EncodePodDevices(const PodDecision& decision) {
  std::string out;
  for (const auto& shares : decision.containers) {
    for (const DeviceShare& s : shares)
      out += s.uuid + "," + kDeviceType + "," + std::to_string(s.memory_mib) + "," + std::to_string(s.cores) + ":";
    out += ";";
  }
  return out;
}

StatusOr<std::vector<std::vector<DeviceShare>>> DecodePodDevices(std::string_view text) {
  std::vector<std::vector<DeviceShare>> out;
  if (text.empty()) return out;
  std::vector<std::string_view> containers = Split(text, ';');
  if (containers.back().empty()) containers.pop_back();  // the closing ";"
  for (size_t c = 0; c < containers.size(); ++c) {
    std::vector<DeviceShare> shares;
    for (std::string_view entry : Split(containers[c], ':')) {
      if (entry.empty()) continue;
      std::vector<std::string_view> f = Split(entry, ',');
      std::string where = "container #" + std::to_string(c) + " device '" + std::string(entry) + "'";
      if (f.size() < 4) return InvalidArgument(where + ": want uuid,type,memory,cores");
      auto mem = ParseInt(f[2]), cores = ParseInt(f[3]);
      if (f[0].empty()) return InvalidArgument(where + ": empty uuid");
      if (!mem || *mem < 0) return InvalidArgument(where + ": memory field is not a non-negative integer");
      if (!cores || *cores < 0 || *cores > 100) return InvalidArgument(where + ": cores field is not 0..100");
      shares.push_back(DeviceShare{std::string(f[0]), std::string(f[1]), *mem, static_cast<int>(*cores)});
    }
    out.push_back(std::move(shares));
  }
  return out;
}

Annotations DecisionAnnotations(const PodDecision& decision, int64_t now) {
  std::string devices = EncodePodDevices(decision);
  return {
      {kAssignedNode, decision.node}, {kAssignedTime, std::to_string(now)}, {kDevicesToAllocate, devices},
      {kDevicesAllocated, devices},   {kBindPhase, "allocating"},           {kBindTime, std::to_string(now)},
  };
}

StatusOr<std::optional<LedgerRecord>> RecordFromAnnotations(const std::string& pod_uid, const Annotations& annos) {
  auto node = annos.find(kAssignedNode);
  auto devices = annos.find(kDevicesAllocated);
  if (node == annos.end() || devices == annos.end()) return std::optional<LedgerRecord>();
  auto shares = DecodePodDevices(devices->second);
  if (!shares.ok())
    return InvalidArgument(std::string(kDevicesAllocated) + " on pod " + pod_uid + ": " + shares.status().message());
  LedgerRecord r;
  r.pod_uid = pod_uid;
  r.decision.node = node->second;
  r.decision.containers = std::move(*shares);
  return std::optional<LedgerRecord>(std::move(r));
}

void Refuse(PodRequest* r, const std::string& what) {
  if (!r->refused.empty()) r->refused += "; ";
  r->refused += what + " is not supported by gpuslice";
}

Status ApplyRequestAnnotations(const Annotations& annos, PodRequest* r) {
  r->use_types = CommaList(annos, kUseType);
  r->nouse_types = CommaList(annos, kNoUseType);
  r->use_uuids = CommaList(annos, kUseUuid);
  r->nouse_uuids = CommaList(annos, kNoUseUuid);
  GS_ASSIGN_OR_RETURN(r->use_indexes, IndexList(annos, kUseIndexes));
  GS_ASSIGN_OR_RETURN(r->nouse_indexes, IndexList(annos, kNoUseIndexes));
  auto numa = annos.find(kNumaBind);
  r->numa_bind = false;
  if (numa != annos.end()) {
    // HAMi drops a value Go's ParseBool rejects; here it refuses the pod instead of
    // placing it without the NUMA constraint it evidently asked for.
    auto on = ParseGoBool(numa->second);
    if (!on)
      return InvalidArgument(std::string("annotation ") + kNumaBind + " '" + numa->second +
                             "': want true or false (Go's ParseBool: 1, t, T, TRUE, true, True, 0, f, ...)");
    r->numa_bind = *on;
  }
  for (auto [key, out] : {std::pair{kGpuPolicy, &r->gpu_policy}, std::pair{kNodePolicy, &r->node_policy}}) {
    auto it = annos.find(key);
    if (it == annos.end()) continue;
    // HAMi takes a comma chain ("binpack,numa"); binpack and spread order cards and nodes
    // here (the first named wins). HAMi's other GPU policies are not implemented: mutex
    // (only idle cards), topology-aware (NVLink scores) and numa (a NUMA sort key).
    std::optional<Policy> first;
    for (std::string_view token : Split(it->second, ',')) {
      std::string_view t = Trim(token);
      if (t.empty()) continue;
      auto p = ParsePolicy(t);
      if (p.ok()) {
        if (!first) first = *p;
      } else if (std::string_view(key) == kGpuPolicy && (t == "mutex" || t == "topology-aware" || t == "numa")) {
        Refuse(r, std::string(key) + " '" + std::string(t) + "'");
      } else {
        return InvalidArgument(std::string("annotation ") + key + " '" + it->second + "': '" + std::string(t) +
                               "' is not a scheduler policy (binpack or spread)");
      }
    }
    if (first) *out = *first;
  }
  // Every card gpuslice offers is shared the hami-core way (MIG and MPS cards are not
  // offered), so a mode naming hami-core is met, as HAMi matches it (a substring).
  auto mode = annos.find(kVgpuMode);
  if (mode != annos.end() && mode->second.find("hami-core") == std::string::npos)
    Refuse(r, std::string(kVgpuMode) + " '" + mode->second + "'");
  if (annos.count(kDeviceScoringWeights)) Refuse(r, kDeviceScoringWeights);
  // Any other card constraint in HAMi's naming is one this code does not know: refused,
  // never placed as if it were absent.
  for (const auto& [key, value] : annos) {
    if (!StartsWith(key, "nvidia.com/use-") && !StartsWith(key, "nvidia.com/nouse-")) continue;
    if (key == kUseType || key == kNoUseType || key == kUseUuid || key == kNoUseUuid || key == kUseIndexes ||
        key == kNoUseIndexes)
      continue;
    Refuse(r, key);
  }
  return Status::Ok();
}

}  // namespace gs::scheduler::hami
