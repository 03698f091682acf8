#include "src/model/visible_devices.h"

#include <algorithm>
#include <sstream>

namespace gs::model {

StatusOr<VisibleDevices> ParseVisibleDevices(const std::string& value, bool set) {
  VisibleDevices v;
  if (!set || value.empty() || value == "void") return v;
  if (value == "none") {
    v.kind = Visibility::kNone;
    return v;
  }
  if (value == "all") {
    v.kind = Visibility::kAll;
    return v;
  }
  if (value[0] == '/')
    return InvalidArgument("NVIDIA_VISIBLE_DEVICES=" + value + ": volume-mount device lists are not supported");
  v.kind = Visibility::kList;
  std::stringstream in(value);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) continue;
    bool index = std::all_of(item.begin(), item.end(), ::isdigit) && item.size() < 4;
    bool uuid = item.rfind("GPU-", 0) == 0 && item.size() > 4 && item.size() < 80 &&
                std::all_of(item.begin() + 4, item.end(), [](char c) { return isxdigit(c) || c == '-'; });
    if (!index && !uuid)
      return InvalidArgument("NVIDIA_VISIBLE_DEVICES: '" + item +
                             "' is not a GPU index or UUID (MIG devices are not supported)");
    v.items.push_back(item);
  }
  if (v.items.empty()) v.kind = Visibility::kVoid;
  return v;
}

StatusOr<std::vector<Gpu>> SelectGpus(const VisibleDevices& v, const std::vector<Gpu>& gpus) {
  if (v.kind == Visibility::kAll) return gpus;
  std::vector<Gpu> out;
  for (const auto& item : v.items) {
    const Gpu* found = nullptr;
    for (const auto& g : gpus)
      if ((item[0] != 'G' && g.index == std::stoi(item)) || g.uuid == item) found = &g;
    if (found == nullptr) return InvalidArgument("NVIDIA_VISIBLE_DEVICES: no GPU '" + item + "' on this node");
    bool dup = false;
    for (const auto& o : out) dup |= o.uuid == found->uuid;
    if (!dup) out.push_back(*found);
  }
  return out;
}

}  // namespace gs::model
