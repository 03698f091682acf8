// CDI specs for gpuslice: one device per GPU by index and by UUID, and "all"; common
// edits for the control nodes, the driver files of the chosen capabilities, the enforcer
// and /etc/ld.so.preload. The spec declares the lowest cdiVersion its fields need, so
// podman 4.3 (which accepts up to 0.5.0) and current runtimes both load it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/container/edits_plan.h"

namespace gs::container {

struct CdiOptions {
  std::string kind = "gpuslice.io/gpu";
  PlanOptions plan;
};

StatusOr<nlohmann::json> GenerateCdiSpec(const CdiOptions& o, const std::vector<model::Gpu>& gpus);

// The lowest CDI version the spec's fields require (hostPath on device nodes: 0.5.0).
std::string MinimumCdiVersion(const nlohmann::json& spec);

std::string ToYaml(const nlohmann::json& spec);

// Validates a spec as a strict loader would (version, kind, device names, known fields);
// returns the qualified device names it offers.
StatusOr<std::vector<std::string>> CdiDeviceNames(const nlohmann::json& spec);

}  // namespace gs::container
