// What this process has charged to the region, by handle, so every free returns exactly
// what its allocation counted. One table per kind of handle (device pointers, arrays,
// VMM handles, graphs, contexts, modules, libraries), since their values may collide.
// Thread-safe (one mutex; not on the launch path).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace gs::enforcer {

enum class HandleKind { kPointer, kArray, kMipmappedArray, kVmm, kGraph, kModule, kLibrary, kCount };

struct Charge {
  int device = -1;
  uint64_t bytes = 0;
  bool spilled = false;  // host-backed (virtual device memory)
};

class Allocations {
 public:
  void Add(HandleKind kind, uint64_t handle, Charge c);
  // Adds bytes to an existing entry (graphs accumulate their memory nodes).
  void Accumulate(HandleKind kind, uint64_t handle, int device, uint64_t bytes);
  // Removes and returns the entry; false if unknown (allocated before the enforcer saw it).
  bool Take(HandleKind kind, uint64_t handle, Charge* out);
  // Total bytes held by this process on a device (for tests and views).
  uint64_t Total(int device);

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, Charge> maps_[static_cast<int>(HandleKind::kCount)];
};

Allocations& TheAllocations();

}  // namespace gs::enforcer
