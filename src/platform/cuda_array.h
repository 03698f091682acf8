// Device memory a CUDA array occupies, from its descriptor: one definition for the
// simulator (which allocates it) and the enforcer (which charges it). Pure.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "src/platform/cuda_api.h"

namespace gs::platform {

inline uint64_t CudaFormatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit formats; block-compressed formats are charged as 4 bytes per element
  }
}

// Width x max(Height, 1) x max(Depth, 1) x channels x element size.
inline uint64_t CudaArrayBytes(size_t width, size_t height, size_t depth, unsigned channels, CUarray_format f) {
  return static_cast<uint64_t>(width) * std::max<size_t>(height, 1) * std::max<size_t>(depth, 1) * channels *
         CudaFormatBytes(f);
}

// All levels of a mipmapped array: each level halves every dimension that is used.
inline uint64_t CudaMipmappedBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  uint64_t bytes = 0;
  size_t w = d.Width, h = d.Height, z = d.Depth;
  for (unsigned i = 0; i < levels; ++i) {
    bytes += CudaArrayBytes(w, h, z, d.NumChannels, d.Format);
    w = std::max<size_t>(w / 2, 1);
    h = h ? std::max<size_t>(h / 2, 1) : 0;
    z = z ? std::max<size_t>(z / 2, 1) : 0;
  }
  return bytes;
}

}  // namespace gs::platform
