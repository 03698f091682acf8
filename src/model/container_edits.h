// What a container gets, in one vocabulary (docs/architecture.md, "Data flow"): environment,
// mounts and device nodes. Every consumer renders a ContainerEdits: the kubelet's
// ContainerAllocateResponse and `gpuslice run` (from ToContainerEdits), the CDI spec and
// the OCI hook (from container::PlanEdits, which fills in what only the host can know:
// driver files, device numbers). The device nodes and the enforcer's mounts are listed
// once, here (DeviceNodes, EnforcerMounts). The names and keys are those of
// src/common/contract.h.
// Pure: no I/O, no clocks.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "src/common/contract.h"

namespace gs::model {

// One physical GPU's share, as granted to a container.
struct DeviceGrant {
  std::string uuid;
  unsigned minor = 0;         // /dev/nvidia<minor>
  uint64_t memory_limit = 0;  // bytes; 0 = whole card
  unsigned sm_share = 0;      // percent; 0 or >= 100 = no compute limit
  // The container's tenant entry on this card's region (GPUSLICE_CARD_ENTRY_<i>); -1 =
  // none handed out (the enforcer claims one itself).
  int card_entry = -1;
};

using contract::CorePolicy;  // src/common/contract.h: one definition for writer and enforcer

struct Allocation {
  std::vector<DeviceGrant> devices;  // in the order the container will see them
  bool oversubscribe = false;        // virtual device memory (spill to host)
  int priority = 1;                  // CUDA_TASK_PRIORITY: lower = higher
  // GPUSLICE_CARD_BEST_PRIORITY: the best priority any container computing on the same
  // cards may hold (src/common/contract.h). The node agent grants every container 1;
  // `gpuslice run` sets 0, since any run may ask for --priority 0.
  int card_best_priority = 1;
  CorePolicy core_policy = CorePolicy::kDefault;
};

struct Mount {
  std::string host_path, container_path;
  bool read_only = true;
  // A driver library: CDI and the hook mount it where the image's loader looks
  // (src/container/library_dirs.h).
  bool library = false;
};

// The character-device major of the NVIDIA GPU and control nodes (/dev/nvidia<N>,
// /dev/nvidiactl); nvidia-uvm's is assigned at load time.
inline constexpr unsigned kNvidiaMajor = 195;

struct DeviceNode {
  std::string container_path, host_path;
  std::string permissions = "rw";
  unsigned major = 0, minor = 0;  // filled in on the host (container::PlanEdits) for the hook's mknod
};

struct ContainerEdits {
  std::map<std::string, std::string> env;
  std::vector<Mount> mounts;
  std::vector<DeviceNode> devices;
};

// The device plugin's allocation marker, NVIDIA's "volume-mounts" convention: one
// read-only mount of the host's /dev/null at <kDeviceMarkerDir>/<GPU-UUID> per granted
// card. Mounts in an OCI config come from the runtime (the kubelet's Allocate response),
// never from an image's environment, so the OCI hook trusts this list where it must not
// trust NVIDIA_VISIBLE_DEVICES (src/container/device_request.h).
inline constexpr char kDeviceMarkerDir[] = "/var/run/nvidia-container-devices";
inline constexpr char kDeviceMarkerSource[] = "/dev/null";

// NVIDIA_DRIVER_CAPABILITIES when a container names none.
inline const std::set<std::string>& DefaultCapabilities() {
  static const std::set<std::string> caps = {"utility", "compute"};
  return caps;
}

// Where a driver root's device nodes are: "/dev" for "/", else <root>/dev.
std::string DevRoot(const std::string& driver_root);

// The device nodes of the granted cards (/dev/nvidia<minor>, in the order given), then the
// control nodes the capabilities need (docs/containers.md): nvidiactl; nvidia-uvm and
// nvidia-uvm-tools with compute; nvidia-modeset with display (the toolkit's rules).
std::vector<DeviceNode> DeviceNodes(const std::vector<unsigned>& minors, const std::set<std::string>& capabilities,
                                    const std::string& dev_root);

// The enforcer at its versioned path and /etc/ld.so.preload naming it, both read-only.
std::vector<Mount> EnforcerMounts(const std::string& enforcer_host_path, const std::string& enforcer_container_path,
                                  const std::string& preload_file_host_path);

struct EditOptions {
  // Standalone (`gpuslice run`): no container; LD_PRELOAD and host paths are used, and
  // CUDA_VISIBLE_DEVICES selects the granted cards. Otherwise: container paths, the
  // enforcer preloaded through a read-only /etc/ld.so.preload, and device nodes.
  bool standalone = false;
  std::string enforcer_host_path;       // libgpuslice.so on the host
  std::string enforcer_container_path;  // versioned: upgrades never replace a mapped library
  std::string preload_file_host_path;   // file holding enforcer_container_path
  // The limits file (LimitsFileText): in a container, mounted read-only at
  // contract::kLimitsFile (authoritative); standalone, named by
  // contract::kEnvRunLimitsFile (binds the limits to the granted cards' UUIDs).
  std::string limits_file_host_path;
  std::string region_host_dir;  // per-container, read-write
  std::string region_container_dir = "/var/run/gpuslice";
  // The node's card regions (one file per GPU, src/region/card.h), shared read-write by
  // every container so their enforcers take turns on a card; "" = none (each container
  // then coordinates only its own processes). Named by GPUSLICE_CARDS_DIR.
  std::string cards_host_dir;
  std::string cards_container_dir = "/var/run/gpuslice-cards";
  std::string dev_root = "/dev";                               // where the host's device nodes are
  std::set<std::string> capabilities = DefaultCapabilities();  // which control nodes
  std::string existing_ld_preload;                             // standalone: kept after the enforcer
  // LIBCUDA_LOG_LEVEL (the enforcer's log level, 0-4) in the environment; -1 = not set.
  // Only logging: a container's own value may replace it.
  int log_level = -1;
};

// Memory limits are written in MiB ("<n>m"), as HAMi's device plugin does, when they are
// whole MiB; otherwise in bytes.
std::string FormatMemoryLimit(uint64_t bytes);

// The limit variables of src/common/contract.h for an allocation (also the limits file),
// with GPUSLICE_CARDS_DIR when cards_dir is not empty.
std::map<std::string, std::string> LimitVariables(const Allocation& a, const std::string& region_path,
                                                  const std::string& cards_dir = "");

// The limits file (contract::kLimitsFile): `comment` as a first "# " line, then one
// KEY=VALUE line per limit variable, as the enforcer's SplitLimitsFile reads it (tested
// end to end by tests/limits_contract_test.cc).
std::string LimitsFileText(const Allocation& a, const std::string& region_path, const std::string& cards_dir,
                           const std::string& comment);

// The grants a limits file of LimitsFileText records, in device order: each device index
// that names its card (GPUSLICE_DEVICE_UUID_<i>) with its memory limit and compute share
// (0 where the file has none). A value that does not parse counts as absent; a limit
// without its UUID is left out. `minor` is not in the file and stays 0. Readers of the
// agent's records (metrics, the memory watchdog) take what a container was granted from
// here, so they follow the scheduler's decision, not the kubelet's slice IDs.
std::vector<DeviceGrant> GrantsInLimitsFile(const std::string& text);

// The container's own slice: its limits file (read-only at contract::kLimitsFile), its
// region directory (read-write at region_container_dir) and the node's cards directory
// (read-write at cards_container_dir), each where its host path is set. The node agent
// (through ToContainerEdits) and the OCI hook mount these same three.
std::vector<Mount> SliceMounts(const EditOptions& o);

ContainerEdits ToContainerEdits(const Allocation& a, const EditOptions& o);

}  // namespace gs::model
