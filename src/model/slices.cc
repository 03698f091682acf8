#include "src/model/slices.h"

#include <algorithm>
#include <cmath>

namespace gs::model {

Status SplitPolicy::Validate() const {
  if (split_count < 1 || split_count > 64)
    return InvalidArgument("--device-split-count: " + std::to_string(split_count) + " is out of range [1, 64]");
  if (!(memory_scaling > 0) || memory_scaling > 16)
    return InvalidArgument("--device-memory-scaling: " + std::to_string(memory_scaling) + " is out of range (0, 16]");
  if (!(cores_scaling > 0) || cores_scaling > split_count)
    return InvalidArgument("--device-cores-scaling: " + std::to_string(cores_scaling) +
                           " is out of range (0, device-split-count]");
  return Status::Ok();
}

uint64_t SplitPolicy::SliceMemory(uint64_t gpu_memory) const {
  double bytes = memory_scaling * static_cast<double>(gpu_memory) / split_count;
  return static_cast<uint64_t>(bytes) / (1ull << 20) * (1ull << 20);
}

unsigned SplitPolicy::SliceShare() const {
  double share = 100.0 * cores_scaling / split_count;
  if (share >= 100.0) return 0;  // C = K: no compute limit
  return std::max(1u, static_cast<unsigned>(std::lround(share)));
}

std::string SliceId(const std::string& uuid, int k) {
  return uuid + "::" + std::to_string(k);
}

bool ParseSliceId(const std::string& id, std::string* uuid, int* k) {
  auto sep = id.rfind("::");
  if (sep == std::string::npos || sep == 0 || sep + 2 >= id.size()) return false;
  const std::string num = id.substr(sep + 2);
  if (num.size() > 3 || !std::all_of(num.begin(), num.end(), [](unsigned char c) { return c >= '0' && c <= '9'; }))
    return false;
  *uuid = id.substr(0, sep);
  *k = std::stoi(num);
  return true;
}

std::vector<Slice> Split(const std::vector<Gpu>& gpus, const SplitPolicy& policy) {
  std::vector<Slice> slices;
  for (size_t g = 0; g < gpus.size(); ++g)
    for (int k = 0; k < policy.split_count; ++k)
      slices.push_back(
          {SliceId(gpus[g].uuid, k), static_cast<int>(g), k, policy.SliceMemory(gpus[g].memory), policy.SliceShare()});
  return slices;
}

namespace {
int GpuOf(const std::vector<Gpu>& gpus, const std::string& id) {
  std::string uuid;
  int k;
  if (!ParseSliceId(id, &uuid, &k)) return -1;
  for (size_t g = 0; g < gpus.size(); ++g)
    if (gpus[g].uuid == uuid) return static_cast<int>(g);
  return -1;
}
}  // namespace

std::vector<std::string> PreferSlices(const std::vector<Gpu>& gpus, const std::vector<std::string>& available,
                                      const std::vector<std::string>& must_include, int size,
                                      const std::map<std::string, int>& in_use, PackingPolicy policy) {
  std::vector<std::string> chosen(must_include.begin(), must_include.end());
  std::set<int> used_gpus;
  std::set<int> numa;
  for (const auto& id : chosen) {
    int g = GpuOf(gpus, id);
    if (g >= 0) {
      used_gpus.insert(g);
      numa.insert(gpus[g].numa_node);
    }
  }
  // Candidates grouped per GPU, lowest slice number first (deterministic answers).
  std::map<int, std::vector<std::string>> per_gpu;
  for (const auto& id : available) {
    if (std::find(chosen.begin(), chosen.end(), id) != chosen.end()) continue;
    int g = GpuOf(gpus, id);
    if (g >= 0 && gpus[g].healthy) per_gpu[g].push_back(id);
  }
  for (auto& [g, ids] : per_gpu) std::sort(ids.begin(), ids.end());
  auto load = [&](int g) {
    auto it = in_use.find(gpus[g].uuid);
    return it == in_use.end() ? 0 : it->second;
  };
  while (static_cast<int>(chosen.size()) < size) {
    int best = -1;
    auto better = [&](int a, int b) {  // is GPU a a better next pick than b?
      bool a_new = !used_gpus.count(a), b_new = !used_gpus.count(b);
      if (a_new != b_new) return a_new;  // distinct GPUs first
      bool a_local = numa.empty() || numa.count(gpus[a].numa_node),
           b_local = numa.empty() || numa.count(gpus[b].numa_node);
      if (a_local != b_local) return a_local;  // then NUMA locality
      if (load(a) != load(b)) return policy == PackingPolicy::kSpread ? load(a) < load(b) : load(a) > load(b);
      return a < b;
    };
    for (auto& [g, ids] : per_gpu)
      if (!ids.empty() && (best < 0 || better(g, best))) best = g;
    if (best < 0) break;  // not enough available: return what there is
    chosen.push_back(per_gpu[best].front());
    per_gpu[best].erase(per_gpu[best].begin());
    used_gpus.insert(best);
    numa.insert(gpus[best].numa_node);
  }
  return chosen;
}

StatusOr<Allocation> AllocationFor(const std::vector<Gpu>& gpus, const SplitPolicy& policy,
                                   const std::vector<std::string>& slice_ids) {
  Allocation a;
  a.oversubscribe = policy.oversubscribed();
  std::set<int> seen;
  for (const auto& id : slice_ids) {
    int g = GpuOf(gpus, id);
    if (g < 0) return InvalidArgument("unknown device ID '" + id + "' (expected <GPU-UUID>::<k> of this node)");
    std::string uuid;
    int k;
    ParseSliceId(id, &uuid, &k);
    if (k >= policy.split_count)
      return InvalidArgument("device ID '" + id + "': this node splits each GPU " + std::to_string(policy.split_count) +
                             " ways");
    if (!gpus[g].healthy) return FailedPrecondition("device '" + id + "' is on unhealthy GPU " + uuid);
    if (!seen.insert(g).second)
      return InvalidArgument("two slices of GPU " + uuid +
                             " requested for one container; a container's slices must "
                             "come from distinct GPUs (request fewer, or enable --enable-legacy-preferred)");
    a.devices.push_back({uuid, gpus[g].minor, policy.SliceMemory(gpus[g].memory), policy.SliceShare()});
  }
  return a;
}

StatusOr<std::vector<std::string>> LegacyDistinct(const std::vector<Gpu>& gpus, const SplitPolicy& policy,
                                                  const std::vector<std::string>& requested,
                                                  const std::set<std::string>& taken) {
  std::set<int> seen;
  bool clash = false;
  for (const auto& id : requested) clash |= !seen.insert(GpuOf(gpus, id)).second;
  if (!clash) return requested;
  std::vector<std::string> out;
  std::set<int> used;
  for (const auto& id : requested) {
    int g = GpuOf(gpus, id);
    if (g >= 0 && used.insert(g).second) {
      out.push_back(id);
      continue;
    }
    bool found = false;
    for (size_t h = 0; h < gpus.size() && !found; ++h) {
      if (used.count(static_cast<int>(h)) || !gpus[h].healthy) continue;
      for (int k = 0; k < policy.split_count && !found; ++k) {
        std::string cand = SliceId(gpus[h].uuid, k);
        if (taken.count(cand)) continue;
        out.push_back(cand);
        used.insert(static_cast<int>(h));
        found = true;
      }
    }
    if (!found)
      return FailedPrecondition("cannot place " + std::to_string(requested.size()) +
                                " slices on distinct GPUs: not enough GPUs with a free slice");
  }
  return out;
}

}  // namespace gs::model
