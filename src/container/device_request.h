// Which GPUs the OCI hook gives a container, and from which source. The hook runs for
// every container, and NVIDIA_VISIBLE_DEVICES comes from the image (every CUDA base image
// sets it to "all"), so the variable alone cannot be trusted:
//   1. the device plugin's marker mounts (model::kDeviceMarkerDir), which only the
//      runtime can put in config.json, are the device list whenever there are any;
//   2. otherwise NVIDIA_VISIBLE_DEVICES, but only for a privileged container or when the
//      operator opted in (`gpuslice hook --accept-env-when-unprivileged`), as NVIDIA's
//      accept-nvidia-visible-devices-envvar-when-unprivileged;
//   3. otherwise nothing: the container is left alone, with a message saying why.
// Pure: no I/O.
#pragma once

#include <string>

#include "src/common/status.h"
#include "src/container/oci_config.h"
#include "src/model/visible_devices.h"

namespace gs::container {

struct DevicePolicy {
  bool accept_env_when_unprivileged = false;
};

enum class DeviceSource { kNone, kMarkers, kEnvironment };

struct DeviceDecision {
  model::VisibleDevices devices;  // kVoid: leave the container exactly as it is
  DeviceSource source = DeviceSource::kNone;
  std::string ignored;  // not empty: a request that was refused, and why (for the log)
};

// Errors (a malformed device list that would be used) name the variable or the mount.
StatusOr<DeviceDecision> DecideDevices(const ContainerConfig& c, const DevicePolicy& p);

// A container-controlled string made safe for one log line: printable ASCII kept, other
// bytes as \xNN, at most `max` characters of the original.
std::string Printable(const std::string& s, size_t max = 128);

}  // namespace gs::container
