// The simulated CUDA driver API, arrays and mipmapped arrays, charged what the card spends
// on them.
// Shared state and helpers: src/sim/cuda_driver.h.
#include <sys/mman.h>

#include <algorithm>

#include "src/platform/cuda_array.h"
#include "src/sim/compute_capability.h"
#include "src/sim/cuda_driver.h"
#include "src/sim/impl.h"

using namespace gs::sim;  // NOLINT: the definitions below are the C ABI of this library

namespace {
size_t ArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  return gs::platform::CudaArrayBytes(d.Width, d.Height, d.Depth, d.NumChannels, d.Format);
}

// Whether the extents fit the card's texture limits (src/sim/compute_capability.h). A
// real driver refuses larger arrays with an error that is not CUDA_ERROR_OUT_OF_MEMORY
// (docs/measurements/h100-driver.md: cuda_probe's 768 MiB 2D array, 196608 x 1024, failed on the H100
// under a limit it fitted); cuArrayCreate documents CUDA_ERROR_INVALID_VALUE.
bool WithinTextureExtents(const DeviceSpec& spec, const CUDA_ARRAY3D_DESCRIPTOR& d) {
  const ComputeCapabilityLimits cc = LimitsForComputeCapability(spec.cc_major, spec.cc_minor);
  if (d.Flags & CUDA_ARRAY3D_LAYERED) {  // Depth is the number of layers
    return d.Width <= cc.layered_extent && d.Height <= cc.layered_extent && d.Depth <= cc.layers;
  }
  if (d.Depth)
    return d.Width <= cc.texture3d_extent && d.Height <= cc.texture3d_extent && d.Depth <= cc.texture3d_extent;
  if (d.Height) return d.Width <= cc.texture2d_width && d.Height <= cc.texture2d_height;
  return d.Width <= cc.texture1d_width;
}

CUresult CreateArray(const CUDA_ARRAY3D_DESCRIPTOR& desc, CUarray* out) {
  if (out == nullptr || desc.Width == 0 || desc.NumChannels == 0 || desc.NumChannels > 4)
    return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!WithinTextureExtents(Spec(c->device), desc)) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes = ArrayBytes(desc);
  if (!node()->Reserve(c->device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* a = new ArrayObject;
  a->device = c->device;
  a->bytes = bytes;
  a->desc = desc;
  a->mem = MapLazy(RoundUp(bytes, 4096));
  *out = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}
}  // namespace

GS_SIM_CUDA(cuArrayCreate_v2)(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  GS_REQUIRE_INIT();
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = pAllocateArray->Width;
  d.Height = pAllocateArray->Height;
  d.Format = pAllocateArray->Format;
  d.NumChannels = pAllocateArray->NumChannels;
  return CreateArray(d, pHandle);
}

GS_SIM_CUDA(cuArray3DCreate_v2)(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  GS_REQUIRE_INIT();
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(*pAllocateArray, pHandle);
}

GS_SIM_CUDA(cuArrayDestroy)(CUarray hArray) {
  GS_REQUIRE_INIT();
  auto* a = reinterpret_cast<ArrayObject*>(hArray);
  if (a == nullptr || a->parent) return CUDA_ERROR_INVALID_HANDLE;
  node()->Release(a->device, a->bytes);
  if (a->mem) munmap(a->mem, RoundUp(a->bytes, 4096));
  delete a;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuArray3DGetDescriptor_v2)(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  GS_REQUIRE_INIT();
  auto* a = reinterpret_cast<ArrayObject*>(hArray);
  if (a == nullptr || pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pArrayDescriptor = a->desc;
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMipmappedArrayCreate)
(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc, unsigned int numMipmapLevels) {
  GS_REQUIRE_INIT();
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr || numMipmapLevels == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* c = CurrentContext();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!WithinTextureExtents(Spec(c->device), *pMipmappedArrayDesc)) return CUDA_ERROR_INVALID_VALUE;
  auto m = std::make_unique<MipmappedArray>();
  m->device = c->device;
  CUDA_ARRAY3D_DESCRIPTOR level = *pMipmappedArrayDesc;
  for (unsigned i = 0; i < numMipmapLevels; ++i) {
    auto a = std::make_unique<ArrayObject>();
    a->device = c->device;
    a->desc = level;
    a->bytes = ArrayBytes(level);
    a->parent = m.get();
    m->bytes += a->bytes;
    m->levels.push_back(std::move(a));
    level.Width = std::max<size_t>(level.Width / 2, 1);
    if (level.Height) level.Height = std::max<size_t>(level.Height / 2, 1);
    if (level.Depth) level.Depth = std::max<size_t>(level.Depth / 2, 1);
  }
  if (!node()->Reserve(c->device, m->bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  *pHandle = reinterpret_cast<CUmipmappedArray>(m.release());
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMipmappedArrayGetLevel)(CUarray* pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level) {
  GS_REQUIRE_INIT();
  auto* m = reinterpret_cast<MipmappedArray*>(hMipmappedArray);
  if (m == nullptr || pLevelArray == nullptr || level >= m->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *pLevelArray = reinterpret_cast<CUarray>(m->levels[level].get());
  return CUDA_SUCCESS;
}

GS_SIM_CUDA(cuMipmappedArrayDestroy)(CUmipmappedArray hMipmappedArray) {
  GS_REQUIRE_INIT();
  auto* m = reinterpret_cast<MipmappedArray*>(hMipmappedArray);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  node()->Release(m->device, m->bytes);
  delete m;
  return CUDA_SUCCESS;
}
