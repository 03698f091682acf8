// The OCI prestart / createRuntime hook's work, for `gpuslice hook` (any OCI runtime;
// src/cli/hook_command.cc). ReadHookContainer reads the container state (the hook's
// stdin) and the bundle's config.json; DecideDevices (device_request.h) says which GPUs
// the container may have: the device plugin's marker mounts, or NVIDIA_VISIBLE_DEVICES
// only where that is trusted (privileged, or --accept-env-when-unprivileged; docker --gpus
// semantics). GiveDevices then enters the container's mount namespace to create the
// allocated device nodes and read-only bind mounts, and allows the devices in the devices
// cgroup. A container that did not ask for GPUs is left exactly as it was. Malformed input
// is an error, before anything changes. Nothing here prints: errors come back as Status.
#pragma once

#include <functional>
#include <istream>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/container/oci_config.h"
#include "src/model/slices.h"
#include "src/model/visible_devices.h"

namespace gs::container {

struct HookContainer {
  int pid = 0;
  std::string id;  // for messages; may be empty
  ContainerConfig config;
};

// The container state on `state_in` (at most 1 MiB; "pid" and an absolute "bundle") and
// the bundle's config.json (at most 16 MiB). Errors name what is malformed.
StatusOr<HookContainer> ReadHookContainer(std::istream& state_in);

struct HookOptions {
  std::string driver_root = "/";
  std::string state_dir = "/var/lib/gpuslice";  // where the enforcer is installed
  std::string enforcer;                         // libgpuslice.so to install (empty: none)
};

// The node's GPUs; called only when the container gets some (not for "none").
using GpuLister = std::function<StatusOr<std::vector<model::Gpu>>()>;

// Gives the container the devices `visible` selects (not kVoid: DecideDevices left it
// alone then), with the driver files of its NVIDIA_DRIVER_CAPABILITIES and the enforcer.
// Forks a child to enter the mount namespace (setns needs a single-threaded process).
Status GiveDevices(const HookContainer& c, const model::VisibleDevices& visible, const HookOptions& o,
                   const GpuLister& node_gpus);

}  // namespace gs::container
