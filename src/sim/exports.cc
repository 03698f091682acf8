// Every symbol of the two driver tables, exported from the simulator libraries.
// Built twice: with GS_SIM_EXPORT_CUDA into libcuda.so.1, with GS_SIM_EXPORT_NVML into
// libnvidia-ml.so.1 (each library exports only its own table, as the real ones do).
#include "src/common/raw_log.h"
#include "src/sim/impl.h"

#define GS_EXPORT extern "C" __attribute__((visibility("default")))

#if defined(GS_SIM_EXPORT_CUDA)
#define GS_CUDA_SYM(name, params, args)                     \
  GS_EXPORT CUresult name params {                          \
    if (gs_sim_cuda_##name) return gs_sim_cuda_##name args; \
    GS_LOG(kDebug, "%s is not simulated", #name);           \
    return CUDA_ERROR_NOT_SUPPORTED;                        \
  }
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
#endif

#if defined(GS_SIM_EXPORT_NVML)
namespace {
template <typename T>
T NotSupported();
template <>
nvmlReturn_t NotSupported<nvmlReturn_t>() {
  return NVML_ERROR_NOT_SUPPORTED;
}
template <>
const char* NotSupported<const char*>() {
  return "Not Supported";
}
}  // namespace
#define GS_NVML_SYM(ret, name, params, args)                \
  GS_EXPORT ret name params {                               \
    if (gs_sim_nvml_##name) return gs_sim_nvml_##name args; \
    GS_LOG(kDebug, "%s is not simulated", #name);           \
    return NotSupported<ret>();                             \
  }
#include "src/platform/nvml_symbols.def"
#undef GS_NVML_SYM
#endif

#if defined(GS_SIM_EXPORT_CUDA)
// Exported symbol addresses in the order of CudaSymbolNames(), for cuGetProcAddress.
extern "C" __attribute__((visibility("hidden"))) void* const gs_sim_cuda_exports[] = {
#define GS_CUDA_SYM(name, params, args) reinterpret_cast<void*>(&name),
#include "src/platform/cuda_symbols.def"
#undef GS_CUDA_SYM
};
#endif
