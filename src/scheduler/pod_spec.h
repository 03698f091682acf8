// A Kubernetes Pod (JSON, as kube-scheduler sends it to an extender) to a PodRequest:
// the GPU resources of each container (init containers first, HAMi's order), the
// request annotations (hami_format.h) and the pod's identity. Decision annotations a
// user wrote on the pod (hami.io/vgpu-*) are never read here: only bind writes them.
//
// HAMi's admission defaults are applied, as its webhook would have:
//  - gpumem / gpumem-percentage / gpucores without nvidia.com/gpu: one GPU;
//  - nvidia.com/gpu with neither gpumem nor gpumem-percentage (or 100 %) and no gpucores:
//    the whole card, exclusively (gpucores = 100);
//  - limits first, requests if there is no limit.
// Quantities are Kubernetes' ("3k" = 3000, "1Gi"), and must be whole numbers.
//
// What a GPU container states that HAMi acts on and gpuslice does not implement (the
// nvidia.com/priority resource; CUDA_DISABLE_CONTROL true, GPU_CORE_UTILIZATION_POLICY
// disable or a CUDA_TASK_PRIORITY better than the granted 1 in its env) goes to the request's
// `refused`, as unsupported annotations do (hami_format.h).
//
// Pure; O(size of the pod).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "src/common/status.h"
#include "src/scheduler/hami_format.h"
#include "src/scheduler/request.h"

namespace gs::scheduler {

StatusOr<PodRequest> PodRequestFromJson(const nlohmann::json& pod);

// object[key] when `object` is a JSON object and that member a string, else "". Never
// throws, whatever the input (nlohmann's value(key, "") throws on a non-string member).
std::string StringField(const nlohmann::json& object, const char* key);

// metadata.annotations as a map (missing = empty). Non-string values are an error.
StatusOr<hami::Annotations> PodAnnotations(const nlohmann::json& pod);

// A Kubernetes quantity as a whole number: "2", "3k", "1Gi", "5e3". Fractions ("1.5",
// "500m") and overflow are errors.
StatusOr<int64_t> ParseKubeQuantity(std::string_view text);

}  // namespace gs::scheduler
