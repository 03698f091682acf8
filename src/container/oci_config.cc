#include "src/container/oci_config.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "src/common/contract.h"
#include "src/model/container_edits.h"

namespace gs::container {
namespace {

// Lexically clean, without a trailing slash: "/a/./b/../c/" -> "/a/c".
std::string Clean(const std::string& path) {
  std::string p = std::filesystem::path(path).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::vector<std::string> MarkerDevices(const nlohmann::json& mounts) {
  std::vector<std::string> out;
  if (!mounts.is_array()) return out;
  const std::string root = std::string(model::kDeviceMarkerDir) + "/";
  for (const auto& m : mounts) {
    if (!m.is_object() || !m.contains("source") || !m["source"].is_string() || !m.contains("destination") ||
        !m["destination"].is_string())
      continue;
    // Only /dev/null: an image's VOLUME becomes a mount too, but never of /dev/null.
    if (Clean(m["source"].get<std::string>()) != model::kDeviceMarkerSource) continue;
    std::string dest = Clean(m["destination"].get<std::string>());
    if (dest.rfind(root, 0) != 0) continue;
    std::string name = dest.substr(root.size());
    if (name.empty() || name.find('/') != std::string::npos) continue;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

// Whether a mount's destination is `path` (lexically).
bool Mounts(const nlohmann::json& mounts, const std::string& path) {
  if (!mounts.is_array()) return false;
  for (const auto& m : mounts)
    if (m.is_object() && m.contains("destination") && m["destination"].is_string() &&
        Clean(m["destination"].get<std::string>()) == path)
      return true;
  return false;
}

bool HasSysAdmin(const nlohmann::json& list) {
  if (!list.is_array()) return false;
  for (const auto& c : list)
    if (c.is_string() && c.get<std::string>() == "CAP_SYS_ADMIN") return true;
  return false;
}

// Runtime spec >= 1.0.0: process.capabilities.bounding; 1.0.0-rc1..rc4: one plain list.
// Only the bounding set: a container started privileged has it there, whoever its user is.
bool Privileged(const nlohmann::json& process) {
  if (!process.is_object() || !process.contains("capabilities")) return false;
  const auto& caps = process["capabilities"];
  if (caps.is_array()) return HasSysAdmin(caps);
  return caps.is_object() && caps.contains("bounding") && HasSysAdmin(caps["bounding"]);
}

// The minors of the GPU device nodes the runtime gives the container ("linux"."devices":
// /dev/nvidia<N>, a character device of the NVIDIA major), in config order, without
// duplicates; what CDI or --device put there.
std::vector<unsigned> GpuMinors(const nlohmann::json& linux_section) {
  std::vector<unsigned> out;
  if (!linux_section.is_object() || !linux_section.contains("devices") || !linux_section["devices"].is_array())
    return out;
  for (const auto& d : linux_section["devices"]) {
    if (!d.is_object() || !d.contains("path") || !d["path"].is_string()) continue;
    const std::string path = d["path"].get<std::string>();
    const std::string prefix = "/dev/nvidia";
    if (path.size() <= prefix.size() || path.size() > prefix.size() + 3 ||
        path.compare(0, prefix.size(), prefix) != 0 ||
        path.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
      continue;
    if (d.contains("type") && d["type"] != "c") continue;
    if (d.contains("major") && (!d["major"].is_number_integer() || d["major"].get<int64_t>() != model::kNvidiaMajor))
      continue;
    unsigned minor = static_cast<unsigned>(std::stoul(path.substr(prefix.size())));
    if (std::find(out.begin(), out.end(), minor) == out.end()) out.push_back(minor);
  }
  return out;
}

}  // namespace

StatusOr<ContainerConfig> ParseContainerConfig(const std::string& text, const std::string& bundle) {
  const std::string where = bundle + "/config.json";
  ContainerConfig c;
  try {
    auto cfg = nlohmann::json::parse(text);
    if (!cfg.is_object() || !cfg.contains("root") || !cfg["root"].is_object() || !cfg["root"].contains("path") ||
        !cfg["root"]["path"].is_string() || cfg["root"]["path"].get<std::string>().empty())
      return InvalidArgument(where + ": no \"root\".\"path\"");
    std::string root = cfg["root"]["path"].get<std::string>();
    c.rootfs = root[0] == '/' ? root : bundle + "/" + root;
    if (cfg.contains("process") && cfg["process"].is_object()) {
      const auto& process = cfg["process"];
      if (process.contains("env")) {
        if (!process["env"].is_array()) return InvalidArgument(where + ": \"process\".\"env\" is not a list");
        for (const auto& e : process["env"]) {
          if (!e.is_string()) return InvalidArgument(where + ": an entry of \"process\".\"env\" is not a string");
          std::string kv = e.get<std::string>();
          c.env.push_back(kv);
          // The last definition wins, as it does for the process.
          if (kv.rfind("NVIDIA_VISIBLE_DEVICES=", 0) == 0) {
            c.visible = kv.substr(23);
            c.visible_set = true;
          }
          if (kv.rfind("NVIDIA_DRIVER_CAPABILITIES=", 0) == 0) c.capabilities = kv.substr(27);
        }
      }
      c.privileged = Privileged(process);
    }
    if (cfg.contains("linux")) c.gpu_minors = GpuMinors(cfg["linux"]);
    if (cfg.contains("mounts")) {
      c.marker_devices = MarkerDevices(cfg["mounts"]);
      c.limits_mounted = Mounts(cfg["mounts"], contract::kLimitsFile);
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(where + ": " + e.what());
  }
  return c;
}

}  // namespace gs::container
