// The GPUs of one node as the scheduler sees them: what each card has in total, not what
// is in use (that is the ledger's job, see ledger.h). Filled from the node agent's
// hami.io/node-nvidia-register annotation (hami_format.h) or from a file.
//
// Plain values; no locking. Validation is O(GPUs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/common/status.h"

namespace gs::scheduler {

struct GpuDevice {
  std::string uuid;        // "GPU-…", unique on the node
  int index = 0;           // the driver's index on the node
  std::string model;       // e.g. "NVIDIA-H100-80GB-HBM3" (type include/exclude match this)
  int64_t memory_mib = 0;  // memory the scheduler may hand out
  int cores = 100;         // compute share in percent; 100 is the whole card
  int slots = 1;           // most containers that may share the card at once
  int numa = 0;            // NUMA node of the card
  bool healthy = true;
  bool cordoned = false;  // named by the node's hami.io/device-cordon: no new containers
};

struct NodeInventory {
  std::string name;
  std::vector<GpuDevice> gpus;
};

// Checks what the placement code relies on: a node name, unique non-empty UUIDs,
// positive memory, cores in 1..100, at least one slot, NUMA >= 0. The error names the
// node, the card and the field.
Status ValidateNode(const NodeInventory& node);

}  // namespace gs::scheduler
