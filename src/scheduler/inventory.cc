#include "src/scheduler/inventory.h"

#include <set>

namespace gs::scheduler {

Status ValidateNode(const NodeInventory& node) {
  if (node.name.empty()) return InvalidArgument("node inventory: empty node name");
  std::set<std::string> seen;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuDevice& g = node.gpus[i];
    std::string where = "node " + node.name + " GPU #" + std::to_string(i) + " (" + g.uuid + ")";
    if (g.uuid.empty()) return InvalidArgument("node " + node.name + " GPU #" + std::to_string(i) + ": empty uuid");
    if (!seen.insert(g.uuid).second) return InvalidArgument(where + ": uuid listed twice");
    if (g.memory_mib <= 0) return InvalidArgument(where + ": memory must be > 0 MiB");
    if (g.cores < 1 || g.cores > 100) return InvalidArgument(where + ": cores must be 1..100");
    if (g.slots < 1) return InvalidArgument(where + ": slots (containers per card) must be >= 1");
    if (g.numa < 0) return InvalidArgument(where + ": numa must be >= 0");
    if (g.index < 0) return InvalidArgument(where + ": index must be >= 0");
  }
  return Status::Ok();
}

}  // namespace gs::scheduler
