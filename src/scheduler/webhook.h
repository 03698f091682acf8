// The mutating admission webhook for pods (AdmissionReview admission.k8s.io/v1). The
// resource names below are HAMi's defaults; WebhookOptions::resources may name others
// (the chart's resourceCountName ...), as the extender reads them (pod_spec.h):
//  - a pod whose containers or init containers request or limit nvidia.com/gpu, gpumem,
//    gpumem-percentage or gpucores gets spec.schedulerName = the configured name, when
//    it names no scheduler or "default-scheduler". A pod that names another scheduler
//    keeps it: someone chose that scheduler on purpose (a batch scheduler, a second
//    profile), and silently overriding the choice would be worse than not placing its
//    GPUs through us;
//  - a container asking for gpumem, gpumem-percentage or gpucores without nvidia.com/gpu
//    gets nvidia.com/gpu: resources.default_gpu_num (HAMi's defaultGPUNum, 1; without it
//    kubelet never asks the device plugin for that container; 0 adds nothing, and the
//    extender refuses such a container);
//  - the decision annotations (hami.io/vgpu-node, vgpu-time, vgpu-devices-to-allocate,
//    vgpu-devices-allocated, bind-time, bind-phase) may only be written by the scheduler
//    and the node agent (HAMi #3041): on CREATE they are removed; on UPDATE by anyone
//    not in `trusted_users` they are put back as they were on the old object (removed if
//    it had none). Any pod, GPU or not, is cleaned.
// Errors: the webhook never refuses a pod because of its own trouble. A review it cannot
// read is answered allowed, without a patch, with a warning naming the problem (and an
// empty uid if it had none, which the API server counts as a failed call, so the
// webhook's failurePolicy decides). The ledger's own rule, that a decision counts only on
// a pod bound to the node it names, still guards against what slips through.
//
// Pure and thread-safe; served over HTTPS by webhook_http.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "src/scheduler/pod_spec.h"

namespace gs::scheduler {

struct WebhookOptions {
  std::string scheduler_name = "gpuslice-scheduler";
  // The resource names and the card count added (the extender's, so both read a pod alike).
  PodSpecOptions resources;
  // request.userInfo.username values allowed to change decision annotations on UPDATE,
  // e.g. "system:serviceaccount:gpuslice-system:gpuslice-scheduler".
  std::vector<std::string> trusted_users;
};

// AdmissionReview JSON in, AdmissionReview JSON out (response.patch is base64 JSONPatch).
std::string MutatePodReview(std::string_view review, const WebhookOptions& options);

// "/metadata/annotations/<key>" with '~' and '/' escaped as RFC 6901 says.
std::string AnnotationPointer(std::string_view key);

}  // namespace gs::scheduler
