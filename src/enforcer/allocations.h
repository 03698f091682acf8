// What this process has charged to the region, by handle, so every free returns exactly
// what its allocation counted. One table per kind of handle (device pointers, arrays,
// VMM handles, graphs, contexts, modules, libraries), since their values may collide.
// Thread-safe (one mutex; not on the launch path).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace gs::enforcer {

enum class HandleKind {
  kPointer,
  kArray,
  kMipmappedArray,
  kVmm,
  kGraph,
  kModule,
  kLibrary,
  kContext,
  kContextLimit,
  kCount
};

struct Charge {
  int device = -1;
  uint64_t bytes = 0;
  bool spilled = false;  // host-backed (virtual device memory)
  uint64_t context = 0;  // the CUcontext it lives in: destroying or resetting it frees it
};

class Allocations {
 public:
  void Add(HandleKind kind, uint64_t handle, Charge c);
  // Adds bytes to an existing entry (graphs accumulate their memory nodes).
  void Accumulate(HandleKind kind, uint64_t handle, int device, uint64_t bytes);
  // Removes and returns the entry; false if unknown (allocated before the enforcer saw it).
  bool Take(HandleKind kind, uint64_t handle, Charge* out);
  // Removes every entry of a context (destroyed or reset: the driver freed them all) and
  // adds their bytes per device into bytes[device] / spilled[device] (arrays of `devices`).
  void TakeContext(uint64_t context, uint64_t* bytes, uint64_t* spilled, int devices);
  // Total bytes held by this process on a device (for tests and views).
  uint64_t Total(int device);
  // fork(): the child holds none of its parent's allocations. Lock in the parent before
  // fork, unlock in both after, and Forget in the child.
  void LockForFork() { mu_.lock(); }
  void UnlockAfterFork() { mu_.unlock(); }
  void ForgetAll();

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, Charge> maps_[static_cast<int>(HandleKind::kCount)];
};

Allocations& TheAllocations();

}  // namespace gs::enforcer
