#include "src/enforcer/allocations.h"

namespace gs::enforcer {

void Allocations::Add(HandleKind kind, uint64_t handle, Charge c) {
  std::lock_guard<std::mutex> lock(mu_);
  maps_[static_cast<int>(kind)][handle] = c;
}

void Allocations::Accumulate(HandleKind kind, uint64_t handle, int device, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Charge& c = maps_[static_cast<int>(kind)][handle];
  c.device = device;
  c.bytes += bytes;
}

bool Allocations::Take(HandleKind kind, uint64_t handle, Charge* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& m = maps_[static_cast<int>(kind)];
  auto it = m.find(handle);
  if (it == m.end()) return false;
  *out = it->second;
  m.erase(it);
  return true;
}

void Allocations::TakeContext(uint64_t context, uint64_t* bytes, uint64_t* spilled, int devices) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& m : maps_) {
    for (auto it = m.begin(); it != m.end();) {
      const Charge& c = it->second;
      if (c.context != context || c.device < 0 || c.device >= devices) {
        ++it;
        continue;
      }
      (c.spilled ? spilled : bytes)[c.device] += c.bytes;
      it = m.erase(it);
    }
  }
}

void Allocations::ForgetAll() {
  for (auto& m : maps_) m.clear();
}

uint64_t Allocations::Total(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t t = 0;
  for (auto& m : maps_)
    for (auto& [h, c] : m)
      if (c.device == device) t += c.bytes;
  return t;
}

Allocations& TheAllocations() {
  static Allocations* a = new Allocations;  // never destroyed: hooks may run during exit
  return *a;
}

}  // namespace gs::enforcer
