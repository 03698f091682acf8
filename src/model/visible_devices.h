// NVIDIA_VISIBLE_DEVICES as the NVIDIA container toolkit defines it: unset, empty or
// "void" (leave the container alone), "none" (the driver but no GPU), "all", or a comma
// list of indices and GPU UUIDs (what `docker --gpus` produces). Pure.
#pragma once

#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/model/slices.h"

namespace gs::model {

enum class Visibility { kVoid, kNone, kAll, kList };

struct VisibleDevices {
  Visibility kind = Visibility::kVoid;
  std::vector<std::string> items;
};

// `set` is whether the variable exists at all. Errors name the bad entry.
StatusOr<VisibleDevices> ParseVisibleDevices(const std::string& value, bool set);

// The GPUs a request selects, in request order, without duplicates.
StatusOr<std::vector<Gpu>> SelectGpus(const VisibleDevices& v, const std::vector<Gpu>& gpus);

}  // namespace gs::model
