// What a pod asks for (PodRequest) and what the scheduler decided for it (PodDecision),
// in the scheduler's own words; hami_format.h and pod_spec.h translate from and to
// Kubernetes and HAMi.
//
// Rules (HAMi's, so HAMi pod specs keep their meaning):
//  - a container with gpus = 0 asks for nothing; its GPUs are `gpus` distinct cards;
//  - memory per card: memory_mib if set, else memory_percent of the card, else the whole
//    card;
//  - cores = 100 means the card exclusively: it goes only to a card no one uses;
//  - a card whose cores are all handed out takes no more containers, even cores = 0;
//  - type include/exclude match the card model as a case-insensitive substring; UUID
//    include/exclude match exactly; index include/exclude match the card's index on its
//    node (the "index" of hami.io/node-nvidia-register); an include list and an exclude
//    list of one kind both apply;
//  - numa_bind: all cards of one container on one NUMA node;
//  - a pod that states something gpuslice does not do (`refused`) fits nowhere.
//
// Plain values; no locking.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/common/status.h"

namespace gs::scheduler {

// binpack: fill the fullest node / card that fits first; spread: the emptiest first.
enum class Policy { kBinpack, kSpread };
StatusOr<Policy> ParsePolicy(std::string_view text);  // "binpack" | "spread"
const char* PolicyName(Policy p);

struct ContainerRequest {
  int gpus = 0;
  int64_t memory_mib = 0;  // 0 = not set
  int memory_percent = 0;  // 0 = not set; 1..100
  int cores = 0;           // percent of each card, 0..100
  bool exclusive() const { return cores >= 100; }
  bool operator==(const ContainerRequest&) const = default;
};

struct PodRequest {
  std::string uid, namespace_name, name;
  // One entry per container, init containers first (HAMi's order in its annotations).
  std::vector<ContainerRequest> containers;
  std::vector<std::string> use_types, nouse_types, use_uuids, nouse_uuids;
  std::vector<int> use_indexes, nouse_indexes;  // card indexes, ascending, each once
  bool numa_bind = false;
  std::optional<Policy> node_policy, gpu_policy;  // unset: the extender's defaults
  // Why the pod is placed nowhere: what it states that gpuslice does not implement, e.g.
  // "nvidia.com/vgpu-mode: mig is not supported by gpuslice". Empty: nothing.
  std::string refused;

  bool wants_gpus() const;
  bool operator==(const PodRequest&) const = default;
};

// Checks counts and ranges; the error names the container and the field.
Status ValidateRequest(const PodRequest& request);

// Memory one card of `card_memory_mib` gives this container.
int64_t MemoryOnCard(const ContainerRequest& c, int64_t card_memory_mib);

// One card's share given to one container.
struct DeviceShare {
  std::string uuid;
  std::string model;
  int64_t memory_mib = 0;
  int cores = 0;
  // The model is for people; HAMi's annotations carry the vendor ("NVIDIA") there, so
  // two shares are the same when card, memory and cores are.
  bool operator==(const DeviceShare& o) const {
    return uuid == o.uuid && memory_mib == o.memory_mib && cores == o.cores;
  }
};

struct PodDecision {
  std::string node;
  std::vector<std::vector<DeviceShare>> containers;  // parallel to PodRequest::containers
  bool operator==(const PodDecision&) const = default;
};

}  // namespace gs::scheduler
