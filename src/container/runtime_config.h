// The runtime configuration that turns on one of the two routes (CDI, or the OCI hook),
// for `gpuslice runtime configure` (src/cli/runtime_command.cc): printed, or applied with
// --write. Applying is idempotent and merges into existing files instead of replacing
// them; a file that contradicts the change is left alone with an error that says what to
// change by hand. Each runtime is one row of a table in runtime_config.cc: a new runtime
// is a new row (and a line in runtime_config_test.cc).
#pragma once

#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::container {

struct RuntimeConfigRequest {
  std::string runtime;       // one of RuntimeNames()
  std::string mode = "cdi";  // cdi or hook
  std::string root;          // prefix for --write (tests); "" = /
  std::string gpuslice_path = "/usr/bin/gpuslice";
  std::string enforcer_path = "/usr/lib/gpuslice/libgpuslice.so";
  std::string driver_root;  // passed to the hook when set (simulated nodes)
  std::string state_dir;    // passed to the hook when set
  // The hook's own options (--mode hook only): a file for its refusals (runc drops a
  // successful hook's stderr), and the single-tenant escape hatch that gives GPUs to
  // unprivileged containers by NVIDIA_VISIBLE_DEVICES alone (docs/containers.md).
  std::string hook_log;
  bool accept_env_when_unprivileged = false;
  // docker --mode hook: the directory on dockerd's PATH that gets the executable
  // nvidia-container-runtime-hook, and whether a file there that is not gpuslice's may be
  // replaced.
  std::string hook_dir = "/usr/local/bin";
  bool force = false;
};

// How a change goes into its file.
enum class ConfigMerge {
  kReplace,          // a file gpuslice owns: written whole
  kJsonFeaturesCdi,  // docker's daemon.json: "features": {"cdi": true} set, the rest kept
  kTomlAppend,       // containerd's config.toml: appended once, never against what it sets
  kDockerHook,       // an executable gpuslice owns only when it carries kDockerHookMarker
};

struct ConfigChange {
  std::string path;     // absolute, without the root prefix; "" = nothing to write
  std::string content;  // what to add (or the whole file)
  std::string note;
  ConfigMerge merge = ConfigMerge::kReplace;
};

// The runtimes of the table, in its order: "containerd, crio, docker or podman" by default.
std::string RuntimeNames(const std::string& separator = ", ", const std::string& last_separator = " or ");

StatusOr<ConfigChange> PlanRuntimeConfig(const RuntimeConfigRequest& r);
Status ApplyRuntimeConfig(const RuntimeConfigRequest& r, const ConfigChange& c);

// docker's --gpus route: dockerd registers its "nvidia" device driver at start only when an
// executable of this name is on its PATH, and runs it as `<name> prestart` with the
// container's state on stdin. gpuslice's is a shell script that runs `gpuslice hook`; its
// second line is the marker that tells it from another program of the same name (the NVIDIA
// Container Toolkit's).
inline constexpr char kDockerHookName[] = "nvidia-container-runtime-hook";
inline constexpr char kDockerHookMarker[] = "# gpuslice-docker-hook: written by gpuslice runtime configure";

enum class HookFileOwner { kAbsent, kOurs, kForeign };

// Who owns `path`: absent; gpuslice's (a regular file whose second line is
// kDockerHookMarker); anything else, a symbolic link included, is foreign. Never follows a
// link.
HookFileOwner ClassifyHookFile(const std::string& path);

// Other executables named kDockerHookName in the directories of dockerd's usual PATH
// (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) under `root`, besides
// `ours`: the one dockerd runs is the first on its PATH.
std::vector<std::string> OtherDockerHooks(const std::string& root, const std::string& ours);

}  // namespace gs::container
