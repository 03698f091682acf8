// Reading kernel names out of PTX text for the simulator's cuModuleLoadData.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace gs::sim {

// Appends the names of all `.entry` kernels in NUL-terminated PTX text. False if the text
// holds no entry (not PTX, or a PTX file without kernels).
bool ParsePtxEntries(const char* ptx, std::vector<std::string>* names);

// Kernels the cost model knows by name: "gpuslice_spin" runs its u64 parameter in ns.
bool IsSpinKernel(const std::string& name);

}  // namespace gs::sim
