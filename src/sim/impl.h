// Declarations of the simulator's implementation functions, generated from the symbol
// tables. exports.cc defines every public driver symbol and forwards to
// gs_sim_cuda_<name> / gs_sim_nvml_<name> when the simulator implements it (a hidden weak
// symbol that is null otherwise), else returns NOT_SUPPORTED. Declaring them here, in
// every file that defines one, makes the compiler check each definition's signature.
#pragma once

#include "src/platform/cuda_api.h"
#include "src/platform/nvml_api.h"

#define GS_CUDA_SYM(name, params, args) \
  extern "C" __attribute__((weak, visibility("hidden"))) CUresult gs_sim_cuda_##name params;
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM

#define GS_NVML_SYM(ret, name, params, args) \
  extern "C" __attribute__((weak, visibility("hidden"))) ret gs_sim_nvml_##name params;
#include "src/platform/nvml_symbols.def"
#undef GS_NVML_SYM

// Starts the definition of a simulated CUDA / NVML function.
#define GS_SIM_CUDA(name) extern "C" __attribute__((visibility("hidden"))) CUresult gs_sim_cuda_##name
#define GS_SIM_NVML(ret, name) extern "C" __attribute__((visibility("hidden"))) ret gs_sim_nvml_##name

// Makes `variant` (a _ptsz/_ptds or versioned export with the same signature) run `base`.
#define GS_SIM_CUDA_SAME(variant, base)           \
  extern "C" __attribute__((visibility("hidden"), \
                            alias("gs_sim_cuda_" #base))) decltype(gs_sim_cuda_##base) gs_sim_cuda_##variant;
#define GS_SIM_NVML_SAME(variant, base)           \
  extern "C" __attribute__((visibility("hidden"), \
                            alias("gs_sim_nvml_" #base))) decltype(gs_sim_nvml_##base) gs_sim_nvml_##variant;
