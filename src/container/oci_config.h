// What the OCI hook needs from a bundle's config.json, parsed without I/O so that every
// field a container could shape is unit-tested: the root path, NVIDIA_VISIBLE_DEVICES and
// NVIDIA_DRIVER_CAPABILITIES from the process environment (which the image sets), the
// device plugin's marker mounts (which only the runtime sets) and whether the container
// is privileged (CAP_SYS_ADMIN in the bounding set, as NVIDIA's toolkit decides).
#pragma once

#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::container {

struct ContainerConfig {
  std::string rootfs;  // absolute
  std::string visible, capabilities;
  bool visible_set = false;
  // Names under model::kDeviceMarkerDir mounted from /dev/null, in mount order, without
  // duplicates (e.g. "GPU-<uuid>"). Other mounts there (another source, nested names) are
  // not markers and are left out.
  std::vector<std::string> marker_devices;
  bool privileged = false;
  // process.env as written (KEY=VALUE; the image's and `docker run -e`'s, the last
  // definition of a name winning for the process): the limits a container asks for.
  std::vector<std::string> env;
  // Something is already mounted at the enforcer's limits file (the node agent's slice,
  // through the kubelet): the hook leaves the container's limits to it.
  bool limits_mounted = false;
  // Minors of the GPU device nodes (/dev/nvidia<N>) in "linux"."devices": the GPUs a CDI
  // runtime gave the container.
  std::vector<unsigned> gpu_minors;
};

// `bundle` is the absolute bundle path a relative root is taken from. Errors name the
// bundle's config.json and the field.
StatusOr<ContainerConfig> ParseContainerConfig(const std::string& text, const std::string& bundle);

}  // namespace gs::container
