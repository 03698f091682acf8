// A Kubernetes Pod (JSON, as kube-scheduler sends it to an extender) to a PodRequest:
// the GPU resources of each container (init containers first, HAMi's order), the
// request annotations (hami_format.h) and the pod's identity. Decision annotations a
// user wrote on the pod (hami.io/vgpu-*) are never read here: only bind writes them.
//
// The resource names and HAMi's admission defaults come from PodSpecOptions (the chart's
// resourceCountName ... memoryFactor; `gpuslice scheduler --resource-count-name`,
// `--default-memory`, ...), applied as HAMi's webhook and scheduler apply them
// (pkg/device/nvidia/device.go, MutateAdmission and GenerateResourceRequests):
//  - gpumem / gpumem-percentage / gpucores without a card count: default_gpu_num cards
//    (0: the container is an error, since no card would be added and the rest would be
//    ignored);
//  - gpumem is in units of memory_factor MiB; gpumem-percentage is not scaled;
//  - no memory asked (gpumem and gpumem-percentage absent or 0): default_memory_mib,
//    0 = the whole card;
//  - no gpucores: 100 (the card exclusively) when the container states no gpumem and no
//    gpumem-percentage, or gpumem-percentage 100; otherwise default_cores;
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

// How a pod's GPU resources are read: HAMi's chart settings for NVIDIA cards, with
// HAMi's defaults.
struct PodSpecOptions {
  std::string count_name = hami::kResourceGpu;                     // resourceCountName
  std::string memory_name = hami::kResourceMemory;                 // resourceMemoryName
  std::string memory_percent_name = hami::kResourceMemoryPercent;  // resourceMemoryPercentageName
  std::string cores_name = hami::kResourceCores;                   // resourceCoreName
  int64_t default_memory_mib = 0;                                  // defaultMemory; 0 = the whole card
  int default_cores = 0;                                           // defaultCores, 0..100
  int default_gpu_num = 1;                                         // defaultGPUNum, 0..64
  int64_t memory_factor = 1;                                       // memoryFactor: MiB per unit of gpumem
};

// Upper limits of the numeric settings (the lower ones are 0, memory_factor's 1).
inline constexpr int64_t kMaxDefaultMemoryMib = INT32_MAX;  // HAMi's int32
inline constexpr int kMaxDefaultGpuNum = 64;                // the most cards one container may ask
inline constexpr int64_t kMaxMemoryFactor = 1 << 20;

// OK when `name` is a valid Kubernetes extended resource name: "<domain>/<name>", the
// domain a DNS subdomain outside kubernetes.io, the name at most 63 characters of
// [A-Za-z0-9._-] starting and ending with a letter or digit (Kubernetes'
// IsExtendedResourceName). The error says what is wrong.
Status CheckExtendedResourceName(std::string_view name);

StatusOr<PodRequest> PodRequestFromJson(const nlohmann::json& pod, const PodSpecOptions& options = {});

// object[key] when `object` is a JSON object and that member a string, else "". Never
// throws, whatever the input (nlohmann's value(key, "") throws on a non-string member).
std::string StringField(const nlohmann::json& object, const char* key);

// metadata.annotations as a map (missing = empty). Non-string values are an error.
StatusOr<hami::Annotations> PodAnnotations(const nlohmann::json& pod);

// A Kubernetes quantity as a whole number: "2", "3k", "1Gi", "5e3". Fractions ("1.5",
// "500m") and overflow are errors.
StatusOr<int64_t> ParseKubeQuantity(std::string_view text);

}  // namespace gs::scheduler
