// Declarations of the simulator's implementation functions, generated from the symbol
// tables. exports.cc defines every public driver symbol and forwards to
// gs_sim_cuda_<name> / gs_sim_nvml_<name> when the simulator implements it (a hidden weak
// symbol that is null otherwise), else returns NOT_SUPPORTED. Declaring them here, in
// every file that defines one, makes the compiler check each definition's signature.
#pragma once

#include "src/platform/cuda_api.h"
#include "src/platform/nvml_api.h"

#define GS_WEAK_CUDA_NAME(name) gs_sim_cuda_##name
#define GS_WEAK_NVML_NAME(name) gs_sim_nvml_##name
#include "src/platform/weak_declarations.inc"

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
