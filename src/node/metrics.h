// Prometheus metrics of a node: per GPU (memory, utilisation, slices, health) and per
// container slice (memory used and limit, spilled bytes, SM utilisation and share)
// labelled pod/namespace/container/uuid, in gpuslice_* names and the classic cAdvisor
// accelerator names; and how long the agent took to answer Allocate. Rendering is a pure
// function; Collect gathers the inputs.
#pragma once

#include <string>
#include <vector>

#include "src/node/latency_histogram.h"
#include "src/node/pod_resources.h"
#include "src/node/slice_book.h"
#include "src/platform/gpu_driver.h"

namespace gs::node {

struct GpuUsage {
  platform::GpuInfo info;
  std::string uuid;  // from the book (valid even when the GPU is lost)
  int slices_total = 0, slices_allocated = 0;
  bool healthy = true;
};

struct SliceUsage {
  std::string pod, ns, container, allocation, uuid, model;
  uint64_t limit = 0, used = 0, spilled = 0;
  unsigned sm_util = 0, sm_share = 0;  // percent; share 0 = no limit
};

std::string RenderMetrics(const std::vector<GpuUsage>& gpus, const std::vector<SliceUsage>& slices,
                          const LatencyHistogram::Snapshot& allocate);

// Gathers from the driver, the book, the regions and pod-resources.
std::string CollectMetrics(platform::GpuDriver* driver, const SliceBook& book,
                           const std::vector<ContainerDevices>& pods, const LatencyHistogram& allocate);

}  // namespace gs::node
