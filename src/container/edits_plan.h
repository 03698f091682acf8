// What a container asking for GPUs gets, worked out on the host before anything is
// touched: device nodes, driver files, the enforcer and its preload file, and on a
// simulated node the simulator's state. Shared by the OCI hook and the CDI generator so
// both routes make the same edits.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/container/driver_files.h"
#include "src/model/slices.h"

namespace gs::container {

struct DeviceNodeEdit {
  std::string container_path, host_path;
  unsigned major = 0, minor = 0;
};

struct MountEdit {
  std::string host_path, container_path;
  bool writable = false;
  bool library = false;  // a driver library: PlaceLibraries may move it (library_dirs.h)
};

struct EditsPlan {
  std::vector<DeviceNodeEdit> gpu_nodes;      // /dev/nvidia<N> of the selected GPUs
  std::vector<DeviceNodeEdit> control_nodes;  // nvidiactl, nvidia-uvm, nvidia-uvm-tools (present ones)
  std::vector<MountEdit> mounts;              // driver files, enforcer, /etc/ld.so.preload, sim state
  std::vector<std::string> env;               // for CDI; a hook cannot change a process's env
};

struct PlanOptions {
  std::string driver_root = "/";
  std::set<std::string> capabilities = {"utility", "compute"};
  EnforcerInstall enforcer;  // empty host_path: no enforcer
};

// Device node of a GPU (or control node) in the driver root, with its numbers.
StatusOr<DeviceNodeEdit> DeviceNode(const std::string& driver_root, const std::string& name);

StatusOr<EditsPlan> PlanEdits(const PlanOptions& o, const std::vector<model::Gpu>& gpus);

}  // namespace gs::container
