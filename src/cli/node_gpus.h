// The node's GPUs from a driver root: NVML opened there, its GPUs listed, and each one as
// the domain sees it (model::Gpu). Every command that needs the GPUs (node, hook, cdi,
// run) starts here, so the driver's GpuInfo becomes a model::Gpu in one place.
//
// Thread-safety: the functions are; the driver is as GpuDriver says.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/model/slices.h"
#include "src/platform/gpu_driver.h"

namespace gs::cli {

struct NodeGpus {
  std::unique_ptr<platform::GpuDriver> driver;
  std::vector<platform::GpuInfo> infos;  // as the driver reported them
  std::vector<model::Gpu> gpus;          // the same GPUs, in the same order
};

// The domain's view of one GPU the driver reports (a lost GPU is unhealthy).
model::Gpu ToModelGpu(const platform::GpuInfo& g);

// NVML from driver_root ("/" for the system's) and its GPUs. Errors: NVML's own reason
// when it cannot be loaded or initialised; "cannot list GPUs: ..." when it cannot count
// them. No GPUs is not an error.
StatusOr<NodeGpus> OpenNodeGpus(const std::string& driver_root);

}  // namespace gs::cli
