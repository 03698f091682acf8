#include "src/sim/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <tuple>

#include "src/common/quantity.h"
#include "src/sim/gpu_presets.h"
#include "src/sim/state.h"

namespace gs::sim {
namespace {

// Reads "MAJOR.MINOR" (or "MAJOR") of decimal numbers; returns how many it read, in order,
// and 0 when anything follows them.
int ParseMajorMinor(const std::string& text, unsigned* major, unsigned* minor) {
  const char* p = text.c_str();
  char* end = nullptr;
  errno = 0;
  unsigned long v = strtoul(p, &end, 10);
  if (end == p || errno != 0 || v > 0xFFFFFFFFul || text[0] == '-' || text[0] == '+') return 0;
  *major = static_cast<unsigned>(v);
  if (*end == 0) return 1;
  if (*end != '.') return 0;
  const char* q = end + 1;
  v = strtoul(q, &end, 10);
  if (end == q || errno != 0 || v > 0xFFFFFFFFul || *end != 0 || *q == '-' || *q == '+') return 0;
  *minor = static_cast<unsigned>(v);
  return 2;
}

// Deterministic UUIDs so a scenario always yields the same cards.
std::string MakeUuid(uint64_t seed) {
  uint64_t a = seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL, b = (a ^ (a >> 29)) * 0xBF58476D1CE4E5B9ULL;
  char buf[64];
  snprintf(buf, sizeof(buf), "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
           static_cast<unsigned>(a >> 16) & 0xFFFF, static_cast<unsigned>(a) & 0xFFFF, static_cast<unsigned>(b >> 48),
           static_cast<unsigned long long>(b & 0xFFFFFFFFFFFFULL));
  return buf;
}

Status ApplyPreset(const std::string& key, ScenarioGpu* g) {
  const GpuPreset* p = FindGpuPreset(key);
  if (p == nullptr) {
    std::string known;
    for (const auto& q : GpuPresets()) known += std::string(known.empty() ? "" : ", ") + q.key;
    return InvalidArgument("unknown GPU preset '" + key + "' (known: " + known + ")");
  }
  g->name = p->name;
  g->memory_bytes = p->memory_mib << 20;
  g->sm_count = p->sm_count;
  g->cc_major = p->cc_major;
  g->cc_minor = p->cc_minor;
  g->architecture = p->architecture;
  g->pci_device = p->pci_device;
  g->power_limit_w = p->power_limit_w;
  g->sm_clock_mhz = p->sm_clock_mhz;
  g->mem_clock_mhz = p->mem_clock_mhz;
  g->context_memory = p->context_mib << 20;
  g->multicast = p->multicast;
  return Status::Ok();
}

StatusOr<uint64_t> Bytes(const YAML::Node& n, const std::string& key) {
  std::string text = n.as<std::string>();
  uint64_t b = 0;
  if (!ParseByteQuantity(text.c_str(), &b)) return InvalidArgument(key + ": '" + text + "' is not a size (e.g. 80Gi)");
  return b;
}

StatusOr<double> Seconds(const YAML::Node& n, const std::string& key) {
  std::string text = n.as<std::string>();
  std::smatch m;
  static const std::regex re(R"(^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m)?\s*$)");
  if (!std::regex_match(text, m, re)) return InvalidArgument(key + ": '" + text + "' is not a duration (e.g. 5s)");
  // strtod, not stod: stod throws out_of_range for a number past a double's range.
  double v = std::strtod(m[1].str().c_str(), nullptr);
  if (m[2] == "ms") v /= 1000;
  if (m[2] == "m") v *= 60;
  if (!std::isfinite(v)) return InvalidArgument(key + ": '" + text + "' is too long a duration");
  return v;
}

Status AddGpus(const YAML::Node& item, const std::string& where, std::vector<ScenarioGpu>* out) {
  int count = 1;
  ScenarioGpu g;
  if (item.IsScalar()) {  // "2xH100-80GB" or "H100-80GB"
    std::string s = item.as<std::string>();
    std::smatch m;
    static const std::regex re(R"(^\s*(?:([0-9]+)\s*[xX]\s*)?([A-Za-z0-9._-]+)\s*$)");
    if (!std::regex_match(s, m, re)) return InvalidArgument(where + ": '" + s + "' is not COUNTxPRESET");
    if (m[1].matched) {
      // stoi throws out_of_range past INT_MAX; a count of more than 9 digits is out of range anyway.
      std::string digits = m[1];
      digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
      count = digits.size() > 9 ? -1 : digits.empty() ? 0 : std::stoi(digits);
    }
    GS_RETURN_IF_ERROR(ApplyPreset(m[2], &g));
  } else if (item.IsMap()) {
    for (auto it = item.begin(); it != item.end(); ++it) {
      std::string k = it->first.as<std::string>();
      static const char* kKeys[] = {"preset", "count",         "name",           "memory",     "sms",
                                    "uuid",   "pci_bus_id",    "numa",           "minor",      "compute_capability",
                                    "serial", "power_limit_w", "context_memory", "memory_info"};
      bool ok = false;
      for (const char* known : kKeys) ok |= k == known;
      if (!ok) return InvalidArgument(where + ": unknown key '" + k + "'");
    }
    if (item["preset"]) GS_RETURN_IF_ERROR(ApplyPreset(item["preset"].as<std::string>(), &g));
    if (item["count"]) count = item["count"].as<int>();
    if (item["name"]) g.name = item["name"].as<std::string>();
    if (item["memory"]) {
      auto b = Bytes(item["memory"], where + ".memory");
      if (!b.ok()) return b.status();
      g.memory_bytes = *b;
    }
    if (item["sms"]) g.sm_count = item["sms"].as<uint32_t>();
    if (item["uuid"]) g.uuid = item["uuid"].as<std::string>();
    if (item["pci_bus_id"]) g.pci_bus_id = item["pci_bus_id"].as<std::string>();
    if (item["serial"]) g.serial = item["serial"].as<std::string>();
    if (item["numa"]) {
      g.numa_node = item["numa"].as<int>();
      g.numa_set = true;
    }
    if (item["minor"]) {
      g.minor = item["minor"].as<uint32_t>();
      g.minor_set = true;
    }
    if (item["power_limit_w"]) g.power_limit_w = item["power_limit_w"].as<uint32_t>();
    if (item["context_memory"]) {
      auto b = Bytes(item["context_memory"], where + ".context_memory");
      if (!b.ok()) return b.status();
      g.context_memory = *b;
      g.context_memory_set = true;
    }
    if (item["memory_info"]) {
      std::string v = item["memory_info"].as<std::string>();
      if (v != "supported" && v != "not_supported")
        return InvalidArgument(where + ".memory_info: '" + v + "' is not supported or not_supported");
      g.memory_info_unsupported = v == "not_supported";
    }
    if (item["compute_capability"]) {
      std::string cc = item["compute_capability"].as<std::string>();
      if (ParseMajorMinor(cc, &g.cc_major, &g.cc_minor) != 2)
        return InvalidArgument(where + ".compute_capability: '" + cc + "' is not MAJOR.MINOR");
    }
    if (count > 1 && (item["uuid"] || item["pci_bus_id"] || item["minor"]))
      return InvalidArgument(where + ": uuid, pci_bus_id and minor need count 1");
  } else {
    return InvalidArgument(where + ": expected a preset string or a map");
  }
  if (g.name.empty()) return InvalidArgument(where + ": needs a preset or a name");
  if (g.memory_bytes == 0) return InvalidArgument(where + ": memory must be more than 0");
  if (g.sm_count == 0) return InvalidArgument(where + ": sms must be more than 0");
  if (count < 1 || count > sim::kMaxDevices)
    return InvalidArgument(where + ": count must be 1.." + std::to_string(sim::kMaxDevices));
  for (int i = 0; i < count; ++i) out->push_back(g);
  return Status::Ok();
}

}  // namespace

StatusOr<Scenario> ParseScenario(const std::string& yaml_text) {
  Scenario sc;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("scenario is not valid YAML: ") + e.what());
  }
  if (!root.IsMap()) return InvalidArgument("scenario must be a YAML map with a 'gpus' key");
  try {
    for (auto it = root.begin(); it != root.end(); ++it) {
      std::string k = it->first.as<std::string>();
      if (k != "gpus" && k != "driver_version" && k != "cuda_version" && k != "context_memory" && k != "faults" &&
          k != "sample_period_ms" && k != "timeslice_ms")
        return InvalidArgument("scenario: unknown key '" + k + "'");
    }
    if (root["driver_version"]) sc.driver_version = root["driver_version"].as<std::string>();
    if (root["cuda_version"]) {
      std::string v = root["cuda_version"].as<std::string>();
      unsigned major = 0, minor = 0;
      if (ParseMajorMinor(v, &major, &minor) < 1) return InvalidArgument("cuda_version: '" + v + "' is not X.Y");
      sc.cuda_version = static_cast<int>(major * 1000 + minor * 10);
    }
    if (root["context_memory"]) {
      auto b = Bytes(root["context_memory"], "context_memory");
      if (!b.ok()) return b.status();
      sc.context_memory = *b;
    }
    for (auto [key, value, lo, hi] : {std::tuple{"sample_period_ms", &sc.sample_period_ms, 10.0, 10000.0},
                                      std::tuple{"timeslice_ms", &sc.timeslice_ms, 0.05, 1000.0}}) {
      if (!root[key]) continue;
      *value = root[key].as<double>();
      if (!(*value >= lo && *value <= hi)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %s is outside %g..%g", key, root[key].as<std::string>().c_str(), lo, hi);
        return InvalidArgument(msg);
      }
    }
    const YAML::Node gpus = root["gpus"];
    if (!gpus) return InvalidArgument("scenario: 'gpus' is missing");
    if (gpus.IsScalar()) {  // "2xH100-80GB,1xT4"
      std::string s = gpus.as<std::string>();
      size_t start = 0;
      while (start <= s.size()) {
        size_t comma = s.find(',', start);
        std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        GS_RETURN_IF_ERROR(AddGpus(YAML::Node(part), "gpus", &sc.gpus));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (gpus.IsSequence()) {
      for (size_t i = 0; i < gpus.size(); ++i)
        GS_RETURN_IF_ERROR(AddGpus(gpus[i], "gpus[" + std::to_string(i) + "]", &sc.gpus));
    } else {
      return InvalidArgument("gpus: expected a list or a string like 2xH100-80GB");
    }
    if (sc.gpus.empty()) return InvalidArgument("gpus: no GPUs described");
    if (sc.gpus.size() > static_cast<size_t>(sim::kMaxDevices))
      return InvalidArgument("gpus: at most " + std::to_string(sim::kMaxDevices) + " GPUs per simulated node");
    for (size_t i = 0; i < sc.gpus.size(); ++i) {
      ScenarioGpu& g = sc.gpus[i];
      if (g.uuid.empty()) g.uuid = MakeUuid(i + 1);
      if (g.pci_bus_id.empty()) {
        char buf[32];
        snprintf(buf, sizeof(buf), "00000000:%02X:00.0", static_cast<unsigned>(0x18 + 0x10 * i));
        g.pci_bus_id = buf;
      }
      if (g.serial.empty()) g.serial = "13240" + std::to_string(1000000 + i);
      if (!g.minor_set) g.minor = static_cast<uint32_t>(i);
      // Like a two-socket server: the first half of the cards on NUMA node 0.
      if (!g.numa_set) g.numa_node = sc.gpus.size() > 1 && i >= sc.gpus.size() / 2 ? 1 : 0;
      // The top-level key overrides the presets' figures; a GPU's own key overrides both.
      if (sc.context_memory && !g.context_memory_set) g.context_memory = *sc.context_memory;
    }
    for (size_t i = 0; i < sc.gpus.size(); ++i)
      for (size_t j = 0; j < i; ++j) {
        if (sc.gpus[i].uuid == sc.gpus[j].uuid) return InvalidArgument("gpus: duplicate uuid " + sc.gpus[i].uuid);
        if (sc.gpus[i].minor == sc.gpus[j].minor)
          return InvalidArgument("gpus: duplicate minor number " + std::to_string(sc.gpus[i].minor));
      }
    if (const YAML::Node faults = root["faults"]) {
      if (!faults.IsSequence()) return InvalidArgument("faults: expected a list");
      for (size_t i = 0; i < faults.size(); ++i) {
        std::string where = "faults[" + std::to_string(i) + "]";
        const YAML::Node f = faults[i];
        ScenarioFault fault;
        if (!f["at"] || !f["gpu"]) return InvalidArgument(where + ": needs 'at' and 'gpu'");
        auto at = Seconds(f["at"], where + ".at");
        if (!at.ok()) return at.status();
        fault.at_seconds = *at;
        fault.gpu = f["gpu"].as<int>();
        if (fault.gpu < 0 || fault.gpu >= static_cast<int>(sc.gpus.size()))
          return InvalidArgument(where + ".gpu: no GPU " + std::to_string(fault.gpu));
        if (f["lost"] && f["lost"].as<bool>())
          fault.xid = 79;
        else if (f["xid"])
          fault.xid = f["xid"].as<uint64_t>();
        else
          return InvalidArgument(where + ": needs 'xid: N' or 'lost: true'");
        sc.faults.push_back(fault);
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("scenario: ") + e.what());
  }
  return sc;
}

}  // namespace gs::sim
