// Reading kernel names and .global sizes out of PTX text for the simulator's cuModuleLoadData.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gs::sim {

// Appends the names of all `.entry` kernels in NUL-terminated PTX text. False if the text
// holds no entry (not PTX, or a PTX file without kernels).
bool ParsePtxEntries(const char* ptx, std::vector<std::string>* names);

// Bytes of device memory the module-scope `.global` variables of NUL-terminated PTX text
// declare (element size x vector width x array dimensions, summed; an unsized array
// counts its initialiser's elements; `.extern` declarations hold nothing). Saturates at
// UINT64_MAX. Memory instructions such as `ld.global` are not declarations.
uint64_t PtxGlobalBytes(const char* ptx);

// Kernels the cost model knows by name: "gpuslice_spin" runs its u64 parameter in ns.
bool IsSpinKernel(const std::string& name);

}  // namespace gs::sim
