// `gpuslice hook`: an OCI prestart / createRuntime hook (any OCI runtime). Reads the
// container state on stdin and the bundle's config.json; the device list comes from the
// device plugin's marker mounts, or from NVIDIA_VISIBLE_DEVICES only where that is trusted
// (device_request.h: privileged, or --accept-env-when-unprivileged; docker --gpus
// semantics). Then it enters the container's mount namespace to create the
// allocated device nodes and read-only bind mounts, and allows the devices in the
// devices cgroup. A container that did not ask for GPUs is left exactly as it was.
// Malformed input fails with a message and a non-zero exit, before anything changes.
#pragma once

#include <string>
#include <vector>

namespace gs::container {

int RunHook(const std::vector<std::string>& args);

}  // namespace gs::container
