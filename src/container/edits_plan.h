// What a container asking for GPUs gets on this node, worked out on the host before
// anything is touched, as a model::ContainerEdits: the device nodes model::DeviceNodes
// lists (with their numbers; control nodes only where the node has them), the driver
// files of the capabilities, the enforcer and its preload file, and on a simulated node
// the simulator's state. The CDI generator (cdi.h) and the OCI hook (oci_hook.h) render
// these same edits, as the device plugin renders model::ToContainerEdits. Reads the
// filesystem; changes nothing.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/container/driver_files.h"
#include "src/model/container_edits.h"
#include "src/model/slices.h"

namespace gs::container {

// Device nodes beside the GPUs' that a container with GPUs may get (NVIDIA's device
// plugin's gdrcopyEnabled, gdsEnabled, mofedEnabled).
struct ExtraDevices {
  bool gdrcopy = false;  // /dev/gdrdrv (GDRCopy)
  bool gds = false;      // /dev/nvidia-fs* (GPUDirect Storage)
  bool mofed = false;    // /dev/infiniband/* (Mellanox OFED: RDMA)
};

// The nodes `extras` asks for that exist under dev_root, in a stable order (gdrdrv, then
// nvidia-fs* by name, then infiniband/* by name); one that is absent is left out, as
// NVIDIA's toolkit leaves it out. Numbers are filled in (FillDeviceNumbers).
std::vector<model::DeviceNode> ExtraDeviceNodes(const std::string& dev_root, const ExtraDevices& extras);

struct PlanOptions {
  std::string driver_root = "/";
  std::set<std::string> capabilities = model::DefaultCapabilities();
  EnforcerInstall enforcer;  // empty host_path: no enforcer
  ExtraDevices extras;       // after the control nodes
};

// Processes of one container share accounting through a region in its own /tmp (CDI's
// env; the hook cannot set any).
inline constexpr char kContainerRegion[] = "/tmp/.gpuslice-region";

// The edits for a container given `gpus`. `devices` holds the GPUs' nodes first, in the
// order of `gpus`, then the control nodes. Fails when a GPU has no device node.
StatusOr<model::ContainerEdits> PlanEdits(const PlanOptions& o, const std::vector<model::Gpu>& gpus);

// Fills in the device numbers of `node` from its host path. A simulated node made without
// mknod rights has regular files there: the numbers are the driver's conventional ones.
Status FillDeviceNumbers(model::DeviceNode* node);

}  // namespace gs::container
