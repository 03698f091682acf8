// Small inventories for the scheduler's unit tests.
#pragma once

#include <string>

#include "src/scheduler/inventory.h"

namespace gs::scheduler::testing {

inline GpuDevice Card(const std::string& uuid, int index, int64_t memory_mib, int numa = 0,
                      const std::string& model = "NVIDIA-A100-SXM4-40GB", int slots = 10) {
  GpuDevice g;
  g.uuid = uuid;
  g.index = index;
  g.model = model;
  g.memory_mib = memory_mib;
  g.cores = 100;
  g.slots = slots;
  g.numa = numa;
  return g;
}

// A node with `cards` identical cards named <node>-gpu<i>, the first half on NUMA 0.
inline NodeInventory Node(const std::string& name, int cards, int64_t memory_mib = 40960, int slots = 10) {
  NodeInventory n;
  n.name = name;
  for (int i = 0; i < cards; ++i)
    n.gpus.push_back(
        Card(name + "-gpu" + std::to_string(i), i, memory_mib, i < cards / 2 ? 0 : 1, "NVIDIA-A100-SXM4-40GB", slots));
  return n;
}

}  // namespace gs::scheduler::testing
