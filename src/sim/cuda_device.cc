// The simulated CUDA driver API, devices: count, names, UUIDs, memory, attributes, PCI bus
// IDs, peer access.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <cstdio>
#include <cstring>

#include "src/sim/compute_capability.h"
#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

GS_SIM_CUDA(cuDeviceGetCount)(int* count) {
  GS_REQUIRE_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = g_driver->rt->cuda_count;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGet)(CUdevice* device, int ordinal) {
  GS_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetName)(char* name, int len, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, static_cast<size_t>(len), "%s", Spec(StateIndex(dev)).name);
  return CUDA_SUCCESS;
}

namespace {
// "GPU-0a1b2c3d-..." -> 16 raw bytes.
void UuidBytes(const char* text, CUuuid* out) {
  memset(out, 0, sizeof(*out));
  const char* p = strncmp(text, "GPU-", 4) == 0 ? text + 4 : text;
  int n = 0;
  auto hex = [](char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; };
  while (*p && n < 16) {
    if (*p == '-') {
      ++p;
      continue;
    }
    if (!p[1]) break;
    out->bytes[n++] = static_cast<char>(hex(p[0]) << 4 | hex(p[1]));
    p += 2;
  }
}
}  // namespace

GS_SIM_CUDA(cuDeviceGetUuid)(CUuuid* uuid, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  UuidBytes(Spec(StateIndex(dev)).uuid, uuid);
  return CUDA_SUCCESS;
}
GS_SIM_CUDA_SAME(cuDeviceGetUuid_v2, cuDeviceGetUuid)

GS_SIM_CUDA(cuDeviceTotalMem_v2)(size_t* bytes, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = Spec(StateIndex(dev)).memory_total;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceComputeCapability)(int* major, int* minor, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *major = static_cast<int>(Spec(StateIndex(dev)).cc_major);
  *minor = static_cast<int>(Spec(StateIndex(dev)).cc_minor);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetAttribute)(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const DeviceSpec& s = Spec(StateIndex(dev));
  const ComputeCapabilityLimits cc = LimitsForComputeCapability(s.cc_major, s.cc_minor);
  unsigned domain = 0, bus = 0, device = 0;
  ParsePciBusId(s.pci_bus_id, &domain, &bus, &device);
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *pi = static_cast<int>(s.sm_count);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *pi = static_cast<int>(s.cc_major);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *pi = static_cast<int>(s.cc_minor);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *pi = static_cast<int>(cc.max_threads_per_sm);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *pi = static_cast<int>(cc.max_blocks_per_sm);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *pi = static_cast<int>(cc.max_shared_per_block_optin);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *pi = static_cast<int>(cc.max_shared_per_sm);
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
      *pi = static_cast<int>(cc.texture1d_width);
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
      *pi = static_cast<int>(cc.texture2d_width);
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
      *pi = static_cast<int>(cc.texture2d_height);
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
      *pi = static_cast<int>(cc.texture3d_extent);
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT:
      *pi = static_cast<int>(cc.layered_extent);
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS:
      *pi = static_cast<int>(cc.layers);
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *pi = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *pi = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *pi = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *pi = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *pi = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *pi = 48 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *pi = 64 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *pi = static_cast<int>(s.sm_clock_mhz) * 1000;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *pi = static_cast<int>(s.mem_clock_mhz) * 1000;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *pi = static_cast<int>(domain);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *pi = static_cast<int>(bus);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *pi = static_cast<int>(device);
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      *pi = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
      *pi = s.numa_node;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
      *pi = s.multicast_supported ? 1 : 0;
      break;
    default:
      *pi = 0;
      break;
  }
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetPCIBusId)(char* pciBusId, int len, CUdevice dev) {
  GS_REQUIRE_INIT();
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // CUDA's form has a 4-digit domain: "0000:1A:00.0".
  const char* id = Spec(StateIndex(dev)).pci_bus_id;
  size_t n = strlen(id);
  snprintf(pciBusId, static_cast<size_t>(len), "%s", n > 12 ? id + (n - 12) : id);
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuDeviceGetByPCIBusId)(CUdevice* dev, const char* pciBusId) {
  GS_REQUIRE_INIT();
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < g_driver->rt->cuda_count; ++i) {
    const char* id = Spec(StateIndex(i)).pci_bus_id;
    size_t a = strlen(id), b = strlen(pciBusId);
    if (b <= a && strcasecmp(id + (a - b), pciBusId) == 0) {
      *dev = i;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

GS_SIM_CUDA(cuDeviceCanAccessPeer)(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  GS_REQUIRE_INIT();
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev) || !ValidOrdinal(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = dev != peerDev;
  return CUDA_SUCCESS;
}
