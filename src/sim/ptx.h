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

// A kernel of a PTX module: its name and the size of its body's text, which the
// simulator takes as the size of its machine code on the card (src/sim/cuda_module.cc).
struct PtxKernel {
  std::string name;
  uint64_t body_bytes = 0;
};
// The `.entry` kernels of NUL-terminated PTX text with their body sizes (from the body's
// opening brace to its matching closing brace; 0 for a declaration without a body).
// False if the text holds no entry.
bool ParsePtxKernels(const char* ptx, std::vector<PtxKernel>* kernels);

// Bytes of device memory the module-scope `.global` variables of NUL-terminated PTX text
// declare (element size x vector width x array dimensions, summed; an unsized array
// counts its initialiser's elements; `.extern` declarations hold nothing). Saturates at
// UINT64_MAX. Memory instructions such as `ld.global` are not declarations.
uint64_t PtxGlobalBytes(const char* ptx);

// Kernels the cost model knows by name: "gpuslice_spin" runs its u64 parameter in ns.
bool IsSpinKernel(const std::string& name);

}  // namespace gs::sim
