// `gpuslice runtime configure`: the runtime configuration that turns on one of the two
// routes (CDI, or the OCI hook), printed, or applied with --write. Applying is idempotent
// and merges into existing files instead of replacing them; a file that contradicts the
// change is left alone with an error that says what to change by hand.
#pragma once

#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::container {

struct RuntimeConfigRequest {
  std::string runtime;       // containerd, crio, docker, podman
  std::string mode = "cdi";  // cdi or hook
  std::string root;          // prefix for --write (tests); "" = /
  std::string gpuslice_path = "/usr/bin/gpuslice";
  std::string enforcer_path = "/usr/lib/gpuslice/libgpuslice.so";
  std::string driver_root;  // passed to the hook when set (simulated nodes)
  std::string state_dir;    // passed to the hook when set
};

struct ConfigChange {
  std::string path;     // absolute, without the root prefix
  std::string content;  // what to add (or the whole file)
  std::string note;
};

StatusOr<ConfigChange> PlanRuntimeConfig(const RuntimeConfigRequest& r);
Status ApplyRuntimeConfig(const RuntimeConfigRequest& r, const ConfigChange& c);

int RuntimeCommand(const std::vector<std::string>& args);

}  // namespace gs::container
