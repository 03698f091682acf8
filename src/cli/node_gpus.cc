#include "src/cli/node_gpus.h"

namespace gs::cli {

model::Gpu ToModelGpu(const platform::GpuInfo& g) {
  return {g.uuid, g.index, g.name, g.memory_total, g.numa_node, g.minor, !g.lost};
}

StatusOr<NodeGpus> OpenNodeGpus(const std::string& driver_root) {
  NodeGpus n;
  GS_ASSIGN_OR_RETURN(n.driver, platform::OpenNvmlGpuDriver(driver_root));
  auto infos = n.driver->ListGpus();
  if (!infos.ok()) return Status(infos.status().code(), "cannot list GPUs: " + infos.status().message());
  n.infos = std::move(*infos);
  for (const auto& g : n.infos) n.gpus.push_back(ToModelGpu(g));
  return n;
}

}  // namespace gs::cli
