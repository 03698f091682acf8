// KubeBinder (extender.h) over the Kubernetes API (src/kube/client.h): the calls bind
// makes.
//  - BindPod: POST pods/<name>/binding, a v1 Binding whose metadata.uid makes the API
//    server refuse it (409 Conflict, Aborted) if the pod was replaced by another of the
//    same name, and whose metadata.annotations the API server copies onto the pod as it
//    sets spec.nodeName (one write; pods/binding is the scheduler's own right, which the
//    webhook's rules on pods do not see);
//  - GetPod: GET the pod.
// Each call has its own deadline (kube-scheduler gives the whole bind 5 s by default).
//
// Created by `gpuslice scheduler`; thread-safe (the client is).
#pragma once

#include <chrono>
#include <string>

#include "src/kube/client.h"
#include "src/scheduler/extender.h"

namespace gs::scheduler {

class ApiBinder : public KubeBinder {
 public:
  explicit ApiBinder(kube::Client* client, std::chrono::milliseconds call_timeout = std::chrono::milliseconds(2000));

  Status BindPod(const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
                 const hami::Annotations& annotations) override;
  StatusOr<std::string> GetPod(const std::string& ns, const std::string& name) override;

 private:
  kube::Client* client_;
  std::chrono::milliseconds timeout_;
};

// "/api/v1/namespaces/<ns>/pods/<name>"; an error if either is empty or could change
// the path ('/', '?', '#', '%', '..').
StatusOr<std::string> PodPath(const std::string& ns, const std::string& name);

}  // namespace gs::scheduler
