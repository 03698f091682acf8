// The simulated CUDA driver API, multicast objects (cuMulticast*): only on cards whose
// CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 1 (GPUs on an NVSwitch, DeviceSpec::
// multicast_supported); elsewhere every call answers CUDA_ERROR_NOT_SUPPORTED, as a PCIe
// card does.
//
// What a multicast object costs is not measured: modelled as the least convenient for
// gpuslice, the object itself takes no device memory, and a binding keeps the physical
// memory it binds alive as a mapping does: a handle released while bound stays on the card
// until it is unbound or the multicast object is released (cuMemRelease of its handle).
// docs/measurements/README.md, "Multicast objects"; tests/gpu/run.sh measures it.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <algorithm>
#include <iterator>

#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

namespace gs::sim {
namespace {

// Binding offsets and sizes are multiples of this; prop.size too.
constexpr size_t kMulticastGranularity = 2u << 20;
// CU_MULTICAST_GRANULARITY_RECOMMENDED (not measured).
constexpr size_t kMulticastRecommended = 512u << 20;

bool Supported(CUdevice ordinal) {
  return ValidOrdinal(ordinal) && Spec(StateIndex(ordinal)).multicast_supported != 0;
}

// Whether any device of this process does multicast: the calls that name no device answer
// CUDA_ERROR_NOT_SUPPORTED when none does.
bool AnySupported() {
  for (int d = 0; d < g_driver->rt->cuda_count; ++d)
    if (Supported(d)) return true;
  return false;
}

// Caller holds g_driver->mu.
MulticastObject* Find(CUmemGenericAllocationHandle h) {
  auto it = g_driver->multicast.find(h);
  return it == g_driver->multicast.end() ? nullptr : it->second.get();
}

// Binds [offset, offset + size) of mc on the physical memory's device to phys. Caller holds
// g_driver->mu.
CUresult Bind(MulticastObject* mc, size_t offset, PhysicalMemory* phys, size_t phys_offset, size_t size) {
  if (phys->device < 0) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || offset % kMulticastGranularity || size % kMulticastGranularity ||
      phys_offset % kMulticastGranularity || offset + size > mc->size || phys_offset + size > phys->size)
    return CUDA_ERROR_INVALID_VALUE;
  const int ordinal = phys->prop.location.id;
  if (std::find(mc->devices.begin(), mc->devices.end(), ordinal) == mc->devices.end()) return CUDA_ERROR_INVALID_DEVICE;
  for (const auto& b : mc->bindings)
    if (b.ordinal == ordinal && b.offset < offset + size && offset < b.offset + b.size)
      return CUDA_ERROR_INVALID_VALUE;  // already bound there
  ++phys->mappings;
  mc->bindings.push_back({ordinal, offset, size, phys});
  return CUDA_SUCCESS;
}

// Ends a binding: its physical memory goes once nothing else holds it.
void EndBinding(const MulticastObject::Binding& b) {
  --b.phys->mappings;
  MaybeDestroyPhysical(reinterpret_cast<CUmemGenericAllocationHandle>(b.phys));
}

}  // namespace

bool ReleaseMulticast(CUmemGenericAllocationHandle handle) {
  auto it = g_driver->multicast.find(handle);
  if (it == g_driver->multicast.end()) return false;
  std::unique_ptr<MulticastObject> mc = std::move(it->second);
  g_driver->multicast.erase(it);
  for (const auto& b : mc->bindings) EndBinding(b);
  return true;
}

}  // namespace gs::sim

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

GS_SIM_CUDA(cuMulticastGetGranularity)
(size_t* granularity, const CUmulticastObjectProp* prop, CUmulticastGranularity_flags option) {
  GS_REQUIRE_INIT();
  if (!AnySupported()) return CUDA_ERROR_NOT_SUPPORTED;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = option == CU_MULTICAST_GRANULARITY_RECOMMENDED ? kMulticastRecommended : kMulticastGranularity;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMulticastCreate)(CUmemGenericAllocationHandle* mcHandle, const CUmulticastObjectProp* prop) {
  GS_REQUIRE_INIT();
  if (!AnySupported()) return CUDA_ERROR_NOT_SUPPORTED;
  if (mcHandle == nullptr || prop == nullptr || prop->numDevices == 0 ||
      prop->numDevices > static_cast<unsigned>(g_driver->rt->cuda_count) || prop->size == 0 ||
      prop->size % kMulticastGranularity != 0 || prop->flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  auto mc = std::make_unique<MulticastObject>();
  mc->num_devices = prop->numDevices;
  mc->size = prop->size;
  auto key = reinterpret_cast<CUmemGenericAllocationHandle>(mc.get());
  std::lock_guard<std::mutex> lock(g_driver->mu);
  g_driver->multicast[key] = std::move(mc);
  *mcHandle = key;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMulticastAddDevice)(CUmemGenericAllocationHandle mcHandle, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!Supported(dev)) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  MulticastObject* mc = Find(mcHandle);
  if (mc == nullptr || mc->devices.size() >= mc->num_devices ||
      std::find(mc->devices.begin(), mc->devices.end(), dev) != mc->devices.end())
    return CUDA_ERROR_INVALID_VALUE;
  mc->devices.push_back(dev);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMulticastBindMem)
(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUmemGenericAllocationHandle memHandle, size_t memOffset,
 size_t size, unsigned long long flags) {
  GS_REQUIRE_INIT();
  if (!AnySupported()) return CUDA_ERROR_NOT_SUPPORTED;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  MulticastObject* mc = Find(mcHandle);
  auto phys = g_driver->physical.find(memHandle);
  if (mc == nullptr || phys == g_driver->physical.end() || phys->second->released) return CUDA_ERROR_INVALID_VALUE;
  return Bind(mc, mcOffset, phys->second.get(), memOffset, size);
}

// Binds the physical memory mapped at memptr (one mapping holds the whole range).
GS_SIM_CUDA(cuMulticastBindAddr)
(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr, size_t size, unsigned long long flags) {
  GS_REQUIRE_INIT();
  if (!AnySupported()) return CUDA_ERROR_NOT_SUPPORTED;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  MulticastObject* mc = Find(mcHandle);
  auto next = g_driver->vmm_maps.upper_bound(static_cast<uintptr_t>(memptr));
  if (mc == nullptr || next == g_driver->vmm_maps.begin()) return CUDA_ERROR_INVALID_VALUE;
  auto m = std::prev(next);
  const uintptr_t at = static_cast<uintptr_t>(memptr);
  if (at + size > m->first + m->second.second) return CUDA_ERROR_INVALID_VALUE;
  return Bind(mc, mcOffset, m->second.first, at - m->first, size);
}

// Unbinds what dev bound inside [mcOffset, mcOffset + size).
GS_SIM_CUDA(cuMulticastUnbind)(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size) {
  GS_REQUIRE_INIT();
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!Supported(dev)) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(g_driver->mu);
  MulticastObject* mc = Find(mcHandle);
  if (mc == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  bool any = false;
  for (auto it = mc->bindings.begin(); it != mc->bindings.end();) {
    if (it->ordinal == dev && it->offset >= mcOffset && it->offset + it->size <= mcOffset + size) {
      MulticastObject::Binding b = *it;
      it = mc->bindings.erase(it);
      EndBinding(b);
      any = true;
    } else {
      ++it;
    }
  }
  return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
