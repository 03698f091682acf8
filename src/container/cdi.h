// CDI specs for gpuslice: one device per GPU by index and by UUID, and "all"; common
// edits for the control nodes, the driver files of the chosen capabilities, the enforcer,
// /etc/ld.so.preload and, where asked, the hooks that make each container's slice. The spec declares the lowest
// cdiVersion its fields need, so podman 4.3 (which accepts up to 0.5.0) and current runtimes both load it. Used by
// `gpuslice cdi` (src/cli/cdi_command.cc) and the node agent, which keeps a spec current.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/container/edits_plan.h"

namespace gs::container {

// The hooks that give each container of the CDI route a slice of its own (a createRuntime
// hook `gpuslice hook ... slice` and a poststop hook that removes it): the gpuslice binary
// on the host and the flags the hook needs. Empty `gpuslice`: no hooks (the node agent's
// spec, whose pods get their slices at Allocate).
struct CdiSliceHooks {
  std::string gpuslice;  // absolute
  std::string driver_root = "/";
  std::string state_dir = "/var/lib/gpuslice";
};

struct CdiOptions {
  std::string kind = "gpuslice.io/gpu";
  PlanOptions plan;
  CdiSliceHooks slice_hooks;
};

StatusOr<nlohmann::json> GenerateCdiSpec(const CdiOptions& o, const std::vector<model::Gpu>& gpus);

// The lowest CDI version the spec's fields require (hostPath on device nodes: 0.5.0).
std::string MinimumCdiVersion(const nlohmann::json& spec);

std::string ToYaml(const nlohmann::json& spec);

// Writes a spec's text to `output`: a file, or a directory (one that exists or a path
// ending in '/': then <dir>/gpuslice.<format>). Replaced by a rename, so runtimes never
// see a half-written spec. Returns the path written.
StatusOr<std::string> SaveCdiSpec(const std::string& text, std::string output, const std::string& format);

// Reads a spec file: JSON when its name ends in .json, else YAML. Errors name the file.
StatusOr<nlohmann::json> LoadCdiSpec(const std::string& path);

// Validates a spec as a strict loader would (version, kind, device names, known fields);
// returns the qualified device names it offers.
StatusOr<std::vector<std::string>> CdiDeviceNames(const nlohmann::json& spec);

}  // namespace gs::container
