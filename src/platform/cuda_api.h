// The CUDA driver API as the driver itself declares it.
//
// Including cuda.h with __CUDA_API_VERSION_INTERNAL declares every exported name exactly
// (cuMemAlloc and cuMemAlloc_v2, cuLaunchKernel and cuLaunchKernel_ptsz, ...) instead of
// mapping unversioned names to the newest export with macros. The simulator and the
// enforcer define functions under those exact names, so the compiler checks each
// definition in cuda_symbols.def against NVIDIA's own prototype.
#pragma once

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

namespace gs::cuda {

// cuGetProcAddress flags (cuda.h CUdriverProcAddress_flags).
inline constexpr unsigned long long kProcDefault = CU_GET_PROC_ADDRESS_DEFAULT;
inline constexpr unsigned long long kProcLegacyStream = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
inline constexpr unsigned long long kProcPerThreadStream = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

}  // namespace gs::cuda
