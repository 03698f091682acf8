// GPUs split into vGPU slices (docs/node-agent.md), and where a request's slices go.
//
// A GPU of M bytes split K ways with memory scaling S and cores scaling C gives K slices
// of S*M/K bytes and 100*C/K percent SM share each (C = K: no compute limit; S > 1:
// virtual device memory). Slice k of a GPU has device ID "<GPU-UUID>::<k>".
// Pure: no I/O, no clocks.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/model/container_edits.h"

namespace gs::model {

struct Gpu {
  std::string uuid;
  int index = 0;
  std::string name;
  uint64_t memory = 0;  // bytes
  int numa_node = -1;   // -1: unknown
  unsigned minor = 0;
  bool healthy = true;
};

struct SplitPolicy {
  int split_count = 2;          // --device-split-count, 1..64
  double memory_scaling = 1.0;  // --device-memory-scaling, > 0; > 1 = virtual device memory
  double cores_scaling = 1.0;   // --device-cores-scaling, > 0
  Status Validate() const;
  bool oversubscribed() const { return memory_scaling > 1.0; }
  uint64_t SliceMemory(uint64_t gpu_memory) const;  // whole MiB, rounded down
  unsigned SliceShare() const;                      // percent; 0 = no limit
};

struct Slice {
  std::string id;  // "<uuid>::<k>"
  int gpu = 0;     // index into the GPU list
  int k = 0;
  uint64_t memory_limit = 0;
  unsigned sm_share = 0;
};

std::string SliceId(const std::string& uuid, int k);
// Splits "<uuid>::<k>"; false for anything else.
bool ParseSliceId(const std::string& id, std::string* uuid, int* k);

std::vector<Slice> Split(const std::vector<Gpu>& gpus, const SplitPolicy& policy);

enum class PackingPolicy { kSpread, kBinpack };

// GetPreferredAllocation: `size` IDs out of `available` (which includes must_include),
// on distinct GPUs first, then NUMA-local to each other, then by policy: spread prefers
// GPUs with the fewest slices in use (`in_use` counts per GPU UUID), binpack the most.
std::vector<std::string> PreferSlices(const std::vector<Gpu>& gpus, const std::vector<std::string>& available,
                                      const std::vector<std::string>& must_include, int size,
                                      const std::map<std::string, int>& in_use, PackingPolicy policy);

// Allocate: the grants for the requested slice IDs. Fails, naming the problem, for an
// unknown or unhealthy ID, or for two slices of one GPU (a container's slices must come
// from distinct GPUs).
StatusOr<Allocation> AllocationFor(const std::vector<Gpu>& gpus, const SplitPolicy& policy,
                                   const std::vector<std::string>& slice_ids);

// --enable-legacy-preferred: re-maps requested IDs so that no two share a GPU, using
// IDs not in `taken`; returns the IDs unchanged when they already are distinct.
StatusOr<std::vector<std::string>> LegacyDistinct(const std::vector<Gpu>& gpus, const SplitPolicy& policy,
                                                  const std::vector<std::string>& requested,
                                                  const std::set<std::string>& taken);

}  // namespace gs::model
