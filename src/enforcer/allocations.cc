#include "src/enforcer/allocations.h"

#include <algorithm>
#include <iterator>
#include <vector>

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
  return TakeLocked(kind, handle, out);
}

bool Allocations::Find(HandleKind kind, uint64_t handle, Charge* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& m = maps_[static_cast<int>(kind)];
  auto it = m.find(handle);
  if (it == m.end()) return false;
  *out = it->second;
  return true;
}

bool Allocations::TakeLocked(HandleKind kind, uint64_t handle, Charge* out) {
  auto& m = maps_[static_cast<int>(kind)];
  auto it = m.find(handle);
  if (it == m.end()) return false;
  *out = it->second;
  m.erase(it);
  return true;
}

void Allocations::GraphInstantiated(uint64_t exec, uint64_t graph) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = exec_graph_.emplace(exec, graph);
  if (!fresh) {  // a handle value handed out again: the old executable is gone
    if (--graph_execs_[it->second] <= 0) graph_execs_.erase(it->second);
    it->second = graph;
  }
  ++graph_execs_[graph];
}

bool Allocations::GraphDestroyed(uint64_t graph, Charge* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (graph_execs_.count(graph) != 0) {
    destroyed_graphs_.insert(graph);
    return false;
  }
  return TakeLocked(HandleKind::kGraph, graph, out);
}

bool Allocations::GraphExecDestroyed(uint64_t exec, Charge* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exec_graph_.find(exec);
  if (it == exec_graph_.end()) return false;
  const uint64_t graph = it->second;
  exec_graph_.erase(it);
  if (--graph_execs_[graph] > 0) return false;
  graph_execs_.erase(graph);
  if (destroyed_graphs_.erase(graph) == 0) return false;
  return TakeLocked(HandleKind::kGraph, graph, out);
}

void Allocations::GraphMoved(uint64_t child, uint64_t parent) {
  std::lock_guard<std::mutex> lock(mu_);
  Charge c;
  if (child == parent || !TakeLocked(HandleKind::kGraph, child, &c)) return;
  Charge& p = maps_[static_cast<int>(HandleKind::kGraph)][parent];
  p.device = c.device;
  p.bytes += c.bytes;
}

bool Allocations::MarkExported(HandleKind kind, uint64_t handle) {
  return Update(kind, handle, [](Charge& c) { c.exported = true; });
}

bool Allocations::MarkFollowed(HandleKind kind, uint64_t handle, uint64_t piece) {
  return Update(kind, handle, [piece](Charge& c) { c.piece = piece; });
}

bool Allocations::ReopenedIpc(uint64_t ptr) {
  bool ipc = false;
  Update(HandleKind::kPointer, ptr, [&ipc](Charge& c) {
    ipc = c.ipc_opens > 0;
    if (ipc) ++c.ipc_opens;
  });
  return ipc;
}

bool Allocations::ClosedIpc(uint64_t ptr, Charge* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& m = maps_[static_cast<int>(HandleKind::kPointer)];
  auto it = m.find(ptr);
  if (it == m.end()) return false;
  if (it->second.ipc_opens > 1) {
    --it->second.ipc_opens;
    return false;
  }
  *out = it->second;
  m.erase(it);
  return true;
}

void Allocations::MarkPoolExported(uint64_t pool) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [ptr, c] : maps_[static_cast<int>(HandleKind::kPointer)])
    if (c.pool == pool) c.exported = true;
}

void Allocations::TakeContext(uint64_t context, int devices, uint64_t* bytes, uint64_t* spilled, uint64_t* kept,
                              std::vector<std::pair<uint64_t, Charge>>* shared) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& m : maps_) {
    for (auto it = m.begin(); it != m.end();) {
      const Charge& c = it->second;
      if (c.context != context || c.device < 0 || c.device >= devices) {
        ++it;
        continue;
      }
      if ((c.exported && c.pool && !c.spilled) || c.imported) {
        shared->emplace_back(it->first, c);
      } else {
        (c.spilled ? spilled : c.exported ? kept : bytes)[c.device] += c.bytes;
        if (c.exported && c.piece) {
          Charge record = c;
          record.bytes = 0;
          shared->emplace_back(it->first, record);
        }
      }
      it = m.erase(it);
    }
  }
}

void Allocations::ForgetAll() {
  for (auto& m : maps_) m.clear();
  exec_graph_.clear();
  graph_execs_.clear();
  destroyed_graphs_.clear();
}

uint64_t Allocations::Total(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t t = 0;
  for (auto& m : maps_)
    for (auto& [h, c] : m)
      if (c.device == device) t += c.bytes;
  return t;
}

void GraphMemoryBook::Held(int dev, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  held_[dev] += bytes;
}

uint64_t GraphMemoryBook::Trimmed(int dev, uint64_t reserved) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(dev);
  if (it == held_.end() || it->second <= reserved) return 0;
  uint64_t back = it->second - reserved;
  if (reserved == 0)
    held_.erase(it);
  else
    it->second = reserved;
  return back;
}

uint64_t GraphMemoryBook::HeldOn(int dev) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(dev);
  return it == held_.end() ? 0 : it->second;
}

void GraphMemoryBook::ForgetAll() {
  held_.clear();
}

GraphMemoryBook& TheGraphMemoryBook() {
  static GraphMemoryBook* b = new GraphMemoryBook;  // never destroyed: hooks may run during exit
  return *b;
}

Allocations& TheAllocations() {
  static Allocations* a = new Allocations;  // never destroyed: hooks may run during exit
  return *a;
}

// ---- pools ----------------------------------------------------------------------------------

void PoolBook::Freed(uint64_t pool, int dev, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Held& h = held_[pool];
  h.device = dev;
  h.bytes += bytes;
}

uint64_t PoolBook::Take(uint64_t pool, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(pool);
  if (it == held_.end()) return 0;
  uint64_t taken = std::min(bytes, it->second.bytes);
  it->second.bytes -= taken;
  if (it->second.bytes == 0) held_.erase(it);
  return taken;
}

uint64_t PoolBook::Trimmed(uint64_t pool, uint64_t free_bytes, int* dev) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(pool);
  if (it == held_.end() || it->second.bytes <= free_bytes) return 0;
  uint64_t back = it->second.bytes - free_bytes;
  *dev = it->second.device;
  it->second.bytes = free_bytes;
  if (free_bytes == 0) held_.erase(it);
  return back;
}

int PoolBook::PoolsOn(int dev, uint64_t* out, int max) {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [pool, h] : held_)
    if (h.device == dev && n < max) out[n++] = pool;
  return n;
}

void PoolBook::Exported(uint64_t pool) {
  std::lock_guard<std::mutex> lock(mu_);
  exported_.insert(pool);
}

bool PoolBook::IsExported(uint64_t pool) {
  std::lock_guard<std::mutex> lock(mu_);
  return exported_.count(pool) != 0;
}

void PoolBook::KeptForImporters(uint64_t pool, int dev, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Held& h = kept_[pool];
  h.device = dev;
  h.bytes += bytes;
}

uint64_t PoolBook::Destroyed(uint64_t pool, int* dev) {
  std::lock_guard<std::mutex> lock(mu_);
  exported_.erase(pool);
  auto it = kept_.find(pool);
  if (it == kept_.end()) return 0;
  uint64_t back = it->second.bytes;
  *dev = it->second.device;
  kept_.erase(it);
  return back;
}

uint64_t PoolBook::KeptOn(int dev) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t sum = 0;
  for (const auto& [pool, h] : kept_)
    if (h.device == dev) sum += h.bytes;
  return sum;
}

void PoolBook::ForgetAll() {
  held_.clear();
  kept_.clear();
  exported_.clear();
}

PoolBook& ThePoolBook() {
  static PoolBook* b = new PoolBook;  // never destroyed: hooks may run during exit
  return *b;
}

// ---- VMM ------------------------------------------------------------------------------------

VmmBook::Physical* VmmBook::Find(uint64_t handle, uint64_t* id) {
  auto h = by_handle_.find(handle);
  if (h == by_handle_.end()) return nullptr;
  auto p = physical_.find(h->second);
  if (p == physical_.end()) {  // the allocation is gone: a stale value
    by_handle_.erase(h);
    return nullptr;
  }
  *id = h->second;
  return &p->second;
}

bool VmmBook::Collect(uint64_t id, Charge* freed) {
  auto p = physical_.find(id);
  if (p == physical_.end() || p->second.handles > 0 || p->second.mappings > 0) return false;
  *freed = p->second.charge;
  auto h = by_handle_.find(p->second.handle);
  if (h != by_handle_.end() && h->second == id) by_handle_.erase(h);
  physical_.erase(p);
  return true;
}

void VmmBook::Created(uint64_t handle, Charge c) {
  uint64_t id = ++next_id_;
  physical_[id] = Physical{c, 1, 0, handle};
  by_handle_[handle] = id;  // a value the driver hands out again names the new allocation
}

void VmmBook::Mapped(uint64_t ptr, uint64_t size, uint64_t handle) {
  uint64_t id = 0;
  Physical* p = Find(handle, &id);
  if (p == nullptr || size == 0) return;
  mappings_[ptr] = Mapping{size > UINT64_MAX - ptr ? UINT64_MAX : ptr + size, id};
  ++p->mappings;
}

bool VmmBook::AnyMapped(uint64_t ptr, uint64_t size) const {
  uint64_t end = size > UINT64_MAX - ptr ? UINT64_MAX : ptr + size;
  auto it = mappings_.lower_bound(ptr);
  if (it != mappings_.end() && it->first < end) return true;
  return it != mappings_.begin() && std::prev(it)->second.end > ptr;
}

void VmmBook::Retained(uint64_t handle, uint64_t addr) {
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin() || std::prev(it)->second.end <= addr) return;  // not charged here
  uint64_t id = std::prev(it)->second.id;
  Physical& p = physical_[id];
  ++p.handles;
  p.handle = handle;
  by_handle_[handle] = id;
}

bool VmmBook::Released(uint64_t handle, Charge* freed) {
  uint64_t id = 0;
  Physical* p = Find(handle, &id);
  if (p == nullptr || p->handles == 0) return false;
  --p->handles;
  return Collect(id, freed);
}

bool VmmBook::Exported(uint64_t handle) {
  uint64_t id = 0;
  Physical* p = Find(handle, &id);
  if (p == nullptr) return false;
  p->charge.exported = true;
  return true;
}

void VmmBook::Imported(uint64_t handle) {
  by_handle_.erase(handle);
}

void VmmBook::Unmapped(uint64_t ptr, uint64_t size, uint64_t* bytes, int devices, uint64_t* kept) {
  if (size == 0) return;
  uint64_t end = size > UINT64_MAX - ptr ? UINT64_MAX : ptr + size;
  auto it = mappings_.lower_bound(ptr);
  if (it != mappings_.begin() && std::prev(it)->second.end > ptr) --it;
  while (it != mappings_.end() && it->first < end) {
    uint64_t start = it->first, stop = it->second.end, id = it->second.id;
    it = mappings_.erase(it);  // the next mapping starts at or after `stop`
    Physical& p = physical_[id];
    --p.mappings;
    // What the range covered only in part stays mapped.
    if (start < ptr) mappings_.emplace(start, Mapping{ptr, id}), ++p.mappings;
    if (stop > end) mappings_.emplace(end, Mapping{stop, id}), ++p.mappings;
    AddFreed(id, bytes, devices, kept);
  }
}

void VmmBook::AddFreed(uint64_t id, uint64_t* bytes, int devices, uint64_t* kept) {
  Charge c;
  if (Collect(id, &c) && c.device >= 0 && c.device < devices) (c.exported && kept ? kept : bytes)[c.device] += c.bytes;
}

void VmmBook::MulticastCreated(uint64_t mc) {
  multicasts_.insert(mc);
}

void VmmBook::Bind(uint64_t mc, uint64_t offset, uint64_t size, uint64_t id) {
  ++physical_[id].mappings;
  bindings_.emplace(mc, Binding{offset, size, id});
}

void VmmBook::BoundHandle(uint64_t mc, uint64_t offset, uint64_t size, uint64_t handle) {
  uint64_t id = 0;
  if (Find(handle, &id) != nullptr) Bind(mc, offset, size, id);
}

void VmmBook::BoundAddress(uint64_t mc, uint64_t offset, uint64_t size, uint64_t addr) {
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin() || std::prev(it)->second.end <= addr) return;  // not charged here
  Bind(mc, offset, size, std::prev(it)->second.id);
}

void VmmBook::Unbound(uint64_t mc, int dev, uint64_t offset, uint64_t size, uint64_t* bytes, int devices,
                      uint64_t* kept) {
  uint64_t end = size > UINT64_MAX - offset ? UINT64_MAX : offset + size;
  auto [first, last] = bindings_.equal_range(mc);
  for (auto it = first; it != last;) {
    const Binding b = it->second;
    auto p = physical_.find(b.id);
    if (p == physical_.end() || p->second.charge.device != dev || b.offset < offset || b.offset + b.size > end) {
      ++it;
      continue;
    }
    it = bindings_.erase(it);
    --p->second.mappings;
    AddFreed(b.id, bytes, devices, kept);
  }
}

bool VmmBook::MulticastReleased(uint64_t handle, uint64_t* bytes, int devices, uint64_t* kept) {
  if (multicasts_.erase(handle) == 0) return false;
  auto [first, last] = bindings_.equal_range(handle);
  std::vector<uint64_t> ids;
  for (auto it = first; it != last; ++it) ids.push_back(it->second.id);
  bindings_.erase(first, last);
  for (uint64_t id : ids) {
    --physical_[id].mappings;
    AddFreed(id, bytes, devices, kept);
  }
  return true;
}

uint64_t VmmBook::Total(int device) const {
  uint64_t t = 0;
  for (const auto& [id, p] : physical_)
    if (p.charge.device == device) t += p.charge.bytes;
  return t;
}

void VmmBook::ForgetAll() {
  physical_.clear();
  by_handle_.clear();
  mappings_.clear();
  multicasts_.clear();
  bindings_.clear();
}

VmmBook& TheVmmBook() {
  static VmmBook* b = new VmmBook;  // never destroyed: hooks may run during exit
  return *b;
}

}  // namespace gs::enforcer
