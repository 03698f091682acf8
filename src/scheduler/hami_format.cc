#include "src/scheduler/hami_format.h"

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

Status ApplyRequestAnnotations(const Annotations& annos, PodRequest* r) {
  r->use_types = CommaList(annos, kUseType);
  r->nouse_types = CommaList(annos, kNoUseType);
  r->use_uuids = CommaList(annos, kUseUuid);
  r->nouse_uuids = CommaList(annos, kNoUseUuid);
  auto numa = annos.find(kNumaBind);
  // HAMi ignores a value ParseBool rejects; so do we.
  r->numa_bind = numa != annos.end() && ParseGoBool(numa->second).value_or(false);
  for (auto [key, out] : {std::pair{kGpuPolicy, &r->gpu_policy}, std::pair{kNodePolicy, &r->node_policy}}) {
    auto it = annos.find(key);
    if (it == annos.end()) continue;
    // HAMi takes a comma chain ("binpack,numa", "topology-aware", "mutex"); the first
    // binpack or spread in it is the one that orders cards and nodes here.
    bool found = false;
    for (std::string_view token : Split(it->second, ',')) {
      auto p = ParsePolicy(Trim(token));
      if (p.ok()) {
        *out = *p;
        found = true;
        break;
      }
    }
    if (!found && !Trim(it->second).empty())
      return InvalidArgument(std::string("annotation ") + key + " '" + it->second +
                             "': names neither binpack nor spread");
  }
  return Status::Ok();
}

}  // namespace gs::scheduler::hami
