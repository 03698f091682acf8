// The simulated CUDA driver API, virtual memory management: physical handles, address
// reservations, maps.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

GS_SIM_CUDA(cuMemGetAllocationGranularity)
(size_t* granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags) {
  GS_REQUIRE_INIT();
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemCreate)
(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags) {
  GS_REQUIRE_INIT();
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || size % kVmmGranularity != 0)
    return CUDA_ERROR_INVALID_VALUE;
  int dev = -1;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (!ValidOrdinal(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
      dev = StateIndex(prop->location.id);
      break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev >= 0 && !node()->Reserve(dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = NewBacking("gpuslice-sim-vmm");
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    if (dev >= 0) node()->Release(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto phys = std::make_unique<PhysicalMemory>();
  phys->device = dev;
  phys->size = size;
  phys->fd = fd;
  phys->prop = *prop;
  auto key = reinterpret_cast<CUmemGenericAllocationHandle>(phys.get());
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->physical[key] = std::move(phys);
  *handle = key;
  return CUDA_SUCCESS;
}

void gs::sim::MaybeDestroyPhysical(CUmemGenericAllocationHandle key) {
  auto it = g_driver->physical.find(key);
  if (it == g_driver->physical.end() || !it->second->released || it->second->mappings > 0) return;
  ReleasePhysicalMemory(*it->second);
  close(it->second->fd);
  g_driver->physical.erase(it);
}

GS_SIM_CUDA(cuMemRelease)(CUmemGenericAllocationHandle handle) {
  GS_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  if (ReleaseMulticast(handle)) return CUDA_SUCCESS;
  auto it = g_driver->physical.find(handle);
  if (it == g_driver->physical.end() || it->second->released) return CUDA_ERROR_INVALID_VALUE;
  it->second->released = true;
  MaybeDestroyPhysical(handle);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemGetAllocationPropertiesFromHandle)(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  GS_REQUIRE_INIT();
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->physical.find(handle);
  if (it == g_driver->physical.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second->prop;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAddressReserve)(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr, unsigned long long) {
  GS_REQUIRE_INIT();
  if (ptr == nullptr || size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t align = std::max(alignment, kVmmGranularity);
  size_t span = size + align;
  void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t base = RoundUp(reinterpret_cast<uintptr_t>(p), align);
  // Trim the slack so the reservation is exactly [base, base + size).
  if (base > reinterpret_cast<uintptr_t>(p)) munmap(p, base - reinterpret_cast<uintptr_t>(p));
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + span;
  if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - (base + size));
  *ptr = static_cast<CUdeviceptr>(base);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemAddressFree)(CUdeviceptr ptr, size_t size) {
  GS_REQUIRE_INIT();
  if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemMap)
(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  GS_REQUIRE_INIT();
  if (ptr == 0 || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  auto it = g_driver->physical.find(handle);
  if (it == g_driver->physical.end() || offset + size > it->second->size) return CUDA_ERROR_INVALID_VALUE;
  // An imported allocation maps whole or not at all: an H200 refuses its first granule alone
  // (docs/measurements/shared-memory.md).
  if (it->second->imported && (offset != 0 || size != it->second->size)) return CUDA_ERROR_NOT_SUPPORTED;
  // Only addresses not mapped yet can be mapped.
  auto next = g_driver->vmm_maps.lower_bound(static_cast<uintptr_t>(ptr));
  if ((next != g_driver->vmm_maps.end() && next->first < ptr + size) ||
      (next != g_driver->vmm_maps.begin() && std::prev(next)->first + std::prev(next)->second.second > ptr))
    return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, it->second->fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  ++it->second->mappings;
  g_driver->vmm_maps[static_cast<uintptr_t>(ptr)] = {it->second.get(), size};
  g_driver->allocations[static_cast<uintptr_t>(ptr)] =
      Allocation{size, 0, it->second->device, AllocKind::kVmm, nullptr};
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  GS_REQUIRE_INIT();
  if (ptr == 0 || desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
             : desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                 : PROT_NONE;
  return mprotect(reinterpret_cast<void*>(ptr), size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GS_SIM_CUDA(cuMemUnmap)(CUdeviceptr ptr, size_t size) {
  GS_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g_driver->mu);
  // The range must be whole mappings side by side (one or several), never part of one.
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  auto first = g_driver->vmm_maps.find(static_cast<uintptr_t>(ptr));
  auto it = first;
  uintptr_t at = static_cast<uintptr_t>(ptr), end = at + size;
  for (; it != g_driver->vmm_maps.end() && it->first == at && at < end; ++it) at += it->second.second;
  if (first == g_driver->vmm_maps.end() || at != end) return CUDA_ERROR_INVALID_VALUE;
  for (it = first; it != g_driver->vmm_maps.end() && it->first < end;) {
    PhysicalMemory* phys = it->second.first;
    // Unreadable from now on; should that fail, the pages stay readable, but the mapping is
    // gone from the books either way.
    void* gone = mmap(reinterpret_cast<void*>(it->first), it->second.second, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    (void)gone;
    g_driver->allocations.erase(it->first);
    it = g_driver->vmm_maps.erase(it);
    --phys->mappings;
    MaybeDestroyPhysical(reinterpret_cast<CUmemGenericAllocationHandle>(phys));
  }
  return CUDA_SUCCESS;
}
