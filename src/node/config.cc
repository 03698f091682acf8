#include "src/node/config.h"

#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>

#include "src/common/file.h"
#include "src/common/flags.h"
#include "src/common/quantity.h"

namespace gs::node {

std::string Config::plugin_socket() const {
  return kubelet_dir + "/device-plugins/gpuslice.sock";
}
std::string Config::kubelet_socket() const {
  return kubelet_dir + "/device-plugins/kubelet.sock";
}
std::string Config::pod_resources_socket() const {
  return kubelet_dir + "/pod-resources/kubelet.sock";
}

namespace {

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Status CheckStrategies(const std::vector<std::string>& list) {
  if (list.empty()) return InvalidArgument("--device-list-strategy: give at least one of envvar, cdi-cri");
  for (const auto& s : list)
    if (s != "envvar" && s != "cdi-cri")
      return InvalidArgument("--device-list-strategy: '" + s + "' is not one of envvar, cdi-cri");
  return Status::Ok();
}

// Keys of the top level that a nodeConfig section may also set.
constexpr const char* kKeys[] = {"resourceName",
                                 "deviceSplitCount",
                                 "deviceMemoryScaling",
                                 "deviceCoresScaling",
                                 "failOnInitError",
                                 "enableLegacyPreferred",
                                 "driverRoot",
                                 "kubeletDir",
                                 "stateDir",
                                 "metricsAddr",
                                 "deviceListStrategy",
                                 "cdiKind",
                                 "cdiSpecDir",
                                 "packing",
                                 "ignoredXids",
                                 "healthyRecoverySeconds",
                                 "sweepSeconds",
                                 "cleanupGraceSeconds",
                                 "enforcerPath",
                                 "sharedDirSize",
                                 "memoryWatchdog",
                                 "requireEnforcer",
                                 "schedulerDecisions",
                                 "kubeconfig",
                                 "excludeDevices",
                                 "corePolicy",
                                 "disableCoreLimit",
                                 "enforcerLogLevel",
                                 "preConfiguredDeviceMemory",
                                 "gdrcopyEnabled",
                                 "gdsEnabled",
                                 "mofedEnabled"};

bool KnownKey(const std::string& k) {
  for (const char* known : kKeys)
    if (k == known) return true;
  return false;
}

// Memory as HAMi writes preConfiguredDeviceMemory (a bare number of MiB) or a size with a unit.
bool ParseDeviceMemory(const std::string& text, uint64_t* bytes) {
  bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) return ParseByteQuantity(text.c_str(), bytes);
  if (text.size() > 12) return false;
  *bytes = std::stoull(text) << 20;
  return true;
}

std::vector<std::string> ListValue(const YAML::Node& n) {
  return n.IsSequence() ? n.as<std::vector<std::string>>() : SplitList(n.as<std::string>());
}

Status ParseExcludeList(const std::vector<std::string>& entries, const std::string& where,
                        std::vector<std::string>* out) {
  for (const auto& e : entries) {
    Status s = CheckExcludeEntry(e);
    if (!s.ok()) return InvalidArgument(where + ": " + s.message());
  }
  *out = entries;
  return Status::Ok();
}

Status ParseLogLevel(const std::string& v, const std::string& where, int* out) {
  if (v.size() != 1 || v[0] < '0' || v[0] > '4')
    return InvalidArgument(where + ": '" + v + "' is not a log level 0 (errors) to 4 (debug)");
  *out = v[0] - '0';
  return Status::Ok();
}

Status ParsePolicy(const std::string& v, const std::string& where, contract::CorePolicy* out) {
  if (v != "default" && v != "force" && v != "disable")
    return InvalidArgument(where + ": '" + v + "' is not default, force or disable");
  contract::ParseCorePolicy(v.c_str(), out);
  return Status::Ok();
}

// Applies the settings of one map (the top level or a node's section); `where` prefixes
// errors ("config file", or "config file: nodeConfig '<name>'").
Status ApplySettings(const YAML::Node& root, const std::string& where, Config* c) {
  if (root["resourceName"]) c->resource_name = root["resourceName"].as<std::string>();
  if (root["deviceSplitCount"]) c->split.split_count = root["deviceSplitCount"].as<int>();
  if (root["deviceMemoryScaling"]) c->split.memory_scaling = root["deviceMemoryScaling"].as<double>();
  if (root["deviceCoresScaling"]) c->split.cores_scaling = root["deviceCoresScaling"].as<double>();
  if (root["failOnInitError"]) c->fail_on_init_error = root["failOnInitError"].as<bool>();
  if (root["enableLegacyPreferred"]) c->enable_legacy_preferred = root["enableLegacyPreferred"].as<bool>();
  if (root["driverRoot"]) c->driver_root = root["driverRoot"].as<std::string>();
  if (root["kubeletDir"]) c->kubelet_dir = root["kubeletDir"].as<std::string>();
  if (root["stateDir"]) c->state_dir = root["stateDir"].as<std::string>();
  if (root["metricsAddr"]) c->metrics_addr = root["metricsAddr"].as<std::string>();
  if (root["deviceListStrategy"]) c->device_list_strategy = ListValue(root["deviceListStrategy"]);
  if (root["cdiKind"]) c->cdi_kind = root["cdiKind"].as<std::string>();
  if (root["cdiSpecDir"]) c->cdi_spec_dir = root["cdiSpecDir"].as<std::string>();
  if (root["packing"]) {
    std::string p = root["packing"].as<std::string>();
    if (p != "spread" && p != "binpack") return InvalidArgument(where + ": packing must be spread or binpack");
    c->packing = p == "spread" ? model::PackingPolicy::kSpread : model::PackingPolicy::kBinpack;
  }
  if (root["ignoredXids"]) {
    c->ignored_xids.clear();
    for (const auto& x : root["ignoredXids"]) c->ignored_xids.insert(x.as<uint64_t>());
  }
  if (root["healthyRecoverySeconds"]) c->healthy_recovery_seconds = root["healthyRecoverySeconds"].as<int>();
  if (root["sweepSeconds"]) c->sweep_seconds = root["sweepSeconds"].as<int>();
  if (root["cleanupGraceSeconds"]) c->cleanup_grace_seconds = root["cleanupGraceSeconds"].as<int>();
  if (root["enforcerPath"]) c->enforcer_path = root["enforcerPath"].as<std::string>();
  if (root["sharedDirSize"]) {
    std::string size = root["sharedDirSize"].as<std::string>();
    if (!ParseByteQuantity(size.c_str(), &c->shared_dir_bytes))
      return InvalidArgument(where + ": sharedDirSize '" + size + "' is not a size (e.g. 4Mi, or 0)");
  }
  if (root["memoryWatchdog"]) c->memory_watchdog = root["memoryWatchdog"].as<bool>();
  if (root["requireEnforcer"]) c->require_enforcer = root["requireEnforcer"].as<bool>();
  if (root["schedulerDecisions"]) c->scheduler_decisions = root["schedulerDecisions"].as<bool>();
  if (root["nodeName"]) c->node_name = root["nodeName"].as<std::string>();
  if (root["kubeconfig"]) c->kubeconfig = root["kubeconfig"].as<std::string>();
  if (root["excludeDevices"])
    GS_RETURN_IF_ERROR(
        ParseExcludeList(ListValue(root["excludeDevices"]), where + ": excludeDevices", &c->exclude_devices));
  if (root["corePolicy"])
    GS_RETURN_IF_ERROR(ParsePolicy(root["corePolicy"].as<std::string>(), where + ": corePolicy", &c->core_policy));
  if (root["disableCoreLimit"]) c->disable_core_limit = root["disableCoreLimit"].as<bool>();
  if (root["enforcerLogLevel"])
    GS_RETURN_IF_ERROR(ParseLogLevel(root["enforcerLogLevel"].as<std::string>(), where + ": enforcerLogLevel",
                                     &c->enforcer_log_level));
  if (root["preConfiguredDeviceMemory"]) {
    std::string v = root["preConfiguredDeviceMemory"].as<std::string>();
    if (!ParseDeviceMemory(v, &c->pre_configured_device_memory))
      return InvalidArgument(where + ": preConfiguredDeviceMemory '" + v +
                             "' is not MiB or a size (e.g. 122880, 120Gi)");
  }
  if (root["gdrcopyEnabled"]) c->gdrcopy_enabled = root["gdrcopyEnabled"].as<bool>();
  if (root["gdsEnabled"]) c->gds_enabled = root["gdsEnabled"].as<bool>();
  if (root["mofedEnabled"]) c->mofed_enabled = root["mofedEnabled"].as<bool>();
  return Status::Ok();
}

}  // namespace

Status CheckExcludeEntry(const std::string& entry) {
  bool digits = !entry.empty() && entry.find_first_not_of("0123456789") == std::string::npos;
  if (digits && (entry.size() == 1 || entry[0] != '0') && entry.size() <= 3) return Status::Ok();
  if ((entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) && entry.size() > 4 &&
      entry.find_first_of(" ,\t") == std::string::npos)
    return Status::Ok();
  return InvalidArgument("'" + entry + "' is neither a card index (0, 1, ...) nor a UUID (GPU-...)");
}

Status ApplyConfigYaml(const std::string& yaml, Config* c, const std::string& node_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("config file is not valid YAML: ") + e.what());
  }
  if (!root || root.IsNull()) return Status::Ok();
  if (!root.IsMap()) return InvalidArgument("config file: expected a map of settings");
  try {
    for (auto it = root.begin(); it != root.end(); ++it) {
      std::string k = it->first.as<std::string>();
      if (!KnownKey(k) && k != "nodeName" && k != "version" && k != "nodeConfig")
        return InvalidArgument("config file: unknown key '" + k + "'");
    }
    // Every section is checked, so that a mistake shows on every node, not only its own.
    const YAML::Node sections = root["nodeConfig"];
    if (sections && !sections.IsSequence())
      return InvalidArgument("config file: nodeConfig must be a list of sections, each with a name");
    std::set<std::string> names;
    for (size_t i = 0; sections && i < sections.size(); ++i) {
      const YAML::Node& sec = sections[i];
      std::string where = "config file: nodeConfig[" + std::to_string(i) + "]";
      if (!sec.IsMap() || !sec["name"] || sec["name"].as<std::string>().empty())
        return InvalidArgument(where + ": needs a name (the node it is for)");
      std::string name = sec["name"].as<std::string>();
      if (!names.insert(name).second) return InvalidArgument(where + ": a second section for node '" + name + "'");
      for (auto it = sec.begin(); it != sec.end(); ++it) {
        std::string k = it->first.as<std::string>();
        if (!KnownKey(k) && k != "name")
          return InvalidArgument("config file: nodeConfig '" + name + "': unknown key '" + k + "'");
      }
      Config scratch;  // values are checked in every section
      GS_RETURN_IF_ERROR(ApplySettings(sec, "config file: nodeConfig '" + name + "'", &scratch));
    }
    GS_RETURN_IF_ERROR(ApplySettings(root, "config file", c));
    const std::string node = node_name.empty() ? c->node_name : node_name;
    for (size_t i = 0; sections && !node.empty() && i < sections.size(); ++i)
      if (sections[i]["name"].as<std::string>() == node)
        GS_RETURN_IF_ERROR(ApplySettings(sections[i], "config file: nodeConfig '" + node + "'", c));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("config file: ") + e.what());
  }
  return Status::Ok();
}

StatusOr<Config> LoadConfig(const std::vector<std::string>& args, std::string* usage) {
  Config c;
  // The config file comes first so that environment and flags override it.
  // The node's name picks its nodeConfig section: flag, then environment, then the file's.
  std::string file, node_name;
  if (const char* env = getenv("GPUSLICE_CONFIG")) file = env;
  if (const char* env = getenv("NODE_NAME")) node_name = env;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) file = args[i + 1];
    if (args[i].rfind("--config=", 0) == 0) file = args[i].substr(9);
    if (args[i] == "--node-name" && i + 1 < args.size()) node_name = args[i + 1];
    if (args[i].rfind("--node-name=", 0) == 0) node_name = args[i].substr(12);
  }
  if (!file.empty()) {
    auto text = ReadFile(file);
    if (!text.ok()) return InvalidArgument("--config: cannot read " + text.status().message());
    Status s = ApplyConfigYaml(*text, &c, node_name);
    if (!s.ok()) return InvalidArgument(file + ": " + s.message());
    c.config_file = file;
  }

  int64_t split = c.split.split_count, recovery = c.healthy_recovery_seconds, sweep = c.sweep_seconds,
          grace = c.cleanup_grace_seconds;
  std::string shared_dir_size, strategies, packing = c.packing == model::PackingPolicy::kSpread ? "spread" : "binpack",
                                           ignored, exclude, log_level, device_memory;
  std::string core_policy = contract::CorePolicyName(c.core_policy);
  FlagSet f("node", "The gpuslice node agent: kubelet device plugin with vGPU slices, health and metrics.");
  f.String("config", &c.config_file, "YAML config file (flags > environment > file)", "GPUSLICE_CONFIG");
  f.String("resource-name", &c.resource_name, "extended resource to serve", "RESOURCE_NAME");
  f.Int("device-split-count", &split, "slices per GPU", 1, 64, "DEVICE_SPLIT_COUNT");
  f.Double("device-memory-scaling", &c.split.memory_scaling,
           "each slice gets S*M/K memory; S > 1: virtual device memory", 0.01, 16, "DEVICE_MEMORY_SCALING");
  f.Double("device-cores-scaling", &c.split.cores_scaling, "each slice gets 100*C/K percent SM share; C = K: no limit",
           0.01, 64, "DEVICE_CORES_SCALING");
  f.Bool("fail-on-init-error", &c.fail_on_init_error, "exit when GPUs cannot be found (false: log and wait)",
         "FAIL_ON_INIT_ERROR");
  f.Bool("enable-legacy-preferred", &c.enable_legacy_preferred,
         "re-map slices to distinct GPUs inside Allocate (kubelets without GetPreferredAllocation)",
         "ENABLE_LEGACY_PREFERRED");
  f.String("driver-root", &c.driver_root, "root of the driver installation ('/' on real nodes)", "NVIDIA_DRIVER_ROOT");
  f.String("kubelet-dir", &c.kubelet_dir, "the kubelet's directory (device-plugins/, pod-resources/)", "KUBELET_DIR");
  f.String("state-dir", &c.state_dir, "where enforcer copies and per-container regions live", "GPUSLICE_STATE_DIR");
  f.String("metrics-addr", &c.metrics_addr, "Prometheus metrics listen address ('' = off)", "METRICS_ADDR");
  f.String("device-list-strategy", &strategies, "comma list of envvar, cdi-cri", "DEVICE_LIST_STRATEGY");
  f.String("cdi-kind", &c.cdi_kind, "CDI kind for cdi-cri device names", "CDI_KIND");
  f.String("cdi-spec-dir", &c.cdi_spec_dir, "keep a CDI spec of the healthy GPUs here ('' = off)", "CDI_SPEC_DIR");
  f.String("packing", &packing, "spread or binpack slices over GPUs", "GPUSLICE_PACKING");
  f.String("ignored-xids", &ignored, "comma list of XIDs that do not make a GPU unhealthy", "DP_IGNORED_XIDS");
  f.Int("healthy-recovery-seconds", &recovery, "seconds without errors before a GPU is healthy again", 1, 86400);
  f.Int("sweep-seconds", &sweep, "seconds between cleanups of allocations no container holds", 1, 3600);
  f.Int("cleanup-grace-seconds", &grace, "seconds before an allocation no container holds is removed", 0, 86400);
  f.String("enforcer", &c.enforcer_path, "libgpuslice.so to install for containers", "GPUSLICE_ENFORCER");
  f.String("shared-dir-size", &shared_dir_size,
           "size of the tmpfs each container may write (its region; e.g. 4Mi); 0 = a plain directory on the "
           "state disk, which a container can fill",
           "SHARED_DIR_SIZE");
  f.Bool("memory-watchdog", &c.memory_watchdog,
         "twice a second, compare each container's device memory as NVML reports it per process with its limit, "
         "and kill its largest process on a GPU where it is over in three samples in a row (needs hostPID and "
         "--shared-dir-size > 0)",
         "GPUSLICE_MEMORY_WATCHDOG");
  f.Bool("require-enforcer", &c.require_enforcer,
         "kill a process of a container with a slice that is on a GPU without the enforcer (no slot in its "
         "container's region in three samples in a row, 0.5 s apart), whatever it holds (needs hostPID and "
         "--shared-dir-size > 0)",
         "GPUSLICE_REQUIRE_ENFORCER");
  f.Bool("scheduler-decisions", &c.scheduler_decisions,
         "give each container what gpuslice scheduler decided (HAMi's annotations: cards, memory, cores) and "
         "publish the cards on the Node",
         "GPUSLICE_SCHEDULER_DECISIONS");
  f.String("node-name", &c.node_name, "this node's name in Kubernetes (with --scheduler-decisions)", "NODE_NAME");
  f.String("kubeconfig", &c.kubeconfig, "API server access ('' = the service account, in a pod)", "KUBECONFIG");
  f.String("exclude-devices", &exclude,
           "comma list of cards not to register, each a UUID (GPU-...) or an NVML index (HAMi's filterdevices)",
           "GPUSLICE_EXCLUDE_DEVICES");
  f.String("core-policy", &core_policy,
           "GPU_CORE_UTILIZATION_POLICY of every container: default, force (held to its share even alone) or "
           "disable (no compute limit)",
           "GPU_CORE_POLICY");
  f.Bool("disable-core-limit", &c.disable_core_limit, "no compute limit for any container (--core-policy disable)",
         "DISABLE_CORE_LIMIT");
  f.String("enforcer-log-level", &log_level,
           "LIBCUDA_LOG_LEVEL put in every container's environment: 0 errors ... 4 debug ('' = none)",
           "GPUSLICE_ENFORCER_LOG_LEVEL");
  f.String("pre-configured-device-memory", &device_memory,
           "memory to register for a card whose NVML memory query is not supported (MiB, or a size like 120Gi); "
           "unset, such cards are not registered",
           "PRE_CONFIGURED_DEVICE_MEMORY");
  f.Bool("gdrcopy-enabled", &c.gdrcopy_enabled, "give containers with GPUs /dev/gdrdrv (where the node has it)",
         "GDRCOPY_ENABLED");
  f.Bool("gds-enabled", &c.gds_enabled, "give containers with GPUs /dev/nvidia-fs* (where the node has them)",
         "GDS_ENABLED");
  f.Bool("mofed-enabled", &c.mofed_enabled, "give containers with GPUs /dev/infiniband/* (where the node has them)",
         "MOFED_ENABLED");
  std::vector<std::string> rest;
  GS_RETURN_IF_ERROR(f.Parse(args, &rest));
  if (!exclude.empty()) {
    c.exclude_devices.clear();
    for (const auto& e : SplitList(exclude)) {
      Status s = CheckExcludeEntry(e);
      if (!s.ok()) return InvalidArgument("--exclude-devices: " + s.message());
      c.exclude_devices.push_back(e);
    }
  }
  GS_RETURN_IF_ERROR(ParsePolicy(core_policy, "--core-policy", &c.core_policy));
  if (!log_level.empty()) GS_RETURN_IF_ERROR(ParseLogLevel(log_level, "--enforcer-log-level", &c.enforcer_log_level));
  if (!device_memory.empty() && !ParseDeviceMemory(device_memory, &c.pre_configured_device_memory))
    return InvalidArgument("--pre-configured-device-memory: '" + device_memory +
                           "' is not MiB or a size (e.g. 122880, 120Gi)");
  *usage = f.help_requested() ? f.Usage() : "";
  c.split.split_count = static_cast<int>(split);
  c.healthy_recovery_seconds = static_cast<int>(recovery);
  c.sweep_seconds = static_cast<int>(sweep);
  c.cleanup_grace_seconds = static_cast<int>(grace);
  if (!strategies.empty()) c.device_list_strategy = SplitList(strategies);
  if (!shared_dir_size.empty() && !ParseByteQuantity(shared_dir_size.c_str(), &c.shared_dir_bytes))
    return InvalidArgument("--shared-dir-size: '" + shared_dir_size + "' is not a size (e.g. 4Mi, or 0)");
  // The region alone is ~290 KiB: a smaller tmpfs would make every enforcer fail to join it.
  if (c.shared_dir_bytes != 0 && c.shared_dir_bytes < (1ull << 20))
    return InvalidArgument("--shared-dir-size: at least 1Mi (the region needs ~290 KiB), or 0 for a plain directory");
  GS_RETURN_IF_ERROR(CheckStrategies(c.device_list_strategy));
  if (packing != "spread" && packing != "binpack")
    return InvalidArgument("--packing: '" + packing + "' is not spread or binpack");
  c.packing = packing == "spread" ? model::PackingPolicy::kSpread : model::PackingPolicy::kBinpack;
  if (!ignored.empty()) {
    c.ignored_xids.clear();
    for (const auto& x : SplitList(ignored)) {
      char* end = nullptr;
      unsigned long long v = strtoull(x.c_str(), &end, 10);
      if (*end) return InvalidArgument("--ignored-xids: '" + x + "' is not a number");
      c.ignored_xids.insert(v);
    }
  }
  GS_RETURN_IF_ERROR(c.split.Validate());
  if (c.scheduler_decisions && c.node_name.empty())
    return InvalidArgument(
        "--scheduler-decisions needs --node-name (or NODE_NAME, e.g. from the pod's spec.nodeName by the downward "
        "API)");
  if (c.resource_name.find('/') == std::string::npos || c.resource_name.find("kubernetes.io/") != std::string::npos)
    return InvalidArgument("--resource-name: '" + c.resource_name + "' is not an extended resource (domain/name)");
  return c;
}

}  // namespace gs::node
