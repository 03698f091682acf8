#include "src/model/container_edits.h"

#include <utility>

#include "src/common/contract.h"
#include "src/common/quantity.h"

namespace gs::model {

std::string FormatMemoryLimit(uint64_t bytes) {
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "m";
  return std::to_string(bytes);
}

std::map<std::string, std::string> LimitVariables(const Allocation& a, const std::string& region_path,
                                                  const std::string& cards_dir) {
  std::map<std::string, std::string> env;
  for (size_t i = 0; i < a.devices.size(); ++i) {
    const DeviceGrant& d = a.devices[i];
    if (d.memory_limit) env["CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i)] = FormatMemoryLimit(d.memory_limit);
    if (d.sm_share > 0 && d.sm_share < 100)
      env["CUDA_DEVICE_SM_LIMIT_" + std::to_string(i)] = std::to_string(d.sm_share);
    // Binds these limits to the card itself, not to its position: a container that
    // reorders CUDA_VISIBLE_DEVICES cannot move a card under another card's limits.
    if (!d.uuid.empty()) env[std::string(contract::kDeviceUuid) + "_" + std::to_string(i)] = d.uuid;
    if (d.card_entry >= 0)
      env[std::string(contract::kCardEntry) + "_" + std::to_string(i)] = std::to_string(d.card_entry);
  }
  if (!region_path.empty()) env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = region_path;
  if (!cards_dir.empty()) env["GPUSLICE_CARDS_DIR"] = cards_dir;
  env["CUDA_OVERSUBSCRIBE"] = a.oversubscribe ? "true" : "false";
  env["CUDA_TASK_PRIORITY"] = std::to_string(a.priority);
  env[contract::kCardBestPriority] = std::to_string(a.card_best_priority);
  env["GPU_CORE_UTILIZATION_POLICY"] = contract::CorePolicyName(a.core_policy);
  return env;
}

std::string LimitsFileText(const Allocation& a, const std::string& region_path, const std::string& cards_dir,
                           const std::string& comment) {
  std::string text = "# " + comment + "\n";
  for (const auto& [k, v] : LimitVariables(a, region_path, cards_dir)) text += k + "=" + v + "\n";
  return text;
}

std::vector<DeviceGrant> GrantsInLimitsFile(const std::string& text) {
  const std::string memory_key = std::string(contract::kMemoryLimit) + "_";
  const std::string sm_key = std::string(contract::kSmLimit) + "_";
  const std::string uuid_key = std::string(contract::kDeviceUuid) + "_";
  // Only what the agent writes: an index is at most kMaxDevices - 1 in decimal.
  auto index_after = [](const std::string& key, const std::string& prefix) {
    if (key.size() <= prefix.size() || key.size() > prefix.size() + 2 || key.compare(0, prefix.size(), prefix) != 0)
      return -1;
    int i = 0;
    for (size_t k = prefix.size(); k < key.size(); ++k) {
      if (key[k] < '0' || key[k] > '9') return -1;
      i = i * 10 + (key[k] - '0');
    }
    return i < contract::kMaxDevices ? i : -1;
  };
  std::map<int, DeviceGrant> by_index;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (int i = index_after(key, uuid_key); i >= 0) {
      by_index[i].uuid = value;
    } else if (int m = index_after(key, memory_key); m >= 0) {
      uint64_t bytes = 0;
      if (ParseByteQuantity(value.c_str(), &bytes)) by_index[m].memory_limit = bytes;
    } else if (int c = index_after(key, sm_key); c >= 0) {
      unsigned share = 0;
      bool digits = !value.empty() && value.size() <= 3;
      for (char ch : value) {
        digits &= ch >= '0' && ch <= '9';
        share = share * 10 + static_cast<unsigned>(ch - '0');
      }
      if (digits) by_index[c].sm_share = share;
    }
  }
  std::vector<DeviceGrant> grants;
  for (auto& [i, g] : by_index)
    if (!g.uuid.empty()) grants.push_back(std::move(g));
  return grants;
}

std::string DevRoot(const std::string& driver_root) {
  return driver_root == "/" ? "/dev" : driver_root + "/dev";
}

std::vector<DeviceNode> DeviceNodes(const std::vector<unsigned>& minors, const std::set<std::string>& capabilities,
                                    const std::string& dev_root) {
  std::vector<DeviceNode> nodes;
  for (unsigned minor : minors) {
    std::string name = "nvidia" + std::to_string(minor);
    nodes.push_back({"/dev/" + name, dev_root + "/" + name, "rw"});
  }
  const bool compute = capabilities.count("compute") > 0, display = capabilities.count("display") > 0;
  for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}) {
    std::string n = name;
    if (n.rfind("nvidia-uvm", 0) == 0 && !compute) continue;
    if (n == "nvidia-modeset" && !display) continue;
    nodes.push_back({"/dev/" + n, dev_root + "/" + n, "rw"});
  }
  return nodes;
}

std::vector<Mount> EnforcerMounts(const std::string& enforcer_host_path, const std::string& enforcer_container_path,
                                  const std::string& preload_file_host_path) {
  return {{enforcer_host_path, enforcer_container_path, true}, {preload_file_host_path, "/etc/ld.so.preload", true}};
}

std::vector<Mount> SliceMounts(const EditOptions& o) {
  std::vector<Mount> mounts;
  if (!o.limits_file_host_path.empty()) mounts.push_back({o.limits_file_host_path, contract::kLimitsFile, true});
  if (!o.region_host_dir.empty()) mounts.push_back({o.region_host_dir, o.region_container_dir, false});
  if (!o.cards_host_dir.empty()) mounts.push_back({o.cards_host_dir, o.cards_container_dir, false});
  return mounts;
}

ContainerEdits ToContainerEdits(const Allocation& a, const EditOptions& o) {
  ContainerEdits e;
  std::string uuids;
  for (const auto& d : a.devices) uuids += (uuids.empty() ? "" : ",") + d.uuid;
  if (o.standalone) {
    e.env = LimitVariables(a, o.region_host_dir.empty() ? "" : o.region_host_dir + "/region", o.cards_host_dir);
    e.env["CUDA_VISIBLE_DEVICES"] = uuids;
    // A program may set its own CUDA_VISIBLE_DEVICES: the file binds the limits to the
    // cards themselves, as the limits file does in a container.
    if (!o.limits_file_host_path.empty()) e.env[contract::kEnvRunLimitsFile] = o.limits_file_host_path;
    e.env["LD_PRELOAD"] = o.enforcer_host_path + (o.existing_ld_preload.empty() ? "" : ":" + o.existing_ld_preload);
    return e;
  }
  e.env = LimitVariables(a, o.region_container_dir + "/region", o.cards_host_dir.empty() ? "" : o.cards_container_dir);
  e.env["NVIDIA_VISIBLE_DEVICES"] = uuids.empty() ? "void" : uuids;
  if (o.log_level >= 0) e.env[contract::kLogLevel] = std::to_string(o.log_level);
  std::vector<unsigned> minors;
  for (const auto& d : a.devices) minors.push_back(d.minor);
  e.devices = DeviceNodes(minors, o.capabilities, o.dev_root);
  e.mounts = EnforcerMounts(o.enforcer_host_path, o.enforcer_container_path, o.preload_file_host_path);
  for (auto& m : SliceMounts(o)) e.mounts.push_back(std::move(m));
  // The marker the OCI hook gives devices by: what the container was allocated, in a form
  // only the runtime can produce (kDeviceMarkerDir in the header).
  for (const auto& d : a.devices)
    if (!d.uuid.empty()) e.mounts.push_back({kDeviceMarkerSource, std::string(kDeviceMarkerDir) + "/" + d.uuid, true});
  return e;
}

}  // namespace gs::model
