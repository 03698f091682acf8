// What cuGetProcAddress means: maps a base driver-API name ("cuMemAlloc"), the CUDA
// version the caller was built for and the per-thread-stream flag to the exported symbol
// the driver hands out ("cuMemAlloc_v2", "cuLaunchKernel_ptsz", ...).
//
// Pure functions over the generated tables (cuda_symbols.def, cuda_versions.def); used by
// the simulator to implement cuGetProcAddress and by the enforcer as a fallback when a
// driver returns a pointer it cannot name. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gs::platform {

// All exported CUDA driver symbol names, sorted in strcmp order.
const char* const* CudaSymbolNames(size_t* count);

// Index of name in CudaSymbolNames(), or -1.
int CudaSymbolIndex(const char* name);

enum class ProcLookup { kFound, kNotFound, kVersionNotSufficient };

// On kFound sets *export_name to a string from CudaSymbolNames().
ProcLookup ResolveCudaExport(const char* symbol, int cuda_version, uint64_t flags, const char** export_name);

}  // namespace gs::platform
