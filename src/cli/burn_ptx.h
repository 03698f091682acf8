#pragma once

// The PTX of src/cli/burn_kernels.cu, embedded at build time (library gs_burn_ptx).
// gpuslice_spin(u64 ns) spins every thread on the GPU's global timer for ns on a real
// card; the simulator knows it by name and runs each wave of blocks for ns.
extern const char kBurnPtx[];
