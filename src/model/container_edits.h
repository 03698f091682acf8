// The domain's central translation (docs/architecture.md, "Data flow"): what a slice
// allocation means for a process — environment, device nodes, mounts. It feeds the
// kubelet's ContainerAllocateResponse and `gpuslice run`; the CDI spec and the OCI hook
// still plan their edits in container::PlanEdits (issue 14: one path). The names and keys
// are those of src/common/contract.h.
// Pure: no I/O, no clocks.
#pragma once

#include <cstdint>
#include <map>
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
};

using contract::CorePolicy;  // src/common/contract.h: one definition for writer and enforcer

struct Allocation {
  std::vector<DeviceGrant> devices;  // in the order the container will see them
  bool oversubscribe = false;        // virtual device memory (spill to host)
  int priority = 1;                  // CUDA_TASK_PRIORITY: lower = higher
  CorePolicy core_policy = CorePolicy::kDefault;
};

struct Mount {
  std::string host_path, container_path;
  bool read_only = true;
};

struct DeviceNode {
  std::string container_path, host_path;
  std::string permissions = "rw";
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

struct EditOptions {
  // Standalone (`gpuslice run`): no container; LD_PRELOAD and host paths are used, and
  // CUDA_VISIBLE_DEVICES selects the granted cards. Otherwise: container paths, the
  // enforcer preloaded through a read-only /etc/ld.so.preload, and device nodes.
  bool standalone = false;
  std::string enforcer_host_path;       // libgpuslice.so on the host
  std::string enforcer_container_path;  // versioned: upgrades never replace a mapped library
  std::string preload_file_host_path;   // file holding enforcer_container_path
  std::string limits_file_host_path;    // read-only limits (authoritative)
  std::string region_host_dir;          // per-container, read-write
  std::string region_container_dir = "/var/run/gpuslice";
  // The node's card regions (one file per GPU, src/region/card.h), shared read-write by
  // every container so their enforcers take turns on a card; "" = none (each container
  // then coordinates only its own processes). Named by GPUSLICE_CARDS_DIR.
  std::string cards_host_dir;
  std::string cards_container_dir = "/var/run/gpuslice-cards";
  std::string dev_root = "/dev";    // where the host's device nodes are
  std::string existing_ld_preload;  // standalone: kept after the enforcer
};

// Memory limits are written in MiB ("<n>m"), as HAMi's device plugin does, when they are
// whole MiB; otherwise in bytes.
std::string FormatMemoryLimit(uint64_t bytes);

// The limit variables of src/common/contract.h for an allocation (also the limits file),
// with GPUSLICE_CARDS_DIR when cards_dir is not empty.
std::map<std::string, std::string> LimitVariables(const Allocation& a, const std::string& region_path,
                                                  const std::string& cards_dir = "");

ContainerEdits ToContainerEdits(const Allocation& a, const EditOptions& o);

}  // namespace gs::model
