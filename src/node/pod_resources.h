// The kubelet's pod-resources API (v1 List): which container holds which devices. Used
// for metrics labels and to keep only the region directories of containers that exist.
#pragma once

#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::node {

struct ContainerDevices {
  std::string pod, ns, container;
  std::string resource;
  std::vector<std::string> device_ids;
};

// Lists containers with devices of `resource` (all resources when empty). Unavailable
// when the socket is missing or the call fails (the caller keeps its last view).
StatusOr<std::vector<ContainerDevices>> ListPodResources(const std::string& socket, const std::string& resource);

}  // namespace gs::node
