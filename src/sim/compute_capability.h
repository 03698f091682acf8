// What a simulated card reports for the limits that follow from its compute capability:
// resident threads and blocks per SM, shared memory per block, texture and array extents.
// The values are those of the CUDA C++ Programming Guide's "Technical Specifications per
// Compute Capability" table (CUDA 12/13; deviceQuery on an H100, A100 and T4 prints the
// same texture extents), so each preset reports its real values whatever the preset
// table holds. Used by cuDeviceGetAttribute, the stack reservation of cuCtxSetLimit
// (resident threads x SMs, measured on the H100: docs/measurements/h100-driver.md), the cost model's
// blocks per SM and cuArrayCreate's extent checks.
//
// Pure data; thread-safe.
#pragma once

#include <cstdint>

namespace gs::sim {

struct ComputeCapabilityLimits {
  uint32_t max_threads_per_sm;
  uint32_t max_blocks_per_sm;
  uint32_t max_shared_per_block_optin;  // bytes (cudaFuncSetAttribute opt-in)
  uint32_t max_shared_per_sm;           // bytes
  // Texture extents of CUDA arrays (same for every compute capability >= 5.0).
  uint32_t texture1d_width = 131072;
  uint32_t texture2d_width = 131072, texture2d_height = 65536;
  uint32_t texture3d_extent = 16384;  // width, height and depth each
  uint32_t layered_extent = 32768;    // width (and height) of a layered 1D/2D array
  uint32_t layers = 2048;
};

// The row for compute capability major.minor; an unknown one gets the nearest lower row
// of its major version, or 9.0's.
inline ComputeCapabilityLimits LimitsForComputeCapability(uint32_t major, uint32_t minor) {
  uint32_t cc = major * 10 + minor;
  if (cc == 75) return {1024, 16, 64 << 10, 64 << 10};             // Turing (T4)
  if (cc >= 70 && cc < 75) return {2048, 32, 96 << 10, 96 << 10};  // Volta
  if (cc == 80) return {2048, 32, 163 << 10, 164 << 10};           // A100
  if (cc == 86) return {1536, 16, 99 << 10, 100 << 10};
  if (cc == 87) return {2048, 16, 163 << 10, 164 << 10};
  if (cc == 89) return {1536, 24, 99 << 10, 100 << 10};  // Ada (L4)
  if (cc >= 60 && cc < 70) return {2048, 32, 48 << 10, 64 << 10};
  if (cc >= 120) return {1536, 32, 99 << 10, 100 << 10};  // Blackwell (consumer)
  return {2048, 32, 227 << 10, 228 << 10};                // 9.0 (H100, H200), 10.x
}

}  // namespace gs::sim
