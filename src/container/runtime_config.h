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
};

// How a change goes into its file.
enum class ConfigMerge {
  kReplace,          // a file gpuslice owns: written whole
  kJsonFeaturesCdi,  // docker's daemon.json: "features": {"cdi": true} set, the rest kept
  kTomlAppend,       // containerd's config.toml: appended once, never against what it sets
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

}  // namespace gs::container
