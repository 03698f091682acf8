#include "src/enforcer/limits.h"

#include <cstdio>
#include <cstring>

#include "src/common/raw_log.h"
#include "src/enforcer/enforcer.h"

namespace gs::enforcer {

uint64_t MemoryLimit(int dev) {
  return dev >= 0 && dev < kMaxDevices ? g_state.cfg.memory_limit[dev] : 0;
}

unsigned SmShare(int dev) {
  return dev >= 0 && dev < kMaxDevices ? g_state.cfg.sm_limit[dev] : 0;
}

int CardEntry(int dev) {
  return dev >= 0 && dev < kMaxDevices ? static_cast<int>(g_state.cfg.card_entry[dev]) - 1 : -1;
}

bool AnyMemoryLimit() {
  static const bool any = [] {
    for (uint64_t l : g_state.cfg.memory_limit)
      if (l) return true;
    return false;
  }();
  return any;
}

bool CardsNamed() {
  for (const auto& uuid : g_state.cfg.device_uuid)
    if (uuid[0]) return true;
  return false;
}

int BindDevice(region::Region* r, const char* uuid, int visible_index) {
  int idx = -1;
  bool keyed = CardsNamed();
  for (int i = 0; keyed && i < kMaxDevices; ++i)
    if (g_state.cfg.device_uuid[i][0] && strcmp(g_state.cfg.device_uuid[i], uuid) == 0) idx = i;
  if (!keyed) idx = visible_index >= 0 && visible_index < kMaxDevices ? visible_index : -1;
  if (idx < 0) return -1;
  region::Device& d = r->devices[idx];
  if (strncmp(d.uuid, uuid, sizeof(d.uuid)) != 0) {
    if (d.uuid[0]) GS_LOG(kWarn, "region device %d was %.96s, is %s (re-bound by the limits)", idx, d.uuid, uuid);
    snprintf(d.uuid, sizeof(d.uuid), "%s", uuid);
  }
  if (static_cast<uint32_t>(idx) + 1 > r->device_count.load()) r->device_count.store(static_cast<uint32_t>(idx) + 1);
  return idx;
}

bool LimitedView(int dev, uint64_t physical_total, uint64_t physical_free, region::MemoryView* out) {
  uint64_t limit = MemoryLimit(dev);
  if (limit == 0 || g_state.region == nullptr) return false;
  *out = region::ViewMemory(g_state.region, dev, limit, physical_total);
  if (!g_state.cfg.oversubscribe && out->free > physical_free) out->free = physical_free;
  return true;
}

}  // namespace gs::enforcer
