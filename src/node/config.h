// The node agent's configuration: flags, environment and a YAML config file, with
// precedence flag > environment > file > default. Invalid values fail at start with a
// message that names the flag and the accepted range. Parsed once at start.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "src/common/contract.h"
#include "src/common/status.h"
#include "src/model/slices.h"

namespace gs::node {

struct Config {
  std::string resource_name = "nvidia.com/gpu";
  model::SplitPolicy split;  // --device-split-count / -memory-scaling / -cores-scaling
  bool fail_on_init_error = true;
  bool enable_legacy_preferred = false;
  std::string driver_root = "/";
  std::string kubelet_dir = "/var/lib/kubelet";
  std::string state_dir = "/var/lib/gpuslice";  // enforcer copies, per-container regions, records
  std::string metrics_addr = ":9396";
  std::vector<std::string> device_list_strategy = {"envvar"};  // envvar, cdi-cri
  std::string cdi_kind = "gpuslice.io/gpu";
  std::string cdi_spec_dir = "/var/run/cdi";  // spec kept current here ("" = off)
  model::PackingPolicy packing = model::PackingPolicy::kSpread;
  std::set<uint64_t> ignored_xids = {13, 31, 43, 45, 68, 109};  // application errors
  int healthy_recovery_seconds = 60;                            // a GPU quiet this long after an XID is healthy again
  int sweep_seconds = 30;                                       // period of the cleanup of stale allocations
  int cleanup_grace_seconds = 60;  // an allocation no container holds is removed after this
  std::string enforcer_path;       // libgpuslice.so to install (default: next to gpuslice)
  // Each container's writable directory is a tmpfs of this size (ContainerDirs); 0 = a
  // plain directory on the state disk, which a container can fill.
  uint64_t shared_dir_bytes = 4ull << 20;
  // The memory watchdog (src/node/memory_watchdog.h): kills a container's largest process
  // on a GPU where NVML shows the container over its limit in three samples in a row.
  bool memory_watchdog = true;
  // In the same loop: kills a process of a container with a slice that is on a GPU without
  // a slot in its container's region (it runs without the enforcer), in three samples in a row.
  bool require_enforcer = true;
  // Fractional scheduling (docs/scheduler.md): Allocate applies what `gpuslice scheduler`
  // decided for the pod, and the agent publishes its cards on its Node object.
  bool scheduler_decisions = false;
  std::string node_name;   // this node's Node object (required with scheduler_decisions)
  std::string kubeconfig;  // API access; "" = the pod's service account (in-cluster)
  std::string config_file;
  // Cards not registered (HAMi's filterdevices): each entry a card's UUID or its NVML
  // index. Excluded cards get no slices and appear nowhere the agent publishes them.
  std::vector<std::string> exclude_devices;
  // GPU_CORE_UTILIZATION_POLICY written into every container's limits file (HAMi's
  // gpuCorePolicy); kDisable (or disable_core_limit) also drops every compute share.
  contract::CorePolicy core_policy = contract::CorePolicy::kDefault;
  bool disable_core_limit = false;  // HAMi's disablecorelimit: the same as core_policy kDisable
  int enforcer_log_level = -1;      // LIBCUDA_LOG_LEVEL put in containers' environment; -1 = none
  // Memory registered for a card whose NVML memory query answers NOT_SUPPORTED (unified
  // memory); 0 = such cards are not registered (HAMi's preConfiguredDeviceMemory).
  uint64_t pre_configured_device_memory = 0;
  // Extra device nodes for containers with GPUs, where the node has them (NVIDIA's device
  // plugin's gdrcopyEnabled, gdsEnabled, mofedEnabled).
  bool gdrcopy_enabled = false;  // /dev/gdrdrv
  bool gds_enabled = false;      // /dev/nvidia-fs*
  bool mofed_enabled = false;    // /dev/infiniband/*

  // The policy containers get: kDisable when disable_core_limit is set.
  contract::CorePolicy EffectiveCorePolicy() const {
    return disable_core_limit ? contract::CorePolicy::kDisable : core_policy;
  }
  std::string plugin_socket() const;   // <kubelet_dir>/device-plugins/gpuslice.sock
  std::string kubelet_socket() const;  // <kubelet_dir>/device-plugins/kubelet.sock
  std::string pod_resources_socket() const;
};

// Parses args (after "gpuslice node"), the environment and the config file the flags or
// $GPUSLICE_CONFIG name. Returns the usage text in *usage for --help.
StatusOr<Config> LoadConfig(const std::vector<std::string>& args, std::string* usage);

// Applies config-file YAML text onto c (exposed for tests): the top-level keys, then the
// `nodeConfig` section whose `name` is node_name (when node_name is empty: the file's own
// top-level nodeName). Every section's keys are checked, whichever node it is for.
Status ApplyConfigYaml(const std::string& yaml, Config* c, const std::string& node_name = "");

// Checks one --exclude-devices entry: a GPU or MIG UUID, or a card index (decimal, no
// sign or leading zero). The error names the entry.
Status CheckExcludeEntry(const std::string& entry);

}  // namespace gs::node
