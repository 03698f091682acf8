// `gpuslice hook`: an OCI prestart / createRuntime hook (any OCI runtime, docker --gpus
// semantics through NVIDIA_VISIBLE_DEVICES). Reads the container state on stdin and the
// bundle's config.json, then enters the container's mount namespace to create the
// allocated device nodes and read-only bind mounts, and allows the devices in the
// devices cgroup. A container that did not ask for GPUs is left exactly as it was.
// Malformed input fails with a message and a non-zero exit, before anything changes.
#pragma once

#include <string>
#include <vector>

namespace gs::container {

int RunHook(const std::vector<std::string>& args);

}  // namespace gs::container
